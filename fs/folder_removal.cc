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
#include <unistd.h>

#include <chrono>
#include <string_view>

#include "fs/filesystem.h"

namespace tbfs::fs {

namespace {

// How long an rmdir waits for the files aside in its folder: a group of a
// batch waits aside about a second, plus a flush of the store.
constexpr auto kRmdirWait = std::chrono::seconds(10);

// Whether the folder `name` of `parent_fd` holds only names tbfs gives files
// for a moment (IsTransientName: a batch's files aside, a rehydration's
// copy). Opened without following a symlink; a FIFO is not opened.
bool OnlyTransientNames(int parent_fd, const char* name) {
  const int fd = ::openat(parent_fd, name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
  if (fd < 0) return false;
  DIR* dir = ::fdopendir(fd);
  if (dir == nullptr) {
    ::close(fd);
    return false;
  }
  bool only = true;
  for (struct dirent* e; only && (e = ::readdir(dir)) != nullptr;) {
    const std::string_view n = e->d_name;
    if (n != "." && n != "..") only = IsTransientName(n);
  }
  ::closedir(dir);
  return only;
}

}  // namespace

int Filesystem::Rmdir(uint64_t parent, const char* name, const std::atomic<bool>* interrupted) {
  const auto deadline = std::chrono::steady_clock::now() + kRmdirWait;
  for (;;) {
    // Counted before the attempt: a move that ends after it is one to wait for.
    const uint64_t ended = inodes_.TransitionsEnded();
    bool only_aside = false;
    const int r = RemoveFolder(parent, name, &only_aside);
    if (r != -ENOTEMPTY || !only_aside) return r;
    // Not a transition in flight (names left by a crash, for recovery), or
    // none ended in time: not empty, as before.
    if (!inodes_.WaitForATransitionToEnd(ended, deadline, interrupted)) {
      return interrupted != nullptr && interrupted->load() ? -EINTR : -ENOTEMPTY;
    }
  }
}

int Filesystem::RemoveFolder(uint64_t parent, const char* name, bool* only_aside) {
  *only_aside = false;
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
        const int err = errno;
        if (err == ENOTEMPTY) *only_aside = OnlyTransientNames(v.fd->get(), name);
        return -err;
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
