// Filesystem: rmdir, and its wait for the files a batch holds aside in the
// folder (fs/filesystem.h).
//
// While a batch holds a folder's files aside (`.NAME.tbfs-mig-ID`, until
// their group is committed: a second and a flush), the mount shows them
// from the store; deleted through the mount then (`rm -rf`), they are gone
// from the store at once, but their backing files stay aside until the
// batch unlinks them. An rmdir of the folder in that window found the
// backing folder not empty and said so ("Directory not empty"); it now
// waits for a transition to end, and tries again, for kRmdirWait at most.
#include <dirent.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <charconv>
#include <chrono>
#include <string_view>

#include "fs/filesystem.h"

namespace tbfs::fs {

namespace {

// How long an rmdir waits for the files aside in its folder: a group of a
// batch waits aside about a second, plus a flush of the store. The kernel
// holds the parent folder's lock meanwhile (lookups of new names in it
// wait too), so not longer.
constexpr auto kRmdirWait = std::chrono::seconds(5);

// The file id a transient name ends with (`.tbfs-mig-ID`, `.tbfs-tmp-ID`),
// or 0.
uint64_t TransientId(std::string_view name) {
  const size_t dash = name.rfind('-');
  uint64_t id = 0;
  if (dash == std::string_view::npos) return 0;
  const char* end = name.data() + name.size();
  auto [ptr, ec] = std::from_chars(name.data() + dash + 1, end, id);
  return ec == std::errc() && ptr == end ? id : 0;
}

// Entries an rmdir looks at, at most, to see whether it should wait: more
// than a batch holds aside in a folder at once (a group is 256 files).
constexpr int kMaxEntriesLooked = 1024;

// Whether the folder `name` of `parent_fd` holds only names tbfs gives
// files for a moment (IsTransientName: a batch's files aside, a
// rehydration's copy), one of them the very file of a transition now (its
// id and its backing identity): a name planted by a user (even with the id
// of another user's file in flight), or left by a crash for recovery, is
// not waited for. Opened without following a symlink; a FIFO is not
// opened. Looked at without the namespace lock: what it finds only decides
// whether to wait.
bool OnlyFilesInTransition(int parent_fd, const char* name, InodeTable& inodes) {
  const int fd = ::openat(parent_fd, name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
  if (fd < 0) return false;
  DIR* dir = ::fdopendir(fd);
  if (dir == nullptr) {
    ::close(fd);
    return false;
  }
  bool only = true, in_flight = false;
  int looked = 0;
  for (struct dirent* e; only && (e = ::readdir(dir)) != nullptr;) {
    const std::string_view n = e->d_name;
    if (n == "." || n == "..") continue;
    only = IsTransientName(n) && ++looked <= kMaxEntriesLooked;
    struct stat st;
    if (only && !in_flight && TransientId(n) != 0 &&
        ::fstatat(fd, e->d_name, &st, AT_SYMLINK_NOFOLLOW) == 0) {
      in_flight = inodes.InTransition(TransientId(n), st.st_dev, st.st_ino);
    }
  }
  ::closedir(dir);
  return only && in_flight;
}

}  // namespace

int Filesystem::Rmdir(uint64_t parent, const char* name, const std::atomic<bool>* interrupted) {
  const auto deadline = std::chrono::steady_clock::now() + kRmdirWait;
  bool waiting = false;
  int r;
  for (;;) {
    // Counted before the attempt: a move that ends after it is one to wait for.
    const uint64_t ended = inodes_.TransitionsEnded();
    bool hot_not_empty = false;
    r = RemoveFolder(parent, name, &hot_not_empty);
    if (r != -ENOTEMPTY || !hot_not_empty) break;
    InodeView v = inodes_.View(parent);
    if (v.kind != Kind::kHot || !OnlyFilesInTransition(v.fd->get(), name, inodes_)) break;
    if (!waiting && !TakeWaitSlot()) break;
    waiting = true;
    // None ended in time: not empty, as before.
    if (!inodes_.WaitForATransitionToEnd(ended, deadline, interrupted)) {
      if (interrupted != nullptr && interrupted->load()) r = -EINTR;
      break;
    }
  }
  if (waiting) GiveWaitSlot();
  return r;
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
