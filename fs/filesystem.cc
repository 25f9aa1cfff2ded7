// Filesystem: construction, store errors, and the paths of inodes.
#include "fs/filesystem.h"

#include <dirent.h>
#include <fcntl.h>
#include <linux/fs.h>
#include <sys/xattr.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <random>
#include <set>
#include <thread>

#include "base/failpoint.h"
#include "base/work_pool.h"
#include "events/logdir_digest.h"
#include "fmt/format.h"
#include "fs/setattr_bits.h"
#include "spdlog/spdlog.h"
#include "store/classify.h"
#include "store/file_io.h"
#include "store/restore.h"

namespace tbfs::fs {

std::string ProcPath(int fd) { return fmt::format("/proc/self/fd/{}", fd); }

mode_t Caller::ModeIn(int dir_fd, mode_t mode) const {
  // (ENODATA: none; EOPNOTSUPP: a backing filesystem without ACLs.)
  if (::getxattr(ProcPath(dir_fd).c_str(), "system.posix_acl_default", nullptr, 0) > 0) {
    return mode;
  }
  return mode & ~umask;
}

bool IsTransientName(std::string_view name) {
  return name.starts_with('.') && (name.find(".tbfs-mig-") != std::string_view::npos ||
                                   name.find(".tbfs-tmp-") != std::string_view::npos);
}

Filesystem::Filesystem(const FsOptions& options, store::ColdStore* store, UniqueFd root_fd,
                       const struct stat& root_st, SharedMutex* namespace_lock)
    : options_(options),
      cookie_seed_((uint64_t{std::random_device()()} << 32) | std::random_device()()),
      colliding_cookies_(ShouldFail("readdir.colliding_cookies")),
      store_(store),
      inodes_(std::move(root_fd), root_st),
      cache_(store, options.cache_bytes, 2),
      ns_mu_(*namespace_lock) {}

int Filesystem::Eio(EioSite site, std::string_view what) {
  const int i = static_cast<int>(site);
  counters_.eio_by_site[i]++;
  uint64_t held = 0;
  if (eio_log_[i].Allow(&held))
    spdlog::error("[EIO:{}] {}{}", kEioSiteNames[i], what, HeldBack(held));
  return -EIO;
}

int Filesystem::StoreError(const Status& st, EioSite site, std::string_view path) {
  const char* tag = kEioSiteNames[static_cast<int>(site)];
  if (st.IsNotFound()) return -ENOENT;
  // The file first (red team: the store's path alone named no file).
  const std::string what = path.empty() ? st.message() : fmt::format("{}: {}", path, st.message());
  uint64_t held = 0;
  if (st.sys_errno() == EROFS) {
    // A shared store this mount does not write (fs/mount.h): not an error of the store.
    if (eio_log_[static_cast<int>(site)].Allow(&held)) {
      spdlog::info("{}: {}{}", tag, what, HeldBack(held));
    }
    return -EROFS;
  }
  const StoreFault fault = ClassifyStoreFault(st);
  // A store that does not answer is an I/O error of the file, whatever the
  // network said.
  const int err = fault == StoreFault::kUnreachable ? EIO : st.ToErrno();
  if (err == EIO) {
    // Counted as what the caller saw (red team: a full store's ENOSPC
    // counted as EIO, 190,948 of them, with no EIO answered).
    counters_.eio_store++;
    counters_.eio_store_by[static_cast<int>(fault)]++;
    return Eio(site, what);
  }
  if (eio_log_[static_cast<int>(site)].Allow(&held)) {
    spdlog::error("[{}:{}] {}{}", std::strerror(err), tag, what, HeldBack(held));
  }
  return -err;
}

bool Filesystem::Unmakeable(uint64_t parent, const char* name) {
  return IsHidden(parent, name) || IsTransientName(name);
}

bool Filesystem::IsHidden(Folder* parent, const char* name) {
  // LOGDIR/.tbfs is tbfs's own (the logdir's lock; the store by default).
  const bool root = parent->ino == InodeTable::kRootId;
  if (root && std::strcmp(name, store::kStoreDirName) == 0) return true;
  if (options_.store_skip.empty()) return false;
  if (root) return options_.store_skip == name;
  if (options_.store_skip.find('/') == std::string::npos) return false;
  return FolderRel(parent) == 0 && JoinPath(parent->rel, name) == options_.store_skip;
}

int Filesystem::RelPath(uint64_t ino, std::string* rel) {
  if (ino == InodeTable::kRootId) {
    rel->clear();
    return 0;
  }
  InodeView v = inodes_.View(ino);
  if (v.kind == Kind::kColdDir) {
    *rel = v.cold_path;
    return 0;
  }
  if (v.kind == Kind::kColdFile) {
    auto m = store_->GetManifest(v.file_id);  // the inode keeps no path
    if (!m.ok()) return StoreError(m.status(), EioSite::kLookupManifest);
    *rel = m->path();
    return 0;
  }
  char buf[PATH_MAX + 1];
  ssize_t n = ::readlink(ProcPath(v.fd->get()).c_str(), buf, PATH_MAX);
  if (n < 0 && errno == ENAMETOOLONG) return RelPathByWalk(v.fd->get(), rel);
  if (n < 0) return -errno;
  std::string_view abs(buf, static_cast<size_t>(n));
  struct stat st;
  if (abs.ends_with(" (deleted)") && (::fstat(v.fd->get(), &st) != 0 || st.st_nlink == 0)) {
    return -ENOENT;  // removed, not merely named so
  }
  const std::string& root = options_.logdir;
  if (abs == root) {
    rel->clear();
    return 0;
  }
  if (abs.size() <= root.size() || abs.compare(0, root.size(), root) != 0 ||
      abs[root.size()] != '/') {
    return -ENOENT;  // moved out of the logdir behind our back
  }
  rel->assign(abs.substr(root.size() + 1));
  return 0;
}

int Filesystem::RelPathByWalk(int fd, std::string* rel) {
  // The kernel names no path longer than PATH_MAX: climb through ".." to
  // the logdir, finding each folder's name in its parent by its inode.
  struct stat root;
  if (::stat(options_.logdir.c_str(), &root) != 0) return -errno;
  std::vector<std::string> names;
  UniqueFd cur(::dup(fd));
  if (!cur.valid()) return -errno;
  for (;;) {
    struct stat st;
    if (::fstat(cur.get(), &st) != 0) return -errno;
    if (st.st_dev == root.st_dev && st.st_ino == root.st_ino) break;
    if (st.st_nlink == 0) return -ENOENT;
    UniqueFd parent(OpenAtOwnRead(cur.get(), "..", O_RDONLY | O_DIRECTORY | O_NOFOLLOW | kOwnRead));
    if (!parent.valid()) return -errno;
    struct stat pst;
    if (::fstat(parent.get(), &pst) != 0) return -errno;
    if (pst.st_dev == st.st_dev && pst.st_ino == st.st_ino) return -ENOENT;  // "/": left the logdir
    std::unique_ptr<DIR, int (*)(DIR*)> d(::fdopendir(::dup(parent.get())), ::closedir);
    if (!d) return -errno;
    std::string found;
    while (struct dirent* e = ::readdir(d.get())) {
      std::string_view name = e->d_name;
      if (e->d_ino != st.st_ino || name == "." || name == "..") continue;
      struct stat cst;
      if (::fstatat(parent.get(), e->d_name, &cst, AT_SYMLINK_NOFOLLOW) == 0 &&
          cst.st_dev == st.st_dev && cst.st_ino == st.st_ino) {
        found = e->d_name;
        break;
      }
    }
    if (found.empty()) return -ENOENT;  // moved meanwhile
    names.push_back(std::move(found));
    cur = std::move(parent);
  }
  rel->clear();
  for (auto it = names.rbegin(); it != names.rend(); ++it) *rel = JoinPath(*rel, *it);
  return 0;
}

}  // namespace tbfs::fs
