#include "store/dictionary.h"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/stat.h>

#include <filesystem>

#include "base/failpoint.h"
#include "base/fs_util.h"
#include "base/work_pool.h"
#include "fmt/format.h"
#include "store/cold_store.h"
#include "store/file_io.h"
#include "store/format.h"
#include "store/maintenance.h"
#include "store/salvage.h"
#include "tests/store/store_internals.h"
#include "tests/store/trace_json.h"
#include "tests/test_util.h"

namespace tbfs::store {
namespace {

namespace fs = std::filesystem;
using testing::ReadBytes;
using testing::TempDir;
using testing::WriteBytes;

using testing::kChunk;

class DictionaryTest : public ::testing::Test {
 protected:
  void SetUp() override { Open(); }

  void Open(bool read_only = false) {
    store_.reset();
    OpenOptions o;
    o.create_if_missing = true;
    o.read_only = read_only;
    auto s = ColdStore::Open(store_dir_, o);
    ASSERT_TRUE(s.ok()) << s.status().ToString();
    store_ = std::move(s).value();
  }

  // Writes `bytes` at logdir/rel and moves them into the store as a
  // migration of a PyTorch trace does (the hot file stays).
  storepb::Manifest Ingest(const std::string& rel, const std::string& bytes,
                           bool dictionaries = true, ColdStore* into = nullptr,
                           const std::string& file_class = "pytorch_trace") {
    const std::string path = JoinPath(logdir_, rel);
    fs::create_directories(fs::path(path).parent_path());
    WriteBytes(path, bytes);
    originals_[rel] = bytes;
    auto fd = OpenFile(path, O_RDONLY);
    EXPECT_TRUE(fd.ok());
    struct stat st;
    ::fstat(fd->get(), &st);
    ColdStore& store = into != nullptr ? *into : *store_;
    IngestOptions io;
    io.chunk_bytes = chunk_bytes_;
    io.level = level_;
    io.file_class = file_class;
    io.dictionaries = dictionaries;
    io.pool = &pool_;
    auto m = IngestFile(store, logdir_, rel, fd->get(), st, store.NewFileId(), io);
    EXPECT_TRUE(m.ok()) << m.status().ToString();
    return m.ok() ? *m : storepb::Manifest();
  }

  std::string ReadAll(const storepb::Manifest& m) {
    std::string out(m.size(), '\0');
    size_t got = 0;
    ChunkCodec codec;
    Status st = store_->ReadRange(m, 0, m.size(), out.data(), &got, &codec);
    EXPECT_TRUE(st.ok()) << st.ToString();
    out.resize(got);
    return out;
  }

  uint8_t CodecOf(uint64_t file_id, uint64_t index) {
    std::string value;
    EXPECT_TRUE(
        StoreInternals::Of(*store_).Get(Space::kChunks, ChunkKey(file_id, index), &value).ok());
    return value.empty() ? 0xff : static_cast<uint8_t>(value[0]);
  }

  // Flips one byte in the middle of the dictionary's record (kMeta) or of its
  // copy with the chunks.
  void Damage(uint32_t dict_id, Space space) {
    const uint64_t key_id = dict_id - kDictIdBase;
    const std::string key =
        space == Space::kMeta ? DictKey(key_id) : ChunkKey(key_id, kManifestCopyIndex);
    std::string value;
    ASSERT_TRUE(StoreInternals::Of(*store_).Get(space, key, &value).ok());
    value[value.size() / 2] ^= 0x20;
    WriteBatch b;
    b.Put(space, key, value);
    ASSERT_TRUE(store_->Commit(b, true).ok());
  }

  // fsck finds one problem, naming dictionary `id`, and no damaged file.
  void ExpectFsckNamesOnly(uint32_t id) {
    auto report = Fsck(*store_, &pool_, nullptr);
    ASSERT_TRUE(report.ok());
    ASSERT_EQ(report->problems.size(), 1u);
    EXPECT_NE(report->problems[0].find(fmt::format("dictionary {}", id)), std::string::npos)
        << report->problems[0];
    EXPECT_TRUE(report->damaged.empty());
  }

  TempDir dir_;
  std::string logdir_ = dir_ / "logdir";
  std::string store_dir_ = dir_ / "logdir/.tbfs";
  // What Ingest moves files in with.
  int level_ = 3;
  uint32_t chunk_bytes_ = kChunk;
  WorkPool pool_{2};
  std::unique_ptr<ColdStore> store_;
  std::map<std::string, std::string> originals_;
};

// Bytes no dictionary helps (xorshift64 from `seed`).
std::string RandomBytes(size_t n, uint64_t seed) {
  std::string out(n, '\0');
  for (char& c : out) {
    seed ^= seed << 13;
    seed ^= seed >> 7;
    seed ^= seed << 17;
    c = static_cast<char>(seed >> 24);
  }
  return out;
}

TEST(DictionaryFamilyTest, IsTheClassAndTheLastExtensionAndNoneForCompressedFiles) {
  EXPECT_EQ(DictionaryFamily("run/w.1.pt.trace.json", "pytorch_trace"), "pytorch_trace.json");
  EXPECT_EQ(DictionaryFamily("run/plugins/profile/x/h.XPLANE.PB", "tf_profile"), "tf_profile.pb");
  EXPECT_EQ(DictionaryFamily("run/a.trace", "other_trace"), "other_trace.trace");
  EXPECT_EQ(DictionaryFamily("run/noext", "other_trace"), "other_trace.other");
  EXPECT_EQ(DictionaryFamily("run/.hidden", "other_trace"), "other_trace.other");
  EXPECT_EQ(DictionaryFamily("run/a.j$on", "other_trace"), "other_trace.other");
  EXPECT_EQ(DictionaryFamily("run/w.pt.trace.json.gz", "pytorch_trace"), "");
  EXPECT_EQ(DictionaryFamily("run/h.trace.json.GZ", "tf_profile"), "");
  EXPECT_EQ(DictionaryFamily("run/w.pt.trace.json", ""), "");  // not a trace
}

// The first file of a family big enough teaches the family's dictionary;
// its chunks and every later file's are compressed with it, read back
// exactly, and take less than without it. A compressed file gets none.
TEST_F(DictionaryTest, AFamilysFirstBigFileTeachesItsDictionaryAndLaterFilesUseIt) {
  const std::string small_first = TraceJson(300 << 10, 1);
  storepb::Manifest s0 = Ingest("run/a.pt.trace.json", small_first);
  EXPECT_EQ(s0.dictionary(), 0u) << "a file under kMinTrainingBytes teaches nothing";
  EXPECT_TRUE(store_->Dictionaries().empty());

  const std::string big = TraceJson(kMinTrainingBytes + 123457, 2);
  storepb::Manifest m = Ingest("run/b.pt.trace.json", big);
  ASSERT_NE(m.dictionary(), 0u);
  ASSERT_EQ(store_->Dictionaries().size(), 1u);
  EXPECT_EQ(store_->Dictionaries()[0]->record().family(), "pytorch_trace.json");
  EXPECT_GE(store_->Dictionaries()[0]->content().size(), kMinDictionaryBytes);
  EXPECT_EQ(CodecOf(m.file_id(), 0), kChunkZstdDictNumbers);
  EXPECT_EQ(CodecOf(m.file_id(), m.chunks() - 1), kChunkZstdDictNumbers);
  EXPECT_TRUE(VerifyStoredFile(*store_, m, &pool_).ok());
  EXPECT_EQ(ReadAll(m), big);

  const std::string later = TraceJson(500 << 10, 3);
  storepb::Manifest l = Ingest("run2/c.pt.trace.json", later);
  EXPECT_EQ(l.dictionary(), m.dictionary());
  EXPECT_EQ(store_->Dictionaries().size(), 1u);
  EXPECT_EQ(ReadAll(l), later);

  storepb::Manifest gz = Ingest("run2/d.pt.trace.json.gz", TraceJson(kMinTrainingBytes + 1, 4));
  EXPECT_EQ(gz.dictionary(), 0u);
  EXPECT_EQ(CodecOf(gz.file_id(), 0), kChunkZstdNumbers);

  // The same files into a store that makes no dictionaries.
  OpenOptions o;
  o.create_if_missing = true;
  auto plain = ColdStore::Open(dir_ / "plain", o);
  ASSERT_TRUE(plain.ok());
  storepb::Manifest pm = Ingest("run/b.pt.trace.json", big, false, plain->get());
  storepb::Manifest pl = Ingest("run2/c.pt.trace.json", later, false, plain->get());
  EXPECT_EQ(pm.dictionary(), 0u);
  EXPECT_LT(m.stored_bytes(), pm.stored_bytes());
  EXPECT_LT(l.stored_bytes(), pl.stored_bytes());
  EXPECT_EQ((*plain)->info().format_version(), kNewStoreFormatVersion);

  // The store says format 5 from its first dictionary on (8 here: the
  // traces' numbers went as differences too), and a reader opened afresh
  // reads every file.
  Open(/*read_only=*/true);
  EXPECT_EQ(store_->info().format_version(), kFormatVersionNumbers);
  ASSERT_EQ(store_->Dictionaries().size(), 1u);
  for (const auto& [rel, bytes] : originals_) {
    auto found = store_->Lookup(rel);
    ASSERT_TRUE(found.ok()) << rel;
    EXPECT_EQ(ReadAll(*found), bytes) << rel;
  }
  auto report = Fsck(*store_, &pool_, nullptr);
  ASSERT_TRUE(report.ok());
  EXPECT_TRUE(report->clean()) << (report->problems.empty() ? "" : report->problems[0]);
}

// A dictionary is judged at the level it is trained at. At another level
// a migration asks again, once, on the file's middle chunk: at 13 libzstd
// 1.5 stores the real Kineto trace's chunks larger with its family's
// dictionary (trained at 9) than without, and `tbfs migrate --level 13`
// stored the trace in 953 KB where none gives 738 KB.
TEST_F(DictionaryTest, AFileAtAnotherLevelGoesWithoutADictionaryThatDoesWorseThere) {
  // Its numbers quoted: as differences (format 8) they leave the real
  // trace no dictionary to judge.
  const std::string kineto = QuotedNumbers(
      testing::RunCommand(
          "zcat " + testing::SharedData("kineto-resnet50/worker0.1623143089861.pt.trace.json.gz"))
          .out);
  ASSERT_GT(kineto.size(), 30u << 20);
  chunk_bytes_ = kDefaultChunkBytes;
  level_ = 9;
  const storepb::Manifest taught = Ingest("run/a.pt.trace.json", kineto);
  ASSERT_NE(taught.dictionary(), 0u);
  auto dict = store_->FindDictionary(taught.dictionary());
  ASSERT_NE(dict, nullptr);
  // The premise, on the chunk the choice is made on.
  ChunkCodec codec;
  const uint64_t middle = taught.chunks() / 2;
  std::string raw, with, without;
  ASSERT_TRUE(store_->ReadChunk(taught, middle, &codec, &raw).ok());
  codec.Encode(raw, 13, {}, &with, dict.get());
  codec.Encode(raw, 13, {}, &without, nullptr);
  ASSERT_GT(with.size(), without.size()) << "at level 13 the dictionary no longer does worse";

  level_ = 13;
  const storepb::Manifest at13 = Ingest("run2/b.pt.trace.json", kineto);
  EXPECT_EQ(at13.dictionary(), 0u);
  EXPECT_EQ(CodecOf(at13.file_id(), middle), kChunkZstd);
  OpenOptions o;
  o.create_if_missing = true;
  auto plain = ColdStore::Open(dir_ / "plain", o);
  ASSERT_TRUE(plain.ok());
  const storepb::Manifest none = Ingest("run2/b.pt.trace.json", kineto, false, plain->get());
  EXPECT_EQ(at13.stored_bytes(), none.stored_bytes());
  // The next file at 13 goes without it too; at 9 the family's dictionary
  // still serves.
  const storepb::Manifest again = Ingest("run3/c.pt.trace.json", kineto.substr(0, 6 << 20));
  EXPECT_EQ(again.dictionary(), 0u);
  level_ = 9;
  const storepb::Manifest at9 = Ingest("run4/d.pt.trace.json", kineto.substr(0, 6 << 20));
  EXPECT_EQ(at9.dictionary(), taught.dictionary());
  for (const auto& [rel, bytes] : originals_) {
    auto found = store_->Lookup(rel);
    ASSERT_TRUE(found.ok()) << rel;
    EXPECT_TRUE(ReadAll(*found) == bytes) << rel;
  }
}

// A dictionary that nothing was held out to judge is not kept (red team:
// with fewer than four chunks sampled, one was kept unjudged).
TEST_F(DictionaryTest, ADictionaryNothingJudgesIsNotKept) {
  TrainingSamples samples;
  samples.Add(TraceJson(kMinTrainingBytes, 6));
  auto d = store_->AddDictionary("pytorch_trace.json", 3, samples);
  ASSERT_FALSE(d.ok());
  EXPECT_EQ(d.status().code(), Code::kInvalidArgument) << d.status().ToString();
  EXPECT_TRUE(store_->Dictionaries().empty());
}

// A family is taught again as it grows (RetrainPolicy) when the new
// dictionary does better on the new file; files already stored keep the
// dictionary they were made with, and every one reads back.
TEST_F(DictionaryTest, AFamilyIsTaughtAgainAsItGrowsAndStoredFilesKeepTheirs) {
  const std::string a_bytes = TraceJson(kMinTrainingBytes + 4321, 1);
  storepb::Manifest a = Ingest("run/a.pt.trace.json", a_bytes);
  ASSERT_NE(a.dictionary(), 0u);
  // By default (1 GiB of the family, or a day) another model's trace uses
  // the family's dictionary.
  storepb::Manifest b0 = Ingest("run/b0.pt.trace.json", OtherModelJson(kMinTrainingBytes, 2));
  EXPECT_EQ(b0.dictionary(), a.dictionary());
  ASSERT_EQ(store_->Dictionaries().size(), 1u);

  store_->SetRetrainPolicy({.after_bytes = 1, .after_ns = INT64_MAX});
  storepb::Manifest b = Ingest("run/b.pt.trace.json", OtherModelJson(kMinTrainingBytes, 3));
  EXPECT_GT(b.dictionary(), a.dictionary()) << "another model's trace teaches a better one";
  ASSERT_EQ(store_->Dictionaries().size(), 2u);
  EXPECT_EQ(CodecOf(b.file_id(), 0), kChunkZstdDictNumbers);
  // A third like the second: trained again, but what it teaches does not
  // do better than the newest, which it uses.
  storepb::Manifest c = Ingest("run/c.pt.trace.json", OtherModelJson(kMinTrainingBytes, 4));
  EXPECT_EQ(c.dictionary(), b.dictionary());
  EXPECT_EQ(store_->Dictionaries().size(), 2u);
  // A small file of the family counts toward growth but teaches nothing.
  storepb::Manifest d = Ingest("run/d.pt.trace.json", TraceJson(200 << 10, 5));
  EXPECT_EQ(d.dictionary(), b.dictionary());

  // Reopened: both dictionaries load, every file reads with its own, and
  // fsck finds nothing wrong.
  Open(/*read_only=*/true);
  ASSERT_EQ(store_->Dictionaries().size(), 2u);
  for (const auto& [rel, bytes] : originals_) {
    auto found = store_->Lookup(rel);
    ASSERT_TRUE(found.ok()) << rel;
    EXPECT_EQ(ReadAll(*found), bytes) << rel;
  }
  EXPECT_EQ(store_->Lookup("run/a.pt.trace.json")->dictionary(), a.dictionary());
  auto report = Fsck(*store_, &pool_, nullptr);
  ASSERT_TRUE(report.ok());
  EXPECT_TRUE(report->clean()) << (report->problems.empty() ? "" : report->problems[0]);
}

// Content that teaches a dictionary of a few hundred bytes (a sparse
// file's data, one phrase repeated) leaves the family without one.
TEST_F(DictionaryTest, ContentThatTeachesAlmostNothingMakesNoDictionary) {
  storepb::Manifest m = Ingest("run/zeros.pt.trace.json", std::string(kMinTrainingBytes + 1, '\0'));
  EXPECT_EQ(m.dictionary(), 0u);
  EXPECT_TRUE(store_->Dictionaries().empty());
  storepb::Manifest t = Ingest("run/t.pt.trace.json", TraceJson(kMinTrainingBytes, 5));
  EXPECT_NE(t.dictionary(), 0u);
}

// A dictionary is kept only when it makes the chunks held out of its
// training smaller: random bytes (or XSpace protobuf) get none.
TEST_F(DictionaryTest, AFamilyADictionaryDoesNotHelpGetsNone) {
  const std::string random = RandomBytes(kMinTrainingBytes + 99, 88172645463325252ull);
  storepb::Manifest m = Ingest("run/r.pt.trace.json", random);
  EXPECT_EQ(m.dictionary(), 0u);
  EXPECT_TRUE(store_->Dictionaries().empty());
  EXPECT_EQ(CodecOf(m.file_id(), 0), kChunkRaw);
  EXPECT_EQ(ReadAll(m), random);
  // One odd file (any user can write one) does not decide for the family.
  EXPECT_FALSE(store_->Untrainable("pytorch_trace.json"));
  storepb::Manifest t = Ingest("run/t.pt.trace.json", TraceJson(kMinTrainingBytes, 11));
  EXPECT_NE(t.dictionary(), 0u);
  // kTrainingAttempts files that teach nothing give the family up (for as
  // long as the store is open): no training cost for every file of it.
  for (int i = 0; i < kTrainingAttempts; ++i) {
    EXPECT_FALSE(store_->Untrainable("other_trace.bin"));
    storepb::Manifest x =
        Ingest(fmt::format("run/x{}.bin", i), random, true, nullptr, "other_trace");
    EXPECT_EQ(x.dictionary(), 0u);
  }
  EXPECT_TRUE(store_->Untrainable("other_trace.bin"));
}

// A family a dictionary does not help is judged by a probe, trained on a
// few of the samples, not by a whole training: the whole one runs only
// for a probe that helps.
TEST_F(DictionaryTest, AProbeThatDoesNotHelpSparesTheWholeTraining) {
  const std::string random = RandomBytes(kMinTrainingBytes + 99, 2463534242ull);
  storepb::Manifest r = Ingest("run/r.bin", random, true, nullptr, "other_trace");
  EXPECT_EQ(r.dictionary(), 0u);
  EXPECT_EQ(store_->Trainings().probes, 1u);
  EXPECT_EQ(store_->Trainings().whole, 0u);
  EXPECT_EQ(ReadAll(r), random);
  // The probe counts as the file's attempt.
  for (int i = 1; i < kTrainingAttempts; ++i)
    Ingest(fmt::format("run/r{}.bin", i), random, true, nullptr, "other_trace");
  EXPECT_TRUE(store_->Untrainable("other_trace.bin"));
  EXPECT_EQ(store_->Trainings().probes, static_cast<uint64_t>(kTrainingAttempts));
  storepb::Manifest t = Ingest("run/t.pt.trace.json", TraceJson(kMinTrainingBytes, 11));
  EXPECT_NE(t.dictionary(), 0u);
  EXPECT_EQ(store_->Trainings().whole, 1u);
  EXPECT_EQ(store_->Trainings().probes, static_cast<uint64_t>(kTrainingAttempts) + 1);
}

TEST(TrainingSamplesTest, ASubsetTakesWholePiecesEvenlyAndHoldsNothingOut) {
  TrainingSamples all;
  for (int i = 0; i < 32; ++i) all.Add(std::string(kSampleBytes, static_cast<char>('a' + i % 26)));
  all.held_out.push_back("x");
  all.threads = 2;
  const TrainingSamples few = all.Subset(4 * kSampleBytes);
  ASSERT_EQ(few.sizes.size(), 4u);
  EXPECT_EQ(few.bytes.size(), 4 * kSampleBytes);
  EXPECT_TRUE(few.held_out.empty());
  EXPECT_EQ(few.threads, 2);
  EXPECT_EQ(few.bytes[0], 'a');
  EXPECT_EQ(few.bytes[kSampleBytes], 'a' + 8);
  EXPECT_EQ(few.bytes[3 * kSampleBytes], 'a' + 24);
  EXPECT_EQ(all.Subset(1000 * kSampleBytes).bytes.size(), all.bytes.size());
}

// A dictionary whose record does not read (a damaged table) is found by
// the id its chunks name, through its copy with the chunks; while the
// records do not all read, no new dictionary is made (readers might not
// find that one either) and fsck says so.
TEST_F(DictionaryTest, ADictionaryWhoseRecordDoesNotReadIsFoundThroughItsCopy) {
  const std::string big = TraceJson(kMinTrainingBytes + 5000, 12);
  storepb::Manifest m = Ingest("run/b.pt.trace.json", big);
  ASSERT_NE(m.dictionary(), 0u);
  WriteBatch drop;
  drop.Delete(Space::kMeta, DictKey(m.dictionary() - kDictIdBase));
  ASSERT_TRUE(store_->Commit(drop, true).ok());
  Open(/*read_only=*/true);
  EXPECT_TRUE(store_->Dictionaries().empty());
  EXPECT_EQ(ReadAll(m), big);
  ASSERT_EQ(store_->Dictionaries().size(), 1u);
  ExpectFsckNamesOnly(m.dictionary());

  // The records' table damaged: the scan of them fails at open. The
  // dictionary is still found through its copy, and no new one is made.
  {
    ScopedFailpoint unreadable("store.dict_records");
    Open();
  }
  EXPECT_EQ(ReadAll(m), big);
  storepb::Manifest other = Ingest("run/c.trace", TraceJson(kMinTrainingBytes + 1, 13));
  EXPECT_EQ(other.dictionary(), 0u) << "a new dictionary while the records do not read";
  auto report = Fsck(*store_, &pool_, nullptr);
  ASSERT_TRUE(report.ok());
  bool named = false;
  for (const auto& p : report->problems) {
    named |= p.find("dictionary records could not all be read") != std::string::npos;
  }
  EXPECT_TRUE(named);
  EXPECT_TRUE(report->damaged.empty());
}

// Either copy of a dictionary's record is enough; with both damaged, the
// chunks that need it are Corruption (EIO through a mount), fsck names the
// dictionary and every file that needs it, and no wrong byte is returned.
TEST_F(DictionaryTest, ADictionaryDamagedInBothCopiesMakesItsFilesCorruptNeverWrong) {
  const std::string big = TraceJson(kMinTrainingBytes + 5000, 6);
  storepb::Manifest m = Ingest("run/b.pt.trace.json", big);
  storepb::Manifest other = Ingest("run/c.pt.trace.json.gz", TraceJson(200 << 10, 7));
  ASSERT_NE(m.dictionary(), 0u);
  ASSERT_EQ(other.dictionary(), 0u);

  Damage(m.dictionary(), Space::kMeta);
  Open();
  ASSERT_EQ(store_->Dictionaries().size(), 1u) << "read from its copy with the chunks";
  EXPECT_EQ(ReadAll(m), big);
  ExpectFsckNamesOnly(m.dictionary());

  Damage(m.dictionary(), Space::kChunks);
  Open();
  EXPECT_TRUE(store_->Dictionaries().empty());
  ChunkCodec codec;
  std::string raw;
  Status st = store_->ReadChunk(m, 1, &codec, &raw);
  EXPECT_TRUE(st.IsCorruption()) << st.ToString();
  EXPECT_NE(st.message().find(fmt::format("dictionary {}", m.dictionary())), std::string::npos)
      << st.message();
  EXPECT_NE(st.message().find("run/b.pt.trace.json"), std::string::npos) << st.message();
  std::string out(other.size(), '\0');
  size_t got = 0;
  ASSERT_TRUE(store_->ReadRange(other, 0, other.size(), out.data(), &got, &codec).ok());
  EXPECT_EQ(out, originals_["run/c.pt.trace.json.gz"]);

  auto report = Fsck(*store_, &pool_, nullptr);
  ASSERT_TRUE(report.ok());
  EXPECT_FALSE(report->clean());
  ASSERT_EQ(report->damaged.size(), 1u);
  EXPECT_EQ(report->damaged[0].first, "run/b.pt.trace.json");
  bool named = false;
  for (const auto& p : report->problems) {
    named |= p.find(fmt::format("dictionary {} is damaged", m.dictionary())) != std::string::npos;
  }
  EXPECT_TRUE(named);

  // A new file of the family is not held back: the family gets a new
  // dictionary under a new id, never the lost one's.
  storepb::Manifest n = Ingest("run/n.pt.trace.json", TraceJson(kMinTrainingBytes, 8));
  EXPECT_NE(n.dictionary(), 0u);
  EXPECT_NE(n.dictionary(), m.dictionary());
  EXPECT_EQ(ReadAll(n), originals_["run/n.pt.trace.json"]);
}

// Salvage finds the dictionaries in the engine and, with the engine gone,
// in the blob files, and writes back every file that needs one.
TEST_F(DictionaryTest, SalvageWritesBackFilesThatNeedADictionaryFromTheBlobFilesAlone) {
  Ingest("run/b.pt.trace.json", TraceJson(kMinTrainingBytes + 777, 9));
  Ingest("run/c.pt.trace.json", TraceJson(700 << 10, 10));
  ASSERT_EQ(store_->Dictionaries().size(), 1u);
  ASSERT_TRUE(store_->Flush().ok());
  store_.reset();
  const std::string blobs_only = dir_ / "blobs-only";
  fs::create_directories(blobs_only);
  ::chmod(blobs_only.c_str(), 0700);
  for (const auto& e : fs::directory_iterator(store_dir_)) {
    if (e.path().extension() == ".blob") fs::copy(e.path(), blobs_only / e.path().filename());
  }
  int trial = 0;
  for (const std::string& store : {store_dir_, blobs_only}) {
    SalvageOptions o;
    o.store_dir = store;
    o.to = dir_ / fmt::format("out{}", ++trial);
    o.pool = &pool_;
    auto r = Salvage(o);
    ASSERT_TRUE(r.ok()) << store << ": " << r.status().ToString();
    EXPECT_EQ(r->files, originals_.size()) << store;
    for (const auto& [rel, bytes] : originals_) {
      EXPECT_EQ(ReadBytes(o.to + "/" + rel), bytes) << store << ": " << rel;
    }
  }
}

}  // namespace
}  // namespace tbfs::store
