// Reading a stored file back: verifying it chunk by chunk, comparing it
// with a file on disk, writing it out (store/file_io.h).
#include <fcntl.h>
#include <limits.h>
#include <unistd.h>

#include <cstring>
#include <memory>
#include <vector>

#include "base/failpoint.h"
#include "base/fs_util.h"
#include "base/time_util.h"
#include "fmt/format.h"
#include "spdlog/spdlog.h"
#include "store/file_io.h"
#include "store/file_io_internal.h"
#include "store/format.h"
#include "store/xattrs.h"

namespace tbfs::store {

namespace {

// Writes one chunk at its place in a new file, leaving 4 KiB blocks of
// zeros unwritten: holes. A sparse file then takes on disk about what it
// took before, even one with data in every chunk (and no hole run); a
// dense file's blocks of zeros become holes, the same bytes to a reader.
// Nothing is written that a reader cannot tell from a hole: a root daemon
// never fills a disk with a user's zeros.
Status WriteChunkAt(int fd, const storepb::Manifest& m, uint64_t index, std::string_view raw,
                    const std::string& dest) {
  constexpr size_t kBlock = 4096;
  static const char kZeros[kBlock] = {};
  const uint64_t offset = GeometryOf(m).Start(index);
  size_t begin = 0;
  while (begin < raw.size()) {
    // Skip a run of zero blocks, then take the run of blocks after it.
    while (begin < raw.size()) {
      const size_t n = std::min(kBlock, raw.size() - begin);
      if (std::memcmp(raw.data() + begin, kZeros, n) != 0) break;
      begin += n;
    }
    size_t end = begin;
    while (end < raw.size()) {
      const size_t n = std::min(kBlock, raw.size() - end);
      if (std::memcmp(raw.data() + end, kZeros, n) == 0) break;
      end += n;
    }
    for (size_t done = begin; done < end;) {
      const ssize_t n =
          ::pwrite(fd, raw.data() + done, end - done, static_cast<off_t>(offset + done));
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0) return Status::FromErrno(n < 0 ? errno : EIO, "write", dest);
      done += static_cast<size_t>(n);
    }
    begin = end;
  }
  return Status::OK();
}

}  // namespace

Status VerifyStoredFile(ColdStore& store, const storepb::Manifest& m, WorkPool* pool) {
  return VerifyFrom(
      m,
      [&store, content = ContentManifest(m)](uint64_t index, ChunkCodec* codec, std::string* raw) {
        return store.ReadChunk(content, index, codec, raw);
      },
      pool);
}

Status VerifyCopiedFile(ColdStore& store, const storepb::Manifest& m, WorkPool* pool) {
  if (!IsGzipContent(m)) return VerifyStoredFile(store, m, pool);
  const storepb::Manifest content = ContentManifest(m);
  return VerifyFrom(
      content,
      [&store, &content](uint64_t index, ChunkCodec* codec, std::string* raw) {
        return store.ReadChunk(content, index, codec, raw);
      },
      pool);
}

Status VerifyFrom(const storepb::Manifest& m, const ChunkSource& stored, WorkPool* pool) {
  auto codecs = Codecs(*pool);
  const size_t wave = WaveChunks(*pool);
  const ChunkSource read = FileSource(m, stored, wave);
  std::vector<std::string> raw(wave);
  std::vector<Status> status(wave);
  Xxh128 hash;
  uint64_t total = 0;
  for (const ChunkRun& run : DataRuns(m)) {
    for (uint64_t first = run.first; first < run.end; first += wave) {
      size_t n = static_cast<size_t>(std::min<uint64_t>(wave, run.end - first));
      pool->ParallelFor(n, [&](size_t i, int worker) {
        status[i] = read(first + i, codecs[worker].get(), &raw[i]);
      });
      for (size_t i = 0; i < n; ++i) {
        TBFS_RETURN_IF_ERROR(status[i]);
        hash.Update(raw[i]);
        total += raw[i].size();
      }
    }
  }
  if (total != DataBytes(m) || !(hash.Digest() == ManifestHash(m))) {
    return Status::Corruption(m.path() +
                              ": content read back from the store differs from the file");
  }
  return Status::OK();
}

ChunkSource FileSource(const storepb::Manifest& m, const ChunkSource& stored, size_t window) {
  if (!IsGzipContent(m)) return stored;
  auto pieces = std::make_shared<GzipPieces>(m, stored, window);
  return
      [pieces](uint64_t index, ChunkCodec*, std::string* raw) { return pieces->Read(index, raw); };
}

bool SameContent(int fd, const std::string& path, const storepb::Manifest& m) {
  struct stat st;
  if (::fstat(fd, &st) != 0 || !S_ISREG(st.st_mode) ||
      static_cast<uint64_t>(st.st_size) != m.size()) {
    return false;
  }
  const ChunkGeometry g = GeometryOf(m);
  // Where m has a hole the file must have one too (data there, even zeros,
  // is taken for a difference: the caller then writes m's content back).
  for (int i = 0; i + 1 < m.hole_runs_size(); i += 2) {
    const uint64_t begin = g.Start(m.hole_runs(i));
    const uint64_t end = std::min(g.Start(m.hole_runs(i + 1)), m.size());
    const off_t data = ::lseek(fd, static_cast<off_t>(begin), SEEK_DATA);
    if (data >= 0 && static_cast<uint64_t>(data) < end) return false;
    if (data < 0 && errno != ENXIO) return false;
  }
  std::string buf;
  Xxh128 hash;
  for (const ChunkRun& run : DataRuns(m)) {
    for (uint64_t index = run.first; index < run.end; ++index) {
      buf.resize(g.Length(index));
      size_t got = 0;
      if (!PreadFull(fd, buf.data(), buf.size(), g.Start(index), &got, path).ok() ||
          got != buf.size()) {
        return false;
      }
      hash.Update(buf);
    }
  }
  return hash.Digest() == ManifestHash(m);
}

std::string TempNameFor(std::string_view name, uint64_t file_id) {
  std::string temp = fmt::format(".{}.tbfs-tmp-{}", name, file_id);
  return temp.size() <= NAME_MAX ? temp : fmt::format(".tbfs-tmp-{}", file_id);  // as AsideName
}

std::function<void(const std::string& folder, int fd)> FoldersAsStored(
    ColdStore& store, const std::string& root, const MaterializeOptions& options) {
  return [&store, &root, &options](const std::string& folder, int fd) {
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
}

Status MaterializeFile(ColdStore& store, const storepb::Manifest& m, const std::string& root,
                       const std::string& rel, const MaterializeOptions& options) {
  auto read = [&store, content = ContentManifest(m)](uint64_t index, ChunkCodec* codec,
                                                     std::string* raw) {
    return store.ReadChunk(content, index, codec, raw);
  };
  return MaterializeFrom(m, read, FoldersAsStored(store, root, options), root, rel, options);
}

Status MaterializeFrom(const storepb::Manifest& m, const ChunkSource& stored,
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
  const ChunkSource read = FileSource(m, stored, wave);
  std::vector<std::string> raw(wave);
  std::vector<Status> status(wave);
  Xxh128 hash;
  for (const ChunkRun& run : DataRuns(m)) {
    for (uint64_t first = run.first; first < run.end; first += wave) {
      size_t n = static_cast<size_t>(std::min<uint64_t>(wave, run.end - first));
      options.pool->ParallelFor(n, [&](size_t i, int worker) {
        status[i] = read(first + i, codecs[worker].get(), &raw[i]);
      });
      for (size_t i = 0; i < n; ++i) {
        if (!status[i].ok()) return fail(status[i]);
        hash.Update(raw[i]);
        Status st = WriteChunkAt(fd.get(), m, first + i, raw[i], dest);
        if (!st.ok()) return fail(st);
        if (options.progress) {
          options.progress->fetch_add(raw[i].size(), std::memory_order_relaxed);
        }
      }
    }
  }
  if (!(hash.Digest() == ManifestHash(m))) {
    return fail(Status::Corruption(m.path() + ": content hash differs from the manifest"));
  }
  // Its size, holes at the end included.
  if (::ftruncate(fd.get(), static_cast<off_t>(m.size())) != 0) {
    return fail(Status::FromErrno(errno, "set the size of", dest));
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
