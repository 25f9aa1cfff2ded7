// An inode's life beyond lookup and forget: the handles open on it, and
// its moves between the logdir and the store (migration, rehydration, a
// file put back) (fs/inode_table.h).
#include <fcntl.h>

#include <algorithm>

#include "fmt/format.h"
#include "fs/inode_table.h"

namespace tbfs::fs {

InodeTable::Open InodeTable::OpenHandle(uint64_t id, bool writable, uint64_t cold_file_id) {
  MutexLock lock(mu_);
  Inode* inode = Get(id);
  if (cold_file_id != 0) {
    if (inode->kind != Kind::kColdFile || inode->file_id != cold_file_id) return Open::kRetry;
    readers_[cold_file_id]++;
  } else {
    if (inode->kind != Kind::kHot) return Open::kRetry;
    if (writable && inode->in_transition) return Open::kWait;
    if (writable) inode->write_handles++;
  }
  inode->open_handles++;
  return Open::kOk;
}

int InodeTable::CloseHandle(uint64_t id, bool writable, uint64_t cold_file_id) {
  std::unique_ptr<InodeExtra> dead;
  int left = 0;
  {
    MutexLock lock(mu_);
    Inode* inode = Get(id);
    inode->open_handles--;
    if (writable) inode->write_handles--;
    if (cold_file_id != 0) {
      auto it = readers_.find(cold_file_id);
      if (it != readers_.end() && --it->second > 0) {
        left = it->second;
      } else if (it != readers_.end()) {
        readers_.erase(it);
      }
    }
    dead = ReleaseIfUnusedLocked(inode);
  }
  return left;
}

int InodeTable::Readers(uint64_t file_id) {
  MutexLock lock(mu_);
  auto it = readers_.find(file_id);
  return it == readers_.end() ? 0 : it->second;
}

bool InodeTable::WaitSettled(uint64_t id, const std::atomic<bool>* stop) {
  MutexLock lock(mu_);
  Inode* inode = Get(id);
  settled_.wait(lock, [&]() TBFS_NO_THREAD_SAFETY_ANALYSIS {
    return !inode->in_transition || (stop != nullptr && stop->load());
  });
  return !inode->in_transition;
}

bool InodeTable::InTransition(uint64_t file_id, dev_t dev, ino_t ino) {
  MutexLock lock(mu_);
  auto it = cold_files_.find(file_id);
  return it != cold_files_.end() && (*it)->in_transition && (*it)->dev == dev && (*it)->ino == ino;
}

bool InodeTable::Settled(uint64_t id) {
  MutexLock lock(mu_);
  return !Get(id)->in_transition;
}

void InodeTable::WakeWaiters() {
  { MutexLock lock(mu_); }  // a waiter between its check and its sleep is asleep now
  settled_.notify_all();
}

uint64_t InodeTable::BeginMove(int fd, const struct stat& st, const storepb::Manifest& m) {
  const InlineHandle handle = InlineHandle::Of(HandleOf(fd, st));
  UniqueFd path_fd;
  if (handle.empty()) {
    path_fd.reset(::open(fmt::format("/proc/self/fd/{}", fd).c_str(), O_PATH | O_CLOEXEC));
    if (!path_fd.valid()) return 0;
  }
  MutexLock lock(mu_);
  Inode* inode = FindHotLocked(st.st_dev, st.st_ino, handle);
  if (inode != nullptr) {
    if (inode->in_transition || inode->write_handles > 0 || inode->kind != Kind::kHot) return 0;
  } else {
    // Not known to the kernel yet: an inode the lookups of either side find.
    inode = NewLocked();
    SetHotLocked(inode, std::move(path_fd), handle, st);
  }
  // Still found by its backing identity until EndMove.
  Extra(inode).backing = inode->handle;
  inode->kind = Kind::kColdFile;
  inode->cold = ColdAttrs::Of(m);
  inode->in_transition = true;
  inode->pins++;
  inode->generation.fetch_add(1, std::memory_order_release);
  IndexColdLocked(inode, m.file_id());
  return Id(inode);
}

uint64_t InodeTable::EndMove(uint64_t file_id, bool moved) {
  std::unique_ptr<InodeExtra> dead;
  std::shared_ptr<UniqueFd> fd;  // closed after the lock is released
  uint64_t id = 0;
  {
    MutexLock lock(mu_);
    auto it = cold_files_.find(file_id);
    if (it == cold_files_.end() || !(*it)->in_transition) return 0;
    Inode* inode = *it;
    id = Id(inode);
    UnindexHotLocked(inode);
    if (moved) {
      fd = std::move(inode->extra->fd);
      inode->extra->backing = {};
    } else {
      UnindexColdLocked(inode);
      inode->kind = Kind::kHot;
      inode->handle = inode->extra->backing;
      inode->extra->backing = {};
      IndexHotLocked(inode);
    }
    inode->in_transition = false;
    inode->pins--;
    inode->generation.fetch_add(1, std::memory_order_release);
    dead = ReleaseIfUnusedLocked(inode);
  }
  settled_.notify_all();
  return id;
}

InodeTable::Rehydrate InodeTable::BeginRehydrate(uint64_t id) {
  MutexLock lock(mu_);
  Inode* inode = Get(id);
  if (inode->kind != Kind::kColdFile) return Rehydrate::kNotCold;
  if (inode->in_transition) return Rehydrate::kBusy;
  inode->in_transition = true;
  inode->pins++;
  return Rehydrate::kStarted;
}

void InodeTable::RehydrateTarget(uint64_t id, int fd, const struct stat& st) {
  const InlineHandle handle = InlineHandle::Of(HandleOf(fd, st));
  UniqueFd path_fd(::open(fmt::format("/proc/self/fd/{}", fd).c_str(), O_PATH | O_CLOEXEC));
  std::shared_ptr<UniqueFd> replaced;  // closed after the lock is released
  MutexLock lock(mu_);
  Inode* inode = Get(id);
  if (!inode->in_transition || inode->kind != Kind::kColdFile) return;
  UnindexHotLocked(inode);
  // Handles opened while it was cold reopen the new file through the
  // inode: an O_PATH fd keeps it for them even once it is unlinked and its
  // writer gone (a file handle would find nothing then). The file handle
  // stays beside it: it is what lookups compare.
  const bool pin = handle.empty() || (inode->open_handles > 0 && path_fd.valid());
  InodeExtra& extra = Extra(inode);
  replaced = std::move(extra.fd);
  extra.fd = pin ? std::make_shared<UniqueFd>(std::move(path_fd)) : nullptr;
  extra.backing = handle;
  inode->dev = st.st_dev;
  inode->ino = st.st_ino;
  IndexHotLocked(inode);
}

void InodeTable::EndRehydrate(uint64_t id, bool placed) {
  std::unique_ptr<InodeExtra> dead;
  std::shared_ptr<UniqueFd> fd;  // closed after the lock is released
  {
    MutexLock lock(mu_);
    Inode* inode = Get(id);
    InodeExtra* extra = inode->extra.get();
    if (placed && extra != nullptr && (extra->fd || !extra->backing.empty())) {
      // Its file id still finds it (see the header comment).
      inode->kind = Kind::kHot;
      inode->handle = extra->backing;
      extra->backing = {};
      AssignHotNumberLocked(inode);
      inode->generation.fetch_add(1, std::memory_order_release);
    } else {
      UnindexHotLocked(inode);
      if (extra != nullptr) {
        fd = std::move(extra->fd);
        extra->backing = {};
      }
    }
    inode->in_transition = false;
    inode->pins--;
    dead = ReleaseIfUnusedLocked(inode);
  }
  settled_.notify_all();
}

uint64_t InodeTable::PutBackHot(uint64_t file_id, UniqueFd fd, const struct stat& st) {
  const InlineHandle handle = InlineHandle::Of(HandleOf(fd.get(), st));
  std::shared_ptr<UniqueFd> replaced;  // closed after the lock is released
  MutexLock lock(mu_);
  auto it = cold_files_.find(file_id);
  if (it == cold_files_.end() || (*it)->kind == Kind::kColdDir) return 0;
  Inode* inode = *it;
  UnindexHotLocked(inode);
  if (inode->extra) replaced = std::move(inode->extra->fd);
  SetHotLocked(inode, std::move(fd), handle, st);  // its file id still finds it
  return Id(inode);
}

void InodeTable::ColdDirToHot(uint64_t id, UniqueFd fd, const struct stat& st) {
  MutexLock lock(mu_);
  Inode* inode = Get(id);
  if (inode->kind != Kind::kColdDir) return;
  UnindexColdLocked(inode);
  SetHotLocked(inode, std::move(fd), InlineHandle(), st);
}

void InodeTable::UpdateManifest(const storepb::Manifest& m) {
  MutexLock lock(mu_);
  auto it = cold_files_.find(m.file_id());
  if (it != cold_files_.end() && (*it)->kind == Kind::kColdFile) (*it)->cold = ColdAttrs::Of(m);
}

void InodeTable::RenameColdDirs(const std::string& from, const std::string& to) {
  MutexLock lock(mu_);
  auto below = [&](const std::string& p) {
    return p == from || p.compare(0, from.size() + 1, from + "/") == 0;
  };
  std::vector<Inode*> moved;
  for (auto it = cold_dirs_.begin(); it != cold_dirs_.end();) {
    if (below(it->first)) {
      moved.push_back(it->second);
      it = cold_dirs_.erase(it);
    } else {
      ++it;
    }
  }
  for (Inode* inode : moved) {
    std::string& path = inode->extra->cold_path;
    path = to + path.substr(from.size());
    cold_dirs_[path] = inode;
  }
  std::vector<std::pair<std::string, ino_t>> numbers;
  for (auto it = cold_dir_inos_.begin(); it != cold_dir_inos_.end();) {
    if (below(it->first)) {
      numbers.emplace_back(to + it->first.substr(from.size()), it->second);
      it = cold_dir_inos_.erase(it);
    } else {
      ++it;
    }
  }
  for (auto& [path, number] : numbers) cold_dir_inos_[path] = number;
}

}  // namespace tbfs::fs
