#include "store/file_io.h"

#include <fcntl.h>
#include <unistd.h>
#include <xxhash.h>

#include <chrono>
#include <cstring>
#include <memory>
#include <vector>

#include "base/failpoint.h"
#include "base/fs_util.h"
#include "base/time_util.h"
#include "fmt/format.h"
#include "spdlog/spdlog.h"
#include "store/classify.h"
#include "store/format.h"
#include "store/xattrs.h"

namespace tbfs::store {

namespace {

// Uncommitted chunk bytes are written without sync once a batch is this big;
// the final synced batch makes them all durable (the WAL is sequential).
constexpr size_t kBatchBytes = 16 << 20;

struct Xxh128 {
  Xxh128() : state(XXH3_createState()) { XXH3_128bits_reset(state); }
  ~Xxh128() { XXH3_freeState(state); }
  void Update(std::string_view b) { XXH3_128bits_update(state, b.data(), b.size()); }
  Hash128 Digest() const {
    XXH128_hash_t h = XXH3_128bits_digest(state);
    return {h.low64, h.high64};
  }
  XXH3_state_t* state;
};

// Per-worker zstd contexts of a pool.
std::vector<std::unique_ptr<ChunkCodec>> Codecs(const WorkPool& pool) {
  std::vector<std::unique_ptr<ChunkCodec>> codecs;
  for (int i = 0; i < pool.size(); ++i) codecs.push_back(std::make_unique<ChunkCodec>());
  return codecs;
}

size_t WaveChunks(const WorkPool& pool) { return static_cast<size_t>(pool.size()) * 2; }

}  // namespace

FolderAttrs LogdirFolders(const std::string& logdir) {
  return [logdir](const std::string& rel, struct stat* st) {
    auto fd = OpenUnder(logdir, rel, O_PATH | O_DIRECTORY);
    return fd.ok() && ::fstat(fd->get(), st) == 0;
  };
}

Result<storepb::Manifest> IngestFile(ColdStore& store, const std::string& logdir,
                                     const std::string& rel_path, int fd, const struct stat& st,
                                     uint64_t file_id, const IngestOptions& options) {
  const uint64_t size = static_cast<uint64_t>(st.st_size);
  const uint32_t cb = options.chunk_bytes;
  const uint64_t chunks = ChunkCount(size, cb);
  const std::string path = JoinPath(logdir, rel_path);
  WorkPool& pool = *options.pool;
  auto codecs = Codecs(pool);
  Xxh128 hash;

  storepb::Manifest m;
  m.set_file_id(file_id);
  m.set_path(rel_path);
  m.set_size(size);
  m.set_mode(st.st_mode);
  m.set_uid(st.st_uid);
  m.set_gid(st.st_gid);
  m.set_atime_ns(ToNs(st.st_atim));
  m.set_mtime_ns(ToNs(st.st_mtim));
  m.set_ctime_ns(ToNs(st.st_ctim));
  m.set_ino(st.st_ino);
  m.set_chunk_bytes(cb);
  m.set_codec(kCodecZstd);
  m.set_level(options.level);
  m.set_chunks(chunks);
  m.set_file_class(options.file_class);
  m.set_migrated_ns(NowNs());
  // ACLs and every other attribute go with the file (a change after the
  // stat changes its ctime: the migration then leaves it in place).
  TBFS_RETURN_IF_ERROR(ReadXattrs(fd, path, &m));

  WriteBatch batch;
  uint64_t stored = 0;
  const size_t wave = WaveChunks(pool);
  std::vector<std::string> raw(wave), value(wave);
  for (uint64_t first = 0; first < chunks; first += wave) {
    if (options.should_stop && options.should_stop()) {
      return Status::Aborted(path + " was opened for writing while it was copied");
    }
    size_t n = static_cast<size_t>(std::min<uint64_t>(wave, chunks - first));
    for (size_t i = 0; i < n; ++i) {
      uint64_t index = first + i;
      size_t len = static_cast<size_t>(std::min<uint64_t>(cb, size - index * cb));
      raw[i].resize(len);
      size_t got = 0;
      TBFS_RETURN_IF_ERROR(PreadFull(fd, raw[i].data(), len, index * cb, &got, path));
      if (got != len) return Status::Aborted(path + " shrank while it was copied");
      hash.Update(raw[i]);
      if (options.progress) options.progress->fetch_add(len, std::memory_order_relaxed);
    }
    pool.ParallelFor(n, [&](size_t i, int worker) {
      codecs[worker]->Encode(raw[i], options.level, {file_id, first + i}, &value[i]);
    });
    for (size_t i = 0; i < n; ++i) {
      batch.Put(Space::kChunks, ChunkKey(file_id, first + i), value[i]);
      stored += value[i].size();
    }
    // The first wave of a multi-wave file is committed on its own too, so a
    // crash test can stop the copy halfway with chunks already written.
    if (batch.bytes() >= kBatchBytes || (first == 0 && chunks > wave)) {
      TBFS_RETURN_IF_ERROR(store.CheckRoom(batch.bytes()));
      TBFS_RETURN_IF_ERROR(store.Commit(batch, false));
      batch.Clear();
      MaybeCrash("migrate.copying");
    }
  }
  char extra;
  size_t got = 0;
  TBFS_RETURN_IF_ERROR(PreadFull(fd, &extra, 1, size, &got, path));
  if (got != 0) return Status::Aborted(path + " grew while it was copied");

  Hash128 h = hash.Digest();
  m.set_hash_low(h.low);
  m.set_hash_high(h.high);
  m.set_stored_bytes(stored);
  TBFS_RETURN_IF_ERROR(store.CheckRoom(batch.bytes()));
  std::shared_lock<SharedMutex> lock;
  FailpointHook("ingest.commit", path);  // tests: a rename at the end of the copy
  if (options.commit_lock != nullptr) lock = std::shared_lock(*options.commit_lock);
  std::string name;
  if (options.root_fd >= 0 && !OpenParentNaming(options.root_fd, rel_path, st, &name).ok()) {
    return Status::Aborted(path + " was renamed (or its folder was) while it was copied");
  }
  TBFS_RETURN_IF_ERROR(store.AddFile(&batch, m, LogdirFolders(logdir), options.retire_replaced));
  TBFS_RETURN_IF_ERROR(store.Commit(batch, true));
  return m;
}

Status VerifyStoredFile(ColdStore& store, const storepb::Manifest& m, WorkPool* pool) {
  return VerifyFrom(
      m,
      [&](uint64_t index, ChunkCodec* codec, std::string* raw) {
        return store.ReadChunk(m, index, codec, raw);
      },
      pool);
}

Status VerifyFrom(const storepb::Manifest& m, const ChunkSource& read, WorkPool* pool) {
  auto codecs = Codecs(*pool);
  const size_t wave = WaveChunks(*pool);
  std::vector<std::string> raw(wave);
  std::vector<Status> status(wave);
  Xxh128 hash;
  uint64_t total = 0;
  for (uint64_t first = 0; first < m.chunks(); first += wave) {
    size_t n = static_cast<size_t>(std::min<uint64_t>(wave, m.chunks() - first));
    pool->ParallelFor(n, [&](size_t i, int worker) {
      status[i] = read(first + i, codecs[worker].get(), &raw[i]);
    });
    for (size_t i = 0; i < n; ++i) {
      TBFS_RETURN_IF_ERROR(status[i]);
      hash.Update(raw[i]);
      total += raw[i].size();
    }
  }
  if (total != m.size() || !(hash.Digest() == ManifestHash(m))) {
    return Status::Corruption(m.path() +
                              ": content read back from the store differs from the file");
  }
  return Status::OK();
}

Status HashFd(int fd, const std::string& path, uint64_t* size, Hash128* out) {
  std::string buf(1 << 20, '\0');
  Xxh128 hash;
  *size = 0;
  for (;;) {
    size_t got = 0;
    TBFS_RETURN_IF_ERROR(PreadFull(fd, buf.data(), buf.size(), *size, &got, path));
    if (got == 0) break;
    hash.Update(std::string_view(buf.data(), got));
    *size += got;
  }
  *out = hash.Digest();
  return Status::OK();
}

std::string TempNameFor(std::string_view name, uint64_t file_id) {
  return fmt::format(".{}.tbfs-tmp-{}", name, file_id);
}

Status MaterializeFile(ColdStore& store, const storepb::Manifest& m, const std::string& root,
                       const std::string& rel, const MaterializeOptions& options) {
  // Folders missing on the way, made beneath root without following links.
  auto made = [&](const std::string& folder, int fd) {
    if (!options.folders_as_stored) return;
    auto entry = store.GetEntry(folder);
    if (!entry.ok()) return;
    // The folder exists either way; an owner or mode not given back is said.
    if (options.keep_owner && ::fchown(fd, entry->uid(), entry->gid()) != 0) {
      spdlog::warn("{}: chown folder {}: {}", root, folder, std::strerror(errno));
    }
    if (::fchmod(fd, entry->mode() & 07777) != 0) {  // after the chown, which clears set-id bits
      spdlog::warn("{}: chmod folder {}: {}", root, folder, std::strerror(errno));
    }
  };
  auto read = [&](uint64_t index, ChunkCodec* codec, std::string* raw) {
    return store.ReadChunk(m, index, codec, raw);
  };
  return MaterializeFrom(m, read, made, root, rel, options);
}

Status MaterializeFrom(const storepb::Manifest& m, const ChunkSource& read,
                       const std::function<void(const std::string& rel, int fd)>& made,
                       const std::string& root, const std::string& rel,
                       const MaterializeOptions& options) {
  const std::string dest = JoinPath(root, rel);  // for messages
  UniqueFd opened;
  int root_fd = options.root_fd;
  if (root_fd < 0) {
    auto fd = OpenFile(root, O_PATH | O_DIRECTORY);
    if (!fd.ok()) return fd.status();
    opened = std::move(fd).value();
    root_fd = opened.get();
  }
  auto dir = MakeDirsBeneath(root_fd, ParentPath(rel), 0755, made);
  if (!dir.ok()) {
    if (dir.status().sys_errno() == 0) return dir.status();
    return Status::FromErrno(dir.status().sys_errno(), "make the folders of", dest);
  }
  const std::string name(BaseName(rel));
  const std::string tmp = TempNameFor(name, m.file_id());
  const int dfd = dir->get();
  ::unlinkat(dfd, tmp.c_str(), 0);  // left over by a crash
  // The folder's mtime comes back after the temporary file's coming and
  // going (FolderTimes): to users the file was there all along (cold).
  FolderTimes folder_times;
  folder_times.Before(dfd);
  UniqueFd fd(
      ::openat(dfd, tmp.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600));
  folder_times.After(dfd);
  if (!fd.valid()) return Status::FromErrno(errno, "create", JoinPath(ParentPath(dest), tmp));
  auto fail = [&](Status st) {
    folder_times.Before(dfd);
    ::unlinkat(dfd, tmp.c_str(), 0);
    folder_times.After(dfd);
    folder_times.Restore();
    return st;
  };

  auto codecs = Codecs(*options.pool);
  const size_t wave = WaveChunks(*options.pool);
  std::vector<std::string> raw(wave);
  std::vector<Status> status(wave);
  Xxh128 hash;
  for (uint64_t first = 0; first < m.chunks(); first += wave) {
    size_t n = static_cast<size_t>(std::min<uint64_t>(wave, m.chunks() - first));
    options.pool->ParallelFor(n, [&](size_t i, int worker) {
      status[i] = read(first + i, codecs[worker].get(), &raw[i]);
    });
    for (size_t i = 0; i < n; ++i) {
      if (!status[i].ok()) return fail(status[i]);
      hash.Update(raw[i]);
      Status st = WriteAll(fd.get(), raw[i].data(), raw[i].size(), dest);
      if (!st.ok()) return fail(st);
      if (options.progress) options.progress->fetch_add(raw[i].size(), std::memory_order_relaxed);
    }
  }
  if (!(hash.Digest() == ManifestHash(m))) {
    return fail(Status::Corruption(m.path() + ": content hash differs from the manifest"));
  }
  if (options.keep_owner && ::fchown(fd.get(), m.uid(), m.gid()) != 0 && errno != EPERM) {
    return fail(Status::FromErrno(errno, "chown", dest));
  }
  // The file as it was, ACLs included: before the mode, which a set ACL
  // changes (the mode then sets the ACL's mask to what the file had).
  if (options.keep_owner) {
    if (Status st = ApplyXattrs(fd.get(), dest, m); !st.ok()) return fail(st);
  }
  if (::fchmod(fd.get(), m.mode() & 07777) != 0)
    return fail(Status::FromErrno(errno, "chmod", dest));
  struct timespec times[2] = {FromNs(m.atime_ns()), FromNs(m.mtime_ns())};
  if (::futimens(fd.get(), times) != 0) return fail(Status::FromErrno(errno, "utimens", dest));
  if (options.sync && ::fsync(fd.get()) != 0) return fail(Status::FromErrno(errno, "fsync", dest));
  if (options.before_rename) options.before_rename(fd.get());
  fd.reset();

  unsigned flags = options.replace ? 0 : RENAME_NOREPLACE;
  folder_times.Before(dfd);
  const int placed = ::renameat2(dfd, tmp.c_str(), dfd, name.c_str(), flags);
  folder_times.After(dfd);
  if (placed != 0) return fail(Status::FromErrno(errno, "rename into place", dest));
  folder_times.Restore();
  if (options.sync && ::fsync(dfd) != 0) return Status::FromErrno(errno, "fsync", ParentPath(dest));
  return Status::OK();
}

}  // namespace tbfs::store
