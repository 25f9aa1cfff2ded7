#include "fs/inode_table.h"

#include <fcntl.h>

#include <cassert>
#include <cstring>

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

InodeTable::InodeTable(UniqueFd root_fd) {
  struct stat st;
  ::fstat(root_fd.get(), &st);
  root_.kind = Kind::kHot;
  root_.dev = st.st_dev;
  root_.ino = st.st_ino;
  root_.shown_ino = st.st_ino;
  root_.fd = std::make_shared<UniqueFd>(std::move(root_fd));
  root_.nlookup = 1;
  // File handles need the filesystem's support and CAP_DAC_READ_SEARCH, and
  // open_by_handle_at a real (not O_PATH) fd on the same mount.
  mount_fd_.reset(::openat(root_.fd->get(), ".", O_RDONLY | O_DIRECTORY | O_CLOEXEC));
  std::string probe = HandleOfAny(root_.fd->get(), &mount_id_);
  if (mount_fd_.valid() && !probe.empty()) {
    int fd = ::open_by_handle_at(mount_fd_.get(), reinterpret_cast<struct file_handle*>(probe.data()),
                                 O_PATH | O_CLOEXEC);
    if (fd >= 0) {
      use_handles_ = true;
      ::close(fd);
    }
  }
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

Inode* InodeTable::FindHotLocked(dev_t dev, ino_t ino, const std::string& handle) {
  auto it = hot_.find({dev, ino});
  if (it == hot_.end()) return nullptr;
  Inode* inode = it->second;
  bool same = inode->handle ? *inode->handle == handle : handle.empty();
  if (same) return inode;
  hot_.erase(it);  // the kernel may still hold it; it lives until forgotten
  return nullptr;
}

std::string InodeTable::HandleOf(int fd, const struct stat& st) {
  if (!use_handles_ || S_ISDIR(st.st_mode)) return "";
  int mount_id = -1;
  std::string h = HandleOfAny(fd, &mount_id);
  return mount_id == mount_id_ ? h : "";  // another filesystem mounted inside: keep the fd
}

uint64_t InodeTable::IdOf(Inode* inode, Inode* root) {
  return inode == root ? kRootId : reinterpret_cast<uintptr_t>(inode);
}

Inode* InodeTable::Get(uint64_t id) {
  return id == kRootId ? &root_ : reinterpret_cast<Inode*>(static_cast<uintptr_t>(id));
}

InodeView InodeTable::View(uint64_t id) {
  InodeView v;
  std::shared_ptr<const std::string> handle;
  {
    std::lock_guard<std::mutex> lock(mu_);
    Inode* i = Get(id);
    v = {i->kind, i->fd, i->manifest, i->cold_path, i->shown_ino, i->unlinked};
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

ino_t InodeTable::ShownIno(uint64_t id) {
  std::lock_guard<std::mutex> lock(mu_);
  return Get(id)->shown_ino;
}

void InodeTable::SetHotLocked(Inode* inode, UniqueFd fd, std::string handle, const struct stat& st) {
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
}

Inode* InodeTable::NewLocked() {
  auto owned = std::make_unique<Inode>();
  Inode* raw = owned.get();
  all_.emplace(raw, std::move(owned));
  return raw;
}

void InodeTable::IndexLocked(Inode* inode) {
  switch (inode->kind) {
    case Kind::kHot: hot_[{inode->dev, inode->ino}] = inode; break;
    case Kind::kColdFile: cold_files_[inode->manifest->file_id()] = inode; break;
    case Kind::kColdDir: cold_dirs_[inode->cold_path] = inode; break;
  }
}

void InodeTable::UnindexLocked(Inode* inode) {
  switch (inode->kind) {
    case Kind::kHot: {
      auto it = hot_.find({inode->dev, inode->ino});
      if (it != hot_.end() && it->second == inode) hot_.erase(it);
      break;
    }
    case Kind::kColdFile: {
      auto it = cold_files_.find(inode->manifest->file_id());
      if (it != cold_files_.end() && it->second == inode) cold_files_.erase(it);
      break;
    }
    case Kind::kColdDir: {
      auto it = cold_dirs_.find(inode->cold_path);
      if (it != cold_dirs_.end() && it->second == inode) cold_dirs_.erase(it);
      break;
    }
  }
}

uint64_t InodeTable::AddHot(UniqueFd fd, const struct stat& st, bool volatile_attrs) {
  std::string handle = HandleOf(fd.get(), st);
  std::lock_guard<std::mutex> lock(mu_);
  if (st.st_dev == root_.dev && st.st_ino == root_.ino) {
    root_.nlookup++;
    return kRootId;
  }
  if (Inode* found = FindHotLocked(st.st_dev, st.st_ino, handle)) {
    found->nlookup++;
    found->volatile_attrs |= volatile_attrs;
    return Id(found);
  }
  Inode* inode = NewLocked();
  SetHotLocked(inode, std::move(fd), std::move(handle), st);
  inode->shown_ino = st.st_ino;
  inode->volatile_attrs = volatile_attrs;
  inode->nlookup = 1;
  IndexLocked(inode);
  return Id(inode);
}

uint64_t InodeTable::RefHot(const struct stat& st, const std::string& handle,
                            bool volatile_attrs, ino_t* shown_ino) {
  std::lock_guard<std::mutex> lock(mu_);
  if (st.st_dev == root_.dev && st.st_ino == root_.ino) {
    root_.nlookup++;
    *shown_ino = root_.shown_ino;
    return kRootId;
  }
  Inode* found = FindHotLocked(st.st_dev, st.st_ino, handle);
  if (found == nullptr) return 0;
  found->nlookup++;
  found->volatile_attrs |= volatile_attrs;
  *shown_ino = found->shown_ino;
  return Id(found);
}

bool InodeTable::VolatileAttrs(uint64_t id) {
  std::lock_guard<std::mutex> lock(mu_);
  Inode* inode = Get(id);
  return inode == &root_ || (inode->kind == Kind::kHot && inode->volatile_attrs) ||
         inode->kind == Kind::kColdDir;
}

uint64_t InodeTable::AddColdFile(std::shared_ptr<const storepb::Manifest> m) {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = cold_files_.find(m->file_id());
  if (it != cold_files_.end()) {
    it->second->nlookup++;
    it->second->manifest = std::move(m);
    return Id(it->second);
  }
  Inode* inode = NewLocked();
  inode->kind = Kind::kColdFile;
  inode->shown_ino = m->ino();
  inode->manifest = std::move(m);
  inode->nlookup = 1;
  IndexLocked(inode);
  return Id(inode);
}

uint64_t InodeTable::AddColdDir(const std::string& rel_path, ino_t shown_ino) {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = cold_dirs_.find(rel_path);
  if (it != cold_dirs_.end()) {
    it->second->nlookup++;
    return Id(it->second);
  }
  Inode* inode = NewLocked();
  inode->kind = Kind::kColdDir;
  inode->cold_path = rel_path;
  inode->shown_ino = shown_ino;
  inode->nlookup = 1;
  IndexLocked(inode);
  return Id(inode);
}

void InodeTable::Forget(uint64_t id, uint64_t n) {
  std::unique_ptr<Inode> dead;  // destroyed after the lock is released
  {
    std::lock_guard<std::mutex> lock(mu_);
    Inode* inode = Get(id);
    inode->nlookup = n >= inode->nlookup ? 0 : inode->nlookup - n;
    if (inode == &root_ || inode->nlookup > 0 || inode->open_handles > 0) return;
    UnindexLocked(inode);
    auto it = all_.find(inode);
    if (it != all_.end()) {
      dead = std::move(it->second);
      all_.erase(it);
    }
  }
}

void InodeTable::ToCold(dev_t dev, ino_t ino, std::shared_ptr<const storepb::Manifest> m) {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = hot_.find({dev, ino});
  if (it == hot_.end()) return;
  Inode* inode = it->second;
  hot_.erase(it);
  inode->kind = Kind::kColdFile;
  inode->fd.reset();
  inode->handle.reset();
  inode->manifest = std::move(m);
  inode->migrating = false;
  IndexLocked(inode);
}

void InodeTable::ToHot(uint64_t id, UniqueFd fd, const struct stat& st) {
  std::string handle = HandleOf(fd.get(), st);
  std::lock_guard<std::mutex> lock(mu_);
  Inode* inode = Get(id);
  UnindexLocked(inode);
  SetHotLocked(inode, std::move(fd), std::move(handle), st);
  inode->manifest.reset();
  inode->cold_path.clear();
  IndexLocked(inode);
}

void InodeTable::Repoint(dev_t dev, ino_t old_ino, UniqueFd fd, const struct stat& st) {
  std::string handle = HandleOf(fd.get(), st);
  std::lock_guard<std::mutex> lock(mu_);
  auto it = hot_.find({dev, old_ino});
  if (it == hot_.end()) return;
  Inode* inode = it->second;
  hot_.erase(it);
  SetHotLocked(inode, std::move(fd), std::move(handle), st);
  inode->migrating = false;
  IndexLocked(inode);
}

void InodeTable::UpdateManifest(std::shared_ptr<const storepb::Manifest> m) {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = cold_files_.find(m->file_id());
  if (it != cold_files_.end()) it->second->manifest = std::move(m);
}

bool InodeTable::OpenHandle(uint64_t id, bool writable) {
  std::lock_guard<std::mutex> lock(mu_);
  Inode* inode = Get(id);
  if (writable && inode->migrating) return false;
  inode->open_handles++;
  if (writable) inode->write_handles++;
  return true;
}

bool InodeTable::CloseHandle(uint64_t id, bool writable) {
  std::lock_guard<std::mutex> lock(mu_);
  Inode* inode = Get(id);
  inode->open_handles--;
  if (writable) inode->write_handles--;
  return inode->open_handles == 0 && inode->unlinked;
}

bool InodeTable::MarkUnlinked(uint64_t file_id) {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = cold_files_.find(file_id);
  if (it == cold_files_.end() || it->second->open_handles == 0) return false;
  it->second->unlinked = true;
  return true;
}

void InodeTable::RenameColdDirs(const std::string& from, const std::string& to) {
  std::lock_guard<std::mutex> lock(mu_);
  std::vector<Inode*> moved;
  for (auto it = cold_dirs_.begin(); it != cold_dirs_.end();) {
    const std::string& p = it->first;
    if (p == from || p.compare(0, from.size() + 1, from + "/") == 0) {
      moved.push_back(it->second);
      it = cold_dirs_.erase(it);
    } else {
      ++it;
    }
  }
  for (Inode* inode : moved) {
    inode->cold_path = to + inode->cold_path.substr(from.size());
    IndexLocked(inode);
  }
}

bool InodeTable::BeginUnlink(dev_t dev, ino_t ino) {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = hot_.find({dev, ino});
  if (it == hot_.end()) return true;
  if (it->second->open_handles > 0) return false;
  it->second->migrating = true;
  return true;
}

void InodeTable::EndUnlink(dev_t dev, ino_t ino) {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = hot_.find({dev, ino});
  if (it != hot_.end()) it->second->migrating = false;
}

bool InodeTable::IsOpen(dev_t dev, ino_t ino) {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = hot_.find({dev, ino});
  return it != hot_.end() && it->second->open_handles > 0;
}

size_t InodeTable::size() {
  std::lock_guard<std::mutex> lock(mu_);
  return all_.size() + 1;
}

}  // namespace tbfs::fs
