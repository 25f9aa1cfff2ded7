// Filesystem: rmdir, and the files a batch holds aside in the folder
// (fs/filesystem.h).
//
// While a batch holds a folder's files aside (`.NAME.tbfs-mig-ID`, until
// their group is committed: a second and a flush), the mount shows them
// from the store; deleted through the mount then (`rm -rf`), they are gone
// from the store at once, but their backing files stay aside until the
// batch unlinks them. An rmdir of the folder in that window found the
// backing folder not empty and said so ("Directory not empty"). When those
// are all its folder holds, the rmdir now unlinks them itself, then
// removes the folder; the batch finds them gone, as it would have left
// them (docs/format.md, "Moving a file"). It does not wait for the batch:
// the kernel holds the parent folder's lock through an rmdir, and a wait
// there held a shared folder for everyone (red team: 59 s).
#include <dirent.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <charconv>
#include <string>
#include <string_view>
#include <vector>

#include "fs/filesystem.h"

namespace tbfs::fs {

namespace {

// Entries an rmdir looks at, at most: more than a batch holds aside in a
// folder at once (a group is 256 files).
constexpr int kMaxEntriesLooked = 1024;

// The file id an aside name ends with (`.NAME.tbfs-mig-ID`, `.tbfs-mig-ID`),
// or 0.
uint64_t AsideId(std::string_view name) {
  static constexpr std::string_view kMig = ".tbfs-mig-";
  const size_t at = name.rfind(kMig);
  if (!name.starts_with('.') || at == std::string_view::npos) return 0;
  uint64_t id = 0;
  const char* end = name.data() + name.size();
  auto [ptr, ec] = std::from_chars(name.data() + at + kMig.size(), end, id);
  return ec == std::errc() && ptr == end ? id : 0;
}

}  // namespace

int Filesystem::Rmdir(uint64_t parent, const char* name) {
  bool hot_not_empty = false;
  const int r = RemoveFolder(parent, name, &hot_not_empty);
  if (r != -ENOTEMPTY || !hot_not_empty) return r;
  InodeView v = inodes_.View(parent);
  if (v.kind != Kind::kHot || !UnlinkDeletedAside(v.fd->get(), name)) return r;
  return RemoveFolder(parent, name, &hot_not_empty);
}

bool Filesystem::UnlinkDeletedAside(int parent_fd, const char* name) {
  // Opened without following a symlink; a FIFO is not opened.
  const int fd = ::openat(parent_fd, name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
  if (fd < 0) return false;
  DIR* dir = ::fdopendir(fd);
  if (dir == nullptr) {
    ::close(fd);
    return false;
  }
  // Each name must be the very file of a move in flight (its id and its
  // inode: a name a user puts there, even with the id of another user's
  // file in flight, is not one), deleted through the mount since (the store
  // has no copy of it: renamed elsewhere, it is the batch's to put there).
  struct Aside {
    std::string name;
    ino_t ino;
  };
  std::vector<Aside> aside;
  bool only = true;
  for (struct dirent* e; only && (e = ::readdir(dir)) != nullptr;) {
    const std::string_view n = e->d_name;
    if (n == "." || n == "..") continue;
    const uint64_t id = AsideId(n);
    struct stat st;
    only = id != 0 && aside.size() < kMaxEntriesLooked &&
           ::fstatat(fd, e->d_name, &st, AT_SYMLINK_NOFOLLOW) == 0 && S_ISREG(st.st_mode) &&
           inodes_.InTransition(id, st.st_dev, st.st_ino) &&
           store_->GetManifest(id).status().IsNotFound();
    if (only) aside.push_back({std::string(n), st.st_ino});
  }
  for (size_t i = 0; only && i < aside.size(); ++i) {
    // The file looked at, still (unlinked by name), or gone: the batch
    // unlinked it meanwhile.
    const char* n = aside[i].name.c_str();
    struct stat st;
    if (::fstatat(fd, n, &st, AT_SYMLINK_NOFOLLOW) != 0) {
      only = errno == ENOENT;
      continue;
    }
    only = st.st_ino == aside[i].ino && (::unlinkat(fd, n, 0) == 0 || errno == ENOENT);
  }
  ::closedir(dir);
  return only && !aside.empty();
}

int Filesystem::RemoveFolder(uint64_t parent, const char* name, bool* hot_not_empty) {
  *hot_not_empty = false;
  if (IsHidden(parent, name)) return -EPERM;
  WriterMutexLock ns(ns_mu_);
  std::string prel;
  if (int r = RelPath(parent, &prel); r != 0) return r;
  std::string rel = JoinPath(prel, name);
  auto has_cold = store_->HasChildren(rel);
  if (!has_cold.ok()) return StoreError(has_cold.status(), EioSite::kRmdir, rel);
  if (!store_->writer() && store_->GetEntry(rel).ok()) return -EROFS;  // see Rename
  InodeView v = inodes_.View(parent);
  bool hot_gone = false;
  if (v.kind == Kind::kHot) {
    struct stat st;
    if (::fstatat(v.fd->get(), name, &st, AT_SYMLINK_NOFOLLOW) == 0) {
      if (*has_cold) return -ENOTEMPTY;
      if (::unlinkat(v.fd->get(), name, AT_REMOVEDIR) != 0) {
        *hot_not_empty = errno == ENOTEMPTY;
        return -errno;
      }
      hot_gone = true;
    }
  }
  auto entry = store_->GetEntry(rel);
  if (!entry.ok()) return hot_gone ? 0 : StoreError(entry.status(), EioSite::kRmdir, rel);
  if (entry->kind() != storepb::Entry::DIR) return -ENOTDIR;
  if (*has_cold) return -ENOTEMPTY;
  store::WriteBatch batch;
  Status st = store_->RemoveEntry(&batch, rel);
  if (st.ok()) st = store_->Commit(batch, true);
  return st.ok() ? 0 : StoreError(st, EioSite::kRmdir, rel);
}

}  // namespace tbfs::fs
