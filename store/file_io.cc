#include "store/file_io.h"

#include <fcntl.h>
#include <unistd.h>
#include <xxhash.h>
#include <zlib.h>

#include <chrono>
#include <cstring>
#include <memory>
#include <vector>

#include "base/failpoint.h"
#include "base/fs_util.h"
#include "base/time_util.h"
#include "fmt/format.h"
#include "spdlog/spdlog.h"
#include "store/chunk_writer.h"
#include "store/classify.h"
#include "store/file_io_internal.h"
#include "store/format.h"
#include "store/gzip_pieces.h"
#include "store/xattrs.h"

namespace tbfs::store {

namespace {

// The chunks of the file open as fd that hold data, found with SEEK_DATA
// and SEEK_HOLE: a chunk with any data in it is read whole (a hole inside
// it as zeros), a chunk with none is a hole. The cost is one pair of seeks
// per run of data, whatever the size: a 15 TB file that takes no disk is
// not read at all.
Status FindDataRuns(int fd, const std::string& path, const struct stat& st, const ChunkGeometry& g,
                    std::vector<ChunkRun>* runs) {
  runs->clear();
  const uint64_t size = static_cast<uint64_t>(st.st_size);
  const uint64_t chunks = g.Count();
  if (!MayBeSparse(st)) {
    if (chunks > 0) runs->push_back({0, chunks});
    return Status::OK();
  }
  uint64_t pos = 0;
  while (pos < size) {
    const off_t data = ::lseek(fd, static_cast<off_t>(pos), SEEK_DATA);
    if (data < 0 && errno == ENXIO) break;  // nothing but hole from pos on
    if (data < 0) return Status::FromErrno(errno, "find the data (SEEK_DATA) of", path);
    if (static_cast<uint64_t>(data) >= size) break;
    const off_t hole = ::lseek(fd, data, SEEK_HOLE);
    if (hole < 0) return Status::FromErrno(errno, "find the holes (SEEK_HOLE) of", path);
    const uint64_t first = g.IndexAt(static_cast<uint64_t>(data));
    const uint64_t end =
        std::clamp<uint64_t>(g.ChunksBefore(static_cast<uint64_t>(hole)), first + 1, chunks);
    if (!runs->empty() && runs->back().end >= first) {
      runs->back().end = std::max(runs->back().end, end);
    } else {
      runs->push_back({first, end});
    }
    pos = g.Start(end);
  }
  return Status::OK();
}

// The dictionary the file's chunks are compressed with (null: none). One
// that cannot be made costs the file nothing but the attempt.
std::shared_ptr<const Dictionary> DictionaryFor(ColdStore& store, const std::string& rel_path,
                                                int fd, const std::string& path,
                                                const std::vector<ChunkRun>& data,
                                                const ChunkGeometry& g,
                                                const IngestOptions& options) {
  if (!options.dictionaries) return nullptr;
  uint64_t data_bytes = 0;
  for (const ChunkRun& r : data) data_bytes += std::min(g.Start(r.end), g.size) - g.Start(r.first);
  auto read = [&](uint64_t index, std::string* raw) {
    raw->resize(g.Length(index));
    size_t got = 0;
    TBFS_RETURN_IF_ERROR(PreadFull(fd, raw->data(), raw->size(), g.Start(index), &got, path));
    raw->resize(got);
    return Status::OK();
  };
  auto d = store.DictionaryForFile(rel_path, options.file_class, data, data_bytes, options.level,
                                   options.pool->size(), read);
  if (!d.ok()) {
    spdlog::warn("dictionary for {}: {}", path, d.status().message());
    return nullptr;
  }
  // At a level other than its training's, judged once on this file's middle
  // chunk, as a training judges a dictionary (kDictionaryMustSave).
  auto serves = [&]() -> std::optional<bool> {
    const std::optional<uint64_t> middle = MiddleDataChunk(data);
    std::string raw, with, without;
    if (!middle || !read(*middle, &raw).ok()) return std::nullopt;
    ChunkCodec codec;
    codec.Encode(raw, options.level, {}, &with, d->get());
    codec.Encode(raw, options.level, {}, &without, nullptr);
    const bool helps = static_cast<double>(with.size()) <=
                       kDictionaryMustSave * static_cast<double>(without.size());
    spdlog::info(
        "dictionary {} at level {} (trained at {}): {} ({} bytes with it, {} without, "
        "on a chunk of {})",
        (*d)->id(), options.level, (*d)->record().level(),
        helps ? "kept" : "not used at that level", with.size(), without.size(), path);
    return helps;
  };
  if (*d != nullptr && !(*d)->ServesAt(options.level, serves)) return nullptr;
  return *d;
}

}  // namespace

FolderAttrs LogdirFolders(const std::string& logdir) {
  return [logdir](const std::string& rel, struct stat* st) {
    auto fd = OpenUnder(logdir, rel, O_PATH | O_DIRECTORY);
    return fd.ok() && ::fstat(fd->get(), st) == 0;
  };
}

namespace {

// The manifest of the file open as fd in geometry g, all but what its
// content gives.
Status StartManifest(int fd, const std::string& path, const std::string& rel_path,
                     const struct stat& st, uint64_t file_id, const ChunkGeometry& g,
                     const IngestOptions& options, storepb::Manifest* m) {
  m->set_file_id(file_id);
  m->set_path(rel_path);
  m->set_size(static_cast<uint64_t>(st.st_size));
  m->set_mode(st.st_mode);
  m->set_uid(st.st_uid);
  m->set_gid(st.st_gid);
  m->set_atime_ns(ToNs(st.st_atim));
  m->set_mtime_ns(ToNs(st.st_mtim));
  m->set_ctime_ns(ToNs(st.st_ctim));
  m->set_ino(st.st_ino);
  m->set_chunk_bytes(g.chunk_bytes);
  m->set_head_chunk_bytes(g.head);
  m->set_codec(kCodecZstdNoNumbers);  // CommitFile: or kCodecZstdNumbers
  m->set_level(options.level);
  m->set_chunks(g.Count());
  m->set_file_class(options.file_class);
  m->set_migrated_ns(NowNs());
  // ACLs and every other attribute go with the file (a change after the
  // stat changes its ctime: the migration then leaves it in place).
  return ReadXattrs(fd, path, m);
}

// The copy's last steps: the file must not have grown, and must still be
// at rel_path; then the manifest and namespace entries, synced.
Result<storepb::Manifest> CommitFile(ColdStore& store, const std::string& logdir,
                                     const std::string& rel_path, int fd, const struct stat& st,
                                     const IngestOptions& options, ChunkWriter& writer,
                                     storepb::Manifest m) {
  const std::string path = JoinPath(logdir, rel_path);
  char extra;
  size_t got = 0;
  TBFS_RETURN_IF_ERROR(PreadFull(fd, &extra, 1, m.size(), &got, path));
  if (got != 0) return Status::Aborted(path + " grew while it was copied");
  m.set_stored_bytes(writer.stored());
  if (writer.numbers()) m.set_codec(kCodecZstdNumbers);
  WriteBatch& batch = *writer.batch();
  TBFS_RETURN_IF_ERROR(store.CheckRoom(batch.bytes()));
  std::shared_lock<SharedMutex> lock;
  FailpointHook("ingest.commit", path);  // tests: a rename at the end of the copy
  if (options.commit_lock != nullptr) lock = std::shared_lock(*options.commit_lock);
  std::string name;
  if (options.root_fd >= 0 && !OpenParentNaming(options.root_fd, rel_path, st, &name).ok()) {
    return Status::Aborted(path + " was renamed (or its folder was) while it was copied");
  }
  TBFS_RETURN_IF_ERROR(store.AddFile(&batch, &m, LogdirFolders(logdir), options.retire_replaced));
  return m;
}

// A content larger than this many times its gzip file is stored as the
// file is: a deflate bomb (up to 1032x) would cost the migration hours.
constexpr uint64_t kMaxGzipInflation = 256;
// Stored by its content, a gzip file must take at most this part of what
// it takes as it is (about its size: zstd finds nothing in deflate), or
// the remake on every cold read buys nothing.
constexpr double kGzipContentMustSave = 0.9;

// The content that judges a gzip file before its recipe is looked for: the
// search deflates all of the content again as the content is compressed,
// and a content found to store in no less than the file is found so only
// at its end (TensorFlow's trace.json.gz of random timings: about a second
// for 36 MB of content, 4 of the 13.5 s `tbfs-bench cold`'s logdir took to
// migrate).
constexpr uint64_t kGzipProbeBytes = 4 << 20;

// Whether the first kGzipProbeBytes of a gzip file's content, compressed
// as its chunks would be, take at most kGzipContentMustSave of the gzip
// bytes they came from. True when the stream does not inflate: the recipe
// search says why.
bool GzipContentMaySave(int fd, const std::string& path, uint64_t size, uint32_t cb, int level,
                        const Dictionary* dict) {
  z_stream z{};
  if (inflateInit2(&z, 16 + MAX_WBITS) != Z_OK) return true;
  struct End {
    z_stream* z;
    ~End() { inflateEnd(z); }
  } end{&z};
  // One chunk of content at a time, compressed as it fills.
  std::string in(256 << 10, '\0');
  std::string chunk(cb, '\0');
  ChunkCodec codec;
  std::string value;
  uint64_t content = 0, stored = 0;
  auto compress = [&]() {
    const size_t n = cb - z.avail_out;
    codec.Encode(std::string_view(chunk.data(), n), level, ChunkPos{}, &value, dict);
    content += n;
    stored += value.size();
    z.next_out = reinterpret_cast<Bytef*>(chunk.data());
    z.avail_out = cb;
  };
  z.next_out = reinterpret_cast<Bytef*>(chunk.data());
  z.avail_out = cb;
  bool stream_end = false;
  for (uint64_t at = 0; at < size && content < kGzipProbeBytes && !stream_end;) {
    size_t got = 0;
    const size_t want = static_cast<size_t>(std::min<uint64_t>(in.size(), size - at));
    if (!PreadFull(fd, in.data(), want, at, &got, path).ok() || got == 0) return true;
    at += got;
    z.next_in = reinterpret_cast<Bytef*>(in.data());
    z.avail_in = static_cast<uInt>(got);
    while (z.avail_in > 0 && content < kGzipProbeBytes && !stream_end) {
      const int rc = inflate(&z, Z_NO_FLUSH);
      if (rc == Z_STREAM_END) stream_end = true;
      if (rc != Z_OK && rc != Z_STREAM_END) return true;
      if (z.avail_out == 0 || stream_end) compress();
    }
  }
  if (z.avail_out < cb) compress();  // a stream cut short: the finder says so
  return static_cast<double>(stored) <= kGzipContentMustSave * static_cast<double>(z.total_in);
}

// A gzip file read once, piece by piece (of kGzipPieceBytes): each piece
// hashed (the file's hash, its manifest's piece hashes) and given to the
// recipe finder, which deflates the content as a remaker given content
// chunks of `chunk_bytes` will.
class GzipPieceReader {
 public:
  GzipPieceReader(int fd, const std::string& path, uint64_t size, uint32_t chunk_bytes,
                  storepb::GzipContent* g, std::atomic<uint64_t>* progress)
      : fd_(fd),
        path_(path),
        size_(size),
        g_(g),
        progress_(progress),
        piece_(kGzipPieceBytes, '\0'),
        finder_(chunk_bytes) {}

  bool done() const { return at_ == size_; }
  // The next piece; NotFound once the finder knows there is no recipe (or
  // the stream inflates past kMaxGzipInflation times the file).
  Result<std::string_view> Next() {
    const size_t len = static_cast<size_t>(std::min<uint64_t>(kGzipPieceBytes, size_ - at_));
    size_t got = 0;
    TBFS_RETURN_IF_ERROR(PreadFull(fd_, piece_.data(), len, at_, &got, path_));
    if (got != len) return Status::Aborted(path_ + " shrank while it was copied");
    const std::string_view bytes(piece_.data(), len);
    at_ += len;
    hash_.Update(bytes);
    g_->add_piece_hashes(PieceHash(bytes));
    finder_.Add(bytes);
    if (finder_.rejected()) return finder_.Finish().status();
    if (finder_.content_bytes() > kMaxGzipInflation * size_) {
      return Status::NotFound(
          fmt::format("it inflates to more than {} times its size", kMaxGzipInflation));
    }
    if (progress_ != nullptr) progress_->fetch_add(len, std::memory_order_relaxed);
    return bytes;
  }
  // After the last piece.
  Result<GzipRecipe> Finish() { return finder_.Finish(); }
  Hash128 Digest() const { return hash_.Digest(); }
  // The hash of the content the finder deflated.
  Hash128 ContentDigest() const { return finder_.content_hash(); }

 private:
  const int fd_;
  const std::string& path_;
  const uint64_t size_;
  storepb::GzipContent* const g_;
  std::atomic<uint64_t>* const progress_;
  std::string piece_;
  uint64_t at_ = 0;
  Xxh128 hash_;
  GzipRecipeFinder finder_;
};

// A gzip file stored by its content (store/gzip_pieces.h). NotFound, with
// the chunks it wrote removed again, when zlib cannot make the file again
// or its content would not store smaller: it is then stored as it is.
Result<storepb::Manifest> IngestGzipContent(ColdStore& store, const std::string& logdir,
                                            const std::string& rel_path, int fd,
                                            const struct stat& st, storepb::Manifest m,
                                            const IngestOptions& options) {
  const std::string path = JoinPath(logdir, rel_path);
  const uint32_t cb = options.chunk_bytes;
  // The content's family's dictionary, if it has one (none is trained on
  // content here: that needs the content at random, and this is a stream).
  std::shared_ptr<const Dictionary> dict;
  if (options.dictionaries) {
    dict = store.DictionaryOf(DictionaryFamily(ContentPath(rel_path), options.file_class));
  }
  if (!GzipContentMaySave(fd, path, m.size(), cb, options.level, dict.get())) {
    return Status::NotFound(
        fmt::format("its first {} MiB of content store in more than {:.0f}% "
                    "of the gzip bytes they came from",
                    kGzipProbeBytes >> 20, kGzipContentMustSave * 100));
  }
  m.set_chunk_bytes(kGzipPieceBytes);  // the file's bytes, in pieces
  m.clear_head_chunk_bytes();          // all of them alike
  m.set_chunks(ChunkCount(m.size(), kGzipPieceBytes));
  if (dict != nullptr) m.set_dictionary(dict->id());
  storepb::GzipContent* g = m.mutable_gzip();
  g->set_content_chunk_bytes(cb);

  // One pass: the file read piece by piece, then inflated into the
  // content's chunks (on one worker, beside the others compressing them).
  GzipPieceReader file(fd, path, m.size(), cb, g, options.progress);
  Xxh128 content_hash;
  // The file's piece count stands for the content's chunk count, not known
  // yet (it decides only whether the first wave is committed on its own).
  ChunkWriter writer(store, path, m.file_id(), m.chunks(), 0, dict.get(), options);
  z_stream z{};
  if (inflateInit2(&z, 16 + MAX_WBITS) != Z_OK) return Status::Corruption(path + ": inflateInit2");
  struct End {
    z_stream* z;
    ~End() { inflateEnd(z); }
  } end{&z};
  // Content that stores no smaller than the file, or a file with no
  // recipe: its chunks written so far go, and the file is stored as it is
  // (NotFound).
  const double most = kGzipContentMustSave * static_cast<double>(m.size());
  uint64_t content = 0, index = 0;
  auto as_it_is = [&](Status why) -> Status {
    WriteBatch drop;
    store.RemoveChunks(&drop, m.file_id(), {{0, index}});
    TBFS_RETURN_IF_ERROR(store.Commit(drop, false));
    return why;
  };
  bool stream_end = false;
  // A chunk of content at a time, inflated as the file is read.
  auto next = [&](std::string* chunk, uint64_t* chunk_index) -> Result<bool> {
    if (stream_end || static_cast<double>(writer.stored()) > most) return false;
    chunk->resize(cb);
    z.next_out = reinterpret_cast<Bytef*>(chunk->data());
    z.avail_out = cb;
    while (z.avail_out > 0 && !stream_end) {
      if (z.avail_in == 0) {
        if (file.done()) break;  // a stream cut short: the finder says so
        auto bytes = file.Next();
        if (!bytes.ok()) return bytes.status();
        z.next_in = reinterpret_cast<Bytef*>(const_cast<char*>(bytes->data()));
        z.avail_in = static_cast<uInt>(bytes->size());
      }
      const int rc = inflate(&z, Z_NO_FLUSH);
      if (rc == Z_STREAM_END) {
        stream_end = true;
      } else if (rc != Z_OK && rc != Z_BUF_ERROR) {
        // Damage the finder has not judged yet (it checks the trailer at
        // its end): no recipe, whatever the finder would say. A file that
        // changed under the copy is caught by the copy as it is.
        return Status::NotFound(
            fmt::format("its gzip stream does not inflate ({})", z.msg ? z.msg : "?"));
      }
    }
    chunk->resize(cb - z.avail_out);
    if (chunk->empty()) return false;
    content += chunk->size();
    content_hash.Update(*chunk);
    *chunk_index = index++;
    return true;
  };
  Status written = writer.WriteAll(next);
  if (written.IsNotFound()) return as_it_is(written);
  TBFS_RETURN_IF_ERROR(written);
  if (static_cast<double>(writer.stored()) > most) {
    return as_it_is(Status::NotFound(fmt::format(
        "its content stores in more than {:.0f}% of its size", kGzipContentMustSave * 100)));
  }
  // What follows the stream (the finder refuses bytes after its member).
  while (!file.done()) {
    auto bytes = file.Next();
    if (bytes.status().IsNotFound()) return as_it_is(bytes.status());
    TBFS_RETURN_IF_ERROR(bytes.status());
  }
  auto recipe = file.Finish();
  if (!recipe.ok()) return as_it_is(recipe.status());
  if (content != recipe->content_bytes) {
    return Status::Aborted(path + " changed while it was copied (its content is another size)");
  }
  // The content stored is the content the recipe was found for: then the
  // recipe proves that a remaker makes the file from what the store holds
  // (store/gzip_recipe.h), and the read-back checks the content alone.
  const Hash128 ch = content_hash.Digest();
  if (!(ch == file.ContentDigest())) {
    return as_it_is(Status::NotFound("its stream inflated twice gave two contents"));
  }
  g->set_header(recipe->header);
  g->set_level(recipe->level);
  g->set_mem_level(recipe->mem_level);
  for (uint64_t f : recipe->sync_flushes) g->add_sync_flushes(f);
  g->set_content_bytes(recipe->content_bytes);
  g->set_content_chunks(index);
  const Hash128 h = file.Digest();
  m.set_hash_low(h.low);
  m.set_hash_high(h.high);
  g->set_content_hash_low(ch.low);
  g->set_content_hash_high(ch.high);
  return CommitFile(store, logdir, rel_path, fd, st, options, writer, std::move(m));
}

}  // namespace

Result<storepb::Manifest> IngestFile(ColdStore& store, const std::string& logdir,
                                     const std::string& rel_path, int fd, const struct stat& st,
                                     uint64_t file_id, const IngestOptions& options) {
  const uint64_t size = static_cast<uint64_t>(st.st_size);
  const ChunkGeometry g = NewGeometry(size, options.chunk_bytes, options.head_chunk_bytes);
  const uint64_t chunks = g.Count();
  const std::string path = JoinPath(logdir, rel_path);
  std::vector<ChunkRun> data;
  TBFS_RETURN_IF_ERROR(FindDataRuns(fd, path, st, g, &data));
  storepb::Manifest m;
  TBFS_RETURN_IF_ERROR(StartManifest(fd, path, rel_path, st, file_id, g, options, &m));
  const bool dense = data.size() == 1 && data[0].first == 0 && data[0].end == chunks;
  if (options.gzip_by_content && dense && MayBeGzip(rel_path)) {
    auto stored = IngestGzipContent(store, logdir, rel_path, fd, st, m, options);
    if (!stored.status().IsNotFound()) return stored;
    spdlog::debug("{}: stored as it is: {}", path, stored.status().message());
  }

  const std::shared_ptr<const Dictionary> dict =
      DictionaryFor(store, rel_path, fd, path, data, g, options);
  if (dict != nullptr) m.set_dictionary(dict->id());
  uint64_t after = 0;  // the holes are what lies between the runs of data
  for (const ChunkRun& r : data) {
    if (r.first > after) {
      m.add_hole_runs(after);
      m.add_hole_runs(r.first);
    }
    after = r.end;
  }
  if (after < chunks) {
    m.add_hole_runs(after);
    m.add_hole_runs(chunks);
  }

  ChunkWriter writer(store, path, file_id, chunks, g.head, dict.get(), options);
  Xxh128 hash;
  size_t run = 0;
  uint64_t index = data.empty() ? 0 : data[0].first;
  // The chunks of the runs of data, in order.
  auto next = [&](std::string* raw, uint64_t* chunk_index) -> Result<bool> {
    while (run < data.size() && index >= data[run].end) {
      if (++run < data.size()) index = data[run].first;
    }
    if (run == data.size()) return false;
    const size_t len = g.Length(index);
    raw->resize(len);
    size_t got = 0;
    TBFS_RETURN_IF_ERROR(PreadFull(fd, raw->data(), len, g.Start(index), &got, path));
    if (got != len) return Status::Aborted(path + " shrank while it was copied");
    hash.Update(*raw);
    if (options.progress) options.progress->fetch_add(len, std::memory_order_relaxed);
    *chunk_index = index++;
    return true;
  };
  TBFS_RETURN_IF_ERROR(writer.WriteAll(next));
  const Hash128 h = hash.Digest();
  m.set_hash_low(h.low);
  m.set_hash_high(h.high);
  return CommitFile(store, logdir, rel_path, fd, st, options, writer, std::move(m));
}

}  // namespace tbfs::store
