#include "fs/inode_table.h"

#include <fcntl.h>

#include <algorithm>
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

InlineHandle InlineHandle::Of(const std::string& raw) {
  InlineHandle h;
  if (raw.size() < sizeof(struct file_handle)) return h;
  const auto* fh = reinterpret_cast<const struct file_handle*>(raw.data());
  if (fh->handle_bytes == 0 || fh->handle_bytes > InlineHandle::kMaxBytes ||
      raw.size() != sizeof(struct file_handle) + fh->handle_bytes) {
    return h;
  }
  h.type = fh->handle_type;
  h.size = static_cast<uint8_t>(fh->handle_bytes);
  std::memcpy(h.bytes, fh->f_handle, fh->handle_bytes);
  return h;
}

namespace {

// An fd (O_PATH) of the file h names, or -1 when it is gone.
int OpenByHandle(int mount_fd, const InlineHandle& h) {
  alignas(struct file_handle) char buf[sizeof(struct file_handle) + InlineHandle::kMaxBytes];
  auto* fh = reinterpret_cast<struct file_handle*>(buf);
  fh->handle_bytes = h.size;
  fh->handle_type = h.type;
  std::memcpy(fh->f_handle, h.bytes, h.size);
  return ::open_by_handle_at(mount_fd, fh, O_PATH | O_NOFOLLOW | O_CLOEXEC);
}

}  // namespace

ColdAttrs ColdAttrs::Of(const storepb::Manifest& m) {
  const uint64_t blocks = (m.stored_bytes() + 4095) / 4096;  // 16 TiB at most: it saturates
  return {m.size(),     m.atime_ns(),
          m.mtime_ns(), m.ctime_ns(),
          m.mode(),     m.uid(),
          m.gid(),      static_cast<uint32_t>(std::min<uint64_t>(blocks, UINT32_MAX))};
}

static_assert(sizeof(Inode) <= 104, "an inode the kernel holds: about 120 bytes with its index");

size_t InodeTable::HotHash::operator()(const HotKey& k) const {
  return absl::HashOf(static_cast<uint64_t>(k.dev), static_cast<uint64_t>(k.ino));
}

InodeTable::InodeTable(UniqueFd root_fd, const struct stat& st) {
  root_dev_ = st.st_dev;
  root_.kind = Kind::kHot;
  root_.dev = st.st_dev;
  root_.ino = st.st_ino;
  Extra(&root_).assigned_ino = kAssignedInoBase;  // shown if its own number cannot be
  root_.extra->fd = std::make_shared<UniqueFd>(std::move(root_fd));
  root_.nlookup = 1;
  // File handles need the filesystem's support and CAP_DAC_READ_SEARCH, and
  // open_by_handle_at a real (not O_PATH) fd on the same mount.
  mount_fd_.reset(::openat(RootFd(), ".", O_RDONLY | O_DIRECTORY | O_CLOEXEC));
  InlineHandle probe = InlineHandle::Of(HandleOfAny(RootFd(), &mount_id_));
  if (mount_fd_.valid() && !probe.empty()) {
    int fd = OpenByHandle(mount_fd_.get(), probe);
    if (fd >= 0) {
      use_handles_ = true;
      ::close(fd);
    }
  }
}

Inode* InodeTable::Get(uint64_t id) {
  return id == kRootId ? &root_ : reinterpret_cast<Inode*>(static_cast<uintptr_t>(id));
}

InodeExtra& InodeTable::Extra(Inode* inode) {
  if (!inode->extra) inode->extra = std::make_unique<InodeExtra>();
  return *inode->extra;
}

const InlineHandle& InodeTable::BackingHandle(const Inode* inode) {
  static const InlineHandle kNone;
  if (inode->kind == Kind::kHot) return inode->handle;
  return inode->extra ? inode->extra->backing : kNone;
}

std::string InodeTable::HandleAt(int dir_fd, const char* name, const struct stat& st) {
  if (!use_handles_ || S_ISDIR(st.st_mode)) return "";
  std::string buf(sizeof(struct file_handle) + MAX_HANDLE_SZ, '\0');
  auto* fh = reinterpret_cast<struct file_handle*>(buf.data());
  fh->handle_bytes = MAX_HANDLE_SZ;
  int mount_id;
  if (::name_to_handle_at(dir_fd, name, fh, &mount_id, 0) != 0 || mount_id != mount_id_) return "";
  buf.resize(sizeof(struct file_handle) + fh->handle_bytes);
  return InlineHandle::Of(buf).empty() ? "" : buf;
}

std::string InodeTable::HandleOf(int fd, const struct stat& st) {
  if (!use_handles_ || S_ISDIR(st.st_mode)) return "";
  int mount_id = -1;
  std::string h = HandleOfAny(fd, &mount_id);
  // Another filesystem mounted inside, or a handle too long: keep the fd.
  return mount_id == mount_id_ && !InlineHandle::Of(h).empty() ? h : "";
}

Inode* InodeTable::FindHotLocked(dev_t dev, ino_t ino, const InlineHandle& handle) {
  auto it = hot_.find(HotKey{dev, ino});
  if (it == hot_.end()) return nullptr;
  Inode* inode = *it;
  if (BackingHandle(inode) == handle) return inode;
  hot_.erase(it);  // the kernel may still hold it; it lives until forgotten
  return nullptr;
}

ino_t InodeTable::HotNumberLocked(const Inode* inode) const {
  if (inode->dev == root_dev_ && inode->ino < kAssignedInoBase) return inode->ino;
  return inode->extra ? inode->extra->assigned_ino : kAssignedInoBase;
}

void InodeTable::AssignHotNumberLocked(Inode* inode) {
  if (inode->dev == root_dev_ && inode->ino < kAssignedInoBase) return;
  Extra(inode).assigned_ino = kAssignedInoBase + next_assigned_++;
}

ino_t InodeTable::ShownLocked(const Inode* inode) const {
  switch (inode->kind) {
    case Kind::kHot:
      return HotNumberLocked(inode);
    case Kind::kColdFile:
      return ColdIno(inode->file_id);
    case Kind::kColdDir:
      return inode->extra->assigned_ino;
  }
  return 0;
}

ino_t InodeTable::HotDirentIno(dev_t dev, ino_t ino) {
  // Entries of other filesystems get their number at lookup; until then a
  // listing shows one from the mount's range that no file has.
  return dev == root_dev_ && ino < kAssignedInoBase ? ino : kColdInoBase - 1;
}

InodeView InodeTable::View(uint64_t id) {
  InodeView v;
  InlineHandle handle;
  {
    MutexLock lock(mu_);
    Inode* i = Get(id);
    v.kind = i->kind;
    v.fd = i->extra ? i->extra->fd : nullptr;
    v.file_id = i->file_id;
    if (i->kind == Kind::kColdFile) v.cold = i->cold;
    if (i->kind == Kind::kColdDir) v.cold_path = i->extra->cold_path;
    v.shown_ino = ShownLocked(i);
    if (i->kind == Kind::kHot) handle = i->handle;
  }
  if (v.kind == Kind::kHot && !v.fd) {
    // -1 when the file is gone
    v.fd = std::make_shared<UniqueFd>(OpenByHandle(mount_fd_.get(), handle));
  }
  return v;
}

Kind InodeTable::KindOf(uint64_t id) {
  MutexLock lock(mu_);
  return Get(id)->kind;
}

ino_t InodeTable::ShownIno(uint64_t id) {
  MutexLock lock(mu_);
  return ShownLocked(Get(id));
}

bool InodeTable::VolatileAttrs(uint64_t id) {
  MutexLock lock(mu_);
  Inode* inode = Get(id);
  return inode == &root_ || (inode->kind == Kind::kHot && inode->volatile_attrs) ||
         inode->kind == Kind::kColdDir;
}

void InodeTable::SetHotLocked(Inode* inode, UniqueFd fd, const InlineHandle& handle,
                              const struct stat& st) {
  inode->kind = Kind::kHot;
  inode->handle = handle;
  if (handle.empty()) {
    Extra(inode).fd = std::make_shared<UniqueFd>(std::move(fd));
  } else if (inode->extra) {
    inode->extra->fd.reset();
  }
  if (inode->extra) {
    inode->extra->backing = {};
    inode->extra->cold_path.clear();
  }
  inode->dev = st.st_dev;
  inode->ino = st.st_ino;
  AssignHotNumberLocked(inode);
  inode->generation.fetch_add(1, std::memory_order_release);
  IndexHotLocked(inode);
}

Inode* InodeTable::NewLocked() {
  if (!free_.empty()) {
    Inode* inode = free_.back();
    free_.pop_back();
    return inode;
  }
  return &slab_.emplace_back();
}

void InodeTable::IndexHotLocked(Inode* inode) {
  // Another inode of the same (dev, ino) is stale (a reused number): this
  // one takes its place in the index.
  hot_.erase(HotKey{inode->dev, inode->ino});
  hot_.insert(inode);
}

void InodeTable::UnindexHotLocked(Inode* inode) {
  auto it = hot_.find(HotKey{inode->dev, inode->ino});
  if (it != hot_.end() && *it == inode) hot_.erase(it);
}

void InodeTable::IndexColdLocked(Inode* inode, uint64_t file_id) {
  if (inode->file_id != 0 && inode->file_id != file_id) {
    auto it = cold_files_.find(inode->file_id);
    if (it != cold_files_.end() && *it == inode) cold_files_.erase(it);
  }
  cold_files_.erase(file_id);
  inode->file_id = file_id;
  cold_files_.insert(inode);
}

void InodeTable::UnindexColdLocked(Inode* inode) {
  if (inode->file_id != 0) {
    auto it = cold_files_.find(inode->file_id);
    if (it != cold_files_.end() && *it == inode) cold_files_.erase(it);
    inode->file_id = 0;
  }
  if (inode->kind == Kind::kColdDir) {
    auto it = cold_dirs_.find(inode->extra->cold_path);
    if (it != cold_dirs_.end() && it->second == inode) cold_dirs_.erase(it);
  }
}

std::unique_ptr<InodeExtra> InodeTable::ReleaseIfUnusedLocked(Inode* inode) {
  if (inode == &root_ || inode->nlookup > 0 || inode->open_handles > 0 || inode->pins > 0) {
    return nullptr;
  }
  UnindexHotLocked(inode);
  UnindexColdLocked(inode);
  std::unique_ptr<InodeExtra> held = std::move(inode->extra);
  inode->dev = 0;
  inode->ino = 0;
  inode->kind = Kind::kHot;
  inode->handle = {};
  inode->in_transition = false;
  inode->volatile_attrs = false;
  inode->write_handles = 0;
  free_.push_back(inode);
  return held;
}

InodeRef InodeTable::RefLocked(Inode* inode) {
  inode->nlookup++;
  InodeRef ref{Id(inode), ShownLocked(inode), std::nullopt};
  if (inode->kind == Kind::kColdFile) ref.cold = inode->cold;
  return ref;
}

InodeRef InodeTable::AddHot(UniqueFd fd, const struct stat& st, bool volatile_attrs) {
  InlineHandle handle = InlineHandle::Of(HandleOf(fd.get(), st));
  MutexLock lock(mu_);
  if (st.st_dev == root_.dev && st.st_ino == root_.ino) return RefLocked(&root_);
  Inode* inode = FindHotLocked(st.st_dev, st.st_ino, handle);
  if (inode == nullptr) {
    inode = NewLocked();
    SetHotLocked(inode, std::move(fd), handle, st);
  }
  inode->volatile_attrs |= volatile_attrs;
  return RefLocked(inode);
}

InodeRef InodeTable::RefHot(const struct stat& st, const std::string& handle, bool volatile_attrs) {
  const InlineHandle h = InlineHandle::Of(handle);
  MutexLock lock(mu_);
  if (st.st_dev == root_.dev && st.st_ino == root_.ino) return RefLocked(&root_);
  Inode* found = FindHotLocked(st.st_dev, st.st_ino, h);
  if (found == nullptr) return {};
  found->volatile_attrs |= volatile_attrs;
  return RefLocked(found);
}

InodeRef InodeTable::AddHotByHandle(const struct stat& st, const std::string& handle,
                                    bool volatile_attrs) {
  const InlineHandle h = InlineHandle::Of(handle);
  if (h.empty()) return {};
  MutexLock lock(mu_);
  if (st.st_dev == root_.dev && st.st_ino == root_.ino) return RefLocked(&root_);
  Inode* inode = FindHotLocked(st.st_dev, st.st_ino, h);
  if (inode == nullptr) {
    inode = NewLocked();
    SetHotLocked(inode, UniqueFd(), h, st);
  }
  inode->volatile_attrs |= volatile_attrs;
  return RefLocked(inode);
}

InodeRef InodeTable::AddColdFile(const storepb::Manifest& m) {
  MutexLock lock(mu_);
  auto it = cold_files_.find(m.file_id());
  Inode* inode;
  if (it != cold_files_.end()) {
    inode = *it;
    if (inode->kind == Kind::kColdFile) inode->cold = ColdAttrs::Of(m);
  } else {
    inode = NewLocked();
    inode->kind = Kind::kColdFile;
    inode->cold = ColdAttrs::Of(m);
    IndexColdLocked(inode, m.file_id());
  }
  return RefLocked(inode);
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
  Extra(inode).cold_path = rel_path;
  inode->extra->assigned_ino = shown;
  inode->nlookup = 1;
  cold_dirs_[rel_path] = inode;
  return Id(inode);
}

bool InodeTable::Forget(uint64_t id, uint64_t n) {
  std::unique_ptr<InodeExtra> dead;  // destroyed after the lock is released
  MutexLock lock(mu_);
  Inode* inode = Get(id);
  inode->nlookup = n >= inode->nlookup ? 0 : inode->nlookup - n;
  const bool forgotten = inode->nlookup == 0;
  dead = ReleaseIfUnusedLocked(inode);
  return forgotten;
}

size_t InodeTable::size() {
  MutexLock lock(mu_);
  return slab_.size() - free_.size() + 1;
}

}  // namespace tbfs::fs
