// The RocksDB engine under a ColdStore: what it must do on Debian 12's
// RocksDB 7.8, whose scans abort or free twice when they meet a range
// deletion and a table file they cannot read.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <rocksdb/db.h>
#include <rocksdb/listener.h>
#include <rocksdb/metadata.h>
#include <rocksdb/table_properties.h>
#include <rocksdb/utilities/options_util.h>
#include <spdlog/sinks/ostream_sink.h>
#include <sys/stat.h>

#include <algorithm>
#include <filesystem>
#include <functional>
#include <set>
#include <sstream>
#include <thread>

#include "base/failpoint.h"
#include "base/fs_util.h"
#include "base/work_pool.h"
#include "fmt/format.h"
#include "store/cold_store.h"
#include "store/file_io.h"
#include "store/format.h"
#include "store/maintenance.h"
#include "store/rocks_compact.h"
#include "store/rocks_env.h"
#include "tests/test_util.h"

namespace tbfs::store {
namespace {

namespace fs = std::filesystem;

// What the process logs while it lives, at every level: "[level] message".
class CapturedLog {
 public:
  CapturedLog()
      : logger_(std::make_shared<spdlog::logger>(
            "engine-test", std::make_shared<spdlog::sinks::ostream_sink_mt>(out_))) {
    logger_->set_pattern("[%l] %v");
    logger_->set_level(spdlog::level::trace);
    spdlog::set_default_logger(logger_);
  }
  ~CapturedLog() { spdlog::set_default_logger(saved_); }
  std::string text() {
    logger_->flush();
    return out_.str();
  }

 private:
  std::shared_ptr<spdlog::logger> saved_ = spdlog::default_logger();
  std::ostringstream out_;
  std::shared_ptr<spdlog::logger> logger_;
};
using testing::TempDir;
using testing::WriteBytes;

using testing::kChunk;

std::string Trace(size_t n, uint32_t seed) {
  std::string s;
  while (s.size() < n) s += fmt::format("{{\"ts\": {}, \"dur\": {}}},\n", seed++, s.size() % 977);
  s.resize(n);
  return s;
}

storepb::Manifest Ingest(ColdStore& store, const std::string& logdir, const std::string& rel,
                         size_t bytes, WorkPool* pool) {
  const std::string path = JoinPath(logdir, rel);
  WriteBytes(path, Trace(bytes, static_cast<uint32_t>(bytes)));
  auto fd = OpenFile(path, O_RDONLY);
  EXPECT_TRUE(fd.ok());
  struct stat st;
  ::fstat(fd->get(), &st);
  IngestOptions io;
  io.chunk_bytes = kChunk;
  io.level = 3;
  io.pool = pool;
  auto m = IngestFile(store, logdir, rel, fd->get(), st, store.NewFileId(), io);
  EXPECT_TRUE(m.ok()) << m.status().ToString();
  return m.value();
}

// Opens the store's engine directly, with the options it was written with.
struct Engine {
  explicit Engine(const std::string& dir, bool read_only = true) {
    rocksdb::DBOptions db_options;
    rocksdb::ConfigOptions config;
    EXPECT_TRUE(rocksdb::LoadLatestOptions(config, dir, &db_options, &cfs).ok());
    rocksdb::DB* raw = nullptr;
    rocksdb::Status s = read_only
                            ? rocksdb::DB::OpenForReadOnly(db_options, dir, cfs, &handles, &raw)
                            : rocksdb::DB::Open(db_options, dir, cfs, &handles, &raw);
    EXPECT_TRUE(s.ok()) << s.ToString();
    db.reset(raw);
  }
  ~Engine() {
    for (auto* h : handles) (void)db->DestroyColumnFamilyHandle(h);
  }
  rocksdb::ColumnFamilyHandle* Space(const std::string& name) {
    for (size_t i = 0; i < cfs.size(); ++i) {
      if (cfs[i].name == name) return handles[i];
    }
    return nullptr;
  }
  // Range deletions in the table files of every space.
  uint64_t RangeDeletions() {
    uint64_t n = 0;
    for (auto* h : handles) {
      rocksdb::TablePropertiesCollection tables;
      EXPECT_TRUE(db->GetPropertiesOfAllTables(h, &tables).ok());
      for (const auto& [name, props] : tables) n += props->num_range_deletions;
    }
    return n;
  }
  std::vector<rocksdb::ColumnFamilyDescriptor> cfs;
  std::vector<rocksdb::ColumnFamilyHandle*> handles;
  std::unique_ptr<rocksdb::DB> db;
};

std::vector<std::string> TableFiles(const std::string& dir) {
  std::vector<std::string> tables;
  for (const auto& e : fs::directory_iterator(dir)) {
    if (e.path().extension() == ".sst") tables.push_back(e.path().filename());
  }
  std::sort(tables.begin(), tables.end());
  return tables;
}

std::vector<std::string> BlobFiles(const std::string& dir) {
  std::vector<std::string> blobs;
  for (const auto& e : fs::directory_iterator(dir)) {
    if (e.path().extension() == ".blob") blobs.push_back(e.path().filename());
  }
  std::sort(blobs.begin(), blobs.end());
  return blobs;
}

// 64 KiB of random bytes: chunk i of file id in the blob files' tests.
std::string BlobChunk(uint64_t id, uint64_t i) { return RandomBytes(64 << 10, id * 100 + i); }

// `batches` blob files, one per flush, each of 8 files (ids batch * 10 ..
// + 7) of 4 chunks of 64 KiB (2 MiB); chunks in key order in each.
void WriteBlobFiles(Backend& b, uint64_t batches) {
  for (uint64_t batch = 0; batch < batches; ++batch) {
    WriteBatch w;
    for (uint64_t id = batch * 10; id < batch * 10 + 8; ++id) {
      for (uint64_t i = 0; i < 4; ++i) w.Put(Space::kChunks, ChunkKey(id, i), BlobChunk(id, i));
    }
    ASSERT_TRUE(b.Commit(w, true).ok());
    ASSERT_TRUE(b.Flush().ok());
  }
}

// A compaction after a delete (gc, restore, recompress) relocated every
// chunk of every blob file: deleting one old run's traces rewrote the whole
// store and needed as much free space. Now a blob file whose chunks are all
// deleted just goes, and chunks are copied out of the oldest files only as
// far as deleted chunks make a quarter of them.
TEST(RocksBackend, ACompactionCopiesOnlyTheChunksWhoseFilesItFrees) {
  TempDir dir;
  const std::string db = dir / "db";
  auto opened = OpenRocksBackend(db, {.create_if_missing = true});
  ASSERT_TRUE(opened.ok()) << opened.status().ToString();
  Backend& b = **opened;
  auto chunk = BlobChunk;
  WriteBlobFiles(b, 6);
  const std::vector<std::string> blobs = BlobFiles(db);
  ASSERT_EQ(blobs.size(), 6u);
  std::set<uint64_t> gone;
  auto remove = [&](uint64_t batch, uint64_t files) {
    WriteBatch w;
    for (uint64_t id = batch * 10; id < batch * 10 + files; ++id) {
      for (uint64_t i = 0; i < 4; ++i) w.Delete(Space::kChunks, ChunkKey(id, i));
      gone.insert(id);
    }
    ASSERT_TRUE(b.Commit(w, true).ok());
  };
  // Every chunk of the first and the third batch: their files go, the
  // others stay as they are.
  const uint64_t before = b.DiskBytes();
  remove(0, 8);
  remove(2, 8);
  ASSERT_TRUE(b.Compact().ok());
  EXPECT_EQ(BlobFiles(db), (std::vector<std::string>{blobs[1], blobs[3], blobs[4], blobs[5]}));
  EXPECT_LT(b.DiskBytes(), before - (7 << 19));  // 4 MiB freed, 3.5 at least
  // An eighth of the newest: not worth copying the rest; all stay.
  remove(5, 1);
  ASSERT_TRUE(b.Compact().ok());
  EXPECT_EQ(BlobFiles(db), (std::vector<std::string>{blobs[1], blobs[3], blobs[4], blobs[5]}));
  // Three eighths of the oldest: its rest is copied and it goes (with the
  // next oldest, deleted chunks would be under a quarter); the rest stay.
  remove(1, 3);
  ASSERT_TRUE(b.Compact().ok());
  auto now = BlobFiles(db);
  EXPECT_EQ(now.size(), 4u);
  EXPECT_EQ(std::count(now.begin(), now.end(), blobs[1]), 0);
  for (int i : {3, 4, 5}) EXPECT_EQ(std::count(now.begin(), now.end(), blobs[i]), 1) << i;
  std::string value;
  for (uint64_t batch = 0; batch < 6; ++batch) {
    for (uint64_t id = batch * 10; id < batch * 10 + 8; ++id) {
      for (uint64_t i = 0; i < 4; ++i) {
        Status st = b.Get(Space::kChunks, ChunkKey(id, i), &value);
        if (gone.count(id)) {
          EXPECT_TRUE(st.IsNotFound()) << id << "/" << i;
        } else {
          ASSERT_TRUE(st.ok()) << id << "/" << i << ": " << st.ToString();
          EXPECT_TRUE(value == chunk(id, i)) << id << "/" << i;
        }
      }
    }
  }
}

// Where a byte of the oldest of three blob files is flipped, after half
// of its chunks (files 0-3) were deleted, so that a compaction copies the
// rest out: records are in key order, each a 32-byte header and the
// 16-byte key before its 64 KiB value, after the file's 30-byte header,
// and a 32-byte footer ends the file.
uint64_t ValueByte(uint64_t id, uint64_t i) {
  return 30 + (id * 4 + i) * (32 + 16 + (64 << 10)) + 48 + 100;
}
uint64_t KeyByte(uint64_t id, uint64_t i, uint64_t byte) {
  return 30 + (id * 4 + i) * (32 + 16 + (64 << 10)) + 32 + byte;
}
enum class From { kStart, kEnd };

// Deletes the chunks of files 0 to 3 (WriteBlobFiles): the oldest blob
// file holds only deleted chunks then, and the next ones are worth
// copying out of.
Status DeleteFilesZeroToThree(Backend& b) {
  WriteBatch del;
  for (uint64_t id = 0; id < 4; ++id) {
    for (uint64_t i = 0; i < 4; ++i) del.Delete(Space::kChunks, ChunkKey(id, i));
  }
  return b.Commit(del, true);
}

// A synced write of one more chunk (file 99's first): whether the store
// still takes writes.
Status WriteFile99(Backend& b) {
  WriteBatch more;
  more.Put(Space::kChunks, ChunkKey(99, 0), BlobChunk(99, 0));
  return b.Commit(more, true);
}

// Flips the byte, compacts; returns whether the damaged file went (its
// live chunks copied out). Every write works after it, and every read of
// a chunk the damage did not touch: the first of files 4, 5 and 7, in the
// damaged file, unless `whole_file` (its header or footer damaged, the
// engine reads none of it: fsck names them, salvage reads them without
// the engine), and those of files 10 and 27 in the others.
bool CompactAfterDamage(uint64_t at, From from, bool whole_file, std::string* log_text) {
  CapturedLog log;
  TempDir dir;
  const std::string db = dir / "db";
  auto opened = OpenRocksBackend(db, {.create_if_missing = true});
  EXPECT_TRUE(opened.ok()) << opened.status().ToString();
  if (!opened.ok()) return false;
  Backend& b = **opened;
  WriteBlobFiles(b, 3);
  const std::vector<std::string> blobs = BlobFiles(db);
  EXPECT_EQ(blobs.size(), 3u);
  EXPECT_TRUE(DeleteFilesZeroToThree(b).ok());
  const std::string victim = db + "/" + blobs[0];
  std::string bytes = testing::ReadBytes(victim);
  const uint64_t offset = from == From::kStart ? at : bytes.size() - at;
  EXPECT_LT(offset, bytes.size());
  bytes[offset] ^= 0x55;
  WriteBytes(victim, bytes);
  Status compacted = b.Compact();
  EXPECT_TRUE(compacted.ok()) << compacted.ToString();
  Status wrote = WriteFile99(b);
  EXPECT_TRUE(wrote.ok()) << wrote.ToString();
  std::string value;
  for (uint64_t id : {4, 5, 7, 10, 27, 99}) {
    if (whole_file && id < 10) continue;
    Status st = b.Get(Space::kChunks, ChunkKey(id, 0), &value);
    EXPECT_TRUE(st.ok()) << id << ": " << st.ToString();
    EXPECT_TRUE(value == BlobChunk(id, 0)) << id;
  }
  *log_text = log.text();
  return !fs::exists(victim);
}

// One flipped byte in a live chunk of a blob file a compaction would copy
// out (gc, restore, unlink and a mount's retention all compact): the copy
// meets the damage. RocksDB counts that as an error it cannot recover from
// and refused every write after it, until the store was opened again: one
// damaged trace stopped every migration, chmod and unlink of a mount. Now
// the damaged file is left out of the copying, said in a warning, and
// writes go on.
TEST(RocksBackend, ADamagedChunkInABlobFileToCopyLeavesTheFileAndWritesGoOn) {
  std::string log;
  EXPECT_FALSE(CompactAfterDamage(ValueByte(6, 1), From::kStart, false, &log))
      << "the damaged file was copied out";
  EXPECT_NE(log.find("a damaged record"), std::string::npos) << log;
}

// The same for the file's own header and footer, which the engine reads
// as it opens the file to copy out of it (red team: each of these bytes
// stopped every write as a damaged chunk did).
TEST(RocksBackend, ADamagedHeaderOrFooterOfABlobFileToCopyLeavesTheFileAndWritesGoOn) {
  const std::pair<uint64_t, From> places[] = {
      {0, From::kStart},  {4, From::kStart},  {8, From::kStart}, {12, From::kStart},
      {13, From::kStart}, {20, From::kStart}, {32, From::kEnd},  {27, From::kEnd},
      {15, From::kEnd},   {4, From::kEnd}};
  for (const auto& [at, from] : places) {
    const std::string where =
        fmt::format("{} {}", at, from == From::kStart ? "from the start" : "from the end");
    std::string log;
    EXPECT_FALSE(CompactAfterDamage(at, from, true, &log))
        << where << ": the damaged file was copied";
    EXPECT_NE(log.find("check blob file"), std::string::npos) << where << log;
  }
}

// A damaged key of a live chunk (red team: the key as damaged names no
// chunk, the record read as a deleted chunk's, the compaction copied the
// file out, met the damage and the store refused every write), and so a
// damaged record of a deleted chunk too, which cannot be told from it:
// the file stays.
TEST(RocksBackend, ADamagedKeyOrADeletedChunkLeavesTheFileToo) {
  for (const uint64_t at : {KeyByte(6, 1, 15), KeyByte(6, 2, 3), ValueByte(1, 2)}) {
    std::string log;
    EXPECT_FALSE(CompactAfterDamage(at, From::kStart, false, &log)) << at;
    EXPECT_NE(log.find("a damaged record"), std::string::npos) << at << log;
  }
}

// A store of three blob files, the chunks of files 0 to 3 deleted
// (WriteBlobFiles, DeleteFilesZeroToThree); `victim`: the oldest blob file.
struct ThreeBlobFiles {
  TempDir dir;
  std::string db = dir / "db";
  std::unique_ptr<Backend> backend;
  std::string victim;

  // False, with the failure said, when it could not be made.
  bool Make() {
    auto opened = OpenRocksBackend(db, {.create_if_missing = true});
    EXPECT_TRUE(opened.ok()) << opened.status().ToString();
    if (!opened.ok()) return false;
    backend = std::move(*opened);
    WriteBlobFiles(*backend, 3);
    EXPECT_TRUE(DeleteFilesZeroToThree(*backend).ok());
    victim = db + "/" + BlobFiles(db)[0];
    return true;
  }
};

// A FIFO where a blob file was: the check does not hang on it (its open
// would wait for a writer), and the file is left out.
TEST(RocksBackend, AFifoWhereABlobFileWasIsLeftOutWithoutWaiting) {
  CapturedLog log;
  ThreeBlobFiles store;
  ASSERT_TRUE(store.Make());
  Backend& b = *store.backend;
  const std::string& victim = store.victim;
  ASSERT_EQ(::rename(victim.c_str(), (store.dir / "saved.blob").c_str()), 0);
  ASSERT_EQ(::mkfifo(victim.c_str(), 0600), 0);
  Status compacted = b.Compact();
  EXPECT_TRUE(compacted.ok()) << compacted.ToString();
  EXPECT_NE(log.text().find("not a regular file"), std::string::npos) << log.text();
  EXPECT_TRUE(WriteFile99(b).ok());
}

// Runs `at_instant` on the oldest blob file between the compaction's
// checks and the compaction itself, then `after` once the compaction
// returned, which must have failed: every write works after it, and every
// read of a chunk left whole (those of files 4, 5 and 7 in that file, and
// of files 10 and 27 in the others).
void CompactionFailsAtTheInstant(const std::function<void(const std::string&)>& at_instant,
                                 const std::function<void(const std::string&)>& after) {
  CapturedLog log;
  ThreeBlobFiles store;
  ASSERT_TRUE(store.Make());
  Backend& b = *store.backend;
  const std::string& victim = store.victim;
  bool reached = false;
  {
    ScopedFailpoint between("compact.checked", [&](const std::string&) {
      at_instant(victim);
      reached = true;
    });
    Status compacted = b.Compact();
    EXPECT_FALSE(compacted.ok()) << "the compaction met nothing wrong";
    EXPECT_NE(compacted.ToString().find("compact store " + store.db + ": "), std::string::npos)
        << compacted.ToString();
  }
  ASSERT_TRUE(reached) << "the point between the checks and the compaction was not reached";
  after(victim);
  Status wrote = WriteFile99(b);
  EXPECT_TRUE(wrote.ok()) << wrote.ToString();
  std::string value;
  for (uint64_t id : {4, 5, 7, 10, 27, 99}) {
    Status st = b.Get(Space::kChunks, ChunkKey(id, 0), &value);
    EXPECT_TRUE(st.ok()) << id << ": " << st.ToString();
    EXPECT_TRUE(value == BlobChunk(id, 0)) << id;
  }
  EXPECT_TRUE(fs::exists(victim));
  EXPECT_NE(log.text().find("writes go on"), std::string::npos) << log.text();
}

// Damage that comes after the checks, before the compaction reads it (a
// byte flipped in between): the compaction fails on it, and RocksDB
// counted that as an error it cannot recover from: every write was refused
// until the store was opened again (every migration, chmod and unlink of a
// mount). Now only the compaction fails; the files stay as they were and
// writes go on.
TEST(RocksBackend, DamageAfterTheChecksFailsTheCompactionNotTheWrites) {
  CompactionFailsAtTheInstant(
      [](const std::string& victim) {
        std::string bytes = testing::ReadBytes(victim);
        bytes[ValueByte(6, 1)] ^= 0x55;
        WriteBytes(victim, bytes);
      },
      [](const std::string&) {});
}

// The same for an I/O error: the file gone at that instant, back after
// (red team: the compaction's IOError stopped every write of a mount as
// a Corruption did).
TEST(RocksBackend, AnIoErrorAfterTheChecksFailsTheCompactionNotTheWrites) {
  CompactionFailsAtTheInstant(
      [](const std::string& victim) {
        ASSERT_EQ(::rename(victim.c_str(), (victim + ".away").c_str()), 0);
      },
      [](const std::string& victim) {
        ASSERT_EQ(::rename((victim + ".away").c_str(), victim.c_str()), 0);
      });
}

// What the engine's listener takes back: a failed compaction's error, but
// neither a full disk's (RocksDB recovers from it), nor a merge the close
// cut short (no warning then: AMergeCutShortByTheCloseIsNoWarning), nor
// any error of a flush or a write.
TEST(RocksBackend, OnlyAFailedCompactionsErrorIsTakenBack) {
  using Reason = rocksdb::BackgroundErrorReason;
  const rocksdb::DBOptions options = EngineOptions({.create_if_missing = true});
  ASSERT_EQ(options.listeners.size(), 1u);
  auto taken_back = [&](Reason reason, rocksdb::Status error, std::string* said) {
    CapturedLog log;
    options.listeners[0]->OnBackgroundError(reason, &error);
    *said = log.text();
    return error.ok();
  };
  std::string said;
  EXPECT_TRUE(taken_back(Reason::kCompaction, rocksdb::Status::Corruption("blob"), &said));
  EXPECT_NE(said.find("writes go on"), std::string::npos) << said;
  EXPECT_TRUE(taken_back(Reason::kCompaction, rocksdb::Status::IOError("gone"), &said));
  EXPECT_FALSE(taken_back(Reason::kCompaction, rocksdb::Status::NoSpace("full"), &said));
  EXPECT_FALSE(taken_back(Reason::kCompaction, rocksdb::Status::ShutdownInProgress(), &said));
  EXPECT_EQ(said, "");
  EXPECT_FALSE(taken_back(Reason::kFlush, rocksdb::Status::Corruption("blob"), &said));
  EXPECT_FALSE(taken_back(Reason::kWriteCallback, rocksdb::Status::IOError("log"), &said));
}

// The engine's errors as tbfs says them: a lock held by another process
// is Busy; a store whose filesystem is read-only, which fails at the lock
// file first, is said to be that (red team: "in use by another tbfs
// process" for a read-only filesystem).
// A blob file gone keeps no one out (the files whose chunks it held fail
// their reads), and every open says so at once, reader's and writer's
// (red team: ls and du were silent while fsck named the files lost).
TEST(RocksBackend, ABlobFileGoneIsSaidByEveryOpen) {
  TempDir dir;
  const std::string store = dir / "store";
  {
    BackendOptions o;
    o.create_if_missing = true;
    auto b = OpenRocksBackend(store, o);
    ASSERT_TRUE(b.ok()) << b.status().ToString();
    WriteBatch batch;
    batch.Put(Space::kChunks, "k", std::string(4096, 'x'));
    batch.Put(Space::kMeta, "m", "v");
    ASSERT_TRUE((*b)->Commit(batch, true).ok());
    ASSERT_TRUE((*b)->Flush().ok());
  }
  const std::vector<std::string> blobs = BlobFiles(store);
  ASSERT_EQ(blobs.size(), 1u);
  fs::remove(store + "/" + blobs[0]);
  for (const bool read_only : {true, false}) {
    CapturedLog log;
    BackendOptions o;
    o.read_only = read_only;
    auto b = OpenRocksBackend(store, o);
    ASSERT_TRUE(b.ok()) << b.status().ToString();
    std::string value;
    EXPECT_TRUE((*b)->Get(Space::kMeta, "m", &value).ok());
    EXPECT_NE(log.text().find("lists blob file " + blobs[0] + ", which is not there"),
              std::string::npos)
        << log.text();
    EXPECT_FALSE((*b)->Get(Space::kChunks, "k", &value).ok());
  }
}

TEST(RocksBackend, ALockFileOnAReadOnlyFilesystemIsNoOtherProcess) {
  const Status ro =
      FromRocks(rocksdb::Status::IOError("While lock file: /s/.tbfs/LOCK: Read-only file system"),
                "open store /s/.tbfs");
  EXPECT_EQ(ro.sys_errno(), EROFS) << ro.ToString();
  EXPECT_EQ(ro.ToString().find("another"), std::string::npos) << ro.ToString();
  EXPECT_NE(ro.ToString().find("read-only"), std::string::npos) << ro.ToString();
  const Status held = FromRocks(
      rocksdb::Status::IOError("lock hold by current process, acquire time 1 acquiring thread 2: "
                               "/s/.tbfs/LOCK: No locks available"),
      "open store /s/.tbfs");
  EXPECT_EQ(held.code(), Code::kBusy) << held.ToString();
}

// The choice itself: a quarter of the oldest files, within the room.
TEST(RocksBackend, BlobFilesWorthCopyingLeaveUnderAQuarterGarbage) {
  auto file = [](uint64_t n, uint64_t total, uint64_t garbage) {
    rocksdb::BlobMetaData f;
    f.blob_file_number = n;
    f.total_blob_bytes = total;
    f.garbage_blob_bytes = garbage;
    return f;
  };
  constexpr uint64_t kMiB = 1 << 20, kRoom = 1ull << 40;
  uint64_t kept = 0;
  // Listed out of order: the oldest is the lowest number.
  EXPECT_EQ(
      BlobFilesWorthCopying({file(9, 100 * kMiB, 0), file(3, 100 * kMiB, 40 * kMiB)}, kRoom, &kept),
      1u);
  EXPECT_EQ(kept, 0u);
  EXPECT_EQ(BlobFilesWorthCopying({file(3, 100 * kMiB, 20 * kMiB)}, kRoom, &kept), 0u);
  EXPECT_EQ(BlobFilesWorthCopying({}, kRoom, &kept), 0u);
  // 50 + 10 of 200: over a quarter with both.
  EXPECT_EQ(BlobFilesWorthCopying({file(1, 100 * kMiB, 50 * kMiB), file(2, 100 * kMiB, 10 * kMiB)},
                                  kRoom, &kept),
            2u);
  // No room for the 140 MiB both would copy: the oldest alone (50 MiB),
  // and the 10 MiB of the other named as kept.
  EXPECT_EQ(BlobFilesWorthCopying({file(1, 100 * kMiB, 50 * kMiB), file(2, 100 * kMiB, 10 * kMiB)},
                                  130 * kMiB, &kept),
            1u);
  EXPECT_EQ(kept, 10 * kMiB);
}

// The store folder renamed and a symbolic link put in its place while the
// store was open: the engine made its next files by path, through the
// link. A migration then "moved" files whose chunks were in the link's
// target, deleted the originals, and the store left in place no longer
// opened. Every file the engine writes now stays in the folder it opened.
TEST(RocksBackend, AStoreFolderSwappedWhileOpenKeepsEveryFileTheEngineWrites) {
  TempDir dir;
  const std::string db = dir / "db", moved = dir / "moved", elsewhere = dir / "elsewhere";
  ASSERT_EQ(::mkdir(elsewhere.c_str(), 0755), 0);
  auto put = [](Backend& b, uint64_t id) {
    WriteBatch w;
    for (uint64_t i = 0; i < 4; ++i)
      w.Put(Space::kChunks, ChunkKey(id, i), RandomBytes(64 << 10, id + i));
    w.Put(Space::kManifests, EncodeId(id), fmt::format("manifest {}", id));
    ASSERT_TRUE(b.Commit(w, true).ok());
    ASSERT_TRUE(b.Flush().ok());
  };
  {
    auto opened = OpenRocksBackend(db, {.create_if_missing = true});
    ASSERT_TRUE(opened.ok()) << opened.status().ToString();
    put(**opened, 1);
    ASSERT_EQ(::rename(db.c_str(), moved.c_str()), 0);
    ASSERT_EQ(::symlink(elsewhere.c_str(), db.c_str()), 0);
    for (uint64_t id = 2; id < 12; ++id) put(**opened, id);
    EXPECT_TRUE((*opened)->Compact().ok());
    EXPECT_TRUE(fs::is_empty(elsewhere));
  }
  EXPECT_TRUE(fs::is_empty(elsewhere));
  ASSERT_EQ(::unlink(db.c_str()), 0);
  ASSERT_EQ(::rename(moved.c_str(), db.c_str()), 0);
  auto opened = OpenRocksBackend(db, {});
  ASSERT_TRUE(opened.ok()) << opened.status().ToString();
  std::string value;
  for (uint64_t id = 1; id < 12; ++id) {
    ASSERT_TRUE((*opened)->Get(Space::kManifests, EncodeId(id), &value).ok()) << id;
    for (uint64_t i = 0; i < 4; ++i) {
      ASSERT_TRUE((*opened)->Get(Space::kChunks, ChunkKey(id, i), &value).ok()) << id;
      EXPECT_TRUE(value == RandomBytes(64 << 10, id + i)) << id << "/" << i;
    }
  }
  // A store folder that is a link is named by the folder it points to.
  ASSERT_EQ(::symlink(db.c_str(), (dir / "link").c_str()), 0);
  opened->reset();
  auto linked = OpenRocksBackend(dir / "link", {});
  ASSERT_FALSE(linked.ok());
  EXPECT_NE(linked.status().message().find("symbolic link"), std::string::npos)
      << linked.status().ToString();
}

// Each flush leaves a table file in every space it wrote to. With keys
// that only grow (file ids), the engine moves those files down whole and
// never merges them: left so, a store of 100,000 small cold files held 744
// table files open, and the daemon's memory grew with the store.
// The merges check each table first, by a reader of its own with no
// manifest entry to check the table's unique id against: the engine said
// "At least one SST file opened without unique ID to verify: 0.sst" as a
// warning at `tbfs migrate`. Not a warning any more.
TEST(RocksBackend, ManyFlushesOfGrowingKeysLeaveFewTableFiles) {
  CapturedLog log;
  TempDir dir;
  const std::string db = dir / "db";
  auto opened = OpenRocksBackend(db, {.create_if_missing = true});
  ASSERT_TRUE(opened.ok()) << opened.status().ToString();
  Backend& b = **opened;
  uint64_t id = 0;
  for (int flush = 0; flush < 100; ++flush) {
    WriteBatch batch;
    for (int i = 0; i < 50; ++i, ++id) {
      batch.Put(Space::kManifests, EncodeId(id), fmt::format("manifest {:0200}", id));
      batch.Put(Space::kChunks, ChunkKey(id, 0), fmt::format("chunk {:01000}", id));
    }
    ASSERT_TRUE(b.Commit(batch, false).ok());
    ASSERT_TRUE(b.Flush().ok());
  }
  // Two spaces written 100 times: at most a few merged files and fewer
  // than 8 small ones each, plus the other spaces' files.
  EXPECT_LE(TableFiles(db).size(), 24u);
  std::string value;
  for (uint64_t k = 0; k < id; k += 7) {
    ASSERT_TRUE(b.Get(Space::kManifests, EncodeId(k), &value).ok()) << k;
    EXPECT_EQ(value, fmt::format("manifest {:0200}", k));
    ASSERT_TRUE(b.Get(Space::kChunks, ChunkKey(k, 0), &value).ok()) << k;
    EXPECT_EQ(value, fmt::format("chunk {:01000}", k));
  }
  EXPECT_EQ(log.text().find("[warning] store engine: [WARN] [table"), std::string::npos)
      << log.text();
}

// One flipped byte in a small table file the next merge would take: the
// merge leaves it out, and the store goes on taking writes (a merge that
// read the damaged block would have put the engine in an error it cannot
// recover from, refusing every write after it).
TEST(RocksBackend, ADamagedSmallTableFileIsLeftOutOfMergesAndWritesGoOn) {
  TempDir dir;
  const std::string db = dir / "db";
  uint64_t id = 0;
  auto write = [&](Backend& b, int flushes) {
    for (int flush = 0; flush < flushes; ++flush) {
      WriteBatch batch;
      for (int i = 0; i < 50; ++i, ++id) {
        batch.Put(Space::kManifests, EncodeId(id), fmt::format("manifest {:0200}", id));
      }
      Status st = b.Commit(batch, false);
      ASSERT_TRUE(st.ok()) << st.ToString();
      ASSERT_TRUE(b.Flush().ok());
    }
  };
  {
    auto opened = OpenRocksBackend(db, {.create_if_missing = true});
    ASSERT_TRUE(opened.ok()) << opened.status().ToString();
    write(**opened, 6);  // six small files: no merge yet
  }
  std::string victim;
  {
    // The engine moves level 0's files down in the background: the store
    // may have closed before it did (seen in CI). An engine that writes
    // does it as it opens.
    Engine engine(db, false);
    for (int i = 0; i < 300 && victim.empty(); ++i) {
      rocksdb::ColumnFamilyMetaData meta;
      engine.db->GetColumnFamilyMetaData(engine.Space("manifests"), &meta);
      for (const auto& level : meta.levels) {
        if (level.level > 0 && !level.files.empty()) victim = db + level.files[0].name;
      }
      if (victim.empty()) std::this_thread::sleep_for(std::chrono::milliseconds(100));
    }
  }
  ASSERT_FALSE(victim.empty());
  {
    std::string bytes = testing::ReadBytes(victim);
    bytes[40] ^= 0x55;  // in the first data block
    WriteBytes(victim, bytes);
  }
  auto opened = OpenRocksBackend(db, {});
  ASSERT_TRUE(opened.ok()) << opened.status().ToString();
  write(**opened, 20);  // runs of 8 and more form: each would include the damaged file
  EXPECT_TRUE(fs::exists(victim)) << "the damaged file was merged";
  std::string value;
  ASSERT_TRUE((*opened)->Get(Space::kManifests, EncodeId(id - 1), &value).ok());
  // Nor does a compaction (gc, restore) take it: the space is left as it
  // is, the others are compacted, and writes go on.
  {
    CapturedLog log;
    Status compacted = (*opened)->Compact();
    EXPECT_TRUE(compacted.ok()) << compacted.ToString();
    EXPECT_NE(log.text().find("manifests is not compacted"), std::string::npos) << log.text();
  }
  EXPECT_TRUE(fs::exists(victim)) << "the damaged file was compacted";
  write(**opened, 1);
  ASSERT_TRUE((*opened)->Get(Space::kManifests, EncodeId(id - 1), &value).ok());
}

TEST(RocksBackend, FilesRemovedRetiredAndDroppedLeaveNoRangeDeletion) {
  TempDir dir;
  WorkPool pool(2);
  const std::string store_dir = dir / ".tbfs";
  {
    auto s = ColdStore::Open(store_dir, {.create_if_missing = true});
    ASSERT_TRUE(s.ok()) << s.status().ToString();
    ColdStore& store = **s;
    storepb::Manifest a = Ingest(store, dir.path(), "a.pt.trace.json", 5 * kChunk + 3, &pool);
    storepb::Manifest b = Ingest(store, dir.path(), "b.pt.trace.json", 3 * kChunk, &pool);
    Ingest(store, dir.path(), "c.pt.trace.json", 2 * kChunk, &pool);
    WriteBatch remove;
    ASSERT_TRUE(store.RemoveFile(&remove, a).ok());
    ASSERT_TRUE(store.Retire(&remove, b).ok());
    ASSERT_TRUE(store.Commit(remove, true).ok());
    ASSERT_TRUE(store.DropAllRetired().ok());
    ASSERT_TRUE(store.Flush().ok());
    // Every chunk of a and b went with them, and nothing else.
    auto chunks = Fsck(store, &pool, nullptr);
    ASSERT_TRUE(chunks.ok()) << chunks.status().ToString();
    EXPECT_TRUE(chunks->clean());
    uint64_t left = 0;
    ASSERT_TRUE(store
                    .ForEachChunkKey([&](uint64_t id, uint64_t) {
                      EXPECT_NE(id, a.file_id());
                      EXPECT_NE(id, b.file_id());
                      left++;
                      return true;
                    })
                    .ok());
    EXPECT_EQ(left, 2u);
  }
  EXPECT_EQ(Engine(store_dir).RangeDeletions(), 0u);
}

TEST(RocksBackend, AWriterDropsTheRangeDeletionsAnOlderStoreHolds) {
  TempDir dir;
  WorkPool pool(2);
  const std::string store_dir = dir / ".tbfs";
  storepb::Manifest kept;
  {
    auto s = ColdStore::Open(store_dir, {.create_if_missing = true});
    ASSERT_TRUE(s.ok()) << s.status().ToString();
    kept = Ingest(**s, dir.path(), "kept.pt.trace.json", 4 * kChunk, &pool);
    Ingest(**s, dir.path(), "gone.pt.trace.json", 2 * kChunk, &pool);
  }
  {
    // What tbfs before this change wrote for a removed file: one range
    // deletion over its chunks.
    Engine old(store_dir, false);
    const uint64_t gone = kept.file_id() + 1;
    ASSERT_TRUE(
        old.db->DeleteRange({}, old.Space("chunks"), ChunkKey(gone, 0), ChunkKey(gone + 1, 0))
            .ok());
    ASSERT_TRUE(old.db->Flush({}, old.handles).ok());
    ASSERT_GT(old.RangeDeletions(), 0u);
  }
  {
    auto s = ColdStore::Open(store_dir, {});
    ASSERT_TRUE(s.ok()) << s.status().ToString();
    EXPECT_TRUE(VerifyStoredFile(**s, kept, &pool).ok());
  }
  EXPECT_EQ(Engine(store_dir).RangeDeletions(), 0u);
}

TEST(RocksBackend, AnyTableFileLostFailsTheToolsThatNeedItNeverTheProcess) {
  // Removals and retirements before a table file goes: every tool that
  // scans reads past the deletes to the table it cannot open, and says so.
  TempDir dir;
  WorkPool pool(2);
  const std::string store_dir = dir / ".tbfs";
  {
    auto s = ColdStore::Open(store_dir, {.create_if_missing = true});
    ASSERT_TRUE(s.ok()) << s.status().ToString();
    ColdStore& store = **s;
    std::vector<storepb::Manifest> files;
    for (int i = 0; i < 4; ++i) {
      files.push_back(Ingest(store, dir.path(), fmt::format("run/t{}.pt.trace.json", i),
                             (i + 2) * kChunk, &pool));
      ASSERT_TRUE(store.Flush().ok());  // a table file each
    }
    WriteBatch remove;
    ASSERT_TRUE(store.RemoveFile(&remove, files[0]).ok());
    ASSERT_TRUE(store.Retire(&remove, files[2]).ok());
    ASSERT_TRUE(store.Commit(remove, true).ok());
    ASSERT_TRUE(store.DropAllRetired().ok());
    ASSERT_TRUE(store.Flush().ok());
  }
  const std::vector<std::string> tables = TableFiles(store_dir);
  ASSERT_GE(tables.size(), 5u);
  int refused = 0;
  for (const std::string& table : tables) {
    SCOPED_TRACE(table);
    const std::string copy = dir / ("copy-" + table);
    fs::copy(store_dir, copy);
    fs::remove(copy + "/" + table);
    auto s = ColdStore::Open(copy, {.read_only = true});
    if (!s.ok()) {
      refused++;
      continue;
    }
    auto report = Fsck(**s, &pool, nullptr);
    Status chunks = (*s)->ForEachChunkKey([](uint64_t, uint64_t) { return true; });
    Status manifests = (*s)->ForEachManifest([](const storepb::Manifest&) { return true; });
    if (!report.ok() || !report->clean() || !chunks.ok() || !manifests.ok()) refused++;
  }
  // Each table held something a scan needs (the 4 files' chunks at least).
  EXPECT_GE(refused, 4);
}

// The engine's account of a merge cut short by a store's close is no
// warning (`tbfs-bench dictionaries` printed "[warning] store engine: ...
// Background IO error Shutdown in progress" after work that was done), nor
// its note on a table opened outside its manifest. Any other warning of
// the engine stays one.
TEST(RocksBackend, AMergeCutShortByTheCloseIsNoWarning) {
  CapturedLog captured;
  const auto log = NewEngineLog(spdlog::level::warn);
  rocksdb::Log(rocksdb::InfoLogLevel::WARN_LEVEL, log, "[db/error_handler.cc:397] %s",
               "Background IO error Shutdown in progress: Database shutdown");
  rocksdb::Log(rocksdb::InfoLogLevel::WARN_LEVEL, log, "[db/db_impl.cc:1] %s",
               "Corruption: block checksum mismatch");
  rocksdb::Log(rocksdb::InfoLogLevel::WARN_LEVEL, log,
               "[table/block_based/block_based_table_reader.cc:723] %s",
               "At least one SST file opened without unique ID to verify: 0.sst");
  EXPECT_EQ(
      captured.text(),
      "[debug] store engine: [WARN] [db/error_handler.cc:397] Background IO error Shutdown in "
      "progress: Database shutdown\n"
      "[warning] store engine: [WARN] [db/db_impl.cc:1] Corruption: block checksum mismatch\n"
      "[debug] store engine: [WARN] [table/block_based/block_based_table_reader.cc:723] At "
      "least one SST file opened without unique ID to verify: 0.sst\n");
}

// A writer's open on a full disk: the tool's one line says it (`tbfs
// migrate: open store S: its filesystem is full`), not the engine's dump of
// every record of the MANIFEST write that failed, nor its own "DB::Open()
// failed" before it.
TEST(RocksBackend, AFailedOpenIsTheCallersLineNotTheEnginesDump) {
  CapturedLog captured;
  const auto log = NewEngineLog(spdlog::level::warn);
  rocksdb::Log(rocksdb::InfoLogLevel::ERROR_LEVEL, log, "[db/version_set.cc:5250] %s",
               "Error in committing version edit to MANIFEST: \nVersionEdit {\n  PrevLogNumber: "
               "0\n  NextFileNumber: 54\n}\n");
  rocksdb::Log(rocksdb::InfoLogLevel::WARN_LEVEL, log, "[db/db_impl/db_impl_open.cc:2086] %s",
               "DB::Open() failed: IO error: No space left on device");
  EXPECT_EQ(captured.text(),
            "[warning] store engine: [ERROR] [db/version_set.cc:5250] Error in committing version "
            "edit to MANIFEST\n"
            "[debug] store engine: [WARN] [db/db_impl/db_impl_open.cc:2086] DB::Open() failed: IO "
            "error: No space left on device\n");
}

}  // namespace
}  // namespace tbfs::store
