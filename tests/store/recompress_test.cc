#include "store/recompress.h"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <xxhash.h>
#include <zstd.h>

#include <atomic>
#include <cstring>
#include <filesystem>

#include "base/failpoint.h"
#include "base/fs_util.h"
#include "store/dictionary.h"
#include "store/file_io.h"
#include "store/format.h"
#include "store/maintenance.h"
#include "tests/store/store_internals.h"
#include "tests/store/trace_json.h"
#include "tests/test_util.h"

namespace tbfs::store {
namespace {

namespace fs = std::filesystem;
using testing::TempDir;
using testing::WriteBytes;

class RecompressTest : public ::testing::Test {
 protected:
  void SetUp() override {
    OpenOptions o;
    o.create_if_missing = true;
    auto s = ColdStore::Open(dir_ / "logdir/.tbfs", o);
    ASSERT_TRUE(s.ok()) << s.status().ToString();
    store_ = std::move(s).value();
  }

  // Moved in at level 3 without dictionaries (as an older tbfs would
  // have), or with them; or as a migration moves it (1 MiB chunks at level
  // 9, with dictionaries).
  void Ingest(const std::string& rel, const std::string& bytes, bool dictionaries = false,
              bool as_migrated = false) {
    const std::string path = JoinPath(logdir_, rel);
    fs::create_directories(fs::path(path).parent_path());
    WriteBytes(path, bytes);
    originals_[rel] = bytes;
    auto fd = OpenFile(path, O_RDONLY);
    ASSERT_TRUE(fd.ok());
    struct stat st;
    ::fstat(fd->get(), &st);
    IngestOptions io;
    io.chunk_bytes = as_migrated ? kDefaultChunkBytes : 64 << 10;
    io.level = as_migrated ? kDefaultZstdLevel : 3;
    io.file_class = "pytorch_trace";
    io.dictionaries = dictionaries || as_migrated;
    io.pool = &pool_;
    auto m = IngestFile(*store_, logdir_, rel, fd->get(), st, store_->NewFileId(), io);
    ASSERT_TRUE(m.ok()) << m.status().ToString();
  }

  // Three 2 MiB traces at level 3, flushed: their chunks in blob files.
  void IngestThreeTraces(uint32_t seed) {
    for (int i = 0; i < 3; ++i) {
      Ingest("run/t" + std::to_string(i) + ".pt.trace.json",
             TraceJson(2 << 20, seed + static_cast<uint32_t>(i)));
    }
    ASSERT_TRUE(store_->Flush().ok());
  }

  // At `level`, with the families' dictionaries.
  RecompressOptions At(int level) {
    RecompressOptions o;
    o.level = level;
    o.pool = &pool_;
    return o;
  }

  RecompressOptions AtLevel9() {
    RecompressOptions o;
    o.level = 9;
    o.dictionaries = false;
    o.pool = &pool_;
    return o;
  }

  void ExpectEveryFileIntact() {
    for (const auto& [rel, bytes] : originals_) {
      auto m = store_->Lookup(rel);
      ASSERT_TRUE(m.ok()) << rel;
      std::string out(m->size(), '\0');
      size_t got = 0;
      ChunkCodec codec;
      ASSERT_TRUE(store_->ReadRange(*m, 0, m->size(), out.data(), &got, &codec).ok()) << rel;
      EXPECT_EQ(out, bytes) << rel;
    }
    auto report = Fsck(*store_, &pool_, nullptr);
    ASSERT_TRUE(report.ok());
    EXPECT_TRUE(report->clean());
  }

  TempDir dir_;
  std::string logdir_ = dir_ / "logdir";
  WorkPool pool_{2};
  std::unique_ptr<ColdStore> store_;
  std::map<std::string, std::string> originals_;
};

// A file a tbfs before format 8 wrote (plain frames, Manifest.codec 1) is
// compressed again at its own level for its numbers; one run does it.
TEST_F(RecompressTest, FilesWrittenBeforeNumbersWentAsDifferencesAreDoneAgainAtTheirLevel) {
  const std::string rel = "run/old.pt.trace.json";
  Ingest(rel, TraceJson(1 << 20, 9));
  auto m = store_->Lookup(rel);
  ASSERT_TRUE(m.ok());
  ASSERT_EQ(m->codec(), kCodecZstdNumbers);
  WriteBatch b;
  uint64_t old_stored = 0;
  ChunkCodec codec;
  for (uint64_t i = 0; i < m->chunks(); ++i) {
    std::string raw;
    ASSERT_TRUE(store_->ReadChunk(*m, i, &codec, &raw).ok());
    const ChunkPos pos = ChunkPosOf(*m, i);
    const uint32_t len = static_cast<uint32_t>(raw.size());
    const uint64_t hash = XXH3_64bits_withSeed(raw.data(), raw.size(),
                                               ChunkSeed(pos.file_id, pos.index, len, pos.head));
    std::string value(kChunkHeaderBytes + ZSTD_compressBound(raw.size()), '\0');
    value[0] = static_cast<char>(kChunkZstd);
    std::memcpy(value.data() + 1, &len, 4);
    std::memcpy(value.data() + 5, &hash, 8);
    const size_t z =
        ZSTD_compress(value.data() + kChunkHeaderBytes, value.size() - kChunkHeaderBytes,
                      raw.data(), raw.size(), m->level());
    ASSERT_FALSE(ZSTD_isError(z));
    value.resize(kChunkHeaderBytes + z);
    b.Put(Space::kChunks, ChunkKey(m->file_id(), i), value);
    old_stored += value.size();
  }
  m->set_codec(kCodecZstd);
  m->set_stored_bytes(old_stored);
  store_->UpdateManifest(&b, *m);
  ASSERT_TRUE(store_->Commit(b, true).ok());

  RecompressOptions o = At(m->level());
  o.dictionaries = false;
  auto r = Recompress(*store_, o);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(r->files, 1u);
  auto after = store_->Lookup(rel);
  ASSERT_TRUE(after.ok());
  EXPECT_EQ(after->codec(), kCodecZstdNumbers);
  EXPECT_LT(after->stored_bytes(), old_stored);
  std::string first;
  ASSERT_TRUE(
      StoreInternals::Of(*store_).Get(Space::kChunks, ChunkKey(m->file_id(), 0), &first).ok());
  EXPECT_EQ(static_cast<uint8_t>(first[0]), kChunkZstdNumbers);
  ExpectEveryFileIntact();
  r = Recompress(*store_, o);
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->files, 0u);
  EXPECT_EQ(r->unchanged, 1u);
}

// At some levels a dictionary does worse than none: at 13, libzstd 1.5
// stores the real Kineto trace's chunks larger with its family's
// dictionary than without, and `tbfs recompress --level 13` took the
// trace from 738 KB (level 9, with it) to 953 KB. None is one of the
// choices now, judged like the others on the middle chunk.
TEST_F(RecompressTest, AFileGoesWithoutADictionaryWhereOneDoesWorse) {
  const std::string rel = "run/worker0.pt.trace.json";
  // Its numbers quoted: as differences (format 8) they leave the real
  // trace no dictionary to judge.
  Ingest(rel,
         QuotedNumbers(testing::RunCommand(
                           "zcat " + testing::SharedData(
                                         "kineto-resnet50/worker0.1623143089861.pt.trace.json.gz"))
                           .out),
         false, true);
  auto before = store_->Lookup(rel);
  ASSERT_TRUE(before.ok());
  ASSERT_NE(before->dictionary(), 0u);
  // The premise, on the chunk the choice is made on.
  auto dict = store_->FindDictionary(before->dictionary());
  ASSERT_NE(dict, nullptr);
  ChunkCodec codec;
  const uint64_t middle = before->chunks() / 2;
  std::string raw, with, without;
  ASSERT_TRUE(store_->ReadChunk(*before, middle, &codec, &raw).ok());
  codec.Encode(raw, 13, ChunkPosOf(*before, middle), &with, dict.get());
  codec.Encode(raw, 13, ChunkPosOf(*before, middle), &without, nullptr);
  ASSERT_GT(with.size(), without.size()) << "at level 13 the dictionary no longer does worse";

  auto r = Recompress(*store_, At(13));
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(r->files, 1u);
  EXPECT_EQ(store_->Lookup(rel)->dictionary(), 0u);
  EXPECT_EQ(store_->Lookup(rel)->level(), 13);
  EXPECT_LE(r->stored_after, r->stored_before);
  ExpectEveryFileIntact();
}

// A family taught again by another model's trace: each file is compressed
// again with whichever of its own dictionary and the family's newest does
// better on it, and a second run finds nothing to do.
TEST_F(RecompressTest, EachFileKeepsTheDictionaryThatDoesBetterOnIt) {
  Ingest("run/a.pt.trace.json", TraceJson(kMinTrainingBytes + 4321, 1), true);
  store_->SetRetrainPolicy({.after_bytes = 1, .after_ns = INT64_MAX});
  Ingest("run/b.pt.trace.json", OtherModelJson(kMinTrainingBytes, 2), true);
  store_->SetRetrainPolicy({});
  const uint32_t a_dict = store_->Lookup("run/a.pt.trace.json")->dictionary();
  const uint32_t b_dict = store_->Lookup("run/b.pt.trace.json")->dictionary();
  ASSERT_NE(a_dict, 0u);
  ASSERT_GT(b_dict, a_dict);

  const RecompressOptions o = At(9);
  auto r = Recompress(*store_, o);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(r->files, 2u);
  EXPECT_TRUE(r->failed.empty());
  EXPECT_EQ(store_->Lookup("run/a.pt.trace.json")->dictionary(), a_dict);
  EXPECT_EQ(store_->Lookup("run/b.pt.trace.json")->dictionary(), b_dict);
  EXPECT_EQ(store_->Lookup("run/a.pt.trace.json")->level(), 9);
  EXPECT_EQ(store_->Dictionaries().size(), 2u);
  ExpectEveryFileIntact();
  auto again = Recompress(*store_, o);
  ASSERT_TRUE(again.ok());
  EXPECT_EQ(again->files, 0u);
  EXPECT_EQ(again->unchanged, 2u);
}

// The chunks a recompress replaces leave the disk with it: before, the
// store kept the old ones beside the new (in the engine's blob files,
// which only a compaction collects), and took more room after a
// recompress than before it.
TEST_F(RecompressTest, TheChunksItReplacesLeaveTheDisk) {
  IngestThreeTraces(40);
  if (HasFatalFailure()) return;
  const uint64_t before = store_->DiskBytes();
  const RecompressOptions o = AtLevel9();
  auto r = Recompress(*store_, o);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  ASSERT_EQ(r->files, 3u);
  ASSERT_LT(r->stored_after, r->stored_before);
  EXPECT_EQ(r->disk_before, before);
  EXPECT_EQ(r->disk_after, store_->DiskBytes());
  // What the new chunks saved, at least half of it, is off the disk.
  EXPECT_LT(store_->DiskBytes() + (r->stored_before - r->stored_after) / 2, before)
      << "stored " << r->stored_before << " -> " << r->stored_after << ", on disk " << before
      << " -> " << store_->DiskBytes();
  ExpectEveryFileIntact();
}

// Red team: a compaction that failed (a full disk) lost the run's report
// and left the replaced chunks on disk for good: a second run found every
// file done and did not compact. Now the report says why, and the next
// run takes them off.
TEST_F(RecompressTest, ChunksLeftByAFailedCompactionLeaveWithTheNextRun) {
  IngestThreeTraces(50);
  if (HasFatalFailure()) return;
  const uint64_t before = store_->DiskBytes();
  const RecompressOptions o = AtLevel9();
  {
    ScopedFailpoint fail("store.compact");
    auto r = Recompress(*store_, o);
    ASSERT_TRUE(r.ok()) << r.status().ToString();
    EXPECT_EQ(r->files, 3u);
    EXPECT_NE(r->compact_error.find("No space left"), std::string::npos) << r->compact_error;
    EXPECT_GT(r->disk_after, before);
  }
  auto again = Recompress(*store_, o);
  ASSERT_TRUE(again.ok()) << again.status().ToString();
  EXPECT_EQ(again->files, 0u);
  EXPECT_EQ(again->unchanged, 3u);
  EXPECT_EQ(again->compact_error, "");
  EXPECT_LT(again->disk_after, before);
  ExpectEveryFileIntact();
}

TEST_F(RecompressTest, FilesComeBackAtTheLevelWithTheirFamilysDictionarySmallerAndIntact) {
  Ingest("run/big.pt.trace.json", TraceJson(kMinTrainingBytes + 4321, 1));
  Ingest("run/small.pt.trace.json", TraceJson(300 << 10, 2));
  Ingest("run/packed.pt.trace.json.gz", TraceJson(200 << 10, 3));
  ASSERT_TRUE(store_->Dictionaries().empty());
  auto totals = store_->GetTotals();
  ASSERT_TRUE(totals.ok());

  RecompressOptions o;
  o.level = 9;
  o.pool = &pool_;
  auto r = Recompress(*store_, o);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_TRUE(r->failed.empty());
  EXPECT_EQ(r->files, 3u);
  EXPECT_EQ(r->stored_before, totals->stored_bytes);
  EXPECT_LT(r->stored_after, r->stored_before);
  ASSERT_EQ(store_->Dictionaries().size(), 1u);
  const uint32_t dict = store_->Dictionaries()[0]->id();
  for (const auto& [rel, bytes] : originals_) {
    auto m = store_->Lookup(rel);
    ASSERT_TRUE(m.ok());
    EXPECT_EQ(m->level(), 9);
    EXPECT_EQ(m->dictionary(), rel.ends_with(".gz") ? 0u : dict) << rel;
  }
  auto after = store_->GetTotals();
  ASSERT_TRUE(after.ok());
  EXPECT_EQ(after->stored_bytes, r->stored_after);
  ExpectEveryFileIntact();

  // Done is done: a second run changes nothing.
  auto again = Recompress(*store_, o);
  ASSERT_TRUE(again.ok());
  EXPECT_EQ(again->files, 0u);
  EXPECT_EQ(again->unchanged, 3u);
}

// A file with a damaged chunk is named and left as it was; the others go on.
TEST_F(RecompressTest, AFileWithADamagedChunkIsNamedAndLeftAsItWas) {
  Ingest("run/a.pt.trace.json", TraceJson(500 << 10, 4));
  Ingest("run/b.pt.trace.json", TraceJson(500 << 10, 5));
  auto a = store_->Lookup("run/a.pt.trace.json");
  ASSERT_TRUE(a.ok());
  std::string value;
  ASSERT_TRUE(
      StoreInternals::Of(*store_).Get(Space::kChunks, ChunkKey(a->file_id(), 3), &value).ok());
  value[value.size() / 2] ^= 0x04;
  WriteBatch b;
  b.Put(Space::kChunks, ChunkKey(a->file_id(), 3), value);
  ASSERT_TRUE(store_->Commit(b, true).ok());
  std::string first;
  ASSERT_TRUE(
      StoreInternals::Of(*store_).Get(Space::kChunks, ChunkKey(a->file_id(), 0), &first).ok());

  RecompressOptions o;
  o.level = 6;
  o.pool = &pool_;
  auto r = Recompress(*store_, o);
  ASSERT_TRUE(r.ok());
  ASSERT_EQ(r->failed.size(), 1u);
  EXPECT_EQ(r->failed[0].first, "run/a.pt.trace.json");
  EXPECT_EQ(r->files, 1u);
  auto still = store_->Lookup("run/a.pt.trace.json");
  ASSERT_TRUE(still.ok());
  EXPECT_EQ(still->level(), 3);
  std::string after;
  ASSERT_TRUE(
      StoreInternals::Of(*store_).Get(Space::kChunks, ChunkKey(a->file_id(), 0), &after).ok());
  EXPECT_TRUE(after == first) << "nothing of it was written";
}

// A run that found a damaged chunk still compacts (red team: it left the
// replaced chunks on disk for good, and said every file was readable): the
// compaction leaves out what it cannot read, and writes go on after it.
TEST_F(RecompressTest, ARunThatFoundDamageStillCompactsAndWritesGoOn) {
  IngestThreeTraces(100);
  if (HasFatalFailure()) return;
  auto a = store_->Lookup("run/t0.pt.trace.json");
  ASSERT_TRUE(a.ok());
  std::string value;
  ASSERT_TRUE(
      StoreInternals::Of(*store_).Get(Space::kChunks, ChunkKey(a->file_id(), 5), &value).ok());
  value[value.size() / 2] ^= 0x04;
  WriteBatch b;
  b.Put(Space::kChunks, ChunkKey(a->file_id(), 5), value);
  ASSERT_TRUE(store_->Commit(b, true).ok());
  auto r = Recompress(*store_, AtLevel9());
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  ASSERT_EQ(r->failed.size(), 1u);
  EXPECT_EQ(r->files, 2u);
  EXPECT_EQ(r->compact_error, "");
  EXPECT_LT(r->disk_after, r->disk_before) << "no compaction ran";
  WriteBatch more;
  more.Put(Space::kChunks, ChunkKey(999, 0), "after");
  Status wrote = store_->Commit(more, true);
  EXPECT_TRUE(wrote.ok()) << wrote.ToString();
}

// What a mount does to a file while its chunks are compressed again (the
// daemon recompresses while it serves): a chmod stays, and the file gets
// its new level.
TEST_F(RecompressTest, AFileChangedMeanwhileKeepsTheChangeAndGetsTheLevel) {
  IngestThreeTraces(60);
  if (HasFatalFailure()) return;
  ScopedFailpoint chmod("recompress.before_record", [&](const std::string& rel) {
    auto m = store_->Lookup(rel);
    ASSERT_TRUE(m.ok());
    m->set_mode(S_IFREG | 0600);
    WriteBatch b;
    store_->UpdateManifest(&b, *m);
    ASSERT_TRUE(store_->Commit(b, true).ok());
  });
  auto r = Recompress(*store_, AtLevel9());
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(r->files, 3u);
  EXPECT_EQ(r->gone, 0u);
  for (const auto& [rel, bytes] : originals_) {
    auto m = store_->Lookup(rel);
    ASSERT_TRUE(m.ok());
    EXPECT_EQ(m->mode(), S_IFREG | 0600u) << rel;
    EXPECT_EQ(m->level(), 9) << rel;
  }
  ExpectEveryFileIntact();
}

// A file removed (unlinked, made hot) while its chunks were compressed
// again: the chunks written for it go with it, none is left as garbage, and
// its manifest does not come back.
TEST_F(RecompressTest, AFileRemovedMeanwhileTakesItsNewChunksWithIt) {
  IngestThreeTraces(70);
  if (HasFatalFailure()) return;
  const std::string victim = "run/t1.pt.trace.json";
  const uint64_t id = store_->Lookup(victim)->file_id();
  ScopedFailpoint remove("recompress.before_record", [&](const std::string& rel) {
    if (rel != victim) return;
    auto m = store_->Lookup(rel);
    ASSERT_TRUE(m.ok());
    WriteBatch b;
    ASSERT_TRUE(store_->RemoveFile(&b, *m).ok());
    ASSERT_TRUE(store_->Commit(b, true).ok());
  });
  auto r = Recompress(*store_, AtLevel9());
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(r->files, 2u);
  EXPECT_EQ(r->gone, 1u);
  EXPECT_TRUE(r->failed.empty());
  EXPECT_TRUE(store_->Lookup(victim).status().IsNotFound());
  EXPECT_TRUE(store_->GetManifest(id).status().IsNotFound());
  uint64_t left = 0;
  ASSERT_TRUE(store_
                  ->ForEachChunkKey([&](uint64_t file_id, uint64_t) {
                    left += file_id == id;
                    return true;
                  })
                  .ok());
  EXPECT_EQ(left, 0u);
  Garbage garbage;
  ASSERT_TRUE(FindGarbage(*store_, &garbage).ok());
  EXPECT_TRUE(garbage.chunks.empty());
  originals_.erase(victim);
  ExpectEveryFileIntact();
}

// Unlinked while open (a mount retires it): its chunks, new ones included,
// stay for the handles still reading it, and go with its mark.
TEST_F(RecompressTest, ARetiredFileKeepsItsNewChunksForItsReaders) {
  IngestThreeTraces(80);
  if (HasFatalFailure()) return;
  const std::string victim = "run/t2.pt.trace.json";
  auto looked = store_->Lookup(victim);
  ASSERT_TRUE(looked.ok());
  const storepb::Manifest held = *looked;
  ScopedFailpoint retire("recompress.before_record", [&](const std::string& rel) {
    if (rel != victim) return;
    WriteBatch b;
    ASSERT_TRUE(store_->Retire(&b, held).ok());
    ASSERT_TRUE(store_->Commit(b, true).ok());
  });
  auto r = Recompress(*store_, AtLevel9());
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(r->gone, 1u);
  ASSERT_TRUE(store_->IsRetired(held.file_id()));
  std::string out(held.size(), '\0');
  size_t got = 0;
  ChunkCodec codec;
  ASSERT_TRUE(store_->ReadRange(held, 0, held.size(), out.data(), &got, &codec).ok());
  EXPECT_EQ(out, originals_[victim]);
  WriteBatch drop;
  ASSERT_TRUE(store_->DropRetired(&drop, held.file_id()).ok());
  ASSERT_TRUE(store_->Commit(drop, true).ok());
  Garbage garbage;
  ASSERT_TRUE(FindGarbage(*store_, &garbage).ok());
  EXPECT_TRUE(garbage.chunks.empty());
}

// An unmount stops a mount's recompress at its next file (or wave): what
// it did stays, the rest is as it was, and the report says so.
TEST_F(RecompressTest, AStopLeavesTheFilesNotReachedAsTheyWere) {
  IngestThreeTraces(90);
  if (HasFatalFailure()) return;
  std::atomic<bool> stop{false};
  ScopedFailpoint stopper("recompress.before_record", [&](const std::string&) { stop = true; });
  RecompressOptions o = AtLevel9();
  o.stop = &stop;
  auto r = Recompress(*store_, o);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_TRUE(r->stopped);
  EXPECT_EQ(r->files, 1u);
  EXPECT_TRUE(r->failed.empty());
  int at9 = 0, at3 = 0;
  for (const auto& [rel, bytes] : originals_) {
    auto m = store_->Lookup(rel);
    ASSERT_TRUE(m.ok());
    at9 += m->level() == 9;
    at3 += m->level() == 3;
  }
  EXPECT_EQ(at9, 1);
  EXPECT_EQ(at3, 2);
  ExpectEveryFileIntact();
}

}  // namespace
}  // namespace tbfs::store
