#include "store/gzip_pieces.h"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/stat.h>

#include <filesystem>
#include <map>
#include <optional>
#include <random>
#include <set>

#include "base/fs_util.h"
#include "base/work_pool.h"
#include "fmt/format.h"
#include "store/cold_store.h"
#include "store/file_io.h"
#include "store/format.h"
#include "store/maintenance.h"
#include "store/recompress.h"
#include "store/salvage.h"
#include "tests/store/store_internals.h"
#include "tests/store/trace_json.h"
#include "tests/test_util.h"

namespace tbfs::store {
namespace {

namespace fs = std::filesystem;
using testing::ReadBytes;
using testing::RunCommand;
using testing::SameBytes;
using testing::SharedData;
using testing::TempDir;
using testing::WriteBytes;

using testing::kChunk;

// `bytes` of the real Kineto trace's JSON from `at` on: what PyTorch's
// profiler writes, whose repetition zlib's 32 KiB window misses.
std::string KinetoJson(size_t bytes, size_t at) {
  static const std::string* json = new std::string(
      RunCommand("zcat " + SharedData("kineto-resnet50/worker0.1623143089861.pt.trace.json.gz"))
          .out);
  EXPECT_GT(json->size(), at + bytes) << "the shared Kineto trace is needed";
  return json->substr(std::min(at, json->size()), bytes);
}

class GzipContentTest : public ::testing::Test {
 protected:
  void SetUp() override { Open(); }

  void Open() {
    store_.reset();
    OpenOptions o;
    o.create_if_missing = true;
    auto s = ColdStore::Open(store_dir_, o);
    ASSERT_TRUE(s.ok()) << s.status().ToString();
    store_ = std::move(s).value();
  }

  // Trace JSON gzip'd by Python's gzip module, as torch.profiler's
  // use_gzip does, at logdir/rel.
  // Level 1 by default: with the tests' small chunks (64 KiB, many pieces
  // from little data) the content beats only a fast gzip; with the store's
  // 1 MiB chunks it beats every level (README, tbfs-bench gzip).
  std::string PythonGzip(const std::string& rel, const std::string& json, int level = 1) {
    const std::string src = dir_ / "src.json";
    WriteBytes(src, json);
    const std::string gz = JoinPath(logdir_, rel);
    fs::create_directories(fs::path(gz).parent_path());
    const std::string py = fmt::format(
        "import gzip\n"
        "with open('{}') as fin, gzip.open('{}', 'wt', compresslevel={}) as fout:\n"
        "    fout.writelines(fin)\n",
        src, gz, level);
    EXPECT_EQ(RunCommand("python3 -c \"" + py + "\"").exit_code, 0) << "python3 is needed";
    return ReadBytes(gz);
  }

  // Moves logdir/rel into the store as a migration does (the hot file stays).
  storepb::Manifest Ingest(const std::string& rel, bool by_content = true,
                           uint32_t chunk_bytes = kChunk) {
    const std::string path = JoinPath(logdir_, rel);
    auto fd = OpenFile(path, O_RDONLY);
    EXPECT_TRUE(fd.ok());
    struct stat st;
    ::fstat(fd->get(), &st);
    IngestOptions io;
    io.chunk_bytes = chunk_bytes;
    io.level = 9;
    io.file_class = "pytorch_trace";
    io.gzip_by_content = by_content;
    io.pool = &pool_;
    auto m = IngestFile(*store_, logdir_, rel, fd->get(), st, store_->NewFileId(), io);
    EXPECT_TRUE(m.ok()) << m.status().ToString();
    return m.ok() ? *m : storepb::Manifest();
  }

  Status Read(const storepb::Manifest& m, uint64_t offset, size_t length, std::string* out) {
    out->assign(length, '\0');
    size_t got = 0;
    ChunkCodec codec;
    Status st = store_->ReadRange(m, offset, length, out->data(), &got, &codec);
    out->resize(got);
    return st;
  }

  std::string ReadAll(const storepb::Manifest& m) {
    std::string out;
    Status st = Read(m, 0, m.size(), &out);
    EXPECT_TRUE(st.ok()) << st.ToString();
    return out;
  }

  uint32_t FormatVersion() { return StoreInternals::FormatVersion(*store_); }

  // Flips a byte in the middle of m's stored content chunk `index`.
  void DamageContentChunk(const storepb::Manifest& m, uint64_t index) {
    const std::string key = ChunkKey(m.file_id(), index);
    std::string value;
    ASSERT_TRUE(StoreInternals::Of(*store_).Get(Space::kChunks, key, &value).ok());
    value[value.size() / 2] ^= 0x10;
    WriteBatch b;
    b.Put(Space::kChunks, key, value);
    ASSERT_TRUE(store_->Commit(b, true).ok());
  }

  TempDir dir_;
  const std::string logdir_ = dir_ / "logdir";
  const std::string store_dir_ = dir_ / "store";
  WorkPool pool_{2};
  std::unique_ptr<ColdStore> store_;
};

TEST_F(GzipContentTest, AFileZlibMakesAgainIsStoredByItsContentAndReadsBitForBit) {
  const std::string gz = PythonGzip("run/a.pt.trace.json.gz", KinetoJson(6 << 20, 0));
  const storepb::Manifest m = Ingest("run/a.pt.trace.json.gz");
  ASSERT_TRUE(IsGzipContent(m));
  EXPECT_EQ(m.size(), gz.size());
  EXPECT_EQ(m.chunks(), ChunkCount(gz.size(), kGzipPieceBytes));
  EXPECT_EQ(m.gzip().content_bytes(), 6u << 20);
  EXPECT_EQ(m.gzip().level(), 1);
  EXPECT_EQ(m.gzip().content_chunks(), (6u << 20) / kChunk);
  EXPECT_TRUE(WellFormed(m));
  EXPECT_EQ(m.codec(), kCodecZstdNumbers);  // the content's numbers went as differences
  EXPECT_EQ(FormatVersion(), kFormatVersionNumbers);
  // Stored as it is, the same file takes several times more.
  WriteBytes(JoinPath(logdir_, "run/copy.pt.trace.json.gz"), gz);
  const storepb::Manifest as_is = Ingest("run/copy.pt.trace.json.gz", false);
  ASSERT_FALSE(IsGzipContent(as_is));
  EXPECT_LT(m.stored_bytes() * 10, as_is.stored_bytes() * 9)
      << m.stored_bytes() << " by content, " << as_is.stored_bytes() << " as it is";

  EXPECT_TRUE(SameBytes(ReadAll(m), gz));
  // Any range, in any order: behind the remaker's place it starts again.
  std::mt19937_64 rng(3);
  for (int i = 0; i < 40; i++) {
    const uint64_t offset = rng() % gz.size();
    const size_t length = 1 + rng() % (3 * kChunk);
    std::string got;
    ASSERT_TRUE(Read(m, offset, length, &got).ok());
    EXPECT_TRUE(SameBytes(got, gz.substr(offset, length))) << offset << "+" << length;
  }
  EXPECT_TRUE(VerifyStoredFile(*store_, m, &pool_).ok());
  MaterializeOptions mo;
  mo.pool = &pool_;
  fs::create_directories(dir_ / "out");
  ASSERT_TRUE(MaterializeFile(*store_, m, dir_ / "out", "a.gz", mo).ok());
  EXPECT_TRUE(SameBytes(ReadBytes(JoinPath(dir_ / "out", "a.gz")), gz));
  auto fd = OpenFile(JoinPath(dir_ / "out", "a.gz"), O_RDONLY);
  ASSERT_TRUE(fd.ok());
  EXPECT_TRUE(SameContent(fd->get(), "a.gz", m));

  // As the store keeps it, after a reopen.
  Open();
  auto again = store_->Lookup("run/a.pt.trace.json.gz");
  ASSERT_TRUE(again.ok());
  EXPECT_TRUE(SameBytes(ReadAll(*again), gz));
  auto report = Fsck(*store_, &pool_, nullptr);
  ASSERT_TRUE(report.ok());
  EXPECT_TRUE(report->damaged.empty()) << report->damaged[0].second;
  EXPECT_TRUE(report->problems.empty()) << report->problems[0];
}

TEST_F(GzipContentTest, PiecesReadInOrderCostOneDeflateAndReadBackwardsStartAgain) {
  PythonGzip("a.json.gz", KinetoJson(4 << 20, 6 << 20));
  const storepb::Manifest m = Ingest("a.json.gz");
  ASSERT_TRUE(IsGzipContent(m));
  ASSERT_GE(m.chunks(), 3u);
  const storepb::Manifest content = ContentManifest(m);
  GzipPieces pieces(
      m,
      [&](uint64_t index, ChunkCodec* codec, std::string* raw) {
        return store_->ReadChunk(content, index, codec, raw);
      },
      2);
  std::string all, piece;
  for (uint64_t i = 0; i < m.chunks(); i++) {
    ASSERT_TRUE(pieces.Read(i, &piece).ok());
    all += piece;
  }
  EXPECT_EQ(pieces.made(), m.chunks());
  EXPECT_TRUE(SameBytes(all, ReadBytes(JoinPath(logdir_, "a.json.gz"))));
  // The last two are kept; the one before them is made again from the top.
  ASSERT_TRUE(pieces.Read(m.chunks() - 2, &piece).ok());
  EXPECT_EQ(pieces.made(), m.chunks());
  ASSERT_TRUE(pieces.Read(0, &piece).ok());
  EXPECT_EQ(pieces.made(), m.chunks() + 1);
  EXPECT_EQ(pieces.Read(m.chunks(), &piece).code(), Code::kInvalidArgument);
}

// One content chunk can make more pieces than a remaker keeps (1 MiB of
// random digits deflates to about 9 pieces of 64 KiB; verify, restore and
// export keep 2 per thread): the piece asked for is kept, the rest wait.
// Red team: such a file crashed migrate, fsck, restore and export, and the
// recovery of a store holding one (a copy from a pointer to nothing).
TEST_F(GzipContentTest, AContentChunkThatMakesManyPiecesLosesNoneBeforeItIsRead) {
  std::string json;
  for (int i = 0; json.size() < (6u << 20); i++) {
    json += fmt::format("{{\"ph\":\"X\",\"name\":\"op3\",\"tid\":{},\"ts\":{},\"dur\":{}}},\n",
                        i % 8, 1000000 + i * 111, 12 + i % 5);
  }
  std::mt19937_64 rng(9);
  while (json.size() < (8u << 20)) json += fmt::format("{:016x}{:016x}\n", rng(), rng());
  const std::string gz = PythonGzip("run/a.pt.trace.json.gz", json, 9);
  const storepb::Manifest m = Ingest("run/a.pt.trace.json.gz", true, 1 << 20);
  ASSERT_TRUE(IsGzipContent(m));
  const storepb::Manifest content = ContentManifest(m);
  for (size_t window : {1, 2}) {
    GzipPieces pieces(
        m,
        [&](uint64_t index, ChunkCodec* codec, std::string* raw) {
          return store_->ReadChunk(content, index, codec, raw);
        },
        window);
    std::string all, piece;
    for (uint64_t i = 0; i < m.chunks(); i++) {
      ASSERT_TRUE(pieces.Read(i, &piece).ok()) << i;
      all += piece;
    }
    EXPECT_EQ(pieces.made(), m.chunks()) << window;
    EXPECT_TRUE(SameBytes(all, gz)) << window;
  }
  EXPECT_TRUE(SameBytes(ReadAll(m), gz));
}

// Readers of different parts of one file (threads, readahead, mmap) each
// keep their place: reading two halves in turn costs each half once, not
// a deflate from the top for every read.
TEST_F(GzipContentTest, ReadersOfTwoPartsOfAFileDoNotStartEachOtherAgain) {
  const std::string gz = PythonGzip("a.json.gz", KinetoJson(24 << 20, 0));
  const storepb::Manifest m = Ingest("a.json.gz");
  ASSERT_TRUE(IsGzipContent(m));
  const uint64_t n = m.chunks();
  ASSERT_GE(n, 12u);
  store_->SetGzipWindowBytes(2 * kGzipPieceBytes);  // the halves lie far apart
  const uint64_t before = store_->gzip_pieces_made();
  std::string piece;
  ChunkCodec codec;
  for (uint64_t i = 0; i < n / 2; i++) {
    for (uint64_t index : {i, n / 2 + i}) {
      ASSERT_TRUE(store_->ReadChunk(m, index, &codec, &piece).ok());
      ASSERT_EQ(piece, gz.substr(index * kGzipPieceBytes, piece.size())) << index;
    }
  }
  // The front half by one remaker, the file up to the end by the other.
  EXPECT_LE(store_->gzip_pieces_made() - before, n / 2 + n);
}

TEST_F(GzipContentTest, FilesZlibDoesNotMakeAgainAreStoredAsTheyAre) {
  const std::string json = TraceJson(1 << 20, 4);
  fs::create_directories(logdir_);
  WriteBytes(dir_ / "t.json", json);
  // GNU gzip's deflate is not zlib's; a ".gz" that is not gzip at all; a
  // deflate bomb (1000x) that would cost the migration its time.
  WriteBytes(JoinPath(logdir_, "gnu.json.gz"), RunCommand("gzip -6 -c " + dir_ / "t.json").out);
  WriteBytes(JoinPath(logdir_, "text.json.gz"), json);
  ASSERT_EQ(RunCommand(fmt::format("head -c 64M /dev/zero | python3 -c \"import gzip,sys; "
                                   "sys.stdout.buffer.write(gzip.compress(sys.stdin.buffer.read()))"
                                   "\" > {}",
                                   JoinPath(logdir_, "zeros.gz")))
                .exit_code,
            0);
  // zlib makes it again, but its content (random numbers) stores no
  // smaller than the file: the remake would buy nothing.
  PythonGzip("random.json.gz", TraceJson(1 << 20, 4), 6);
  // Damaged where only the inflate of the copy sees it, pieces after the
  // first: the trailer's CRC-32 and its length (a red team's finding).
  std::string gz = PythonGzip("crc.json.gz", KinetoJson(4 << 20, 5));
  ASSERT_GT(gz.size(), kGzipPieceBytes);
  gz[gz.size() - 6] ^= 0x01;
  WriteBytes(JoinPath(logdir_, "crc.json.gz"), gz);
  gz[gz.size() - 6] ^= 0x01;
  gz[gz.size() - 2] ^= 0x01;
  WriteBytes(JoinPath(logdir_, "isize.json.gz"), gz);
  for (const char* rel : {"gnu.json.gz", "text.json.gz", "zeros.gz", "random.json.gz",
                          "crc.json.gz", "isize.json.gz"}) {
    const storepb::Manifest m = Ingest(rel);
    EXPECT_FALSE(IsGzipContent(m)) << rel;
    EXPECT_TRUE(SameBytes(ReadAll(m), ReadBytes(JoinPath(logdir_, rel)))) << rel;
  }
}

// A gzip file whose recipe fails only at its end (bytes after its member,
// a second member) has been copied by its content by then (the finder
// reads beside the copy): what that copy wrote leaves the store again, and
// the file is stored as it is.
TEST_F(GzipContentTest, AFileFoundWithoutARecipeAtItsEndLeavesNoContentChunkBehind) {
  const std::string gz = PythonGzip("one.json.gz", KinetoJson(6 << 20, 3));
  WriteBytes(JoinPath(logdir_, "tail.json.gz"), gz + "bytes after the member\n");
  WriteBytes(JoinPath(logdir_, "two.json.gz"), gz + gz);
  // Chunks of 512 KiB: the content has 12, the first 4 of which the copy
  // commits on their own before it reads the file's end; the file as it
  // is has fewer.
  constexpr uint32_t kBig = 512 << 10;
  for (const char* rel : {"tail.json.gz", "two.json.gz"}) {
    const storepb::Manifest m = Ingest(rel, true, kBig);
    EXPECT_FALSE(IsGzipContent(m)) << rel;
    EXPECT_TRUE(SameBytes(ReadAll(m), ReadBytes(JoinPath(logdir_, rel)))) << rel;
    ASSERT_LT(m.chunks(), 4u) << rel;
    std::set<uint64_t> indices;
    ASSERT_TRUE(store_
                    ->ForEachChunkKey([&](uint64_t id, uint64_t index) {
                      if (id == m.file_id()) indices.insert(index);
                      return true;
                    })
                    .ok());
    EXPECT_EQ(indices.size(), m.chunks()) << rel;
    if (!indices.empty()) {
      EXPECT_EQ(*indices.rbegin(), m.chunks() - 1) << rel;
    }
  }
  // The file without them is stored by its content.
  EXPECT_TRUE(IsGzipContent(Ingest("one.json.gz", true, kBig)));
}

// A gzip file is judged by its first 4 MiB of content before its recipe is
// looked for: the search deflates all of the content again (a second for
// 36 MB of TensorFlow trace that then stored no smaller). So a file whose
// content starts with 4 MiB that store no smaller than their gzip bytes
// is stored as it is, though what follows would have paid for it: whole,
// this one's content stores in less than 90% of the file (checked below).
TEST_F(GzipContentTest, AGzipFileIsJudgedByItsFirst4MiBOfContent) {
  // Random hex digits: 4 bits a byte to zlib and zstd alike.
  std::string hex;
  std::mt19937_64 rng(5);
  while (hex.size() < (4u << 20)) {
    hex += fmt::format("\"{:016x}{:016x}\",\n", rng(), rng());
  }
  const std::string json = hex + KinetoJson(24 << 20, 0);
  const std::string gz = PythonGzip("run/a.pt.trace.json.gz", json);
  const storepb::Manifest m = Ingest("run/a.pt.trace.json.gz");
  EXPECT_FALSE(IsGzipContent(m));
  EXPECT_TRUE(SameBytes(ReadAll(m), gz));
  // What the content would take stored whole, chunk by chunk as the store
  // compresses it: less than 90% of the file.
  ChunkCodec codec;
  std::string value;
  uint64_t stored = 0;
  for (size_t off = 0; off < json.size(); off += kChunk) {
    codec.Encode(std::string_view(json).substr(off, kChunk), 9, ChunkPos{}, &value);
    stored += value.size();
  }
  EXPECT_LT(static_cast<double>(stored), 0.9 * static_cast<double>(gz.size()));
  // Content that starts as it goes on is stored by it.
  PythonGzip("run/b.pt.trace.json.gz", KinetoJson(24 << 20, 0) + hex);
  EXPECT_TRUE(IsGzipContent(Ingest("run/b.pt.trace.json.gz")));
}

// Every gzip'd trace of the shared data, and the same JSON written by
// Python's gzip, GNU gzip -1..-9 and pigz: each stored by content or as it
// is, as zlib and the gain decide, and each read back bit for bit.
TEST_F(GzipContentTest, EveryWriterAndLevelRoundTripsBitForBit) {
  const std::string json = KinetoJson(4 << 20, 20 << 20);
  WriteBytes(dir_ / "k.json", json);
  // rel -> stored by content; unset where either is right (zlib makes GNU
  // gzip -1..-3's streams of some content; 8 KB gains about 10%).
  std::map<std::string, std::optional<bool>> want;
  for (const char* rel : {"kineto-resnet50/worker0.1623143089861.pt.trace.json.gz",
                          "pytorch-logdir/profile_gzip/vm_19341.1796027115058.pt.trace.json.gz"}) {
    fs::create_directories(fs::path(JoinPath(logdir_, rel)).parent_path());
    fs::copy_file(SharedData(rel), JoinPath(logdir_, rel));
  }
  want["kineto-resnet50/worker0.1623143089861.pt.trace.json.gz"] = false;  // GNU gzip -6
  want["pytorch-logdir/profile_gzip/vm_19341.1796027115058.pt.trace.json.gz"] = std::nullopt;
  for (int level : {1, 6, 9}) {
    const std::string rel = fmt::format("python{}.pt.trace.json.gz", level);
    PythonGzip(rel, json, level);
    want[rel] = true;  // even at 64 KiB chunks: the content's numbers go as differences
  }
  for (int level = 1; level <= 9; level++) {
    const std::string rel = fmt::format("gnu{}.pt.trace.json.gz", level);
    WriteBytes(JoinPath(logdir_, rel),
               RunCommand(fmt::format("gzip -{} -c {}", level, dir_ / "k.json")).out);
    want[rel] = level > 3 ? std::optional(false) : std::nullopt;
  }
  WriteBytes(JoinPath(logdir_, "pigz.pt.trace.json.gz"),
             RunCommand("pigz -c " + dir_ / "k.json").out);
  want["pigz.pt.trace.json.gz"] = false;
  for (const auto& [rel, by_content] : want) {
    const std::string original = ReadBytes(JoinPath(logdir_, rel));
    ASSERT_GT(original.size(), 20u) << rel;
    const storepb::Manifest m = Ingest(rel);
    if (by_content.has_value()) {
      EXPECT_EQ(IsGzipContent(m), *by_content) << rel;
    }
    EXPECT_TRUE(SameBytes(ReadAll(m), original)) << rel;
  }
}

// A damaged content chunk, or a zlib that deflates differently from the
// one that stored the file: Corruption, naming the file, never bytes that
// differ from the file's.
TEST_F(GzipContentTest, DamagedContentOrAnotherZlibIsCorruptionNeverWrongBytes) {
  const std::string gz = PythonGzip("b.json.gz", KinetoJson(4 << 20, 10 << 20));
  const storepb::Manifest m = Ingest("b.json.gz");
  ASSERT_TRUE(IsGzipContent(m));

  // Another zlib: its pieces differ from the hashes kept.
  storepb::Manifest other = m;
  other.mutable_gzip()->set_piece_hashes(1, other.gzip().piece_hashes(1) ^ 1);
  std::string got;
  Status st = Read(other, 0, other.size(), &got);
  EXPECT_TRUE(st.IsCorruption()) << st.ToString();
  EXPECT_NE(st.message().find("b.json.gz: piece 1"), std::string::npos) << st.message();

  // A flipped byte in a content chunk.
  DamageContentChunk(m, m.gzip().content_chunks() / 2);
  Open();
  st = Read(m, 0, m.size(), &got);
  EXPECT_TRUE(st.IsCorruption()) << st.ToString();
  EXPECT_NE(st.message().find("b.json.gz"), std::string::npos) << st.message();
  auto report = Fsck(*store_, &pool_, nullptr);
  ASSERT_TRUE(report.ok());
  ASSERT_EQ(report->damaged.size(), 1u);
  EXPECT_EQ(report->damaged[0].first, "b.json.gz");
  MaterializeOptions mo;
  mo.pool = &pool_;
  fs::create_directories(dir_ / "out");
  st = MaterializeFile(*store_, m, dir_ / "out", "b.gz", mo);
  EXPECT_TRUE(st.IsCorruption()) << st.ToString();
  EXPECT_FALSE(fs::exists(JoinPath(dir_ / "out", "b.gz")));
}

// The migration's read-back of such a file reads its content back and
// checks it against the content's hash; it does not make the file again
// (the copy's recipe search did, from that very content). So a recipe
// that no longer makes the file passes it, and fsck and readers catch it;
// a damaged content chunk fails it.
TEST_F(GzipContentTest, TheCopysReadBackChecksTheContentAndLeavesTheRemakeToReaders) {
  const std::string gz = PythonGzip("c.json.gz", KinetoJson(3 << 20, 2 << 20));
  const storepb::Manifest m = Ingest("c.json.gz");
  ASSERT_TRUE(IsGzipContent(m));
  EXPECT_TRUE(VerifyCopiedFile(*store_, m, &pool_).ok());
  EXPECT_TRUE(VerifyStoredFile(*store_, m, &pool_).ok());

  storepb::Manifest other = m;  // as if another zlib read it
  other.mutable_gzip()->set_piece_hashes(0, other.gzip().piece_hashes(0) ^ 1);
  EXPECT_TRUE(VerifyCopiedFile(*store_, other, &pool_).ok());
  Status st = VerifyStoredFile(*store_, other, &pool_);
  EXPECT_TRUE(st.IsCorruption()) << st.ToString();

  storepb::Manifest wrong_content = m;  // content that is not what was found
  wrong_content.mutable_gzip()->set_content_hash_low(m.gzip().content_hash_low() ^ 1);
  st = VerifyCopiedFile(*store_, wrong_content, &pool_);
  EXPECT_TRUE(st.IsCorruption()) << st.ToString();
  EXPECT_NE(st.message().find("c.json.gz"), std::string::npos) << st.message();

  DamageContentChunk(m, m.gzip().content_chunks() - 1);
  st = VerifyCopiedFile(*store_, m, &pool_);
  EXPECT_TRUE(st.IsCorruption()) << st.ToString();
}

TEST_F(GzipContentTest, AStoreWithOneKeepsItsFormatWhenADictionaryComesAfter) {
  PythonGzip("a.pt.trace.json.gz", KinetoJson(2 << 20, 14 << 20));
  ASSERT_TRUE(IsGzipContent(Ingest("a.pt.trace.json.gz")));
  const uint32_t format = FormatVersion();
  ASSERT_GE(format, kFormatVersionGzip);
  // The first dictionary of the store (format 5) must not put it back.
  const std::string rel = "big.pt.trace.json";
  WriteBytes(JoinPath(logdir_, rel), TraceJson(kMinTrainingBytes + 99, 7));
  const storepb::Manifest big = Ingest(rel);
  ASSERT_NE(big.dictionary(), 0u);
  EXPECT_EQ(FormatVersion(), format);
  // The content of a later gzip'd trace of the family uses it.
  const std::string gz = PythonGzip("c.pt.trace.json.gz", KinetoJson(2 << 20, 16 << 20));
  const storepb::Manifest c = Ingest("c.pt.trace.json.gz");
  ASSERT_TRUE(IsGzipContent(c));
  EXPECT_EQ(c.dictionary(), big.dictionary());
  EXPECT_TRUE(SameBytes(ReadAll(c), gz));
}

TEST_F(GzipContentTest, RecompressAndSalvageKeepTheFileBitForBit) {
  const std::string gz = PythonGzip("run/d.pt.trace.json.gz", KinetoJson(4 << 20, 18 << 20));
  const storepb::Manifest m = Ingest("run/d.pt.trace.json.gz");
  ASSERT_TRUE(IsGzipContent(m));
  RecompressOptions ro;
  ro.level = 7;
  ro.pool = &pool_;
  auto r = Recompress(*store_, ro);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  ASSERT_TRUE(r->failed.empty()) << r->failed[0].second;
  EXPECT_EQ(r->files, 1u);
  auto after = store_->Lookup("run/d.pt.trace.json.gz");
  ASSERT_TRUE(after.ok());
  EXPECT_EQ(after->level(), 7);
  EXPECT_TRUE(IsGzipContent(*after));
  EXPECT_TRUE(SameBytes(ReadAll(*after), gz));

  ASSERT_TRUE(store_->Flush().ok());
  store_.reset();
  SalvageOptions so;
  so.store_dir = store_dir_;
  so.to = dir_ / "salvaged";
  so.pool = &pool_;
  auto s = Salvage(so);
  ASSERT_TRUE(s.ok()) << s.status().ToString();
  EXPECT_EQ(s->files, 1u);
  EXPECT_TRUE(SameBytes(ReadBytes(so.to + "/run/d.pt.trace.json.gz"), gz));
}

}  // namespace
}  // namespace tbfs::store
