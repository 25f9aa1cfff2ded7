#include "store/cold_store.h"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <xxhash.h>

#include <cstring>
#include <map>
#include <set>

#include "base/failpoint.h"
#include "base/fs_util.h"
#include "base/work_pool.h"
#include "fmt/format.h"
#include "store/file_io.h"
#include "store/format.h"
#include "store/maintenance.h"
#include "store/store_dir.h"
#include "tests/store/store_fixture.h"
#include "tests/store/store_internals.h"
#include "tests/store/trace_json.h"
#include "tests/test_util.h"

namespace tbfs::store {
namespace {

using testing::ReadBytes;
using testing::RunCommand;
using testing::TempDir;
using testing::WriteBytes;

using testing::kChunk;

// Deterministic content that compresses somewhat, like a trace.
std::string Content(size_t n, uint32_t seed) {
  std::string s(n, '\0');
  uint64_t x = seed * 0x9e3779b97f4a7c15ull + 1;
  for (size_t i = 0; i < n; ++i) {
    x ^= x << 13;
    x ^= x >> 7;
    x ^= x << 17;
    s[i] = (i % 7 == 0) ? static_cast<char>('a' + x % 26) : "{\"ts\": 1, \"dur\": 2}\n"[i % 21];
  }
  return s;
}

// Moves the file at logdir/rel into the store, as a migration does (the
// hot file stays), in chunks of kChunk, the first of `head` bytes (0:
// kChunk).
storepb::Manifest IngestExisting(ColdStore& store, const std::string& logdir,
                                 const std::string& rel, WorkPool* pool, uint32_t head = 0) {
  auto fd = OpenFile(JoinPath(logdir, rel), O_RDONLY);
  EXPECT_TRUE(fd.ok());
  struct stat st;
  ::fstat(fd->get(), &st);
  IngestOptions io;
  io.chunk_bytes = kChunk;
  io.head_chunk_bytes = head;
  io.level = 3;
  io.pool = pool;
  auto m = IngestFile(store, logdir, rel, fd->get(), st, store.NewFileId(), io);
  EXPECT_TRUE(m.ok()) << m.status().ToString();
  return m.ok() ? m.value() : storepb::Manifest();
}

// Writes `bytes` at logdir/rel (mode 0640), then IngestExisting.
storepb::Manifest IngestInto(ColdStore& store, const std::string& logdir, const std::string& rel,
                             const std::string& bytes, WorkPool* pool, uint32_t head = 0) {
  const std::string path = JoinPath(logdir, rel);
  WriteBytes(path, bytes);
  ::chmod(path.c_str(), 0640);
  return IngestExisting(store, logdir, rel, pool, head);
}

class StoreTest : public NewStoreTest {
 protected:
  storepb::Manifest Ingest(const std::string& rel, const std::string& bytes, uint32_t head = 0) {
    return IngestInto(*store_, dir_.path(), rel, bytes, &pool_, head);
  }
  uint32_t FormatVersion() { return StoreInternals::FormatVersion(*store_); }
  // m read back whole, chunk by chunk, from its store; and written out.
  void ExpectReadsBack(const storepb::Manifest& m, const std::string& bytes) {
    ChunkCodec codec;
    std::string all, raw;
    for (uint64_t i = 0; i < m.chunks(); ++i) {
      ASSERT_TRUE(store_->ReadChunk(m, i, &codec, &raw).ok()) << m.path() << " chunk " << i;
      all += raw;
    }
    EXPECT_TRUE(all == bytes) << m.path();
    EXPECT_TRUE(VerifyStoredFile(*store_, m, &pool_).ok()) << m.path();
    MaterializeOptions mo;
    mo.pool = &pool_;
    std::filesystem::create_directories(dir_ / "out");
    const std::string out = "o" + std::to_string(m.file_id());
    ASSERT_TRUE(MaterializeFile(*store_, m, dir_ / "out", out, mo).ok()) << m.path();
    EXPECT_TRUE(ReadBytes(dir_ / ("out/" + out)) == bytes) << m.path();
  }

  WorkPool pool_{2};
};

TEST_F(StoreTest, RoundTripsAreByteIdenticalAtChunkBorders) {
  for (size_t size : {size_t{0}, size_t{1}, size_t{kChunk - 1}, size_t{kChunk}, size_t{kChunk + 1},
                      size_t{3 * kChunk + 17}}) {
    std::string rel = "run/t" + std::to_string(size) + ".pt.trace.json";
    std::string bytes = Content(size, static_cast<uint32_t>(size));
    storepb::Manifest m = Ingest(rel, bytes);
    EXPECT_EQ(m.size(), size);
    EXPECT_EQ(m.chunks(), ChunkCount(size, kChunk));
    EXPECT_TRUE(VerifyStoredFile(*store_, m, &pool_).ok());
    MaterializeOptions mo;
    mo.pool = &pool_;
    std::string out = dir_ / ("out/" + rel);
    std::filesystem::create_directories(dir_ / "out");
    ASSERT_TRUE(MaterializeFile(*store_, m, dir_ / "out", rel, mo).ok()) << size;
    EXPECT_EQ(ReadBytes(out), bytes) << size;
    struct stat st;
    ASSERT_EQ(::stat(out.c_str(), &st), 0);
    EXPECT_EQ(st.st_mode & 07777, 0640u);
    EXPECT_EQ(static_cast<int64_t>(st.st_mtim.tv_sec) * 1'000'000'000 + st.st_mtim.tv_nsec,
              m.mtime_ns());
  }
}

TEST_F(StoreTest, HundredMegabyteFileRoundTrips) {
  std::string bytes = Content(100u << 20, 99);
  storepb::Manifest m = Ingest("big.pt.trace.json", bytes);
  EXPECT_LT(m.stored_bytes(), m.size());
  MaterializeOptions mo;
  mo.pool = &pool_;
  ASSERT_TRUE(MaterializeFile(*store_, m, dir_.path(), "big.out", mo).ok());
  EXPECT_TRUE(ReadBytes(dir_ / "big.out") == bytes);
}

TEST_F(StoreTest, RangeReadsAcrossChunkBordersAreExact) {
  std::string bytes = Content(5 * kChunk + 123, 5);
  storepb::Manifest m = Ingest("r.trace.json", bytes);
  ChunkCodec codec;
  std::string buf(3 * kChunk, '\0');
  for (auto [off, len] : std::vector<std::pair<uint64_t, size_t>>{{0, 1},
                                                                  {kChunk - 1, 2},
                                                                  {kChunk - 10, kChunk + 20},
                                                                  {2 * kChunk, kChunk},
                                                                  {kChunk / 2, 3 * kChunk},
                                                                  {5 * kChunk + 100, 1000},
                                                                  {bytes.size(), 10}}) {
    size_t got = 0;
    ASSERT_TRUE(store_->ReadRange(m, off, len, buf.data(), &got, &codec).ok());
    size_t want = off >= bytes.size() ? 0 : std::min<size_t>(len, bytes.size() - off);
    ASSERT_EQ(got, want) << off;
    EXPECT_EQ(std::string_view(buf.data(), got), std::string_view(bytes).substr(off, want)) << off;
  }
}

// Format 7: chunk 0 of a file longer than the head holds only the head; the
// chunks after it are whole chunks from there. Reads at every border of
// both kinds, the file written out again, and its check, are exact.
TEST_F(StoreTest, AFileLongerThanTheHeadHasAShortChunkZeroAndReadsBackAtEveryBorder) {
  constexpr uint32_t kHead = kChunk / 4;
  for (size_t size : {size_t{kHead - 1}, size_t{kHead}, size_t{kHead + 1}, size_t{kHead + kChunk},
                      size_t{kHead + kChunk + 1}, size_t{3 * kChunk + 17}}) {
    const std::string rel = "run/h" + std::to_string(size) + ".pt.trace.json";
    const std::string bytes = Content(size, static_cast<uint32_t>(size) + 1);
    const storepb::Manifest m = Ingest(rel, bytes, kHead);
    const bool headed = size > kHead;
    EXPECT_EQ(m.head_chunk_bytes(), headed ? kHead : 0u) << size;
    EXPECT_EQ(m.chunks(), headed ? 1 + ChunkCount(size - kHead, kChunk) : 1) << size;
    EXPECT_TRUE(WellFormed(m)) << size;
    EXPECT_EQ(ChunkLength(m, 0), std::min<size_t>(size, kHead)) << size;
    ExpectReadsBack(m, bytes);
    ChunkCodec codec;
    std::string buf(3 * kChunk, '\0');
    for (uint64_t border :
         {uint64_t{kHead}, uint64_t{kHead} + kChunk, uint64_t{kHead} + 2 * kChunk}) {
      for (auto [off, len] : std::vector<std::pair<uint64_t, size_t>>{
               {border - 1, 2}, {border - 10, kChunk + 20}, {border, 1}, {border - 1, 1}}) {
        if (off >= size) continue;
        size_t got = 0;
        ASSERT_TRUE(store_->ReadRange(m, off, len, buf.data(), &got, &codec).ok());
        const size_t want = std::min<size_t>(len, size - off);
        ASSERT_EQ(got, want) << size << " at " << off;
        EXPECT_EQ(std::string_view(buf.data(), got), std::string_view(bytes).substr(off, want))
            << size << " at " << off;
      }
    }
  }
  auto report = Fsck(*store_, &pool_, nullptr);
  ASSERT_TRUE(report.ok());
  EXPECT_TRUE(report->clean());
}

// A store takes format 7 with its first file that has a head chunk (a tbfs
// that reads 6 would take chunk 0 for a whole one), not before; files of
// both shapes read back side by side.
TEST_F(StoreTest, TheFirstFileWithAHeadChunkMakesTheStoreFormat7AndOldFilesStillRead) {
  const std::string a = Content(3 * kChunk - 5, 21), b = Content(3 * kChunk - 5, 22);
  const storepb::Manifest old_shape = Ingest("run/a.pt.trace.json", a, 0);
  const storepb::Manifest small = Ingest("run/s.pt.trace.json", Content(100, 2), kChunk / 4);
  EXPECT_EQ(old_shape.head_chunk_bytes(), 0u);
  EXPECT_EQ(old_shape.chunks(), 3u);
  EXPECT_LT(FormatVersion(), kFormatVersionHead);
  const storepb::Manifest headed = Ingest("run/b.pt.trace.json", b, kChunk / 4);
  EXPECT_EQ(headed.chunks(), 4u);
  EXPECT_EQ(FormatVersion(), kFormatVersionHead);
  store_.reset();
  OpenOptions o;
  store_ = std::move(ColdStore::Open(dir_ / ".tbfs", o)).value();
  ExpectReadsBack(old_shape, a);
  ExpectReadsBack(headed, b);
}

// A file whose chunks hold numbers as differences makes the store format 8
// (a tbfs that reads 7 refuses it rather than failing those chunks); a
// file with none leaves the format as it was. Both read back after an open.
TEST_F(StoreTest, TheFirstFileWithNumbersAsDifferencesMakesTheStoreFormat8) {
  std::string noise(3 * kChunk, '\0');
  uint64_t x = 88172645463325252ull;
  for (char& c : noise) {
    x ^= x << 13, x ^= x >> 7, x ^= x << 17;
    c = static_cast<char>(x);
  }
  const storepb::Manifest plain = Ingest("run/noise.pt.trace.json", noise);
  EXPECT_EQ(plain.codec(), kCodecZstdNoNumbers);
  EXPECT_LT(FormatVersion(), kFormatVersionNumbers);
  const std::string trace = TraceJson(3 * kChunk + 17, 4);
  const storepb::Manifest numbers = Ingest("run/t.pt.trace.json", trace);
  EXPECT_EQ(numbers.codec(), kCodecZstdNumbers);
  EXPECT_EQ(FormatVersion(), kFormatVersionNumbers);
  store_.reset();
  store_ = std::move(ColdStore::Open(dir_ / ".tbfs", OpenOptions{})).value();
  ExpectReadsBack(plain, noise);
  ExpectReadsBack(numbers, trace);
}

// A head chunk in a sparse file: the holes are found and kept in the
// geometry's terms, on either side of the head's border.
TEST_F(StoreTest, ASparseFileWithAHeadChunkKeepsItsHolesAndBytes) {
  constexpr uint32_t kHead = kChunk / 4;
  const std::string path = dir_ / "run/sp.pt.trace.json";
  std::filesystem::create_directories(dir_ / "run");
  std::string bytes(kHead + 6 * kChunk, '\0');
  const std::string mid = Content(100, 4), tail = Content(50, 5);
  bytes.replace(kHead + 2 * kChunk + 7, mid.size(), mid);        // chunk 3 has data
  bytes.replace(bytes.size() - tail.size(), tail.size(), tail);  // and chunk 6
  {
    UniqueFd fd(::open(path.c_str(), O_CREAT | O_WRONLY | O_TRUNC | O_CLOEXEC, 0640));
    ASSERT_TRUE(fd.valid());
    ASSERT_EQ(::ftruncate(fd.get(), static_cast<off_t>(bytes.size())), 0);
    ASSERT_EQ(::pwrite(fd.get(), mid.data(), mid.size(), kHead + 2 * kChunk + 7),
              static_cast<ssize_t>(mid.size()));
    ASSERT_EQ(::pwrite(fd.get(), tail.data(), tail.size(),
                       static_cast<off_t>(bytes.size() - tail.size())),
              static_cast<ssize_t>(tail.size()));
  }
  const storepb::Manifest m =
      IngestExisting(*store_, dir_.path(), "run/sp.pt.trace.json", &pool_, kHead);
  EXPECT_EQ(m.head_chunk_bytes(), kHead);
  EXPECT_EQ(m.chunks(), 7u);
  EXPECT_EQ(std::vector<uint64_t>(m.hole_runs().begin(), m.hole_runs().end()),
            (std::vector<uint64_t>{0, 3, 4, 6}));
  EXPECT_EQ(DataBytes(m), 2 * uint64_t{kChunk});
  ExpectReadsBack(m, bytes);
  struct stat out;
  ASSERT_EQ(::stat((dir_ / ("out/o" + std::to_string(m.file_id()))).c_str(), &out), 0);
  EXPECT_LT(static_cast<uint64_t>(out.st_blocks) * 512, bytes.size() / 2) << "holes filled";
}

TEST_F(StoreTest, NamespaceListsDirectChildrenOnly) {
  Ingest("a/b/one.pt.trace.json", "1");
  Ingest("a/b/two.pt.trace.json", "2");
  Ingest("a/c/three.pt.trace.json", "3");
  Ingest("ab/four.pt.trace.json", "4");
  std::vector<ChildEntry> kids;
  ASSERT_TRUE(store_->ListChildren("a", &kids).ok());
  ASSERT_EQ(kids.size(), 2u);
  EXPECT_EQ(kids[0].name, "b");
  EXPECT_EQ(kids[0].entry.kind(), storepb::Entry::DIR);
  EXPECT_EQ(kids[1].name, "c");
  ASSERT_TRUE(store_->ListChildren("a/b", &kids).ok());
  ASSERT_EQ(kids.size(), 2u);
  EXPECT_EQ(kids[0].entry.kind(), storepb::Entry::FILE);
  ASSERT_TRUE(store_->ListChildren("", &kids).ok());
  EXPECT_EQ(kids.size(), 2u);  // a, ab
  auto m = store_->Lookup("a/c/three.pt.trace.json");
  ASSERT_TRUE(m.ok());
  EXPECT_EQ(m->size(), 1u);
  EXPECT_TRUE(store_->Lookup("a/c/none").status().IsNotFound());
}

// A manifest read before a rename (or a journal's stub) names a path that
// another file may hold now: dropping it removes its own chunks and
// manifest, never the other file's entry.
TEST_F(StoreTest, DroppingAFileLeavesAnEntryThatNamesAnotherFile) {
  storepb::Manifest old = Ingest("a/x.pt.trace.json", "old");
  WriteBatch rename;
  auto none = [](const std::string&, struct stat*) { return false; };
  ASSERT_TRUE(store_->Rename(&rename, old.path(), "a/y.pt.trace.json", none).ok());
  ASSERT_TRUE(store_->Commit(rename, true).ok());
  storepb::Manifest now = Ingest("a/x.pt.trace.json", "new");  // the path, taken again
  for (bool retire : {false, true}) {
    WriteBatch drop;
    storepb::Manifest stale = old;  // still says a/x
    ASSERT_TRUE(store_->Drop(&drop, stale, retire).ok());
    ASSERT_TRUE(store_->Commit(drop, true).ok());
    auto at_x = store_->Lookup("a/x.pt.trace.json");
    ASSERT_TRUE(at_x.ok()) << at_x.status().ToString();
    EXPECT_EQ(at_x->file_id(), now.file_id());
  }
  // The dropped file's own entry (at a/y) names it: that one goes.
  auto moved = store_->GetManifest(old.file_id());
  EXPECT_TRUE(moved.status().IsNotFound());
  WriteBatch drop;
  storepb::Manifest at_y = old;
  at_y.set_path("a/y.pt.trace.json");
  ASSERT_TRUE(store_->RemoveFile(&drop, at_y).ok());
  ASSERT_TRUE(store_->Commit(drop, true).ok());
  EXPECT_TRUE(store_->GetEntry("a/y.pt.trace.json").status().IsNotFound());
}

TEST_F(StoreTest, ASparseFileGoesWithADeletePerStoredChunkNotPerHole) {
  // 64 GiB that store two chunks: removing or retiring it writes deletes
  // for those two (and its copy), not for a million holes.
  const std::string path = dir_ / "run/sparse.pt.trace.json";
  std::filesystem::create_directories(dir_ / "run");
  WriteBytes(path, Content(100, 3));
  ASSERT_EQ(::truncate(path.c_str(), int64_t{64} << 30), 0);
  {
    auto fd = OpenFile(path, O_RDWR);
    ASSERT_TRUE(fd.ok());
    ASSERT_EQ(::pwrite(fd->get(), "tail", 4, (int64_t{64} << 30) - 4), 4);
  }
  std::vector<storepb::Manifest> files;
  for (const char* rel : {"run/a.pt.trace.json", "run/b.pt.trace.json"}) {
    ASSERT_EQ(::link(path.c_str(), (dir_ / rel).c_str()), 0);
    auto fd = OpenFile(dir_ / rel, O_RDONLY);
    ASSERT_TRUE(fd.ok());
    struct stat st;
    ::fstat(fd->get(), &st);
    IngestOptions io;
    io.chunk_bytes = kChunk;
    io.level = 3;
    io.pool = &pool_;
    auto m = IngestFile(*store_, dir_.path(), rel, fd->get(), st, store_->NewFileId(), io);
    ASSERT_TRUE(m.ok()) << m.status().ToString();
    ASSERT_EQ(m->chunks(), (uint64_t{64} << 30) / kChunk);
    files.push_back(*m);
  }
  WriteBatch remove;
  ASSERT_TRUE(store_->RemoveFile(&remove, files[0]).ok());
  ASSERT_TRUE(store_->Retire(&remove, files[1]).ok());
  EXPECT_LT(remove.ops().size(), 16u);
  ASSERT_TRUE(store_->Commit(remove, true).ok());
  WriteBatch drop;
  ASSERT_TRUE(store_->DropRetired(&drop, files[1].file_id()).ok());
  EXPECT_LT(drop.ops().size(), 8u);
  ASSERT_TRUE(store_->Commit(drop, true).ok());
  uint64_t left = 0;
  ASSERT_TRUE(store_
                  ->ForEachChunkKey([&](uint64_t, uint64_t) {
                    left++;
                    return true;
                  })
                  .ok());
  EXPECT_EQ(left, 0u);
}

// Two handles of one retired file closed at once: both reapers find it
// retired, one drops it first. The other has nothing left to do (was
// NotFound, an error in the mount's log).
TEST_F(StoreTest, ARetiredFileDroppedByAnotherReaperIsNothingToDo) {
  storepb::Manifest a = Ingest("run/a.pt.trace.json", Content(3 * kChunk, 1));
  WriteBatch retire;
  ASSERT_TRUE(store_->Retire(&retire, a).ok());
  ASSERT_TRUE(store_->Commit(retire, true).ok());
  WriteBatch first, second;
  ASSERT_TRUE(store_->DropRetired(&first, a.file_id()).ok());
  ASSERT_TRUE(store_->Commit(first, true).ok());
  Status again = store_->DropRetired(&second, a.file_id());
  EXPECT_TRUE(again.ok()) << again.ToString();
  EXPECT_TRUE(second.empty());
}

TEST_F(StoreTest, ADamagedOrStrayRetiredMarkDeletesOnlyWhatItShould) {
  storepb::Manifest a = Ingest("run/a.pt.trace.json", Content(3 * kChunk, 1));
  storepb::Manifest b = Ingest("run/b.pt.trace.json", Content(2 * kChunk, 2));
  WriteBatch retire;
  ASSERT_TRUE(store_->Retire(&retire, a).ok());
  ASSERT_TRUE(store_->Commit(retire, true).ok());
  // a's mark damaged into a run of 2^63 chunks, and a mark for b, which the
  // store still holds.
  WriteBatch damage;
  damage.Put(Space::kMeta, RetiredKey(a.file_id()), EncodeId(0) + EncodeId(uint64_t{1} << 63));
  damage.Put(Space::kMeta, RetiredKey(b.file_id()), "");
  ASSERT_TRUE(StoreInternals::Of(*store_).Commit(damage, true).ok());
  for (const storepb::Manifest* m : {&a, &b}) {
    WriteBatch drop;
    ASSERT_TRUE(store_->DropRetired(&drop, m->file_id()).ok());
    EXPECT_LT(drop.ops().size(), 8u) << m->path();
    ASSERT_TRUE(store_->Commit(drop, true).ok());
  }
  std::vector<uint64_t> retired;
  ASSERT_TRUE(store_->ListRetired(&retired).ok());
  EXPECT_TRUE(retired.empty());
  EXPECT_TRUE(VerifyStoredFile(*store_, b, &pool_).ok());  // b whole
  ASSERT_TRUE(store_
                  ->ForEachChunkKey([&](uint64_t id, uint64_t) {
                    EXPECT_NE(id, a.file_id());  // a gone
                    return true;
                  })
                  .ok());
}

TEST_F(StoreTest, CorruptChunkIsAnErrorAndFsckNamesTheFile) {
  std::string bytes = Content(4 * kChunk, 8);
  storepb::Manifest m = Ingest("run/bad.pt.trace.json", bytes);
  Ingest("run/good.pt.trace.json", Content(kChunk, 9));
  // Flip one payload byte of chunk 2, as bit rot would.
  std::string value;
  ASSERT_TRUE(tbfs::store::StoreInternals::Of(*store_)
                  .Get(Space::kChunks, ChunkKey(m.file_id(), 2), &value)
                  .ok());
  value[value.size() / 2] ^= 0x01;
  WriteBatch b;
  b.Put(Space::kChunks, ChunkKey(m.file_id(), 2), value);
  ASSERT_TRUE(store_->Commit(b, true).ok());

  ChunkCodec codec;
  std::string buf(kChunk, '\0');
  size_t got = 0;
  Status st = store_->ReadRange(m, 2 * kChunk + 5, 10, buf.data(), &got, &codec);
  EXPECT_TRUE(st.IsCorruption()) << st.ToString();
  EXPECT_NE(st.message().find("run/bad.pt.trace.json"), std::string::npos);
  EXPECT_TRUE(store_->ReadRange(m, 0, kChunk, buf.data(), &got, &codec).ok());  // chunk 0 is fine

  auto report = Fsck(*store_, &pool_, nullptr);
  ASSERT_TRUE(report.ok());
  ASSERT_EQ(report->damaged.size(), 1u);
  EXPECT_EQ(report->damaged[0].first, "run/bad.pt.trace.json");
  EXPECT_FALSE(report->clean());
}

// A byte flipped in a blob file on disk: the engine's own check of the
// value fails first ("Blob CRC mismatch"), and the error names the file and
// the chunk (it named only the store).
TEST_F(StoreTest, AByteFlippedInABlobFileIsCorruptionNamingTheFileAndChunk) {
  storepb::Manifest m = Ingest("run/rot.pt.trace.json", Content(8 * kChunk, 11));
  ASSERT_TRUE(store_->Flush().ok());
  int blobs = 0;
  for (const auto& e : std::filesystem::directory_iterator(dir_ / ".tbfs")) {
    if (e.path().extension() != ".blob") continue;
    blobs++;
    UniqueFd fd(::open(e.path().c_str(), O_RDWR | O_CLOEXEC));
    ASSERT_TRUE(fd.valid());
    char c;
    const off_t at = static_cast<off_t>(e.file_size() / 2);
    ASSERT_EQ(::pread(fd.get(), &c, 1, at), 1);
    c ^= 0x10;
    ASSERT_EQ(::pwrite(fd.get(), &c, 1, at), 1);
  }
  ASSERT_EQ(blobs, 1);
  ChunkCodec codec;
  std::string raw;
  int failed = 0;
  for (uint64_t i = 0; i < m.chunks(); ++i) {
    Status st = store_->ReadChunk(m, i, &codec, &raw);
    if (st.ok()) continue;
    failed++;
    EXPECT_TRUE(st.IsCorruption()) << st.ToString();
    EXPECT_NE(st.message().find(fmt::format("run/rot.pt.trace.json: chunk {}: ", i)),
              std::string::npos)
        << st.message();
  }
  EXPECT_EQ(failed, 1);
}

TEST_F(StoreTest, UnknownFormatVersionIsRefused) {
  storepb::StoreInfo info = store_->info();
  info.set_format_version(42);
  WriteBatch b;
  b.Put(Space::kMeta, kMetaInfoKey, info.SerializeAsString());
  ASSERT_TRUE(store_->Commit(b, true).ok());
  store_.reset();
  // What a newer tbfs wrote is left as it was: the refused writer wrote
  // the engine's MANIFEST and OPTIONS anew, and deleted the old ones.
  auto files = [&] {
    std::map<std::string, std::string> out;
    for (const auto& e : std::filesystem::directory_iterator(dir_ / ".tbfs")) {
      if (e.is_regular_file()) out[e.path().filename()] = testing::ReadBytes(e.path());
    }
    return out;
  };
  const auto before = files();
  auto s = ColdStore::Open(dir_ / ".tbfs", OpenOptions());
  ASSERT_FALSE(s.ok());
  EXPECT_EQ(s.status().code(), Code::kNotSupported);
  EXPECT_NE(s.status().message().find("format version 42"), std::string::npos)
      << s.status().message();
  const auto after = files();
  EXPECT_TRUE(after == before) << "the refused writer changed the store";
}

TEST_F(StoreTest, SecondWriterIsBusy) {
  auto second = ColdStore::Open(dir_ / ".tbfs", OpenOptions());
  ASSERT_FALSE(second.ok());
  EXPECT_EQ(second.status().code(), Code::kBusy) << second.status().ToString();
  OpenOptions ro;
  ro.read_only = true;
  EXPECT_TRUE(ColdStore::Open(dir_ / ".tbfs", ro).ok());  // readers may look
}

TEST(StoreOpen, MissingStoreIsNotFoundAndAForeignFolderIsRefused) {
  TempDir dir;
  EXPECT_TRUE(ColdStore::Open(dir / "none", OpenOptions()).status().IsNotFound());
  WriteBytes(dir / "foreign/data.txt", "mine");
  OpenOptions o;
  o.create_if_missing = true;
  auto s = ColdStore::Open(dir / "foreign", o);
  ASSERT_FALSE(s.ok());
  EXPECT_EQ(ReadBytes(dir / "foreign/data.txt"), "mine");
}

// An empty folder named as the store by a command that does not make one
// (`tbfs restore --store EMPTY --apply`) was made private (0755 -> 0700):
// a command found no store there and changed the folder anyway.
TEST(StoreOpen, AnEmptyFolderThatIsNotToBecomeAStoreIsLeftAsItIs) {
  TempDir dir;
  const std::string empty = dir / "empty";
  ASSERT_EQ(::mkdir(empty.c_str(), 0755), 0);
  ASSERT_EQ(::chmod(empty.c_str(), 0755), 0);
  OpenOptions o;  // a writer, not creating
  EXPECT_FALSE(ColdStore::Open(empty, o).ok());
  struct stat st;
  ASSERT_EQ(::stat(empty.c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 07777, 0755u);
  EXPECT_TRUE(std::filesystem::is_empty(empty));
  o.create_if_missing = true;  // one that makes it: private, and a store
  EXPECT_TRUE(ColdStore::Open(empty, o).ok());
  ASSERT_EQ(::stat(empty.c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 07777, 0700u);
}

// A writer refused its store (none there and none to make, a folder of
// other files, a damaged one) still made LOGDIR/.tbfs and the logdir's
// lock in it: a command that did nothing changed the logdir.
TEST(StoreOpen, AWriterRefusedItsStoreLeavesTheLogdirAsItWas) {
  TempDir dir;
  const std::string logdir = dir / "logdir";
  WriteBytes(logdir + "/run/events.out.tfevents.1.host", "");
  WriteBytes(dir / "foreign/data.txt", "mine");
  WriteBytes(dir / "damaged/000012.blob", "engine bytes");
  ASSERT_EQ(::mkdir((dir / "empty").c_str(), 0755), 0);
  WriteBytes(dir / "afile", "mine");
  ASSERT_EQ(::symlink((dir / "nowhere").c_str(), (dir / "dangling").c_str()), 0);
  struct Case {
    std::string store;
    bool create;
  };
  for (const Case& c :
       {Case{logdir + "/.tbfs", false}, Case{dir / "empty", false}, Case{dir / "foreign", true},
        Case{dir / "foreign", false}, Case{dir / "damaged", true}, Case{dir / "damaged", false},
        Case{dir / "afile/store", true}, Case{dir / "dangling", true},
        Case{dir / "dangling/store", true}}) {
    OpenOptions o;
    o.logdir = logdir;
    o.holder = "test";
    o.create_if_missing = c.create;
    auto s = ColdStore::Open(c.store, o);
    EXPECT_FALSE(s.ok()) << c.store;
    EXPECT_FALSE(std::filesystem::exists(logdir + "/.tbfs"))
        << c.store << (c.create ? " (creating)" : "") << ": " << s.status().ToString();
    std::filesystem::remove_all(logdir + "/.tbfs");
  }
  EXPECT_EQ(ReadBytes(dir / "foreign/data.txt"), "mine");
  EXPECT_EQ(ReadBytes(dir / "damaged/000012.blob"), "engine bytes");
}

// A salvage or fsck killed before it removed its scratch folder (hard
// links to every engine file, inside the store) held their space for
// good, deleted chunks included: no later command removed it. The next
// writer does now, and leaves one still in use (held) alone.
TEST(StoreOpen, AScratchFolderLeftByAKilledSalvageGoesWithTheNextWriter) {
  TempDir dir;
  const std::string store = dir / "store";
  ASSERT_TRUE(ColdStore::Open(store, {.create_if_missing = true}).ok());
  const std::string stale = store + "/salvage.k1LL3d", busy = store + "/salvage.busy01";
  for (const std::string& scratch : {stale, busy}) {
    ASSERT_EQ(::mkdir(scratch.c_str(), 0700), 0);
    ASSERT_EQ(::link((store + "/CURRENT").c_str(), (scratch + "/CURRENT").c_str()), 0);
    WriteBytes(scratch + "/000001.log", "engine bytes");
    WriteBytes(scratch + "/lost+found/000002.sst", "set aside by the engine");
    WriteBytes(scratch + "/" + kScratchMarker, "");
  }
  // Not made by tbfs (no marker): stays, whatever its name.
  WriteBytes(store + "/salvage.mine/notes.txt", "mine");
  UniqueFd held(::open(busy.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC));
  ASSERT_EQ(::flock(held.get(), LOCK_EX | LOCK_NB), 0);
  OpenOptions reader;
  reader.read_only = true;
  ASSERT_TRUE(ColdStore::Open(store, reader).ok());
  EXPECT_TRUE(std::filesystem::exists(stale));  // a reader changes nothing
  ASSERT_TRUE(ColdStore::Open(store, {}).ok());
  EXPECT_FALSE(std::filesystem::exists(stale));
  EXPECT_TRUE(std::filesystem::exists(busy + "/CURRENT"));
  held = UniqueFd();
  RemoveStaleScratch(store);
  EXPECT_FALSE(std::filesystem::exists(busy));
  EXPECT_TRUE(ColdStore::Open(store, {}).ok());
  EXPECT_EQ(ReadBytes(store + "/salvage.mine/notes.txt"), "mine");
}

// A writer killed while it made a new store (the engine's files half
// written, or the store without its format record, or that record only in
// the engine's log) left a folder no command would open ("damaged"). Now
// the creation is marked until it is whole: a reader sees no store, and
// the next writer makes it anew and works.
TEST(StoreOpen, ACreationCutShortIsMadeAnewByTheNextWriter) {
  for (const char* point : {"store.create.engine", "store.create.record"}) {
    for (const bool without_current : {false, true}) {
      const std::string what = std::string(point) + (without_current ? " (no CURRENT)" : "");
      TempDir dir;
      const std::string logdir = dir / "logdir", store = logdir + "/.tbfs";
      WriteBytes(logdir + "/run/events.out.tfevents.1.host", "");
      WriteBytes(logdir + "/run/host.pt.trace.json", Content(200 << 10, 3));
      auto crashed = RunCommand(std::string("TBFS_FAILPOINT=") + point + " " + TBFS_BINARY +
                                " migrate " + logdir + " --older-than 0 --apply >/dev/null 2>&1");
      ASSERT_EQ(crashed.exit_code, kFailpointExitCode) << what << ": failpoint not reached";
      if (without_current) {
        ASSERT_EQ(::unlink((store + "/CURRENT").c_str()), 0);
      }
      OpenOptions ro;
      ro.read_only = true;
      auto reader = ColdStore::Open(store, ro);
      EXPECT_TRUE(reader.status().IsNotFound()) << what << ": " << reader.status().ToString();
      auto again = RunCommand(std::string(TBFS_BINARY) + " migrate " + logdir +
                              " --older-than 0 --apply 2>&1");
      EXPECT_EQ(again.exit_code, 0) << what << ": " << again.out;
      EXPECT_EQ(RunCommand(std::string(TBFS_BINARY) + " fsck " + logdir + " 2>&1").exit_code, 0)
          << what;
      EXPECT_EQ(RunCommand(std::string(TBFS_BINARY) + " restore " + logdir + " --all --apply 2>&1")
                    .exit_code,
                0)
          << what;
      EXPECT_EQ(ReadBytes(logdir + "/run/host.pt.trace.json"), Content(200 << 10, 3)) << what;
    }
  }
}

TEST(Chunk, RawFallbackAndChecksums) {
  ChunkCodec codec;
  std::string random(4096, '\0');
  uint32_t x = 1;
  for (char& c : random) c = static_cast<char>((x = x * 1103515245 + 12345) >> 16);
  std::string value, out;
  codec.Encode(random, 3, {7, 2}, &value);
  EXPECT_EQ(static_cast<uint8_t>(value[0]), kChunkRaw);
  ASSERT_TRUE(codec.Decode(value, random.size(), {7, 2}, &out).ok());
  EXPECT_EQ(out, random);
  EXPECT_TRUE(codec.Decode(value, random.size() + 1, {7, 2}, &out).IsCorruption());
  // The same bytes read as another file's chunk, or another index: refused.
  EXPECT_TRUE(codec.Decode(value, random.size(), {8, 2}, &out).IsCorruption());
  EXPECT_TRUE(codec.Decode(value, random.size(), {7, 3}, &out).IsCorruption());
  value.back() ^= 1;
  EXPECT_TRUE(codec.Decode(value, random.size(), {7, 2}, &out).IsCorruption());
  EXPECT_TRUE(codec.Decode("xy", 2, {7, 2}, &out).IsCorruption());
  // A chunk of a file with a head chunk (format 7) read by a tbfs that
  // knows none would be read at the wrong offset: its check fails instead.
  const std::string json(4096, '{');
  codec.Encode(json, 3, {7, 2, 16384}, &value);
  ASSERT_TRUE(codec.Decode(value, json.size(), {7, 2, 16384}, &out).ok());
  EXPECT_EQ(out, json);
  EXPECT_TRUE(codec.Decode(value, json.size(), {7, 2}, &out).IsCorruption());
  EXPECT_TRUE(codec.Decode(value, json.size(), {7, 2, 8192}, &out).IsCorruption());
}

TEST_F(StoreTest, AChunkReadFromTheWrongKeyIsAnErrorNeverData) {
  std::string bytes = Content(4 * kChunk, 5);
  storepb::Manifest m = Ingest("run/t.pt.trace.json", bytes);
  // Chunk 2's value at chunk 3's key, as a damaged key in an SST file would.
  std::string value;
  ASSERT_TRUE(tbfs::store::StoreInternals::Of(*store_)
                  .Get(Space::kChunks, ChunkKey(m.file_id(), 2), &value)
                  .ok());
  WriteBatch b;
  b.Put(Space::kChunks, ChunkKey(m.file_id(), 3), value);
  ASSERT_TRUE(store_->Commit(b, true).ok());
  ChunkCodec codec;
  std::string raw;
  EXPECT_TRUE(store_->ReadChunk(m, 3, &codec, &raw).IsCorruption());
  auto fsck = Fsck(*store_, &pool_, nullptr);
  ASSERT_TRUE(fsck.ok());
  ASSERT_EQ(fsck->damaged.size(), 1u);
  EXPECT_EQ(fsck->damaged[0].first, "run/t.pt.trace.json");
}

TEST_F(StoreTest, NamesAreBytes) {
  const std::string rel = "run/bad-\xff\xfe.pt.trace.json";
  storepb::Manifest m = Ingest(rel, Content(3000, 1));
  auto found = store_->Lookup(rel);
  ASSERT_TRUE(found.ok()) << found.status().ToString();
  EXPECT_EQ(found->path(), rel);
  int seen = 0;
  ASSERT_TRUE(store_
                  ->ForEachManifest([&](const storepb::Manifest& x) {
                    seen += x.path() == rel;
                    return true;
                  })
                  .ok());
  EXPECT_EQ(seen, 1);
}

// A format-1 store, written record by record as tbfs 0.1 wrote it: its
// chunk checksums are not bound to their place.
void WriteFormat1Store(const std::string& dir, const std::string& rel, const std::string& bytes) {
  auto backend = OpenRocksBackend(dir, {.create_if_missing = true});
  ASSERT_TRUE(backend.ok());
  storepb::StoreInfo info;
  info.set_format_version(1);
  info.set_store_id("0000000000000001");
  info.set_chunk_bytes(kChunk);
  info.set_level(3);
  storepb::Manifest m;
  m.set_file_id(1);
  m.set_path(rel);
  m.set_size(bytes.size());
  m.set_mode(S_IFREG | 0644);
  m.set_chunk_bytes(kChunk);
  m.set_codec(kCodecZstd);
  m.set_chunks(ChunkCount(bytes.size(), kChunk));
  Hash128 h;
  {
    XXH128_hash_t x = XXH3_128bits(bytes.data(), bytes.size());
    h = {x.low64, x.high64};
  }
  m.set_hash_low(h.low);
  m.set_hash_high(h.high);
  WriteBatch b;
  b.Put(Space::kMeta, kMetaInfoKey, info.SerializeAsString());
  for (uint64_t i = 0; i < m.chunks(); ++i) {
    std::string raw = bytes.substr(i * kChunk, kChunk);
    std::string value(kChunkHeaderBytes, '\0');
    value[0] = static_cast<char>(kChunkRawV1);
    uint32_t len = static_cast<uint32_t>(raw.size());
    uint64_t hash = XXH3_64bits(raw.data(), raw.size());
    std::memcpy(value.data() + 1, &len, 4);
    std::memcpy(value.data() + 5, &hash, 8);
    b.Put(Space::kChunks, ChunkKey(1, i), value + raw);
    m.set_stored_bytes(m.stored_bytes() + value.size() + raw.size());
  }
  b.Put(Space::kManifests, EncodeId(1), m.SerializeAsString());
  storepb::Entry e;
  e.set_kind(storepb::Entry::FILE);
  e.set_file_id(1);
  b.Put(Space::kNamespace, EntryKey(rel), e.SerializeAsString());
  storepb::Entry d;
  d.set_kind(storepb::Entry::DIR);
  d.set_mode(S_IFDIR | 0755);
  b.Put(Space::kNamespace, EntryKey(ParentPath(rel)), d.SerializeAsString());
  ASSERT_TRUE((*backend)->Commit(b, true).ok());
}

TEST(Upgrade, AFormat1StoreIsReadAndUpgradedInPlace) {
  TempDir dir;
  const std::string rel = "run/t.pt.trace.json", bytes = Content(3 * kChunk + 100, 9);
  WriteFormat1Store(dir / "store", rel, bytes);
  WorkPool pool(2);
  {
    OpenOptions ro;
    ro.read_only = true;
    auto s = ColdStore::Open(dir / "store", ro);  // readers read it as it is
    ASSERT_TRUE(s.ok()) << s.status().ToString();
    EXPECT_EQ((*s)->info().format_version(), 1u);
    auto m = (*s)->Lookup(rel);
    ASSERT_TRUE(m.ok());
    EXPECT_TRUE(VerifyStoredFile(**s, *m, &pool).ok());
  }
  auto s = ColdStore::Open(dir / "store", {});  // a writer upgrades it
  ASSERT_TRUE(s.ok()) << s.status().ToString();
  EXPECT_EQ((*s)->info().format_version(), kNewStoreFormatVersion);
  auto m = (*s)->Lookup(rel);
  ASSERT_TRUE(m.ok());
  EXPECT_TRUE(VerifyStoredFile(**s, *m, &pool).ok());
  std::string value;
  ASSERT_TRUE(
      tbfs::store::StoreInternals::Of(**s).Get(Space::kChunks, ChunkKey(1, 0), &value).ok());
  EXPECT_EQ(static_cast<uint8_t>(value[0]), kChunkRaw);  // bound to its place now
  int copies = 0;  // and its manifest has its second copy with the chunks
  ASSERT_TRUE((*s)->ForEachManifestCopy([&](const storepb::Manifest& c) {
                    copies++;
                    EXPECT_EQ(c.SerializeAsString(), m->SerializeAsString());
                    return true;
                  })
                  .ok());
  EXPECT_EQ(copies, 1);
  MaterializeOptions mo;
  mo.pool = &pool;
  ASSERT_TRUE(MaterializeFile(**s, *m, dir.path(), "out.json", mo).ok());
  EXPECT_TRUE(ReadBytes(dir / "out.json") == bytes);
}

TEST(Format, EntryKeysMakeChildrenAPrefix) {
  EXPECT_EQ(EntryKey("a"), std::string("\0a", 2));
  EXPECT_EQ(EntryKey("a/b/c"), std::string("a/b\0c", 5));
  EXPECT_EQ(PathOfEntryKey(EntryKey("a/b/c")), "a/b/c");
  EXPECT_EQ(PathOfEntryKey(EntryKey("top")), "top");
  uint64_t id = 0, index = 0;
  ASSERT_TRUE(DecodeChunkKey(ChunkKey(258, 3), &id, &index));
  EXPECT_EQ(id, 258u);
  EXPECT_EQ(index, 3u);
  EXPECT_LT(ChunkKey(1, 0xffffffff), ChunkKey(2, 0));
}

TEST(Format, TreeKeysMakeAFoldersChildrenAPrefixLongerThanItsLink) {
  EXPECT_EQ(TreeLinkKey(0), std::string("/\0\0\0\0\0\0\0\0", 9));
  EXPECT_EQ(TreeKey(258, "b"), TreeLinkKey(258) + "b");
  EXPECT_TRUE(TreeKey(258, "b").starts_with(TreeLinkKey(258)));
  EXPECT_FALSE(TreeKey(259, "a").starts_with(TreeLinkKey(258)));
  std::string link;
  EXPECT_TRUE(ParseDirCopy(7, DirCopyValue(7, "x"), &link));
  EXPECT_EQ(link, "x");
  EXPECT_FALSE(ParseDirCopy(8, DirCopyValue(7, "x"), &link)) << "bound to its id";
  EXPECT_FALSE(ParseManifestCopy(7, DirCopyValue(7, "x"), &link)) << "never taken for a manifest";
}

// Issue 23: a folder rename costs the same whatever the folder holds: the
// batch that moves a folder of 300 cold files is the one that moves a
// folder of one, and every file is then found, listed and read at its new
// path, before and after the store is opened again.
TEST_F(StoreTest, AFolderRenameWritesTheSameRecordsWhateverItHolds) {
  Ingest("small/x.pt.trace.json", "x");
  std::map<std::string, std::string> big;
  for (int i = 0; i < 300; ++i) {
    const std::string rel = fmt::format("big/sub{}/t{:03}.pt.trace.json", i % 3, i);
    big[rel] = Content(100 + static_cast<size_t>(i), static_cast<uint32_t>(i));
    Ingest(rel, big[rel]);
  }
  auto none = [](const std::string&, struct stat*) { return false; };
  WriteBatch small, large;
  ASSERT_TRUE(store_->Rename(&small, "small", "small2", none).ok());
  ASSERT_TRUE(store_->Rename(&large, "big", "big2", none).ok());
  EXPECT_EQ(large.ops().size(), small.ops().size());
  EXPECT_LT(large.bytes(), 512u);
  ASSERT_TRUE(store_->Commit(small, true).ok());
  ASSERT_TRUE(store_->Commit(large, true).ok());
  auto check = [&] {
    ChunkCodec codec;
    for (const auto& [rel, bytes] : big) {
      const std::string now = "big2" + rel.substr(3);
      auto m = store_->Lookup(now);
      ASSERT_TRUE(m.ok()) << now << ": " << m.status().ToString();
      EXPECT_EQ(m->path(), now);
      EXPECT_EQ(store_->GetManifest(m->file_id())->path(), now);
      std::string got(bytes.size(), '\0');
      size_t n = 0;
      ASSERT_TRUE(store_->ReadRange(*m, 0, got.size(), got.data(), &n, &codec).ok());
      EXPECT_TRUE(got == bytes) << now;
      EXPECT_TRUE(store_->GetEntry(rel).status().IsNotFound()) << rel;
    }
    std::set<std::string> entries, manifests;
    ASSERT_TRUE(store_
                    ->ForEachEntry([&](const std::string& path, const storepb::Entry& e) {
                      if (e.kind() == storepb::Entry::FILE) entries.insert(path);
                      return true;
                    })
                    .ok());
    ASSERT_TRUE(store_
                    ->ForEachManifest([&](const storepb::Manifest& m) {
                      manifests.insert(m.path());
                      return true;
                    })
                    .ok());
    EXPECT_EQ(entries, manifests);
    EXPECT_EQ(entries.size(), big.size() + 1);
    EXPECT_TRUE(entries.count("small2/x.pt.trace.json"));
    std::vector<ChildEntry> kids;
    ASSERT_TRUE(store_->ListChildren("big2/sub1", &kids).ok());
    EXPECT_EQ(kids.size(), 100u);
    ASSERT_TRUE(store_->ListChildren("big", &kids).ok());
    EXPECT_TRUE(kids.empty());
    auto totals = store_->GetTotals();
    ASSERT_TRUE(totals.ok());
    EXPECT_EQ(totals->top_folder_bytes.count("big"), 0u) << "its bytes went with it";
    EXPECT_GT(totals->top_folder_bytes["big2"], 0u);
    auto fsck = Fsck(*store_, &pool_, nullptr);
    ASSERT_TRUE(fsck.ok());
    EXPECT_TRUE(fsck->clean());
  };
  check();
  // A file beneath it changes: the totals, counted since the rename, move
  // its bytes within big2 (its manifest as written still says big/...).
  auto m = store_->Lookup("big2/sub0/t000.pt.trace.json");
  ASSERT_TRUE(m.ok());
  m->set_mode(S_IFREG | 0600);
  WriteBatch chmod;
  store_->UpdateManifest(&chmod, *m);
  ASSERT_TRUE(store_->Commit(chmod, true).ok());
  uint64_t big_bytes = 0;
  for (const auto& [rel, bytes] : big) big_bytes += bytes.size();
  auto totals = store_->GetTotals();
  ASSERT_TRUE(totals.ok());
  EXPECT_EQ(totals->top_folder_bytes.count("big"), 0u);
  EXPECT_EQ(totals->top_folder_bytes["big2"], big_bytes);
  EXPECT_EQ(store_->Lookup("big2/sub0/t000.pt.trace.json")->mode(), S_IFREG | 0600u);
  store_.reset();
  auto s = ColdStore::Open(dir_ / ".tbfs", {});
  ASSERT_TRUE(s.ok());
  store_ = std::move(s).value();
  check();
}

// The folder caches (ids by path, paths by id) are filled by the reads
// before each rename; every rename must still show at once.
TEST_F(StoreTest, CachedFolderPathsFollowEveryRename) {
  Ingest("a/b/c/t.pt.trace.json", "trace");
  auto none = [](const std::string&, struct stat*) { return false; };
  const uint64_t id = store_->Lookup("a/b/c/t.pt.trace.json")->file_id();
  // The file's folder, then folders above it, then out to the top.
  const std::pair<std::string, std::string> renames[] = {
      {"a/b/c", "a/b/d"}, {"a/b", "a/x"}, {"a", "z"}, {"z/x/d", "q"}, {"q", "a"}};
  const std::string after[] = {"a/b/d", "a/x/d", "z/x/d", "q", "a"};
  std::string at = "a/b/c";
  for (size_t i = 0; i < std::size(renames); ++i) {
    const auto& [from, to] = renames[i];
    ASSERT_EQ(store_->GetManifest(id)->path(), at + "/t.pt.trace.json");
    ASSERT_TRUE(store_->Lookup(at + "/t.pt.trace.json").ok()) << at;
    ASSERT_TRUE(store_->GetEntry(from).ok()) << from;
    WriteBatch batch;
    ASSERT_TRUE(store_->Rename(&batch, from, to, none).ok()) << from;
    ASSERT_TRUE(store_->Commit(batch, true).ok());
    at = after[i];
    EXPECT_EQ(store_->GetManifest(id)->path(), at + "/t.pt.trace.json") << from << " -> " << to;
    EXPECT_TRUE(store_->Lookup(at + "/t.pt.trace.json").ok()) << at;
    EXPECT_TRUE(store_->GetEntry(from).status().IsNotFound()) << from;
  }
}

TEST_F(StoreTest, AFolderIsNotRenamedIntoItself) {
  Ingest("a/b/x.pt.trace.json", "x");
  auto none = [](const std::string&, struct stat*) { return false; };
  WriteBatch b;
  EXPECT_EQ(store_->Rename(&b, "a", "a/b/c", none).code(), Code::kInvalidArgument);
  EXPECT_EQ(store_->Rename(&b, "a", "a/c", none).code(), Code::kInvalidArgument);
  EXPECT_TRUE(store_->Rename(&b, "a/b", "ab", none).ok()) << "a sibling that starts alike";
}

// The store as tbfs wrote it before format 4: path keys, manifests without
// their folder's id, version 2.
void RewriteAsFormat2(ColdStore& store) {
  Backend& b = StoreInternals::Of(store);
  std::vector<std::pair<std::string, storepb::Entry>> entries;
  ASSERT_TRUE(store
                  .ForEachEntry([&](const std::string& path, const storepb::Entry& e) {
                    entries.emplace_back(path, e);
                    return true;
                  })
                  .ok());
  std::vector<storepb::Manifest> manifests;
  ASSERT_TRUE(store
                  .ForEachManifest([&](const storepb::Manifest& m) {
                    manifests.push_back(m);
                    return true;
                  })
                  .ok());
  WriteBatch w;
  ASSERT_TRUE(b.Scan(Space::kNamespace, "", [&](std::string_view key, std::string_view) {
                 w.Delete(Space::kNamespace, key);
                 return true;
               }).ok());
  for (auto [path, e] : entries) {
    if (e.kind() == storepb::Entry::DIR) {
      w.Delete(Space::kChunks, ChunkKey(e.dir_id(), kManifestCopyIndex));
      e.clear_dir_id();
    }
    w.Put(Space::kNamespace, EntryKey(path), e.SerializeAsString());
  }
  for (storepb::Manifest m : manifests) {
    m.clear_parent_dir();
    w.Put(Space::kManifests, EncodeId(m.file_id()), m.SerializeAsString());
    w.Put(Space::kChunks, ChunkKey(m.file_id(), kManifestCopyIndex),
          ManifestCopyValue(m.file_id(), m.SerializeAsString()));
  }
  storepb::StoreInfo info = store.info();
  info.set_format_version(2);
  w.Put(Space::kMeta, kMetaInfoKey, info.SerializeAsString());
  ASSERT_TRUE(b.Commit(w, true).ok());
}

// A store written before format 4 reads as it did, and its first writer
// converts it: every file at its path, folders with their attributes, no
// old key left; a conversion cut short (tree keys already there) is done
// again from the start.
TEST_F(StoreTest, AFormat2StoreReadsAsItDidAndItsWriterConvertsIt) {
  std::map<std::string, std::string> files;
  for (int i = 0; i < 20; ++i) {
    const std::string rel = fmt::format("run{}/plugins/profile/t{}.pt.trace.json", i % 2, i);
    files[rel] = Content(70000 + static_cast<size_t>(i), static_cast<uint32_t>(i));
    Ingest(rel, files[rel]);
  }
  Ingest("top.pt.trace.json", "at the top");
  files["top.pt.trace.json"] = "at the top";
  auto folder_before = store_->GetEntry("run1/plugins");
  ASSERT_TRUE(folder_before.ok());
  RewriteAsFormat2(*store_);
  {
    // A conversion cut short: tree records of a former attempt.
    WriteBatch w;
    w.Put(Space::kNamespace, TreeKey(kTopDirId, "stale"), "junk");
    w.Put(Space::kNamespace, TreeLinkKey(99999), "junk");
    ASSERT_TRUE(StoreInternals::Of(*store_).Commit(w, true).ok());
  }
  store_.reset();
  auto read_all = [&](ColdStore& s) {
    ChunkCodec codec;
    for (const auto& [rel, bytes] : files) {
      auto m = s.Lookup(rel);
      ASSERT_TRUE(m.ok()) << rel << ": " << m.status().ToString();
      EXPECT_EQ(m->path(), rel);
      std::string got(bytes.size(), '\0');
      size_t n = 0;
      ASSERT_TRUE(s.ReadRange(*m, 0, got.size(), got.data(), &n, &codec).ok());
      EXPECT_TRUE(got == bytes) << rel;
    }
    std::vector<ChildEntry> kids;
    ASSERT_TRUE(s.ListChildren("", &kids).ok());
    EXPECT_EQ(kids.size(), 3u);  // run0, run1, top
    auto folder = s.GetEntry("run1/plugins");
    ASSERT_TRUE(folder.ok());
    EXPECT_EQ(folder->mode(), folder_before->mode());
    EXPECT_EQ(folder->mtime_ns(), folder_before->mtime_ns());
  };
  {
    OpenOptions ro;
    ro.read_only = true;
    auto s = ColdStore::Open(dir_ / ".tbfs", ro);
    ASSERT_TRUE(s.ok()) << s.status().ToString();
    EXPECT_EQ((*s)->info().format_version(), 2u);
    read_all(**s);
  }
  auto s = ColdStore::Open(dir_ / ".tbfs", {});
  ASSERT_TRUE(s.ok()) << s.status().ToString();
  EXPECT_EQ((*s)->info().format_version(), kFormatVersionTree);
  read_all(**s);
  ASSERT_TRUE(StoreInternals::Of(**s)
                  .Scan(Space::kNamespace, "",
                        [&](std::string_view key, std::string_view value) {
                          EXPECT_TRUE(key.starts_with(kTreeKeyPrefix)) << "an old key is left";
                          EXPECT_NE(value, "junk") << "a former attempt's record is left";
                          return true;
                        })
                  .ok());
  auto fsck = Fsck(**s, &pool_, nullptr);
  ASSERT_TRUE(fsck.ok());
  EXPECT_TRUE(fsck->clean());
  // Converted, it renames in O(1) as any other.
  auto none = [](const std::string&, struct stat*) { return false; };
  WriteBatch b;
  ASSERT_TRUE((*s)->Rename(&b, "run1", "renamed", none).ok());
  ASSERT_TRUE((*s)->Commit(b, true).ok());
  EXPECT_TRUE((*s)->Lookup("renamed/plugins/profile/t1.pt.trace.json").ok());
  // Old keys a conversion left after its switch go at the next writer's open.
  WriteBatch stale;
  stale.Put(Space::kNamespace, EntryKey("left/over"), "junk");
  ASSERT_TRUE(StoreInternals::Of(**s).Commit(stale, true).ok());
  s->reset();
  auto again = ColdStore::Open(dir_ / ".tbfs", {});
  ASSERT_TRUE(again.ok());
  std::string ignored;
  EXPECT_TRUE(StoreInternals::Of(**again)
                  .Get(Space::kNamespace, EntryKey("left/over"), &ignored)
                  .IsNotFound());
}

// kill -9 in the middle of a conversion, before its switch and after it:
// a reader reads every file at its path, the next writer finishes, and
// every file comes back whole.
TEST(Convert, AConversionKilledBeforeOrAfterItsSwitchLosesNothing) {
  for (const char* point : {"store.convert.before_switch", "store.convert.after_switch"}) {
    TempDir dir;
    const std::string logdir = dir.path(), store = logdir + "/.tbfs";
    std::map<std::string, std::string> files;
    {
      OpenOptions o;
      o.create_if_missing = true;
      auto s = ColdStore::Open(store, o);
      ASSERT_TRUE(s.ok());
      WorkPool pool(2);
      for (int i = 0; i < 6; ++i) {
        const std::string rel = fmt::format("run{}/plugins/profile/t{}.pt.trace.json", i % 2, i);
        files[rel] = Content(90000 + static_cast<size_t>(i), static_cast<uint32_t>(i));
        IngestInto(**s, logdir, rel, files[rel], &pool);
        ASSERT_EQ(::unlink((logdir + "/" + rel).c_str()), 0);
      }
      RewriteAsFormat2(**s);
    }
    auto crashed = RunCommand(std::string("TBFS_FAILPOINT=") + point + " " + TBFS_BINARY +
                              " restore " + logdir + " --all --apply >/dev/null 2>&1");
    ASSERT_EQ(crashed.exit_code, kFailpointExitCode) << point << ": failpoint not reached";
    {
      OpenOptions ro;
      ro.read_only = true;
      auto reader = ColdStore::Open(store, ro);
      ASSERT_TRUE(reader.ok()) << point << ": " << reader.status().ToString();
      EXPECT_EQ((*reader)->info().format_version(),
                std::string(point).ends_with("before_switch") ? 2u : kFormatVersionTree)
          << point;
      for (const auto& [rel, bytes] : files) {
        auto m = (*reader)->Lookup(rel);
        EXPECT_TRUE(m.ok()) << point << ": " << rel << ": " << m.status().ToString();
      }
    }
    auto fsck = RunCommand(std::string(TBFS_BINARY) + " fsck " + logdir + " 2>&1");
    EXPECT_EQ(fsck.exit_code, 0) << point << ": " << fsck.out;
    auto restored =
        RunCommand(std::string(TBFS_BINARY) + " restore " + logdir + " --all --apply 2>&1");
    EXPECT_EQ(restored.exit_code, 0) << point << ": " << restored.out;
    for (const auto& [rel, bytes] : files)
      EXPECT_TRUE(ReadBytes(logdir + "/" + rel) == bytes) << point << ": " << rel;
  }
}

// A batch's final commit the engine refused (Defer) lands with the next
// write the store takes, whichever it is, in the same atomic write; and
// alone with CommitDeferred. Nothing deferred: CommitDeferred writes nothing.
TEST_F(StoreTest, ADeferredCommitLandsWithTheNextWrite) {
  auto journal_ids = [&] {
    std::vector<storepb::JournalRecord> records;
    EXPECT_TRUE(store_->ListJournal(&records).ok());
    std::vector<uint64_t> ids;
    for (const auto& r : records) ids.push_back(r.batch_id());
    return ids;
  };
  const uint64_t commits = store_->commits();
  ASSERT_TRUE(store_->CommitDeferred().ok());
  EXPECT_EQ(store_->commits(), commits);
  for (uint64_t id : {7, 8}) {
    storepb::JournalRecord r;
    r.set_batch_id(id);
    ASSERT_TRUE(store_->PutJournal(r).ok());
  }
  // Refused, then deferred: still there until the next write.
  WriteBatch done;
  done.Delete(Space::kJournal, EncodeId(7));
  store_->Defer(done);
  EXPECT_EQ(journal_ids(), (std::vector<uint64_t>{7, 8}));
  Ingest("run/a.pt.trace.json", "a trace");  // a commit of its own
  EXPECT_EQ(journal_ids(), (std::vector<uint64_t>{8}));
  // Once only: deleting 8 now and deferring it again, CommitDeferred alone.
  WriteBatch done8;
  done8.Delete(Space::kJournal, EncodeId(8));
  store_->Defer(done8);
  ASSERT_TRUE(store_->CommitDeferred().ok());
  EXPECT_TRUE(journal_ids().empty());
}

}  // namespace
}  // namespace tbfs::store
