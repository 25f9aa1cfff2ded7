#include "base/time_util.h"
#include "fs/filesystem.h"

#include <dirent.h>
#include <fcntl.h>
#include <linux/fs.h>
#include <sys/xattr.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <set>
#include <thread>

#include "base/work_pool.h"
#include "events/logdir_digest.h"
#include "fmt/format.h"
#include "fs/setattr_bits.h"
#include "spdlog/spdlog.h"
#include "store/classify.h"
#include "store/file_io.h"
#include "store/restore.h"

namespace tbfs::fs {

namespace {

int Errno() { return -errno; }

}  // namespace

std::string ProcPath(int fd) { return fmt::format("/proc/self/fd/{}", fd); }

bool IsTransientName(std::string_view name) {
  return name.starts_with('.') && (name.find(".tbfs-mig-") != std::string_view::npos ||
                                   name.find(".tbfs-tmp-") != std::string_view::npos);
}

Filesystem::Filesystem(const FsConfig& config, store::ColdStore* store, UniqueFd root_fd)
    : config_(config),
      store_(store),
      inodes_(std::move(root_fd)),
      cache_(store, config.cache_bytes, 2) {}

int Filesystem::StoreError(const Status& st, const char* tag) {
  if (st.IsNotFound()) return -ENOENT;
  if (st.sys_errno() == EROFS) {
    // A shared store this mount does not write (fs/mount.h): not an error of the store.
    spdlog::info("{}: {}", tag, st.message());
    return -EROFS;
  }
  const StoreFault fault = ClassifyStoreFault(st);
  counters_.eio_store++;
  counters_.eio_store_by[static_cast<int>(fault)]++;
  spdlog::error("[EIO:{}] {}", tag, st.message());
  // A store that does not answer is an I/O error of the file, whatever the
  // network said.
  return fault == StoreFault::kUnreachable ? -EIO : -st.ToErrno();
}

bool Filesystem::IsHidden(uint64_t parent, const char* name) {
  // LOGDIR/.tbfs is tbfs's own (the logdir's lock; the store by default).
  if (parent == InodeTable::kRootId && std::strcmp(name, store::kStoreDirName) == 0) return true;
  if (config_.store_skip.empty()) return false;
  if (parent == InodeTable::kRootId) return config_.store_skip == name;
  if (config_.store_skip.find('/') == std::string::npos) return false;
  std::string rel;
  return RelPath(parent, &rel) == 0 && JoinPath(rel, name) == config_.store_skip;
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
    *rel = v.manifest->path();
    return 0;
  }
  char buf[PATH_MAX + 1];
  ssize_t n = ::readlink(ProcPath(v.fd->get()).c_str(), buf, PATH_MAX);
  if (n < 0 && errno == ENAMETOOLONG) return RelPathByWalk(v.fd->get(), rel);
  if (n < 0) return Errno();
  std::string_view abs(buf, static_cast<size_t>(n));
  struct stat st;
  if (abs.ends_with(" (deleted)") && (::fstat(v.fd->get(), &st) != 0 || st.st_nlink == 0)) {
    return -ENOENT;  // removed, not merely named so
  }
  const std::string& root = config_.logdir;
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
  if (::stat(config_.logdir.c_str(), &root) != 0) return Errno();
  std::vector<std::string> names;
  UniqueFd cur(::dup(fd));
  if (!cur.valid()) return Errno();
  for (;;) {
    struct stat st;
    if (::fstat(cur.get(), &st) != 0) return Errno();
    if (st.st_dev == root.st_dev && st.st_ino == root.st_ino) break;
    if (st.st_nlink == 0) return -ENOENT;
    UniqueFd parent(::openat(cur.get(), "..", O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC));
    if (!parent.valid()) return Errno();
    struct stat pst;
    if (::fstat(parent.get(), &pst) != 0) return Errno();
    if (pst.st_dev == st.st_dev && pst.st_ino == st.st_ino) return -ENOENT;  // "/": left the logdir
    std::unique_ptr<DIR, int (*)(DIR*)> d(::fdopendir(::dup(parent.get())), ::closedir);
    if (!d) return Errno();
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

void Filesystem::ColdAttr(const storepb::Manifest& m, ino_t shown_ino, struct stat* st) {
  *st = {};
  st->st_ino = shown_ino;
  st->st_mode = m.mode();
  st->st_nlink = 1;
  st->st_uid = m.uid();
  st->st_gid = m.gid();
  st->st_size = static_cast<off_t>(m.size());
  st->st_blksize = 1 << 16;
  st->st_blocks = static_cast<blkcnt_t>((m.stored_bytes() + 511) / 512);
  st->st_atim = FromNs(m.atime_ns());
  st->st_mtim = FromNs(m.mtime_ns());
  st->st_ctim = FromNs(m.ctime_ns());
}

void Filesystem::ColdDirAttr(const std::string& rel, ino_t shown_ino, struct stat* st) {
  *st = {};
  st->st_ino = shown_ino;
  st->st_mode = S_IFDIR | 0755;
  st->st_nlink = 2;
  auto entry = store_->GetEntry(rel);
  if (entry.ok()) {
    st->st_mode = S_IFDIR | (entry->mode() & 07777);
    st->st_uid = entry->uid();
    st->st_gid = entry->gid();
    st->st_mtim = st->st_ctim = st->st_atim = FromNs(entry->mtime_ns());
  }
}

int Filesystem::HotLookupAt(int dir_fd, const char* name, EntryOut* out) {
  // One stat finds an inode the table already holds (a walk of a known tree);
  // only a new one is opened.
  struct stat st;
  if (::fstatat(dir_fd, name, &st, AT_SYMLINK_NOFOLLOW) != 0) return Errno();
  // Folders (whose listings TensorBoard polls) and tfevents files (which grow
  // in place) must look fresh; the rest may be cached longer.
  const bool fresh = S_ISDIR(st.st_mode) || events::IsEventsFileName(name);
  InodeRef ref = inodes_.RefHot(st, inodes_.HandleAt(dir_fd, name, st), fresh);
  if (ref.id == 0) {
    int fd = ::openat(dir_fd, name, O_PATH | O_NOFOLLOW | O_CLOEXEC);
    if (fd < 0) return Errno();
    UniqueFd owned(fd);
    if (::fstatat(fd, "", &st, AT_EMPTY_PATH | AT_SYMLINK_NOFOLLOW) != 0) return Errno();
    ref = inodes_.AddHot(std::move(owned), st, fresh);
  }
  out->id = ref.id;
  if (ref.manifest) {
    ColdAttr(*ref.manifest, ref.shown_ino, &out->attr);  // on its way to the store
  } else {
    out->attr = st;
    out->attr.st_ino = ref.shown_ino;
  }
  return 0;
}

int Filesystem::LookupCold(const std::string& rel, EntryOut* out) {
  auto entry = store_->GetEntry(rel);
  if (!entry.ok()) return StoreError(entry.status(), "lookup");
  if (entry->kind() == storepb::Entry::DIR) {
    out->id = inodes_.AddColdDir(rel);
    ColdDirAttr(rel, inodes_.ShownIno(out->id), &out->attr);
    return 0;
  }
  auto m = store_->GetManifest(entry->file_id());
  if (!m.ok()) return StoreError(m.status(), "lookup-manifest");
  InodeRef ref = inodes_.AddColdFile(std::make_shared<const storepb::Manifest>(std::move(m).value()));
  out->id = ref.id;
  if (ref.manifest) {
    ColdAttr(*ref.manifest, ref.shown_ino, &out->attr);
    return 0;
  }
  // Back in the logdir since the store was asked: the inode serves it there.
  int r = GetAttr(ref.id, &out->attr);
  if (r != 0) inodes_.Forget(ref.id, 1);
  return r;
}

int Filesystem::Lookup(uint64_t parent, const char* name, EntryOut* out) {
  if (IsHidden(parent, name) || IsTransientName(name)) return -ENOENT;
  InodeView v = inodes_.View(parent);
  if (v.kind == Kind::kColdFile) return -ENOTDIR;
  if (v.kind == Kind::kHot) {
    int r = HotLookupAt(v.fd->get(), name, out);
    if (r != -ENOENT) return r;
  }
  std::string rel;
  if (int r = RelPath(parent, &rel); r != 0) return r == -ENOENT ? -ENOENT : r;
  return LookupCold(JoinPath(rel, name), out);
}

void Filesystem::Forget(uint64_t ino, uint64_t nlookup) { inodes_.Forget(ino, nlookup); }

int Filesystem::GetAttr(uint64_t ino, struct stat* st, FileHandle* fh) {
  // A handle's own fd: the only way to a file deleted while open.
  int hfd = fh != nullptr && inodes_.KindOf(ino) == Kind::kHot ? IoFd(fh) : -1;
  if (hfd >= 0) {
    if (::fstat(hfd, st) != 0) return Errno();
    st->st_ino = inodes_.ShownIno(ino);
    return 0;
  }
  InodeView v = inodes_.View(ino);
  switch (v.kind) {
    case Kind::kColdFile: ColdAttr(*v.manifest, v.shown_ino, st); return 0;
    case Kind::kColdDir: ColdDirAttr(v.cold_path, v.shown_ino, st); return 0;
    case Kind::kHot:
      // A file handle whose file is gone: ESTALE has the kernel look the
      // name up again (another host may have moved the file to the store).
      if (!v.fd->valid()) return -ESTALE;
      if (::fstatat(v.fd->get(), "", st, AT_EMPTY_PATH | AT_SYMLINK_NOFOLLOW) != 0) return Errno();
      st->st_ino = v.shown_ino;
      return 0;
  }
  return -EIO;
}

int Filesystem::SetAttr(uint64_t ino, const struct stat& attr, int to_set, FileHandle* fh,
                        struct stat* out) {
  InodeView v = inodes_.View(ino);
  if (v.kind == Kind::kColdFile && !(to_set & kSetSize)) {
    // Metadata of a cold file changes in its manifest; no rehydration.
    std::shared_lock<std::shared_mutex> ns(ns_mu_);
    auto m = store_->GetManifest(v.manifest->file_id());
    if (!m.ok()) return StoreError(m.status(), "setattr");
    if (to_set & kSetMode) m->set_mode((m->mode() & S_IFMT) | (attr.st_mode & 07777));
    if (to_set & kSetUid) m->set_uid(attr.st_uid);
    if (to_set & kSetGid) m->set_gid(attr.st_gid);
    const int64_t now = NowNs();
    if (to_set & kSetAtimeNow) m->set_atime_ns(now);
    else if (to_set & kSetAtime) m->set_atime_ns(ToNs(attr.st_atim));
    if (to_set & kSetMtimeNow) m->set_mtime_ns(now);
    else if (to_set & kSetMtime) m->set_mtime_ns(ToNs(attr.st_mtim));
    m->set_ctime_ns(now);
    store::WriteBatch batch;
    store_->UpdateManifest(&batch, *m);
    Status st = store_->Commit(batch, true);
    if (!st.ok()) return StoreError(st, "setattr");
    auto shared = std::make_shared<const storepb::Manifest>(std::move(m).value());
    inodes_.UpdateManifest(shared);
    ColdAttr(*shared, v.shown_ino, out);
    return 0;
  }
  if (v.kind == Kind::kColdFile) {
    if (int r = Rehydrate(ino); r != 0) return r;
  } else if (v.kind == Kind::kColdDir) {
    std::shared_ptr<UniqueFd> ignored;
    if (int r = EnsureBackingDir(ino, &ignored); r != 0) return r;
  }
  v = inodes_.View(ino);
  const int fd = v.fd->get();
  const std::string proc = ProcPath(fd);
  const int hfd = fh != nullptr ? IoFd(fh) : -1;
  const bool have_fh = hfd >= 0;
  if (to_set & kSetMode) {
    int r = have_fh ? ::fchmod(hfd, attr.st_mode & 07777) : ::chmod(proc.c_str(), attr.st_mode & 07777);
    if (r != 0) return Errno();
  }
  if (to_set & (kSetUid | kSetGid)) {
    uid_t uid = (to_set & kSetUid) ? attr.st_uid : static_cast<uid_t>(-1);
    gid_t gid = (to_set & kSetGid) ? attr.st_gid : static_cast<gid_t>(-1);
    if (::fchownat(fd, "", uid, gid, AT_EMPTY_PATH | AT_SYMLINK_NOFOLLOW) != 0) return Errno();
  }
  if (to_set & kSetSize) {
    int r = have_fh && fh->writable ? ::ftruncate(hfd, attr.st_size) : ::truncate(proc.c_str(), attr.st_size);
    if (r != 0) return Errno();
  }
  if (to_set & (kSetAtime | kSetMtime | kSetAtimeNow | kSetMtimeNow)) {
    struct timespec tv[2] = {{0, UTIME_OMIT}, {0, UTIME_OMIT}};
    if (to_set & kSetAtimeNow) tv[0].tv_nsec = UTIME_NOW;
    else if (to_set & kSetAtime) tv[0] = attr.st_atim;
    if (to_set & kSetMtimeNow) tv[1].tv_nsec = UTIME_NOW;
    else if (to_set & kSetMtime) tv[1] = attr.st_mtim;
    int r = have_fh ? ::futimens(hfd, tv) : ::utimensat(AT_FDCWD, proc.c_str(), tv, 0);
    if (r != 0) return Errno();
  }
  return GetAttr(ino, out);
}

int Filesystem::ReadLink(uint64_t ino, std::string* target) {
  InodeView v = inodes_.View(ino);
  if (v.kind != Kind::kHot) return -EINVAL;
  char buf[PATH_MAX + 1];
  ssize_t n = ::readlinkat(v.fd->get(), "", buf, sizeof(buf));
  if (n < 0) return Errno();
  target->assign(buf, static_cast<size_t>(n));
  return 0;
}

int Filesystem::EnsureBackingDir(uint64_t ino, std::shared_ptr<UniqueFd>* fd) {
  InodeView v = inodes_.View(ino);
  if (v.kind == Kind::kHot) {
    *fd = v.fd;
    return 0;
  }
  if (v.kind != Kind::kColdDir) return -ENOTDIR;
  // Recreate the folder chain the cold namespace remembers, beneath the
  // logdir without following a symlink a user may have put on the way.
  const std::string& rel = v.cold_path;
  auto made = MakeDirsBeneath(inodes_.RootFd(), rel, 0755,
                              [&](const std::string& folder, int fd) {
                                auto entry = store_->GetEntry(folder);
                                if (!entry.ok()) return;
                                (void)::fchown(fd, entry->uid(), entry->gid());
                                (void)::fchmod(fd, entry->mode() & 07777);
                              });
  if (!made.ok()) return -(made.status().sys_errno() ? made.status().sys_errno() : EIO);
  auto opened = OpenBeneath(inodes_.RootFd(), rel, O_PATH | O_DIRECTORY);
  if (!opened.ok()) return -(opened.status().sys_errno() ? opened.status().sys_errno() : EIO);
  UniqueFd owned = std::move(opened).value();
  struct stat st;
  if (::fstat(owned.get(), &st) != 0) return Errno();
  inodes_.ColdDirToHot(ino, std::move(owned), st);
  Invalidate(ino);  // a backing folder's number now
  *fd = inodes_.View(ino).fd;
  return 0;
}

void Filesystem::FixOwner(int dir_fd, const char* name, int fd, const Caller& c, mode_t mode) {
  if (!config_.as_root_owner_fixup || (c.uid == 0 && c.gid == 0)) return;
  // Everything through an fd of the object just made, never by name: the
  // caller may have swapped the name for a symlink meanwhile.
  UniqueFd path_fd;
  if (fd < 0) {
    path_fd.reset(::openat(dir_fd, name, O_PATH | O_NOFOLLOW | O_CLOEXEC));
    fd = path_fd.get();
  }
  struct stat st;
  if (fd < 0 || ::fstat(fd, &st) != 0 || (st.st_mode & S_IFMT) != (mode & S_IFMT)) {
    spdlog::warn("chown {} to {}:{}: it changed as it was made; left alone", name, c.uid, c.gid);
    return;
  }
  // In a set-group-ID folder the new entry keeps the folder's group.
  struct stat dir;
  gid_t gid = ::fstat(dir_fd, &dir) == 0 && (dir.st_mode & S_ISGID) ? static_cast<gid_t>(-1) : c.gid;
  if (::fchownat(fd, "", c.uid, gid, AT_EMPTY_PATH | AT_SYMLINK_NOFOLLOW) != 0) {
    spdlog::warn("chown {} to {}:{}: {}", name, c.uid, c.gid, std::strerror(errno));
    return;
  }
  // chown cleared the set-id bits the caller asked for; give them back, on
  // the same file (a regular file or a folder, as checked above).
  if (!(mode & (S_ISUID | S_ISGID)) || !(S_ISREG(mode) || S_ISDIR(mode))) return;
  UniqueFd real;
  if (path_fd.valid()) {
    real.reset(::open(ProcPath(fd).c_str(), (S_ISDIR(mode) ? O_RDONLY | O_DIRECTORY : O_RDONLY | O_NONBLOCK) | O_CLOEXEC));
  }
  if (::fchmod(real.valid() ? real.get() : fd, mode & 07777) != 0) {
    spdlog::warn("chmod {} to {:o}: {}", name, mode & 07777, std::strerror(errno));
  }
}

// Creating a name that exists cold is EEXIST, as it would be on a disk.
#define TBFS_REFUSE_IF_COLD(parent, name)                          \
  do {                                                             \
    std::string rel_;                                              \
    if (RelPath(parent, &rel_) == 0 &&                             \
        store_->GetEntry(JoinPath(rel_, name)).ok()) {             \
      return -EEXIST;                                              \
    }                                                              \
  } while (0)

int Filesystem::MkNod(uint64_t parent, const char* name, mode_t mode, dev_t rdev,
                      const Caller& c, EntryOut* out) {
  if (IsHidden(parent, name)) return -EPERM;
  std::shared_ptr<UniqueFd> pfd;
  if (int r = EnsureBackingDir(parent, &pfd); r != 0) return r;
  TBFS_REFUSE_IF_COLD(parent, name);
  if (::mknodat(pfd->get(), name, mode, rdev) != 0) return Errno();
  FixOwner(pfd->get(), name, -1, c, mode);
  return HotLookupAt(pfd->get(), name, out);
}

int Filesystem::Mkdir(uint64_t parent, const char* name, mode_t mode, const Caller& c,
                      EntryOut* out) {
  if (IsHidden(parent, name)) return -EPERM;
  std::shared_ptr<UniqueFd> pfd;
  if (int r = EnsureBackingDir(parent, &pfd); r != 0) return r;
  TBFS_REFUSE_IF_COLD(parent, name);
  if (::mkdirat(pfd->get(), name, mode) != 0) return Errno();
  FixOwner(pfd->get(), name, -1, c, S_IFDIR | mode);
  return HotLookupAt(pfd->get(), name, out);
}

int Filesystem::Symlink(const char* target, uint64_t parent, const char* name, const Caller& c,
                        EntryOut* out) {
  if (IsHidden(parent, name)) return -EPERM;
  std::shared_ptr<UniqueFd> pfd;
  if (int r = EnsureBackingDir(parent, &pfd); r != 0) return r;
  TBFS_REFUSE_IF_COLD(parent, name);
  if (::symlinkat(target, pfd->get(), name) != 0) return Errno();
  FixOwner(pfd->get(), name, -1, c, S_IFLNK | 0777);
  return HotLookupAt(pfd->get(), name, out);
}

int Filesystem::Link(uint64_t ino, uint64_t parent, const char* name, EntryOut* out) {
  if (IsHidden(parent, name)) return -EPERM;
  if (inodes_.View(ino).kind == Kind::kColdFile) {
    if (int r = Rehydrate(ino); r != 0) return r;
  }
  InodeView v = inodes_.View(ino);
  if (v.kind != Kind::kHot) return -EPERM;
  std::shared_ptr<UniqueFd> pfd;
  if (int r = EnsureBackingDir(parent, &pfd); r != 0) return r;
  TBFS_REFUSE_IF_COLD(parent, name);
  if (::linkat(AT_FDCWD, ProcPath(v.fd->get()).c_str(), pfd->get(), name, AT_SYMLINK_FOLLOW) != 0) {
    return Errno();
  }
  return HotLookupAt(pfd->get(), name, out);
}

int Filesystem::UnlinkCold(const std::string& rel) {
  auto entry = store_->GetEntry(rel);
  if (!entry.ok()) return StoreError(entry.status(), "unlink");
  if (entry->kind() == storepb::Entry::DIR) return -EISDIR;
  auto m = store_->GetManifest(entry->file_id());
  if (!m.ok()) return StoreError(m.status(), "unlink");
  // A file still open keeps its chunks until the last release.
  store::WriteBatch batch;
  store_->Retire(&batch, *m);
  Status st = store_->Commit(batch, true);
  if (!st.ok()) return StoreError(st, "unlink");
  ReapRetired(m->file_id());
  return 0;
}

int Filesystem::DeleteColdFile(const storepb::Manifest& m) {
  {
    MutexLock one(rehydrate_mu_);  // not while it is being rehydrated
    std::shared_lock<std::shared_mutex> ns(ns_mu_);
    auto entry = store_->GetEntry(m.path());
    if (!entry.ok()) return StoreError(entry.status(), "retention");
    if (entry->kind() != storepb::Entry::FILE || entry->file_id() != m.file_id()) return -ENOENT;
    store::WriteBatch batch;
    store_->Retire(&batch, m);
    Status st = store_->Commit(batch, true);
    if (!st.ok()) return StoreError(st, "retention");
  }
  ReapRetired(m.file_id());
  if (kernel_ == nullptr) return 0;
  // The kernel may hold the name for up to kStableTtlS, and the folder's
  // listing until its mtime changes (a cold folder's never does): tell it.
  // Its folder's id, by the lookups the kernel would make (then forgotten).
  std::vector<uint64_t> looked_up;
  uint64_t parent = InodeTable::kRootId;
  const std::string dir = ParentPath(m.path());
  for (size_t start = 0; !dir.empty() && start <= dir.size();) {
    size_t end = dir.find('/', start);
    if (end == std::string::npos) end = dir.size();
    EntryOut out;
    if (Lookup(parent, dir.substr(start, end - start).c_str(), &out) != 0) {
      parent = 0;  // the folder went too: nothing the kernel can still list
      break;
    }
    looked_up.push_back(out.id);
    parent = out.id;
    start = end + 1;
  }
  if (parent != 0) kernel_->InvalidateEntry(parent, std::string(BaseName(m.path())));
  for (uint64_t id : looked_up) Forget(id, 1);
  return 0;
}

int Filesystem::Unlink(uint64_t parent, const char* name) {
  if (IsHidden(parent, name)) return -EPERM;
  std::shared_lock<std::shared_mutex> ns(ns_mu_);
  InodeView v = inodes_.View(parent);
  if (v.kind == Kind::kHot) {
    if (::unlinkat(v.fd->get(), name, 0) == 0) return 0;
    if (errno != ENOENT) return Errno();
  }
  std::string rel;
  if (int r = RelPath(parent, &rel); r != 0) return r;
  return UnlinkCold(JoinPath(rel, name));
}

int Filesystem::Rmdir(uint64_t parent, const char* name) {
  if (IsHidden(parent, name)) return -EPERM;
  std::unique_lock<std::shared_mutex> ns(ns_mu_);
  std::string prel;
  if (int r = RelPath(parent, &prel); r != 0) return r;
  std::string rel = JoinPath(prel, name);
  auto has_cold = store_->HasChildren(rel);
  if (!has_cold.ok()) return StoreError(has_cold.status(), "rmdir");
  if (!store_->writer() && store_->GetEntry(rel).ok()) return -EROFS;  // see Rename
  InodeView v = inodes_.View(parent);
  bool hot_gone = false;
  if (v.kind == Kind::kHot) {
    struct stat st;
    if (::fstatat(v.fd->get(), name, &st, AT_SYMLINK_NOFOLLOW) == 0) {
      if (*has_cold) return -ENOTEMPTY;
      if (::unlinkat(v.fd->get(), name, AT_REMOVEDIR) != 0) return Errno();
      hot_gone = true;
    }
  }
  auto entry = store_->GetEntry(rel);
  if (!entry.ok()) return hot_gone ? 0 : StoreError(entry.status(), "rmdir");
  if (entry->kind() != storepb::Entry::DIR) return -ENOTDIR;
  if (*has_cold) return -ENOTEMPTY;
  store::WriteBatch batch;
  store_->RemoveEntry(&batch, rel);
  Status st = store_->Commit(batch, true);
  return st.ok() ? 0 : StoreError(st, "rmdir");
}

int Filesystem::Rename(uint64_t parent, const char* name, uint64_t newparent, const char* newname,
                       unsigned flags) {
  if (IsHidden(parent, name) || IsHidden(newparent, newname)) return -EPERM;
  if (flags & ~(RENAME_NOREPLACE | RENAME_EXCHANGE)) return -EINVAL;
  std::unique_lock<std::shared_mutex> ns(ns_mu_);
  std::string prel, nrel;
  if (int r = RelPath(parent, &prel); r != 0) return r;
  if (int r = RelPath(newparent, &nrel); r != 0) return r;
  const std::string src = JoinPath(prel, name), dst = JoinPath(nrel, newname);
  if (dst.compare(0, src.size() + 1, src + "/") == 0) return -EINVAL;  // into itself

  InodeView pv = inodes_.View(parent);
  struct stat sst;
  bool src_hot = pv.kind == Kind::kHot &&
                 ::fstatat(pv.fd->get(), name, &sst, AT_SYMLINK_NOFOLLOW) == 0;
  auto dst_entry = store_->GetEntry(dst);
  bool dst_cold = dst_entry.ok();
  if (!store_->writer()) {
    // A mount that reads a shared store another one writes changes nothing
    // the store holds: refused before anything moves (fs/mount.h).
    const bool src_in_store = !src_hot || (S_ISDIR(sst.st_mode) && store_->GetEntry(src).ok());
    if (src_in_store || dst_cold) return -EROFS;
  }
  auto dst_cold_children = [&]() -> int {
    if (!dst_cold || dst_entry->kind() != storepb::Entry::DIR) return 0;
    auto kids = store_->HasChildren(dst);
    if (!kids.ok()) return StoreError(kids.status(), "rename");
    return *kids ? -ENOTEMPTY : 0;
  };

  if (src_hot) {
    std::shared_ptr<UniqueFd> npfd;
    if (int r = EnsureBackingDir(newparent, &npfd); r != 0) return r;
    struct stat dst_st;
    bool dst_hot = ::fstatat(npfd->get(), newname, &dst_st, AT_SYMLINK_NOFOLLOW) == 0;
    if (flags & RENAME_EXCHANGE) {
      if (!dst_hot) return dst_cold ? -EINVAL : -ENOENT;
    } else if (dst_cold && !dst_hot) {
      if (flags & RENAME_NOREPLACE) return -EEXIST;
      if (int r = dst_cold_children(); r != 0) return r;
    }
    pv = inodes_.View(parent);
    if (::renameat2(pv.fd->get(), name, npfd->get(), newname, flags) != 0) return Errno();
    if (!(flags & RENAME_EXCHANGE) && dst_cold && !dst_hot) {
      // The hot file replaced the cold one: the cold one goes. Should that
      // fail, the hot file still wins at this path; the log says so.
      int r = 0;
      if (dst_entry->kind() == storepb::Entry::FILE) {
        r = UnlinkCold(dst);
      } else {
        store::WriteBatch b;
        store_->RemoveEntry(&b, dst);
        Status st = store_->Commit(b, true);
        if (!st.ok()) r = StoreError(st, "rename-replace");
      }
      if (r != 0) spdlog::error("rename over cold {}: its store entry stays: {}", dst, std::strerror(-r));
    }
    if (S_ISDIR(sst.st_mode) && store_->GetEntry(src).ok()) {
      // The folder's cold contents move with it.
      store::WriteBatch b;
      Status st = store_->Rename(&b, src, dst, store::LogdirFolders(config_.logdir));
      if (st.ok()) st = store_->Commit(b, true);
      if (!st.ok()) return StoreError(st, "rename-cold-children");
      inodes_.RenameColdDirs(src, dst);
    }
    return 0;
  }

  // The source is cold (a file, or a folder only the store has).
  if (flags & RENAME_EXCHANGE) return -EINVAL;
  auto src_entry = store_->GetEntry(src);
  if (!src_entry.ok()) return StoreError(src_entry.status(), "rename");
  const bool src_dir = src_entry->kind() == storepb::Entry::DIR;
  InodeView npv = inodes_.View(newparent);
  if (npv.kind == Kind::kColdFile) return -ENOTDIR;
  bool dst_hot_file = false;  // replaced once the store has the file at dst
  if (npv.kind == Kind::kHot) {
    struct stat dst_st;
    if (::fstatat(npv.fd->get(), newname, &dst_st, AT_SYMLINK_NOFOLLOW) == 0) {
      if (flags & RENAME_NOREPLACE) return -EEXIST;
      if (S_ISDIR(dst_st.st_mode) != src_dir) return src_dir ? -ENOTDIR : -EISDIR;
      // An (empty) folder goes first: should it not, nothing has changed.
      if (src_dir && ::unlinkat(npv.fd->get(), newname, AT_REMOVEDIR) != 0) return Errno();
      dst_hot_file = !src_dir;
    }
  }
  if (dst_cold) {
    if (flags & RENAME_NOREPLACE) return -EEXIST;
    if ((dst_entry->kind() == storepb::Entry::DIR) != src_dir) return src_dir ? -ENOTDIR : -EISDIR;
    if (int r = dst_cold_children(); r != 0) return r;
    if (src_dir) {
      store::WriteBatch b;
      store_->RemoveEntry(&b, dst);
      if (Status st = store_->Commit(b, true); !st.ok()) return StoreError(st, "rename");
    } else if (int r = UnlinkCold(dst); r != 0) {
      return r;
    }
  }
  store::WriteBatch batch;
  Status st = store_->Rename(&batch, src, dst, store::LogdirFolders(config_.logdir));
  if (st.ok()) st = store_->Commit(batch, true);
  if (!st.ok()) return StoreError(st, "rename");
  // The hot file it replaces goes only now: a store that failed the
  // rename has left it in place.
  if (dst_hot_file && ::unlinkat(npv.fd->get(), newname, 0) != 0 && errno != ENOENT) {
    const int err = errno;
    spdlog::error("rename {} -> {}: the hot file it replaces stays (and hides it): {}", src, dst, std::strerror(err));
    return -err;
  }
  if (src_dir) {
    inodes_.RenameColdDirs(src, dst);
  } else {
    auto m = store_->GetManifest(src_entry->file_id());
    if (m.ok()) inodes_.UpdateManifest(std::make_shared<const storepb::Manifest>(std::move(m).value()));
  }
  return 0;
}

int Filesystem::OpenDir(uint64_t ino, std::unique_ptr<DirHandle>* out) {
  InodeView v = inodes_.View(ino);
  if (v.kind == Kind::kColdFile) return -ENOTDIR;
  if (v.kind == Kind::kHot) {
    struct stat st;
    if (::fstat(v.fd->get(), &st) != 0) return Errno();
    if (!S_ISDIR(st.st_mode)) return -ENOTDIR;
  }
  *out = std::make_unique<DirHandle>();
  return 0;
}

int Filesystem::FillDir(uint64_t ino, DirHandle* dh) {
  dh->entries.clear();
  InodeView v = inodes_.View(ino);
  std::set<std::string> hot_names;
  dh->entries.push_back({".", S_IFDIR, v.shown_ino});
  dh->entries.push_back({"..", S_IFDIR, 1});  // d_ino 0 would hide it from readdir(3)
  if (v.kind == Kind::kHot) {
    int fd = ::openat(v.fd->get(), ".", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (fd < 0) return Errno();
    struct stat dir_st;
    if (::fstat(fd, &dir_st) != 0) {
      int err = errno;
      ::close(fd);
      return -err;
    }
    DIR* dir = ::fdopendir(fd);
    if (dir == nullptr) {
      ::close(fd);
      return Errno();
    }
    while (struct dirent* de = ::readdir(dir)) {
      std::string_view n = de->d_name;
      if (n == "." || n == "..") continue;
      if (ino == InodeTable::kRootId && (n == config_.store_skip || n == store::kStoreDirName)) continue;
      if (IsTransientName(n)) continue;
      hot_names.emplace(n);
      dh->entries.push_back({std::string(n), static_cast<mode_t>(DTTOIF(de->d_type)),
                             inodes_.HotDirentIno(dir_st.st_dev, de->d_ino)});
    }
    ::closedir(dir);
  }
  std::string rel;
  if (RelPath(ino, &rel) != 0) return 0;  // a folder gone from the logdir has no cold part
  std::vector<store::ChildEntry> cold;
  Status st = store_->ListChildren(rel, &cold);
  if (!st.ok()) return StoreError(st, "readdir");
  for (const auto& c : cold) {
    if (hot_names.count(c.name)) continue;  // hot wins
    bool dir = c.entry.kind() == storepb::Entry::DIR;
    dh->entries.push_back({c.name, static_cast<mode_t>(dir ? S_IFDIR : S_IFREG),
                           dir ? inodes_.ColdDirIno(JoinPath(rel, c.name)) : ColdIno(c.entry.file_id())});
  }
  if (!config_.store_skip.empty() && config_.store_skip.find('/') != std::string::npos) {
    std::erase_if(dh->entries, [&](const DirEntryOut& e) {
      return JoinPath(rel, e.name) == config_.store_skip;
    });
  }
  return 0;
}

int Filesystem::StatFs(struct statvfs* st) {
  if (::fstatvfs(inodes_.RootFd(), st) != 0) {
    if (::statvfs(ProcPath(inodes_.RootFd()).c_str(), st) != 0) return Errno();
  }
  return 0;
}

int Filesystem::GetXattr(uint64_t ino, const char* name, std::string* value) {
  InodeView v = inodes_.View(ino);
  if (std::strcmp(name, kStateXattr) == 0) {
    if (v.kind == Kind::kColdFile) {
      *value = "cold";
      return 0;
    }
    struct stat st;
    if (v.kind == Kind::kHot && ::fstatat(v.fd->get(), "", &st, AT_EMPTY_PATH | AT_SYMLINK_NOFOLLOW) == 0 &&
        S_ISREG(st.st_mode)) {
      *value = "hot";
      return 0;
    }
    return -ENODATA;
  }
  if (ino == InodeTable::kRootId && std::strcmp(name, kControlXattr) == 0 &&
      !config_.control_socket.empty()) {
    *value = config_.control_socket;
    return 0;
  }
  if (v.kind != Kind::kHot) return -ENODATA;
  std::string proc = ProcPath(v.fd->get());
  for (size_t cap = 256;; cap *= 4) {
    value->resize(cap);
    ssize_t n = ::getxattr(proc.c_str(), name, value->data(), cap);
    if (n >= 0) {
      value->resize(static_cast<size_t>(n));
      return 0;
    }
    if (errno != ERANGE || cap > (1 << 20)) return Errno();
  }
}

int Filesystem::ListXattr(uint64_t ino, std::string* names) {
  InodeView v = inodes_.View(ino);
  names->clear();
  bool regular = v.kind == Kind::kColdFile;
  if (v.kind == Kind::kHot) {
    std::string proc = ProcPath(v.fd->get());
    struct stat st;
    if (::fstatat(v.fd->get(), "", &st, AT_EMPTY_PATH | AT_SYMLINK_NOFOLLOW) == 0) {
      regular = S_ISREG(st.st_mode);
      if (!S_ISLNK(st.st_mode)) {
        ssize_t n = ::listxattr(proc.c_str(), nullptr, 0);
        if (n > 0) {
          names->resize(static_cast<size_t>(n));
          n = ::listxattr(proc.c_str(), names->data(), names->size());
          names->resize(n > 0 ? static_cast<size_t>(n) : 0);
        }
      }
    }
  }
  if (regular) names->append(kStateXattr, sizeof(kStateXattr));  // with its NUL
  return 0;
}

int Filesystem::SetXattr(uint64_t ino, const char* name, const char* value, size_t size,
                         int flags) {
  if (std::strcmp(name, kStateXattr) == 0 || std::strcmp(name, kControlXattr) == 0) return -EPERM;
  InodeView v = inodes_.View(ino);
  if (v.kind != Kind::kHot) return -ENOTSUP;
  if (::setxattr(ProcPath(v.fd->get()).c_str(), name, value, size, flags) != 0) return Errno();
  return 0;
}

int Filesystem::RemoveXattr(uint64_t ino, const char* name) {
  if (std::strcmp(name, kStateXattr) == 0) return -EPERM;
  InodeView v = inodes_.View(ino);
  if (v.kind != Kind::kHot) return -ENODATA;
  if (::removexattr(ProcPath(v.fd->get()).c_str(), name) != 0) return Errno();
  return 0;
}

}  // namespace tbfs::fs
