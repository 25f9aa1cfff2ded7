#include "fs/inode_table.h"

#include <fcntl.h>

#include <cstring>
#include <vector>

#include "fmt/format.h"

namespace tbfs::fs {

namespace {

// A struct file_handle, as bytes, for the file open as fd; "" if none.
std::string HandleOfAny(int fd, int* mount_id) {
  std::string buf(sizeof(struct file_handle) + MAX_HANDLE_SZ, '\0');
  auto* fh = reinterpret_cast<struct file_handle*>(buf.data());
  fh->handle_bytes = MAX_HANDLE_SZ;
  if (::name_to_handle_at(fd, "", fh, mount_id, AT_EMPTY_PATH) != 0) return "";
  buf.resize(sizeof(struct file_handle) + fh->handle_bytes);
  return buf;
}

}  // namespace

InodeTable::InodeTable(UniqueFd root_fd, const struct stat& st) {
  root_dev_ = st.st_dev;
  root_.kind = Kind::kHot;
  root_.dev = st.st_dev;
  root_.ino = st.st_ino;
  root_.shown_ino = root_.hot_ino = st.st_ino < kAssignedInoBase ? st.st_ino : kAssignedInoBase;
  root_.fd = std::make_shared<UniqueFd>(std::move(root_fd));
  root_.nlookup = 1;
  // File handles need the filesystem's support and CAP_DAC_READ_SEARCH, and
  // open_by_handle_at a real (not O_PATH) fd on the same mount.
  mount_fd_.reset(::openat(root_.fd->get(), ".", O_RDONLY | O_DIRECTORY | O_CLOEXEC));
  std::string probe = HandleOfAny(root_.fd->get(), &mount_id_);
  if (mount_fd_.valid() && !probe.empty()) {
    int fd = ::open_by_handle_at(
        mount_fd_.get(), reinterpret_cast<struct file_handle*>(probe.data()), O_PATH | O_CLOEXEC);
    if (fd >= 0) {
      use_handles_ = true;
      ::close(fd);
    }
  }
}

Inode* InodeTable::Get(uint64_t id) {
  return id == kRootId ? &root_ : reinterpret_cast<Inode*>(static_cast<uintptr_t>(id));
}

std::string InodeTable::HandleAt(int dir_fd, const char* name, const struct stat& st) {
  if (!use_handles_ || S_ISDIR(st.st_mode)) return "";
  std::string buf(sizeof(struct file_handle) + MAX_HANDLE_SZ, '\0');
  auto* fh = reinterpret_cast<struct file_handle*>(buf.data());
  fh->handle_bytes = MAX_HANDLE_SZ;
  int mount_id;
  if (::name_to_handle_at(dir_fd, name, fh, &mount_id, 0) != 0 || mount_id != mount_id_) return "";
  buf.resize(sizeof(struct file_handle) + fh->handle_bytes);
  return buf;
}

std::string InodeTable::HandleOf(int fd, const struct stat& st) {
  if (!use_handles_ || S_ISDIR(st.st_mode)) return "";
  int mount_id = -1;
  std::string h = HandleOfAny(fd, &mount_id);
  return mount_id == mount_id_ ? h : "";  // another filesystem mounted inside: keep the fd
}

Inode* InodeTable::FindHotLocked(dev_t dev, ino_t ino, const std::string& handle) {
  auto it = hot_.find({dev, ino});
  if (it == hot_.end()) return nullptr;
  Inode* inode = it->second;
  bool same = inode->handle ? *inode->handle == handle : handle.empty();
  if (same) return inode;
  hot_.erase(it);  // the kernel may still hold it; it lives until forgotten
  return nullptr;
}

ino_t InodeTable::HotNumberLocked(dev_t dev, ino_t ino) {
  if (dev == root_dev_ && ino < kAssignedInoBase) return ino;
  return kAssignedInoBase + next_assigned_++;
}

ino_t InodeTable::HotDirentIno(dev_t dev, ino_t ino) {
  // Entries of other filesystems get their number at lookup; until then a
  // listing shows one from the mount's range that no file has.
  return dev == root_dev_ && ino < kAssignedInoBase ? ino : kColdInoBase - 1;
}

InodeView InodeTable::View(uint64_t id) {
  InodeView v;
  std::shared_ptr<const std::string> handle;
  {
    MutexLock lock(mu_);
    Inode* i = Get(id);
    v = {i->kind, i->fd, i->manifest, i->cold_path, i->shown_ino};
    handle = i->handle;
  }
  if (v.kind == Kind::kHot && !v.fd) {
    std::string h = *handle;  // open_by_handle_at wants a mutable struct
    int fd = ::open_by_handle_at(mount_fd_.get(), reinterpret_cast<struct file_handle*>(h.data()),
                                 O_PATH | O_NOFOLLOW | O_CLOEXEC);
    v.fd = std::make_shared<UniqueFd>(fd);  // -1 when the file is gone
  }
  return v;
}

Kind InodeTable::KindOf(uint64_t id) {
  MutexLock lock(mu_);
  return Get(id)->kind;
}

ino_t InodeTable::ShownIno(uint64_t id) {
  MutexLock lock(mu_);
  return Get(id)->shown_ino;
}

bool InodeTable::VolatileAttrs(uint64_t id) {
  MutexLock lock(mu_);
  Inode* inode = Get(id);
  return inode == &root_ || (inode->kind == Kind::kHot && inode->volatile_attrs) ||
         inode->kind == Kind::kColdDir;
}

void InodeTable::SetHotLocked(Inode* inode, UniqueFd fd, std::string handle,
                              const struct stat& st) {
  inode->kind = Kind::kHot;
  if (handle.empty()) {
    inode->fd = std::make_shared<UniqueFd>(std::move(fd));
    inode->handle.reset();
  } else {
    inode->fd.reset();
    inode->handle = std::make_shared<const std::string>(std::move(handle));
  }
  inode->dev = st.st_dev;
  inode->ino = st.st_ino;
  inode->hot_ino = inode->shown_ino = HotNumberLocked(st.st_dev, st.st_ino);
  inode->manifest.reset();
  inode->cold_path.clear();
  inode->generation.fetch_add(1, std::memory_order_release);
  hot_[{inode->dev, inode->ino}] = inode;
}

Inode* InodeTable::NewLocked() {
  auto owned = std::make_unique<Inode>();
  Inode* raw = owned.get();
  all_.emplace(raw, std::move(owned));
  return raw;
}

void InodeTable::UnindexHotLocked(Inode* inode) {
  auto it = hot_.find({inode->dev, inode->ino});
  if (it != hot_.end() && it->second == inode) hot_.erase(it);
}

void InodeTable::IndexColdLocked(Inode* inode, uint64_t file_id) {
  if (inode->file_id != 0 && inode->file_id != file_id) {
    auto it = cold_files_.find(inode->file_id);
    if (it != cold_files_.end() && it->second == inode) cold_files_.erase(it);
  }
  cold_files_[file_id] = inode;
  inode->file_id = file_id;
}

void InodeTable::UnindexColdLocked(Inode* inode) {
  if (inode->file_id != 0) {
    auto it = cold_files_.find(inode->file_id);
    if (it != cold_files_.end() && it->second == inode) cold_files_.erase(it);
    inode->file_id = 0;
  }
  if (inode->kind == Kind::kColdDir) {
    auto it = cold_dirs_.find(inode->cold_path);
    if (it != cold_dirs_.end() && it->second == inode) cold_dirs_.erase(it);
  }
}

std::unique_ptr<Inode> InodeTable::ReleaseIfUnusedLocked(Inode* inode) {
  if (inode == &root_ || inode->nlookup > 0 || inode->open_handles > 0 || inode->pins > 0) {
    return nullptr;
  }
  UnindexHotLocked(inode);
  UnindexColdLocked(inode);
  auto it = all_.find(inode);
  if (it == all_.end()) return nullptr;
  std::unique_ptr<Inode> dead = std::move(it->second);
  all_.erase(it);
  return dead;
}

InodeRef InodeTable::AddHot(UniqueFd fd, const struct stat& st, bool volatile_attrs) {
  std::string handle = HandleOf(fd.get(), st);
  MutexLock lock(mu_);
  if (st.st_dev == root_.dev && st.st_ino == root_.ino) {
    root_.nlookup++;
    return {kRootId, root_.shown_ino, nullptr};
  }
  Inode* inode = FindHotLocked(st.st_dev, st.st_ino, handle);
  if (inode == nullptr) {
    inode = NewLocked();
    SetHotLocked(inode, std::move(fd), std::move(handle), st);
  }
  inode->nlookup++;
  inode->volatile_attrs |= volatile_attrs;
  return {Id(inode), inode->shown_ino, inode->kind == Kind::kColdFile ? inode->manifest : nullptr};
}

InodeRef InodeTable::RefHot(const struct stat& st, const std::string& handle, bool volatile_attrs) {
  MutexLock lock(mu_);
  if (st.st_dev == root_.dev && st.st_ino == root_.ino) {
    root_.nlookup++;
    return {kRootId, root_.shown_ino, nullptr};
  }
  Inode* found = FindHotLocked(st.st_dev, st.st_ino, handle);
  if (found == nullptr) return {};
  found->nlookup++;
  found->volatile_attrs |= volatile_attrs;
  return {Id(found), found->shown_ino, found->kind == Kind::kColdFile ? found->manifest : nullptr};
}

InodeRef InodeTable::AddHotByHandle(const struct stat& st, std::string handle,
                                    bool volatile_attrs) {
  MutexLock lock(mu_);
  Inode* inode = FindHotLocked(st.st_dev, st.st_ino, handle);
  if (inode == nullptr) {
    inode = NewLocked();
    SetHotLocked(inode, UniqueFd(), std::move(handle), st);
  }
  inode->nlookup++;
  inode->volatile_attrs |= volatile_attrs;
  return {Id(inode), inode->shown_ino, inode->kind == Kind::kColdFile ? inode->manifest : nullptr};
}

InodeRef InodeTable::AddColdFile(std::shared_ptr<const storepb::Manifest> m) {
  MutexLock lock(mu_);
  auto it = cold_files_.find(m->file_id());
  Inode* inode;
  if (it != cold_files_.end()) {
    inode = it->second;
    if (inode->kind == Kind::kColdFile) inode->manifest = std::move(m);
  } else {
    inode = NewLocked();
    inode->kind = Kind::kColdFile;
    inode->shown_ino = ColdIno(m->file_id());
    inode->manifest = std::move(m);
    IndexColdLocked(inode, inode->manifest->file_id());
  }
  inode->nlookup++;
  return {Id(inode), inode->shown_ino, inode->kind == Kind::kColdFile ? inode->manifest : nullptr};
}

ino_t InodeTable::ColdDirIno(const std::string& rel_path) {
  MutexLock lock(mu_);
  auto [it, fresh] = cold_dir_inos_.emplace(rel_path, 0);
  if (fresh) it->second = kAssignedInoBase + next_assigned_++;
  return it->second;
}

uint64_t InodeTable::AddColdDir(const std::string& rel_path) {
  ino_t shown = ColdDirIno(rel_path);
  MutexLock lock(mu_);
  auto it = cold_dirs_.find(rel_path);
  if (it != cold_dirs_.end()) {
    it->second->nlookup++;
    return Id(it->second);
  }
  Inode* inode = NewLocked();
  inode->kind = Kind::kColdDir;
  inode->cold_path = rel_path;
  inode->shown_ino = shown;
  inode->nlookup = 1;
  cold_dirs_[rel_path] = inode;
  return Id(inode);
}

void InodeTable::Forget(uint64_t id, uint64_t n) {
  std::unique_ptr<Inode> dead;  // destroyed after the lock is released
  MutexLock lock(mu_);
  Inode* inode = Get(id);
  inode->nlookup = n >= inode->nlookup ? 0 : inode->nlookup - n;
  dead = ReleaseIfUnusedLocked(inode);
}

InodeTable::Open InodeTable::OpenHandle(uint64_t id, bool writable, const storepb::Manifest* cold) {
  MutexLock lock(mu_);
  Inode* inode = Get(id);
  if (cold != nullptr) {
    if (inode->kind != Kind::kColdFile || inode->manifest->file_id() != cold->file_id()) {
      return Open::kRetry;
    }
    readers_[cold->file_id()]++;
  } else {
    if (inode->kind != Kind::kHot) return Open::kRetry;
    if (writable && inode->in_transition) return Open::kWait;
    if (writable) inode->write_handles++;
  }
  inode->open_handles++;
  return Open::kOk;
}

int InodeTable::CloseHandle(uint64_t id, bool writable, uint64_t cold_file_id) {
  std::unique_ptr<Inode> dead;
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

void InodeTable::WaitSettled(uint64_t id) {
  MutexLock lock(mu_);
  Inode* inode = Get(id);
  settled_.wait(lock, [&]() TBFS_NO_THREAD_SAFETY_ANALYSIS { return !inode->in_transition; });
}

uint64_t InodeTable::BeginMove(int fd, const struct stat& st,
                               std::shared_ptr<const storepb::Manifest> m) {
  std::string handle = HandleOf(fd, st);
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
    SetHotLocked(inode, std::move(path_fd), std::move(handle), st);
  }
  inode->kind = Kind::kColdFile;
  inode->manifest = std::move(m);
  inode->shown_ino = ColdIno(inode->manifest->file_id());
  inode->in_transition = true;
  inode->pins++;
  inode->generation.fetch_add(1, std::memory_order_release);
  IndexColdLocked(inode, inode->manifest->file_id());
  return Id(inode);
}

uint64_t InodeTable::EndMove(uint64_t file_id, bool moved) {
  std::unique_ptr<Inode> dead;
  uint64_t id = 0;
  {
    MutexLock lock(mu_);
    auto it = cold_files_.find(file_id);
    if (it == cold_files_.end() || !it->second->in_transition) return 0;
    Inode* inode = it->second;
    id = Id(inode);
    UnindexHotLocked(inode);
    if (moved) {
      inode->fd.reset();
      inode->handle.reset();
    } else {
      UnindexColdLocked(inode);
      inode->kind = Kind::kHot;
      inode->manifest.reset();
      inode->shown_ino = inode->hot_ino;
      hot_[{inode->dev, inode->ino}] = inode;
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
  std::string handle = HandleOf(fd, st);
  UniqueFd path_fd(::open(fmt::format("/proc/self/fd/{}", fd).c_str(), O_PATH | O_CLOEXEC));
  MutexLock lock(mu_);
  Inode* inode = Get(id);
  if (!inode->in_transition || inode->kind != Kind::kColdFile) return;
  UnindexHotLocked(inode);
  // Handles opened while it was cold reopen the new file through the
  // inode: an O_PATH fd keeps it for them even once it is unlinked and its
  // writer gone (a file handle would find nothing then). The file handle
  // stays beside it: it is what lookups compare.
  const bool pin = handle.empty() || (inode->open_handles > 0 && path_fd.valid());
  inode->fd = pin ? std::make_shared<UniqueFd>(std::move(path_fd)) : nullptr;
  if (handle.empty()) {
    inode->handle.reset();
  } else {
    inode->handle = std::make_shared<const std::string>(std::move(handle));
  }
  inode->dev = st.st_dev;
  inode->ino = st.st_ino;
  hot_[{inode->dev, inode->ino}] = inode;
}

void InodeTable::EndRehydrate(uint64_t id, bool placed) {
  std::unique_ptr<Inode> dead;
  {
    MutexLock lock(mu_);
    Inode* inode = Get(id);
    if (placed && (inode->fd || inode->handle)) {
      // Its file id still finds it (see the header comment).
      inode->kind = Kind::kHot;
      inode->manifest.reset();
      inode->hot_ino = inode->shown_ino = HotNumberLocked(inode->dev, inode->ino);
      inode->generation.fetch_add(1, std::memory_order_release);
    } else {
      UnindexHotLocked(inode);
      inode->fd.reset();
      inode->handle.reset();
    }
    inode->in_transition = false;
    inode->pins--;
    dead = ReleaseIfUnusedLocked(inode);
  }
  settled_.notify_all();
}

uint64_t InodeTable::PutBackHot(uint64_t file_id, UniqueFd fd, const struct stat& st) {
  std::string handle = HandleOf(fd.get(), st);
  MutexLock lock(mu_);
  auto it = cold_files_.find(file_id);
  if (it == cold_files_.end() || it->second->kind == Kind::kColdDir) return 0;
  Inode* inode = it->second;
  UnindexHotLocked(inode);
  SetHotLocked(inode, std::move(fd), std::move(handle), st);  // its file id still finds it
  return Id(inode);
}

void InodeTable::ColdDirToHot(uint64_t id, UniqueFd fd, const struct stat& st) {
  MutexLock lock(mu_);
  Inode* inode = Get(id);
  if (inode->kind != Kind::kColdDir) return;
  UnindexColdLocked(inode);
  SetHotLocked(inode, std::move(fd), "", st);
}

void InodeTable::UpdateManifest(std::shared_ptr<const storepb::Manifest> m) {
  MutexLock lock(mu_);
  auto it = cold_files_.find(m->file_id());
  if (it != cold_files_.end() && it->second->kind == Kind::kColdFile)
    it->second->manifest = std::move(m);
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
    inode->cold_path = to + inode->cold_path.substr(from.size());
    cold_dirs_[inode->cold_path] = inode;
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

size_t InodeTable::size() {
  MutexLock lock(mu_);
  return all_.size() + 1;
}

}  // namespace tbfs::fs
