// Open files of the mount: opening and creating, reads of cold files,
// rehydration, and files changing place under open handles (the migrator's
// MoveObserver hooks, retired chunks).
#include <fcntl.h>
#include <unistd.h>

#include <algorithm>

#include "base/failpoint.h"
#include "base/work_pool.h"
#include "fs/filesystem.h"
#include "spdlog/spdlog.h"
#include "store/format.h"
#include "store/manifest.h"
#include "store/restore.h"
#include "store/xattrs.h"

namespace tbfs::fs {

namespace {

// Chunks decompressed ahead of a sequential reader (on the cache's threads).
constexpr uint64_t kReadaheadChunks = 4;
// Chunks a sequential read lets go of at once, at most (ChunkCache::LetGo).
constexpr uint64_t kLetGoAtMost = 1024;
// FUSE threads (of 16) in WaitSettled at most: the others serve everyone
// else, and read the interrupts that end those waits (with every thread
// waiting, none came, and SIGKILL left the waiters in D state). A wait
// beyond is answered EAGAIN at once.
constexpr int kMaxWaiting = 8;

bool IsWritable(int flags) { return (flags & O_ACCMODE) != O_RDONLY || (flags & O_TRUNC); }

// Flags for opening the backing file of a handle. O_DIRECT is the FUSE
// side's business (the handle bypasses the kernel's cache of the mount):
// the buffers this daemon writes from are not aligned for it.
int BackingFlags(int flags) {
  return (flags & ~(O_NOFOLLOW | O_DIRECT | O_CREAT | O_EXCL)) | O_CLOEXEC;
}

}  // namespace

FileHandle::~FileHandle() {
  if (int f = fd.load(); f >= 0) ::close(f);
  for (int f : earlier_fds) ::close(f);
}

std::unique_ptr<FileHandle> Filesystem::NewHandle(uint64_t ino, uint32_t generation, int fd,
                                                  bool writable) {
  auto fh = std::make_unique<FileHandle>();
  fh->inode = ino;
  fh->writable = writable;
  fh->generation = inodes_.Generation(ino);
  fh->seen = generation;
  fh->fd = fd;
  fh->noatime = fd >= 0 && (::fcntl(fd, F_GETFL) & O_NOATIME) != 0;
  struct stat st;
  if (fd >= 0 && ::fstat(fd, &st) == 0) {
    MutexLock lock(fh->mu);
    fh->dev = st.st_dev;
    fh->ino = st.st_ino;
  }
  return fh;
}

int Filesystem::WaitSettled(uint64_t ino, const std::atomic<bool>* interrupted) {
  if (inodes_.Settled(ino)) return 0;
  if (waiting_.fetch_add(1) >= kMaxWaiting) {
    waiting_.fetch_sub(1);
    return -EAGAIN;
  }
  const bool settled = inodes_.WaitSettled(ino, interrupted);
  waiting_.fetch_sub(1);
  return settled ? 0 : -EINTR;
}

int Filesystem::Rehydrate(uint64_t ino, bool wait, const std::atomic<bool>* interrupted) {
  for (;;) {
    // A move in flight ends first.
    if (!wait && !inodes_.Settled(ino)) return -EAGAIN;
    if (int r = WaitSettled(ino, interrupted); r != 0) return r;
    MutexLock one(rehydrate_mu_);
    ReaderMutexLock ns(ns_mu_);
    switch (inodes_.BeginRehydrate(ino)) {
      case InodeTable::Rehydrate::kBusy:
        continue;
      case InodeTable::Rehydrate::kNotCold:
        return inodes_.KindOf(ino) == Kind::kColdDir ? -EISDIR : 0;
      case InodeTable::Rehydrate::kStarted:
        break;
    }
    InodeView v = inodes_.View(ino);
    auto m = store_->GetManifest(v.file_id);  // its current path
    if (!m.ok()) {
      inodes_.EndRehydrate(ino, false);
      // Deleted meanwhile: ESTALE has the kernel look the name up again
      // (an open with O_CREAT then makes a new file).
      return m.status().IsNotFound() ? -ESTALE : StoreError(m.status(), EioSite::kRehydrate);
    }
    storepb::JournalRecord record;
    record.set_kind(storepb::JournalRecord::RESTORE);
    record.set_batch_id(store_->NewBatchId());
    storepb::JournalEntry* e = record.add_entries();
    e->set_path(m->path());
    e->set_file_id(m->file_id());
    static WorkPool pool(2);
    store::RestoreOptions options;
    options.pool = &pool;
    options.retire = true;  // open cold handles keep reading their chunks
    bool placing = false;
    options.placing = [&](const storepb::Manifest&, int fd) {
      struct stat st;
      if (::fstat(fd, &st) == 0) inodes_.RehydrateTarget(ino, fd, st);
      MaybePause("rehydrate.placing");  // tests: copied, not yet in place
      // What was done through the mount to the store's copy meanwhile (a
      // chmod, chown, touch, attribute) is the file's: it was undone.
      if (auto now = store_->GetManifest(m->file_id()); now.ok()) store::CarryChanges(fd, *m, *now);
      placements_.Begin();  // in the folder from now, in the store a moment longer
      placing = true;
    };
    bool placed = false;
    options.placed = [&](const storepb::Manifest&) {
      // From here on the inode is the backing file: new opens go there.
      inodes_.EndRehydrate(ino, true);
      Invalidate(ino);
      placed = true;
    };
    Status st = store_->PutJournal(record);
    if (st.ok()) st = store::RestoreOne(*store_, options_.logdir, *m, options);
    if (placing) placements_.End();
    if (!placed) inodes_.EndRehydrate(ino, false);
    if (placed && !st.ok()) {
      // In place but still in the store too: the journal record stays, and
      // recovery drops the store's copy at the next start.
      spdlog::error("rehydrate {}: {}", m->path(), st.message());
      st = Status::OK();
    } else if (Status journal = store_->DeleteJournal(record.batch_id()); !journal.ok()) {
      spdlog::error("rehydrate {}: {}", m->path(), journal.message());
    }
    if (!st.ok()) {
      int err = st.sys_errno();
      if (err == EEXIST) {
        // A file created in the logdir took the path: this one is stale.
        spdlog::warn("rehydrate {}: {}", m->path(), st.message());
        return -ESTALE;
      }
      if (err != 0 && err != EIO) {
        // Its own error: no space (ENOSPC, EDQUOT), or a folder on its path
        // that is a symlink now (ELOOP, ENOTDIR), never followed.
        spdlog::warn("rehydrate {}: {}", m->path(), st.message());
        return -err;
      }
      counters_.eio_rehydrate++;
      return Eio(EioSite::kRehydrate, m->path() + ": " + st.message());
    }
    counters_.rehydrations++;
    spdlog::info("rehydrated {}", m->path());
    ns.unlock();
    ReapRetired(m->file_id());
    return 0;
  }
}

int Filesystem::Open(uint64_t ino, int flags, std::unique_ptr<FileHandle>* out,
                     const std::atomic<bool>* interrupted) {
  const bool writable = IsWritable(flags);
  for (;;) {
    // Read before the view: if the inode serves another file by the time
    // the handle exists, its first use notices (IoFd).
    const uint32_t generation = inodes_.Generation(ino)->load(std::memory_order_acquire);
    InodeView v = inodes_.View(ino);
    if (v.kind == Kind::kColdDir) return -EISDIR;
    if (v.kind == Kind::kColdFile && writable) {
      if (int r = Rehydrate(ino, true, interrupted); r != 0) return r;
      continue;
    }
    if (v.kind == Kind::kColdFile) {
      const uint64_t id = v.file_id;
      if (inodes_.OpenHandle(ino, false, id) != InodeTable::Open::kOk) continue;
      // Counted as a reader, the chunks stay; unless the file left the
      // store before (ReapRetired checks readers after the manifest went).
      auto m = store_->GetManifest(id);
      if (!m.ok()) {
        inodes_.CloseHandle(ino, false, id);
        if (inodes_.KindOf(ino) != Kind::kColdFile) continue;  // rehydrated meanwhile
        ReapRetired(id);
        return m.status().IsNotFound() ? -ENOENT : StoreError(m.status(), EioSite::kOpen);
      }
      auto fh = NewHandle(ino, generation, -1, false);
      fh->cold = true;
      fh->direct = (flags & O_DIRECT) != 0;
      fh->manifest = std::make_shared<const storepb::Manifest>(std::move(m).value());
      *out = std::move(fh);
      return 0;
    }
    switch (inodes_.OpenHandle(ino, writable, 0)) {
      case InodeTable::Open::kRetry:
        continue;
      case InodeTable::Open::kWait:
        if (int r = WaitSettled(ino, interrupted); r != 0) return r;
        continue;
      case InodeTable::Open::kOk:
        break;
    }
    int fd = OpenBacking(AT_FDCWD, ProcPath(v.fd->get()).c_str(), BackingFlags(flags));
    if (fd < 0) {
      // A file handle of a file gone: ESTALE has the kernel look the name
      // up again (another host may have moved the file to the store).
      int err = v.fd->valid() ? errno : ESTALE;
      inodes_.CloseHandle(ino, writable, 0);
      return -err;
    }
    *out = NewHandle(ino, generation, fd, writable);
    return 0;
  }
}

// The kernel sends CREATE for a name its LOOKUP found missing, having
// checked the caller may write the folder, and nothing else. A file found
// there now (made since, beside the mount or by a migration) was checked
// for nothing: opened here as root, the caller could truncate or write a
// file whose mode or ACL shuts them out. -ESTALE instead has the kernel
// look the name up again and open the file it finds, checking the
// caller's access to it as for any open (open(2) retries once).
int Filesystem::Create(uint64_t parent, const char* name, mode_t mode, int flags, const Caller& c,
                       EntryOut* entry, std::unique_ptr<FileHandle>* out) {
  if (Unmakeable(parent, name)) return -EPERM;
  MaybePause("create.looked_up");  // tests: the kernel has found the name missing
  std::shared_ptr<UniqueFd> pfd;
  if (int r = EnsureBackingDir(parent, &pfd); r != 0) return r;
  const int exists = (flags & O_EXCL) ? -EEXIST : -ESTALE;
  {
    ReaderMutexLock ns(ns_mu_);  // the folder's path is the store's (LookupIn)
    std::string prel;
    if (RelPath(parent, &prel) == 0 && store_->GetEntry(JoinPath(prel, name)).ok()) return exists;
  }
  mode = c.ModeIn(pfd->get(), mode);
  int fd;
  // A name that another process makes and removes again and again: made
  // here once it is gone, a few times, before the kernel is sent to look.
  for (int tries = 0;; ++tries) {
    fd = ::openat(pfd->get(), name, BackingFlags(flags) | O_CREAT | O_EXCL | O_NOFOLLOW, mode);
    if (fd >= 0) break;
    if (errno != EEXIST) return -errno;
    struct stat st;
    if (exists == -EEXIST || tries == 3 ||
        ::fstatat(pfd->get(), name, &st, AT_SYMLINK_NOFOLLOW) == 0 || errno != ENOENT) {
      return exists;
    }
  }
  FixOwner(pfd->get(), name, fd, c, S_IFREG | mode);
  if (int r = HotLookupAt(pfd->get(), name, entry, fd); r != 0) {
    ::close(fd);
    return r;
  }
  bool writable = IsWritable(flags);
  if (inodes_.OpenHandle(entry->id, writable, 0) != InodeTable::Open::kOk) {
    // The file just made, already on its way to the store: open that.
    ::close(fd);
    int r = Open(entry->id, flags & ~(O_CREAT | O_EXCL), out);
    if (r != 0) inodes_.Forget(entry->id, 1);
    return r;
  }
  // The file the handle writes to is the one just created: whatever the
  // inode serves (a lookup raced with a move) is checked at first use.
  *out = NewHandle(entry->id, 0, fd, writable);
  return 0;
}

namespace {

// Reads of files leave access times as they were: -o noatime, or a mount
// that is read-only now.
bool LeaveAtimes(const FsOptions& o) {
  return o.noatime || (o.read_only != nullptr && o.read_only->load(std::memory_order_relaxed));
}

// fd (fh's) with O_NOATIME as the mount says now: a remount to ro (or rw)
// changes it under handles already open. One check per call; a syscall
// only when it changes.
int FollowAtimes(const FsOptions& o, FileHandle* fh, int fd) {
  const bool want = LeaveAtimes(o);
  if (fd < 0 || fh->noatime.load(std::memory_order_relaxed) == want) return fd;
  const int fl = ::fcntl(fd, F_GETFL);
  if (fl >= 0 && ((fl & O_NOATIME) != 0) != want)
    (void)::fcntl(fd, F_SETFL, want ? fl | O_NOATIME : fl & ~O_NOATIME);  // EPERM: not ours
  fh->noatime.store(want, std::memory_order_relaxed);
  return fd;
}

}  // namespace

int Filesystem::IoFd(FileHandle* fh) {
  uint32_t now = fh->generation->load(std::memory_order_acquire);
  if (now == fh->seen.load(std::memory_order_acquire))
    return FollowAtimes(options_, fh, fh->fd.load(std::memory_order_acquire));
  MutexLock lock(fh->mu);
  now = fh->generation->load(std::memory_order_acquire);
  int current = fh->fd.load(std::memory_order_acquire);
  if (now == fh->seen.load(std::memory_order_acquire)) return FollowAtimes(options_, fh, current);
  InodeView v = inodes_.View(fh->inode);
  struct stat st;
  // A cold inode changes nothing: a handle with a backing file holds what
  // moved to the store. A hot one may be another file than the handle's.
  if (v.kind == Kind::kHot && ::fstat(v.fd->get(), &st) == 0 &&
      (current < 0 || st.st_dev != fh->dev || st.st_ino != fh->ino)) {
    int fd = OpenBacking(AT_FDCWD, ProcPath(v.fd->get()).c_str(),
                         (fh->writable ? O_RDWR : O_RDONLY) | O_CLOEXEC);
    if (fd >= 0) {
      if (current >= 0) fh->earlier_fds.push_back(current);
      fh->fd.store(fd, std::memory_order_release);
      fh->dev = st.st_dev;
      fh->ino = st.st_ino;
      current = fd;
    }  // else: gone again; a cold handle's chunks stay while it is open
  }
  fh->seen.store(now, std::memory_order_release);
  fh->noatime.store(current >= 0 && (::fcntl(current, F_GETFL) & O_NOATIME) != 0,
                    std::memory_order_relaxed);
  return FollowAtimes(options_, fh, current);
}

ssize_t Filesystem::ReadCold(FileHandle* fh, size_t size, off_t off, std::vector<ColdSlice>* slices,
                             const std::function<bool()>& stopping) {
  slices->clear();
  const auto& m = fh->manifest;
  uint64_t file_size = m->size();
  if (static_cast<uint64_t>(off) >= file_size) return 0;
  size = static_cast<size_t>(std::min<uint64_t>(size, file_size - static_cast<uint64_t>(off)));
  const store::ChunkGeometry g = store::GeometryOf(*m);
  size_t done = 0;
  uint64_t last_index = 0;
  while (done < size) {
    uint64_t pos = static_cast<uint64_t>(off) + done;
    uint64_t index = g.IndexAt(pos);
    if (done > 0 && stopping && stopping()) return -EINTR;  // a unmount waits for this read
    auto chunk = cache_.Get(m, index);
    if (!chunk.ok()) {
      counters_.eio_cold_chunk++;
      counters_.eio_cold_chunk_by[static_cast<int>(ClassifyStoreFault(chunk.status()))]++;
      counters_.eio_by_site[static_cast<int>(EioSite::kColdChunk)]++;
      return -EIO;  // logged with its tag ([EIO:cold-chunk]) by the cache
    }
    size_t within = static_cast<size_t>(pos - g.Start(index));
    size_t n = std::min((*chunk)->size - within, size - done);
    slices->push_back({*chunk, within, n});
    done += n;
    last_index = index;
  }
  // Sequential readers get the next chunks decompressed ahead of them. The
  // kernel's readahead sends several reads at once, handled by different
  // threads in any order: "sequential" means near where the last one ended.
  // (Reads of many small chunks each: "near" is also within two reads.)
  const uint64_t at = static_cast<uint64_t>(off);
  const uint64_t expected = fh->next_offset.exchange(at + done);
  const uint64_t distance = expected > at ? expected - at : at - expected;
  const uint64_t near = 2 * std::max<uint64_t>(m->chunk_bytes(), size);
  if (distance <= near) {
    for (uint64_t ahead = 1; ahead <= kReadaheadChunks; ++ahead)
      cache_.Prefetch(m, last_index + ahead);
    // The chunks wholly before `near` of this read are behind the reader
    // (a read of the kernel's may come late, never by more), unless the
    // page cache is not where its reads go.
    if (!fh->direct && at > near) {
      const uint64_t to = g.IndexAt(at - near);
      const uint64_t from = fh->let_go_below.exchange(to);
      // A seek ahead leaves what it skipped to age out as it would.
      if (from < to)
        cache_.LetGo(m->file_id(), std::max(from, to - std::min(to, kLetGoAtMost)), to);
    }
  }
  counters_.cold_reads++;
  return static_cast<ssize_t>(done);
}

void Filesystem::Release(std::unique_ptr<FileHandle> fh) {
  const uint64_t cold_id = fh->cold ? fh->manifest->file_id() : 0;
  // A reader that streamed: the chunks it left near it (behind it, read
  // ahead for it, or read out of order at its end) go too.
  const uint64_t behind = fh->let_go_below.load();
  if (cold_id != 0 && behind > 0) {
    cache_.LetGo(cold_id, behind, std::min(fh->manifest->chunks(), behind + kLetGoAtMost));
  }
  // What readahead holds of the file for readers to come, this one went
  // (an O_DIRECT reader that stopped halfway, a random reader) no longer
  // waits for it.
  if (cold_id != 0) cache_.ReaderGone(cold_id);
  int left = inodes_.CloseHandle(fh->inode, fh->writable, cold_id);
  if (cold_id != 0 && left == 0) ReapRetired(cold_id);
}

int Filesystem::Fsync(FileHandle* fh, bool datasync) {
  const int fd = IoFd(fh);
  if (fd < 0) return 0;  // a cold file: nothing of it is unwritten
  if ((datasync ? ::fdatasync(fd) : ::fsync(fd)) != 0) return -errno;
  return 0;
}

int Filesystem::Fallocate(FileHandle* fh, int mode, off_t offset, off_t length) {
  const int fd = IoFd(fh);
  if (fd < 0) return -EBADF;
  if (::fallocate(fd, mode, offset, length) != 0) return -errno;
  return 0;
}

int Filesystem::OpenBacking(int dir_fd, const char* name, int flags, mode_t mode) {
  const bool dir = (flags & O_DIRECTORY) != 0;
  if (dir ? LeaveAtimes(options_) || options_.nodiratime : LeaveAtimes(options_)) {
    const int fd = ::openat(dir_fd, name, flags | O_NOATIME, mode);
    if (fd >= 0 || errno != EPERM) return fd;
  }
  return ::openat(dir_fd, name, flags, mode);
}

int Filesystem::FsyncDir(uint64_t ino, bool datasync) {
  InodeView v = inodes_.View(ino);
  if (v.kind != Kind::kHot) return 0;
  int fd = ::openat(v.fd->get(), ".", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0) return -errno;
  int r = (datasync ? ::fdatasync(fd) : ::fsync(fd)) != 0 ? -errno : 0;
  ::close(fd);
  return r;
}

void Filesystem::ReapRetired(uint64_t file_id) {
  std::vector<uint64_t> ids;
  if (file_id != 0) {
    if (!store_->IsRetired(file_id)) return;
    ids.push_back(file_id);
  } else if (Status st = store_->ListRetired(&ids); !st.ok()) {
    spdlog::error("list retired files: {}", st.message());
    return;
  }
  // A reader counted after this check cannot read: its file's manifest
  // left the store before the file was marked retired, and Open checks it.
  std::erase_if(ids, [&](uint64_t id) { return inodes_.Readers(id) > 0; });
  if (ids.empty()) return;
  store::WriteBatch batch;
  std::erase_if(ids, [&](uint64_t id) {
    Status st = store_->DropRetired(&batch, id);
    // Its mark unread: it stays, and the next reap or recovery tries again.
    if (!st.ok()) spdlog::error("drop retired chunks of file {}: {}", id, st.message());
    return !st.ok();
  });
  if (batch.empty()) return;
  // Unsynced: a retired file lost by a crash is dropped by recovery.
  if (Status st = store_->Commit(batch, false); !st.ok()) {
    spdlog::error("drop retired chunks: {}", st.message());
    return;
  }
  for (uint64_t id : ids) cache_.Drop(id);
}

bool Filesystem::BeginMove(int fd, const struct stat& st, const storepb::Manifest& m) {
  uint64_t id = inodes_.BeginMove(fd, st, m);
  Invalidate(id);  // it shows a number of the store's range now
  return id != 0;
}

void Filesystem::EndMove(uint64_t file_id, bool moved) {
  Invalidate(inodes_.EndMove(file_id, moved));
}

void Filesystem::PutBack(uint64_t file_id, int fd, const struct stat& st) {
  UniqueFd own(::fcntl(fd, F_DUPFD_CLOEXEC, 0));
  if (own.valid()) Invalidate(inodes_.PutBackHot(file_id, std::move(own), st));
}

void Filesystem::Retired() { ReapRetired(); }

Filesystem::Stats Filesystem::stats() {
  Stats s;
  s.cache = cache_.stats();
  s.rehydrations = counters_.rehydrations;
  s.cold_reads = counters_.cold_reads;
  s.eio_cold_chunk = counters_.eio_cold_chunk;
  for (int i = 0; i < kNumStoreFaults; ++i) s.eio_cold_chunk_by[i] = counters_.eio_cold_chunk_by[i];
  s.eio_rehydrate = counters_.eio_rehydrate;
  s.eio_store = counters_.eio_store;
  for (int i = 0; i < kNumStoreFaults; ++i) s.eio_store_by[i] = counters_.eio_store_by[i];
  for (int i = 0; i < kNumEioSites; ++i) s.eio_by_site[i] = counters_.eio_by_site[i];
  s.inodes = inodes_.size();
  return s;
}

}  // namespace tbfs::fs
