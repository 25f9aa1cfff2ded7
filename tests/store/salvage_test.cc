#include "store/salvage.h"

#include <gtest/gtest.h>
#include <sys/stat.h>

#include <filesystem>
#include <functional>
#include <iostream>
#include <map>
#include <set>

#include "base/failpoint.h"
#include "fmt/format.h"
#include "store/file_io.h"
#include "store/format.h"
#include "store/maintenance.h"
#include "store/migrate.h"
#include "store/migrate_internal.h"
#include "store/rocks_env.h"
#include "store/store_dir.h"
#include "tests/store/store_internals.h"
#include "tests/test_util.h"
#include "tools/gen/gen.h"

namespace tbfs::store {
namespace {

namespace fs = std::filesystem;
using testing::ReadBytes;
using testing::TempDir;

// A migrated logdir's store, closed, with the original bytes of every cold
// file: the pristine copy each trial damages a copy of.
class SalvageTest : public ::testing::Test {
 protected:
  void SetUp() override {
    gen::GenOptions g;
    g.runs = 2;
    g.steps = 50;
    g.trace_mb = 3;
    gen::GenReport report;
    ASSERT_TRUE(gen::GenerateLogdir(logdir_, g, &report).ok());
    CandidateOptions c;
    c.older_than_s = 0;
    c.walk.skip_dirs = {kStoreDirName};
    std::vector<Candidate> candidates;
    std::vector<Skipped> skipped;
    ASSERT_TRUE(FindCandidates(logdir_, c, &candidates, &skipped).ok());
    ASSERT_GT(candidates.size(), 4u);
    for (const Candidate& cand : candidates)
      originals_[cand.path] = ReadBytes(logdir_ + "/" + cand.path);
    OpenOptions o;
    o.create_if_missing = true;
    auto store = ColdStore::Open(store_, o);
    ASSERT_TRUE(store.ok()) << store.status().ToString();
    MigrateOptions m;
    m.chunk_bytes = 64 << 10;  // many chunks, several per file
    m.level = 3;
    m.walk.skip_dirs = {kStoreDirName};
    auto result = Migrate(**store, logdir_, candidates, m);
    ASSERT_TRUE(result.ok());
    ASSERT_EQ(result->files_moved, candidates.size());
    // One change left in the engine's log only (not flushed), as a mount's
    // chmod of a cold file leaves it: the log is a store file too.
    auto first = (*store)->Lookup(candidates[0].path);
    ASSERT_TRUE(first.ok());
    first->set_mode((first->mode() & S_IFMT) | 0640);
    WriteBatch batch;
    (*store)->UpdateManifest(&batch, *first);
    ASSERT_TRUE((*store)->Commit(batch, true).ok());
  }

  Result<SalvageReport> SalvageInto(const std::string& store, const std::string& to) {
    SalvageOptions o;
    o.store_dir = store;
    o.to = to;
    o.pool = &pool_;
    return Salvage(o);
  }

  // Salvages `store` into a new folder; checks every file written is the
  // original, byte for byte. Returns the report.
  SalvageReport SalvageAndCheck(const std::string& store, const std::string& what) {
    const std::string to = dir_ / fmt::format("out{}", ++trials_);
    auto r = SalvageInto(store, to);
    EXPECT_TRUE(r.ok()) << what << ": " << r.status().ToString();
    if (!r.ok()) return {};
    for (const auto& [path, bytes] : originals_) {
      const std::string out = to + "/" + path;
      if (fs::exists(out)) {
        EXPECT_EQ(ReadBytes(out), bytes) << what << ": wrong bytes in " << path;  // never
      }
    }
    EXPECT_EQ(r->files + r->lost.size(), originals_.size()) << what;
    fs::remove_all(to);
    return *r;
  }

  TempDir dir_;
  WorkPool pool_{2};
  std::string logdir_ = dir_ / "logdir";
  std::string store_ = dir_ / "store";
  std::map<std::string, std::string> originals_;
  int trials_ = 0;
};

std::string KindOf(const std::string& name) {
  for (const char* suffix : {".sst", ".blob", ".log"}) {
    if (name.size() > 4 && name.ends_with(suffix)) return std::string("*") + suffix;
  }
  return name.substr(0, name.find('-'));
}

TEST_F(SalvageTest, AnIntactStoreGivesBackEveryFile) {
  auto r = SalvageAndCheck(store_, "intact");
  EXPECT_EQ(r.engine, "read-only");
  EXPECT_EQ(r.files, originals_.size());
  EXPECT_TRUE(r.lost.empty());
  EXPECT_TRUE(r.problems.empty());
}

// A store of a format newer than this tbfs reads: salvage says so (what it
// cannot read fails its checks and is listed as lost, never other bytes).
TEST_F(SalvageTest, AStoreOfANewerFormatIsSaidToBeSo) {
  {
    auto store = ColdStore::Open(store_, OpenOptions());
    ASSERT_TRUE(store.ok()) << store.status().ToString();
    storepb::StoreInfo info = (*store)->info();
    info.set_format_version(kNewestFormatVersion + 1);
    WriteBatch b;
    b.Put(Space::kMeta, kMetaInfoKey, info.SerializeAsString());
    ASSERT_TRUE((*store)->Commit(b, true).ok());
  }
  auto r = SalvageAndCheck(store_, "newer format");
  ASSERT_EQ(r.problems.size(), 1u) << ::testing::PrintToString(r.problems);
  EXPECT_NE(r.problems[0].find(fmt::format("format version {}; this tbfs reads versions 1 to {} "
                                           "only",
                                           kNewestFormatVersion + 1, kNewestFormatVersion)),
            std::string::npos)
      << r.problems[0];
}

// Format 4: a folder renamed after its files moved comes back where it is
// now, from the engine's namespace, and from the blob files alone (each
// folder's place has a copy with the chunks).
TEST_F(SalvageTest, AFolderRenamedSinceItsFilesMovedComesBackWhereItIsNow) {
  std::string run;
  for (const auto& [path, bytes] : originals_) run = path.substr(0, path.find('/'));
  {
    auto store = ColdStore::Open(store_, {});
    ASSERT_TRUE(store.ok());
    WriteBatch b;
    ASSERT_TRUE((*store)->Rename(&b, run, "moved/" + run, nullptr).ok());
    ASSERT_TRUE((*store)->Commit(b, true).ok());
    ASSERT_TRUE((*store)->Flush().ok());  // the links' copies into blob files
  }
  std::map<std::string, std::string> now;
  for (const auto& [path, bytes] : originals_)
    now[path.starts_with(run + "/") ? "moved/" + path : path] = bytes;
  const std::string blobs_only = dir_ / "blobs-only";
  fs::create_directories(blobs_only);
  ::chmod(blobs_only.c_str(), 0700);
  for (const auto& e : fs::directory_iterator(store_)) {
    if (e.path().extension() == ".blob") fs::copy(e.path(), blobs_only / e.path().filename());
  }
  for (const std::string& store : {store_, blobs_only}) {
    const std::string to = dir_ / fmt::format("out{}", ++trials_);
    auto r = SalvageInto(store, to);
    ASSERT_TRUE(r.ok()) << store << ": " << r.status().ToString();
    EXPECT_EQ(r->files, now.size()) << store;
    for (const auto& [path, bytes] : now) {
      ASSERT_TRUE(fs::exists(to + "/" + path)) << store << ": " << path;
      EXPECT_TRUE(ReadBytes(to + "/" + path) == bytes) << store << ": " << path;
    }
  }
}

// Finding 5: one flipped byte, at five places of every file of the store.
// Whatever the file, every cold file whose own chunks it does not hold is
// written back whole, and no wrong byte is ever written. Prints the table.
TEST_F(SalvageTest, OneFlippedByteInAnyStoreFileLosesOnlyWhatItHolds) {
  struct Row {
    int trials = 0, all_back = 0, lost = 0, engine_down = 0;
  };
  std::map<std::string, Row> table;
  for (const auto& entry : fs::directory_iterator(store_)) {
    const std::string name = entry.path().filename();
    const uint64_t size = fs::file_size(entry.path());
    if (name == "LOCK" || name == kLogdirLockName || size == 0) continue;
    for (uint64_t offset : {uint64_t{0}, size / 3, size / 2, 2 * size / 3, size - 1}) {
      const std::string work = dir_ / "work";
      fs::remove_all(work);
      fs::copy(store_, work);
      std::string bytes = ReadBytes(work + "/" + name);
      bytes[offset] = static_cast<char>(bytes[offset] ^ 0x40);
      testing::WriteBytes(work + "/" + name, bytes);
      const std::string what = fmt::format("{} byte {} of {}", name, offset, size);
      SalvageReport r = SalvageAndCheck(work, what);
      Row& row = table[KindOf(name)];
      row.trials++;
      row.lost += static_cast<int>(r.lost.size());
      if (r.lost.empty()) row.all_back++;
      if (r.engine != "read-only") row.engine_down++;
      // Only a blob file holds chunks: one byte there can cost one file.
      EXPECT_LE(r.lost.size(), KindOf(name) == "*.blob" ? 1u : 0u) << what;
    }
  }
  std::cout << "store file | trials | every file back | files lost | engine did not open\n";
  for (const auto& [kind, row] : table) {
    std::cout << fmt::format("{} | {} | {} | {} | {}\n", kind, row.trials, row.all_back, row.lost,
                             row.engine_down);
  }
  EXPECT_TRUE(table.count("*.blob") && table.count("*.sst") && table.count("MANIFEST") &&
              table.count("CURRENT") && table.count("*.log"));
}

// A deleted file's blobs stay until a compaction: salvage writes it only
// apart (kUnlisted), never back among the store's files.
TEST_F(SalvageTest, FilesDeletedFromTheStoreComeBackOnlyApart) {
  std::string gone;
  {
    auto store = ColdStore::Open(store_, OpenOptions{});
    ASSERT_TRUE(store.ok());
    gone = originals_.begin()->first;
    auto m = (*store)->Lookup(gone);
    ASSERT_TRUE(m.ok());
    WriteBatch batch;
    ASSERT_TRUE((*store)->RemoveFile(&batch, *m).ok());  // its blobs stay until a compaction
    ASSERT_TRUE((*store)->Commit(batch, true).ok());
    ASSERT_TRUE((*store)->Flush().ok());
  }
  const std::string to = dir_ / "out";
  auto r = SalvageInto(store_, to);
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->files, originals_.size());
  EXPECT_EQ(r->unlisted, 1u);
  EXPECT_FALSE(fs::exists(to + "/" + gone));
  EXPECT_EQ(ReadBytes(to + "/" + kUnlisted + "/" + gone), originals_[gone]);
}

// Red team: pointed at a folder of other files, or an empty one, salvage
// made its scratch folder in it, copied the files there, and said it
// found nothing (exit 0). It is refused now, and left as it was.
TEST_F(SalvageTest, AFolderThatHoldsNoStoreIsRefusedAndLeftAsItWas) {
  const std::string foreign = dir_ / "foreign", empty = dir_ / "empty";
  testing::WriteBytes(foreign + "/data.txt", "mine");
  fs::create_directories(empty);
  auto r = SalvageInto(foreign, dir_ / "out1");
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("not a tbfs store"), std::string::npos)
      << r.status().message();
  r = SalvageInto(empty, dir_ / "out2");
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("no tbfs store"), std::string::npos) << r.status().message();
  std::vector<std::string> names;
  for (const auto& e : fs::directory_iterator(foreign)) names.push_back(e.path().filename());
  EXPECT_EQ(names, std::vector<std::string>{"data.txt"});
  EXPECT_TRUE(fs::is_empty(empty));
  EXPECT_FALSE(fs::exists(dir_ / "out1"));
  EXPECT_FALSE(fs::exists(dir_ / "out2"));
}

TEST_F(SalvageTest, RefusesAFolderThatIsNotEmptyAndChangesNothingInTheStore) {
  auto listing = [&] {
    std::map<std::string, std::pair<uint64_t, int64_t>> out;
    for (const auto& e : fs::directory_iterator(store_)) {
      struct stat st;
      ::stat(e.path().c_str(), &st);
      out[e.path().filename()] = {static_cast<uint64_t>(st.st_size),
                                  st.st_mtim.tv_nsec + st.st_mtim.tv_sec * 1'000'000'000ll};
    }
    return out;
  };
  const auto before = listing();
  const std::string to = dir_ / "busy";
  fs::create_directories(to);
  testing::WriteBytes(to + "/x", "x");
  auto r = SalvageInto(store_, to);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("not empty"), std::string::npos);
  const std::string fresh = dir_ / "fresh";
  ASSERT_TRUE(SalvageInto(store_, fresh).ok());
  EXPECT_EQ(listing(), before);
  struct stat st;
  ASSERT_EQ(::stat(fresh.c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 07777, 0700u);
}

// fsck reads past a damaged part and names each file; when the manifests
// space is unreadable it takes the files from the second copies.
TEST_F(SalvageTest, FsckGoesOnPastDamageAndNamesEachFile) {
  // Damage every table file but the chunks' (found by trying): the one
  // whose damage hides the manifests.
  bool found = false;
  for (const auto& entry : fs::directory_iterator(store_)) {
    const std::string name = entry.path().filename();
    if (!name.ends_with(".sst")) continue;
    const std::string work = dir_ / "fsck";
    fs::remove_all(work);
    fs::copy(store_, work);
    std::string bytes = ReadBytes(work + "/" + name);
    bytes[bytes.size() / 2] ^= 0x40;
    testing::WriteBytes(work + "/" + name, bytes);
    OpenOptions ro;
    ro.read_only = true;
    auto store = ColdStore::Open(work, ro);
    if (!store.ok()) continue;  // the meta space: fsck falls back to salvage (CLI test)
    auto r = Fsck(**store, &pool_, nullptr);
    ASSERT_TRUE(r.ok()) << name << ": " << r.status().ToString();
    if (r->manifests_from_copies) {
      // The manifests' table, or the namespace's (format 4 derives every
      // manifest's path from it): the files' chunks are intact either way.
      EXPECT_FALSE(r->clean());
      EXPECT_EQ(r->files, originals_.size()) << "every file checked through its manifest's copy";
      for (const auto& [path, why] : r->damaged)
        EXPECT_NE(why.find("namespace entry"), std::string::npos) << path << ": " << why;
      if (r->damaged.empty()) found = true;
    }
  }
  EXPECT_TRUE(found) << "no table file held the manifests";
}

// fsck is clean only when a writer can open the store: one flipped byte in
// any table file that keeps writers out (the small spaces' tables too, which
// no file read touches) makes fsck say so.
TEST_F(SalvageTest, FsckIsNotCleanWhenAWriterCannotOpenTheStore) {
  int refused = 0;
  for (const auto& entry : fs::directory_iterator(store_)) {
    const std::string name = entry.path().filename();
    if (!name.ends_with(".sst")) continue;
    for (const double where : {0.25, 0.5, 0.9}) {
      const std::string work = dir_ / "damaged", probe = dir_ / "probe";
      fs::remove_all(work);
      fs::remove_all(probe);
      fs::copy(store_, work);
      std::string bytes = ReadBytes(work + "/" + name);
      bytes[static_cast<size_t>(static_cast<double>(bytes.size()) * where)] ^= 0x10;
      testing::WriteBytes(work + "/" + name, bytes);
      fs::copy(work, probe);
      const bool writer_opens = ColdStore::Open(probe, OpenOptions{}).ok();
      OpenOptions ro;
      ro.read_only = true;
      auto store = ColdStore::Open(work, ro);
      if (!store.ok()) continue;  // fsck falls back to salvage, and is not clean (CLI test)
      auto r = Fsck(**store, &pool_, nullptr);
      ASSERT_TRUE(r.ok()) << name << ": " << r.status().ToString();
      if (!writer_opens) {
        refused++;
        EXPECT_FALSE(r->clean()) << name << " at " << where
                                 << ": writers refuse the store, fsck says clean";
      }
    }
  }
  EXPECT_GT(refused, 0) << "no damage kept a writer out: the test tests nothing";
}

// The baselines space holds only the last batch's verifier summary: a
// damaged table of it is set aside (lost+found) and the space rebuilt empty
// by the next writer, which opens; it never keeps the store from writers.
TEST_F(SalvageTest, ADamagedBaselinesTableIsSetAsideAndRebuiltByAWriter) {
  std::vector<std::string> tables;  // the space's name is in each table's properties
  for (const auto& entry : fs::directory_iterator(store_)) {
    const std::string name = entry.path().filename();
    if (name.ends_with(".sst") && ReadBytes(entry.path()).find("baselines") != std::string::npos)
      tables.push_back(name);
  }
  ASSERT_FALSE(tables.empty()) << "the migration wrote no baselines table";
  int refused_before = 0;
  for (const std::string& name : tables) {
    for (const double where : {0.05, 0.3, 0.5, 0.7, 0.9}) {
      const std::string work = dir_ / "damaged";
      fs::remove_all(work);
      fs::copy(store_, work);
      std::string bytes = ReadBytes(work + "/" + name);
      bytes[static_cast<size_t>(static_cast<double>(bytes.size()) * where)] ^= 0x10;
      testing::WriteBytes(work + "/" + name, bytes);
      {
        OpenOptions ro;
        ro.read_only = true;
        auto reader = ColdStore::Open(work, ro);
        ASSERT_TRUE(reader.ok()) << reader.status().ToString();
        if (!StoreInternals::Of(**reader).VerifyTables().ok()) refused_before++;
      }
      auto writer = ColdStore::Open(work, OpenOptions{});
      ASSERT_TRUE(writer.ok()) << name << " at " << where << ": " << writer.status().ToString();
      writer->reset();
      OpenOptions ro;
      ro.read_only = true;
      auto store = ColdStore::Open(work, ro);
      ASSERT_TRUE(store.ok()) << store.status().ToString();
      auto r = Fsck(**store, &pool_, nullptr);
      ASSERT_TRUE(r.ok()) << r.status().ToString();
      EXPECT_EQ(r->files, originals_.size()) << name << " at " << where;
      EXPECT_TRUE(r->damaged.empty() && r->problems.empty() && r->lost.empty())
          << name << " at " << where << ": "
          << (r->problems.empty() ? std::string() : r->problems[0]);
      bool set_aside = false;
      std::error_code ec;
      for (const auto& e : fs::directory_iterator(work + "/" + kLostFoundName, ec)) {
        if (e.path().filename().string().ends_with(name) && ReadBytes(e.path()) == bytes)
          set_aside = true;
      }
      const bool kept = fs::exists(work + "/" + name) && ReadBytes(work + "/" + name) == bytes;
      EXPECT_TRUE(set_aside || kept) << name << " at " << where << ": gone, not set aside";
    }
  }
  EXPECT_GT(refused_before, 0) << "no damage made the table unreadable: the test tests nothing";
}

// Red team: a MANIFEST cut short opened as an older, emptier store; the
// writer took it for a new store and the engine deleted every table and
// blob file it did not list. Now, wherever it is cut, nothing is deleted:
// a writer refuses the store unchanged (no format record in what the cut
// MANIFEST describes), or opens the older state it describes with every
// file it does not list set aside (fsck counts them), and salvage reads
// every file back either way.
TEST_F(SalvageTest, AManifestCutShortLosesNoFileToAWriter) {
  std::string manifest;
  for (const auto& e : fs::directory_iterator(store_)) {
    if (e.path().filename().string().starts_with("MANIFEST-")) manifest = e.path();
  }
  ASSERT_FALSE(manifest.empty());
  int refused = 0;
  const uint64_t size = fs::file_size(manifest);
  for (uint64_t cut : {size / 8, size / 4, size / 2, size * 3 / 4}) {
    const std::string work = dir_ / "cut";
    fs::remove_all(work);
    fs::copy(store_, work);
    fs::resize_file(work + "/" + fs::path(manifest).filename().string(), cut);
    std::set<std::string> before;
    for (const auto& e : fs::directory_iterator(work)) before.insert(e.path().filename());
    auto writer = ColdStore::Open(work, OpenOptions{});
    std::set<std::string> after;
    for (const auto& e : fs::directory_iterator(work)) after.insert(e.path().filename());
    if (!writer.ok()) {
      refused++;
      EXPECT_EQ(writer.status().code(), Code::kCorruption) << writer.status().ToString();
      EXPECT_NE(writer.status().message().find("salvage"), std::string::npos);
      EXPECT_EQ(after, before) << "the refused open changed the store";
    } else {
      for (const auto& name : before) {
        if (!name.ends_with(".sst") && !name.ends_with(".blob")) continue;
        EXPECT_TRUE(after.count(name) || !fs::is_empty(work + "/" + std::string(kLostFoundName)))
            << name << " went, and nothing was set aside";
      }
      writer->reset();
    }
    auto r = SalvageAndCheck(work, fmt::format("MANIFEST cut at {}", cut));
    EXPECT_EQ(r.files + r.unlisted, originals_.size() + r.unlisted) << "cut at " << cut;
    EXPECT_EQ(r.lost.size(), 0u) << "cut at " << cut;
  }
  EXPECT_GT(refused, 0) << "no cut was refused: the format-record check tests nothing";
}

// A MANIFEST cut back past a compaction lists table files the compaction
// deleted: the engine's open fails on the first of them ("No such file").
// That is damage like any other: a writer refuses the store unchanged and
// says how to get the files out, fsck says it is not clean, and salvage
// reads every file back.
TEST_F(SalvageTest, AManifestCutBackPastACompactionIsCalledDamageAndLosesNothing) {
  std::string manifest;
  uint64_t keep = 0;
  {
    auto store = ColdStore::Open(store_, OpenOptions{});
    ASSERT_TRUE(store.ok()) << store.status().ToString();
    for (const auto& e : fs::directory_iterator(store_)) {
      if (e.path().filename().string().starts_with("MANIFEST-")) manifest = e.path();
    }
    keep = fs::file_size(manifest);
    ASSERT_TRUE((*store)->Compact().ok());
  }
  ASSERT_GT(fs::file_size(manifest), keep) << "the compaction wrote nothing to the MANIFEST";
  fs::resize_file(manifest, keep);
  std::set<std::string> before;
  for (const auto& e : fs::directory_iterator(store_)) before.insert(e.path().filename());
  auto writer = ColdStore::Open(store_, OpenOptions{});
  ASSERT_FALSE(writer.ok()) << "the cut MANIFEST lists no deleted table: the test tests nothing";
  EXPECT_EQ(writer.status().code(), Code::kCorruption) << writer.status().ToString();
  EXPECT_NE(writer.status().message().find("tbfs salvage"), std::string::npos)
      << writer.status().ToString();
  EXPECT_NE(writer.status().message().find("MANIFEST"), std::string::npos)
      << writer.status().ToString();
  std::set<std::string> after;
  for (const auto& e : fs::directory_iterator(store_)) after.insert(e.path().filename());
  EXPECT_EQ(after, before) << "the refused open changed the store";
  OpenOptions ro;
  ro.read_only = true;
  if (auto reader = ColdStore::Open(store_, ro); reader.ok()) {
    auto r = Fsck(**reader, &pool_, nullptr);
    ASSERT_TRUE(r.ok()) << r.status().ToString();
    EXPECT_FALSE(r->clean()) << "writers refuse the store, fsck says clean";
  } else {
    EXPECT_EQ(reader.status().code(), Code::kCorruption) << reader.status().ToString();
  }
  auto r = SalvageAndCheck(store_, "MANIFEST cut back past a compaction");
  EXPECT_EQ(r.files, originals_.size());
  EXPECT_TRUE(r.lost.empty()) << ::testing::PrintToString(r.lost);
}

// Red team: a table file gone that the format record's read does not need
// let a writer's open start, and it wrote a MANIFEST of its own, removed
// the old one and set files aside before it failed. Now every such store
// is refused unchanged, the file named; salvage reads every file back.
TEST_F(SalvageTest, ATableFileGoneKeepsWritersOutAndChangesNothing) {
  std::vector<std::string> tables;
  for (const auto& e : fs::directory_iterator(store_)) {
    if (e.path().extension() == ".sst") tables.push_back(e.path().filename());
  }
  ASSERT_GT(tables.size(), 2u);
  for (const std::string& table : tables) {
    const std::string work = dir_ / "gone";
    fs::remove_all(work);
    fs::copy(store_, work);
    fs::remove(work + "/" + table);
    std::map<std::string, std::string> before;
    for (const auto& e : fs::directory_iterator(work))
      before[e.path().filename()] = ReadBytes(e.path());
    auto writer = ColdStore::Open(work, OpenOptions{});
    ASSERT_FALSE(writer.ok()) << table;
    EXPECT_EQ(writer.status().code(), Code::kCorruption) << writer.status().ToString();
    EXPECT_NE(writer.status().message().find("table file " + table + ", which is not there"),
              std::string::npos)
        << writer.status().ToString();
    EXPECT_NE(writer.status().message().find("tbfs salvage"), std::string::npos);
    std::map<std::string, std::string> after;
    for (const auto& e : fs::directory_iterator(work))
      after[e.path().filename()] = ReadBytes(e.path());
    EXPECT_TRUE(after == before) << table << ": the refused open changed the store";
    auto r = SalvageAndCheck(work, "table file " + table + " gone");
    EXPECT_TRUE(r.lost.empty()) << table << ": " << ::testing::PrintToString(r.lost);
  }
}

// A table file missing while another process holds the store for writing
// may be one its compaction merged away since the check's look: the
// store is in use, not damaged.
TEST_F(SalvageTest, ATableGoneWhileAnotherWriterHoldsTheStoreIsBusyNotDamage) {
  std::string table;
  for (const auto& e : fs::directory_iterator(store_)) {
    if (e.path().extension() == ".sst") table = e.path().filename();
  }
  ASSERT_FALSE(table.empty());
  fs::remove(store_ + "/" + table);
  auto held = HoldStoreForWriting(store_, false);
  ASSERT_TRUE(held.ok()) << held.status().ToString();
  auto writer = ColdStore::Open(store_, OpenOptions{});
  ASSERT_FALSE(writer.ok());
  EXPECT_EQ(writer.status().code(), Code::kBusy) << writer.status().ToString();
  held->reset();
  writer = ColdStore::Open(store_, OpenOptions{});
  ASSERT_FALSE(writer.ok());
  EXPECT_EQ(writer.status().code(), Code::kCorruption) << writer.status().ToString();
}

// A CURRENT file that names a MANIFEST that is not there (one damaged
// digit) is damage too, said as such, and changes nothing.
TEST_F(SalvageTest, ACurrentNamingAMissingManifestIsCalledDamage) {
  testing::WriteBytes(store_ + "/CURRENT", "MANIFEST-000099\n");
  std::set<std::string> before;
  for (const auto& e : fs::directory_iterator(store_)) before.insert(e.path().filename());
  for (const bool read_only : {false, true}) {
    OpenOptions o;
    o.read_only = read_only;
    auto store = ColdStore::Open(store_, o);
    ASSERT_FALSE(store.ok());
    EXPECT_EQ(store.status().code(), Code::kCorruption) << store.status().ToString();
    EXPECT_NE(store.status().message().find("CURRENT file names MANIFEST-000099"),
              std::string::npos)
        << store.status().ToString();
    EXPECT_NE(store.status().message().find("tbfs salvage"), std::string::npos)
        << store.status().ToString();
  }
  std::set<std::string> after;
  for (const auto& e : fs::directory_iterator(store_)) after.insert(e.path().filename());
  EXPECT_EQ(after, before);
  auto r = SalvageAndCheck(store_, "CURRENT names a missing MANIFEST");
  EXPECT_EQ(r.files, originals_.size());
}

// The engine's MANIFEST in `store` (a writer's open starts a new one).
std::string EngineManifest(const std::string& store) {
  std::string manifest;
  for (const auto& e : fs::directory_iterator(store)) {
    if (e.path().filename().string().starts_with("MANIFEST-")) manifest = e.path();
  }
  return manifest;
}

// Moves one more file (`rel`, written with `bytes`) into the fixture's
// store. *manifest gets the MANIFEST that open wrote, *opened its size
// before the migration, *copied its size once the file's copy was in the
// store, before the batch's flush. Returns the file's id.
uint64_t MigrateOne(const std::string& logdir, const std::string& store, const std::string& rel,
                    const std::string& bytes, std::string* manifest, uint64_t* opened,
                    uint64_t* copied) {
  fs::create_directories(fs::path(logdir + "/" + rel).parent_path());
  testing::WriteBytes(logdir + "/" + rel, bytes);
  // The table files that MANIFEST lists at either size, for CutManifestBack:
  // a merge after a flush may delete some. Those of the closed store, those
  // the open added, those at *copied: a merge may delete a table file while
  // they are listed (one gone between the listing and its link).
  const std::string tables = store + ".tables-at-open";
  fs::remove_all(tables);
  fs::create_directories(tables);
  auto keep_tables = [&] {
    for (const auto& e : fs::directory_iterator(store)) {
      std::error_code gone;
      if (e.path().extension() == ".sst" && !fs::exists(tables / e.path().filename()))
        fs::create_hard_link(e.path(), tables / e.path().filename(), gone);
    }
  };
  keep_tables();
  auto s = ColdStore::Open(store, OpenOptions{});
  EXPECT_TRUE(s.ok()) << s.status().ToString();
  if (!s.ok()) return 0;
  *manifest = EngineManifest(store);
  *opened = fs::file_size(*manifest);
  keep_tables();
  CandidateOptions c;
  c.older_than_s = 0;
  c.walk.skip_dirs = {kStoreDirName};
  std::vector<Candidate> all, one;
  std::vector<Skipped> skipped;
  EXPECT_TRUE(FindCandidates(logdir, c, &all, &skipped).ok());
  for (const auto& cand : all)
    if (cand.path == rel) one.push_back(cand);
  EXPECT_EQ(one.size(), 1u);
  MigrateOptions m;
  m.walk.skip_dirs = {kStoreDirName};
  ScopedFailpoint hook("migrate.copied", [&](const std::string&) {
    *copied = fs::file_size(*manifest);
    keep_tables();  // a merge after the batch's flush may delete some it lists
  });
  auto result = Migrate(**s, logdir, one, m);
  EXPECT_TRUE(result.ok() && result->files_moved == 1u);
  auto moved = (*s)->Lookup(rel);
  EXPECT_TRUE(moved.ok());
  return moved.ok() ? moved->file_id() : 0;
}

// Cuts the MANIFEST back to `size`. Only its last records are lost: the
// table files it lists are all there (those a merge deleted since, kept by
// MigrateOne, come back), as a MANIFEST cut by a crash would find them.
void CutManifestBack(const std::string& store, const std::string& manifest, uint64_t size) {
  fs::resize_file(manifest, size);
  for (const auto& e : fs::directory_iterator(store + ".tables-at-open")) {
    const fs::path at = fs::path(store) / e.path().filename();
    if (!fs::exists(at)) fs::create_hard_link(e.path(), at);
  }
}

// MigrateOne, then the MANIFEST cut back to its size at that open: the file
// is in table and blob files it no longer lists. Returns the file's id.
uint64_t MigrateThenCutBack(const std::string& logdir, const std::string& store,
                            const std::string& rel, const std::string& bytes) {
  std::string manifest;
  uint64_t keep = 0, copied = 0;
  const uint64_t id = MigrateOne(logdir, store, rel, bytes, &manifest, &keep, &copied);
  if (id == 0) return id;
  CutManifestBack(store, manifest, keep);
  return id;
}

std::string TraceBytes(int n) {
  std::string bytes;
  for (int i = 0; i < n; ++i)
    bytes += fmt::format("{{\"ph\":\"X\",\"ts\":{},\"dur\":{}}},\n", i * 7, i % 13);
  return bytes;
}

// A MANIFEST that loses only its last records still opens to a sound-looking
// store: the writer's open would delete the newest files as leftovers. They
// are set aside instead, and salvage writes them apart (.tbfs-unlisted).
TEST_F(SalvageTest, FilesAnOpenWouldDropAreSetAsideAndSalvagedApart) {
  const std::string extra = "run_late/late.pt.trace.json", bytes = TraceBytes(20000);
  const uint64_t late_id = MigrateThenCutBack(logdir_, store_, extra, bytes);
  ASSERT_NE(late_id, 0u);
  {
    auto store = ColdStore::Open(store_, OpenOptions{});
    ASSERT_TRUE(store.ok()) << store.status().ToString();
    EXPECT_TRUE((*store)->Lookup(extra).status().IsNotFound());  // the damage: lost from the index
    // What a recovery records when a batch's journal survived the cut but
    // not its manifests (red team): lost, to its eyes.
    ASSERT_TRUE((*store)->RecordLost({late_id, extra, 1, 1, "test"}).ok());
  }
  ASSERT_TRUE(fs::exists(store_ + "/" + kLostFoundName));
  EXPECT_FALSE(fs::is_empty(store_ + "/" + kLostFoundName));
  auto r = SalvageInto(store_, dir_ / "out");
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(r->unlisted, 1u);
  EXPECT_EQ(r->found_again, 1u);
  EXPECT_TRUE(r->lost.empty()) << "written intact, and still called lost";
  EXPECT_EQ(ReadBytes(dir_ / (std::string("out/") + kUnlisted + "/" + extra)), bytes);
  for (const auto& [path, original] : originals_)
    EXPECT_EQ(ReadBytes(dir_ / ("out/" + path)), original);
}

TEST_F(SalvageTest, RefusesAnOutputFolderOthersCanWriteOrOwn) {
  const std::string shared = dir_ / "shared";
  fs::create_directories(shared);
  ASSERT_EQ(::chmod(shared.c_str(), 0777), 0);
  auto r = SalvageInto(store_, shared);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("another user or others may write"), std::string::npos);
  ASSERT_EQ(::chmod(shared.c_str(), 0755), 0);
  ASSERT_EQ(::chown(shared.c_str(), 65534, 65534), 0);
  EXPECT_FALSE(SalvageInto(store_, shared).ok());
  const std::string link = dir_ / "link";
  fs::create_directory_symlink(dir_ / "elsewhere", link);
  fs::create_directories(dir_ / "elsewhere");
  EXPECT_FALSE(SalvageInto(store_, link).ok());
  EXPECT_TRUE(fs::is_empty(dir_ / "elsewhere"));
}

// A MANIFEST cut back to before a migration (every table it lists still
// there) opens: the files migrated since are in table and blob files it
// does not list, which a writer's open sets aside. Their originals are
// gone from the logdir. The recovery that follows finds them there and
// writes them back into the logdir, once: every tool said nothing of them.
TEST_F(SalvageTest, FilesACutBackManifestDroppedAreWrittenBackByTheNextRecovery) {
  const std::string late = "run_late/late.pt.trace.json", bytes = TraceBytes(20000);
  ASSERT_NE(MigrateThenCutBack(logdir_, store_, late, bytes), 0u);
  ASSERT_FALSE(fs::exists(logdir_ + "/" + late));
  OpenOptions ro;
  ro.read_only = true;
  auto fsck = [&] {
    auto reader = ColdStore::Open(store_, ro);
    EXPECT_TRUE(reader.ok()) << reader.status().ToString();
    auto r = reader.ok() ? Fsck(**reader, &pool_, nullptr) : Result<FsckResult>(reader.status());
    EXPECT_TRUE(r.ok()) << r.status().ToString();
    return r.ok() ? *r : FsckResult{};
  };
  const FsckResult damaged = fsck();
  EXPECT_FALSE(damaged.clean()) << "the file is in neither place, and fsck says clean";
  EXPECT_EQ(std::count_if(damaged.problems.begin(), damaged.problems.end(),
                          [&](const std::string& p) { return p.starts_with(late + ": "); }),
            1)
      << ::testing::PrintToString(damaged.problems);
  {
    auto store = ColdStore::Open(store_, OpenOptions{});
    ASSERT_TRUE(store.ok()) << store.status().ToString();
    EXPECT_TRUE((*store)->Lookup(late).status().IsNotFound());  // the damage
    auto r = Recover(**store, logdir_);
    ASSERT_TRUE(r.ok()) << r.status().ToString();
    EXPECT_EQ(r->found_again, 1u);
    EXPECT_TRUE(r->lost.empty());
    ASSERT_TRUE(fs::exists(logdir_ + "/" + late)) << "the file the MANIFEST lost is still gone";
    EXPECT_TRUE(ReadBytes(logdir_ + "/" + late) == bytes) << "other bytes written back";
    EXPECT_EQ(std::count(r->changed.begin(), r->changed.end(), late), 1);
    for (const auto& [path, original] : originals_)  // the others untouched, still cold
      EXPECT_TRUE((*store)->Lookup(path).ok()) << path;
  }
  const FsckResult after = fsck();
  EXPECT_TRUE(after.clean()) << ::testing::PrintToString(after.problems);
  EXPECT_GT(after.set_aside_files, 0u);
  // Found once: a user who deletes it does not see it again.
  fs::remove(logdir_ + "/" + late);
  {
    auto store = ColdStore::Open(store_, OpenOptions{});
    ASSERT_TRUE(store.ok()) << store.status().ToString();
    auto r = Recover(**store, logdir_);
    ASSERT_TRUE(r.ok()) << r.status().ToString();
    EXPECT_EQ(r->found_again, 0u);
    EXPECT_FALSE(fs::exists(logdir_ + "/" + late));
  }
}

// The same cut at the instant after a batch's journal reached the
// engine's tables and before its files' manifests did: the recovery
// finds the journal's file neither in the logdir nor in the store. It was
// recorded lost (red team); it is in what the open set aside.
TEST_F(SalvageTest, AJournaledFileWhoseManifestWasCutIsFoundAgainNotLost) {
  const std::string late = "run_late/late.pt.trace.json", bytes = TraceBytes(20000);
  std::string manifest;
  uint64_t opened = 0, keep = 0;
  ASSERT_NE(MigrateOne(logdir_, store_, late, bytes, &manifest, &opened, &keep), 0u);
  ASSERT_GT(keep, 0u);
  CutManifestBack(store_, manifest, keep);
  auto store = ColdStore::Open(store_, OpenOptions{});
  ASSERT_TRUE(store.ok()) << store.status().ToString();
  auto r = Recover(**store, logdir_);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(r->batches, 1u) << "the cut lost the batch's journal too: the test tests nothing";
  EXPECT_TRUE(r->lost.empty()) << ::testing::PrintToString(r->lost);
  EXPECT_EQ(r->found_again, 1u);
  EXPECT_TRUE(ReadBytes(logdir_ + "/" + late) == bytes) << "other bytes written back";
  std::vector<ColdStore::LostFile> lost;
  ASSERT_TRUE((*store)->ListLost(&lost).ok());
  EXPECT_TRUE(lost.empty()) << "found again, and still recorded lost";
}

// A file found again whose name a new file took meanwhile goes beside it;
// one already back in place (the same bytes) is left as it is.
TEST_F(SalvageTest, AFileFoundAgainNeverReplacesTheFileAtItsName) {
  const std::string late = "run_late/late.pt.trace.json", bytes = TraceBytes(20000);
  const uint64_t id = MigrateThenCutBack(logdir_, store_, late, bytes);
  ASSERT_NE(id, 0u);
  testing::WriteBytes(logdir_ + "/" + late, "a new file by that name");
  auto store = ColdStore::Open(store_, OpenOptions{});
  ASSERT_TRUE(store.ok()) << store.status().ToString();
  auto r = Recover(**store, logdir_);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(r->found_again, 1u);
  EXPECT_EQ(ReadBytes(logdir_ + "/" + late), "a new file by that name");
  EXPECT_TRUE(ReadBytes(logdir_ + "/" + RecoveredName(late, id)) == bytes);
}

// A crash's leftover set aside long after holds copies of files deleted
// since (the store handed their ids out before, and has no record of them
// now): they stay deleted.
TEST_F(SalvageTest, ACopyOfAFileDeletedSinceIsNotBroughtBack) {
  const std::string late = "run_late/late.pt.trace.json";
  std::string manifest;
  uint64_t opened = 0, copied = 0;
  const uint64_t id =
      MigrateOne(logdir_, store_, late, TraceBytes(20000), &manifest, &opened, &copied);
  ASSERT_NE(id, 0u);
  std::string newest;  // the blob file that holds it
  for (const auto& e : fs::directory_iterator(store_)) {
    if (e.path().extension() == ".blob") newest = std::max(newest, e.path().string());
  }
  ASSERT_FALSE(newest.empty());
  const std::string leftover = dir_ / "leftover.blob";
  fs::copy_file(newest, leftover);
  {
    auto store = ColdStore::Open(store_, OpenOptions{});
    ASSERT_TRUE(store.ok()) << store.status().ToString();
    auto m = (*store)->GetManifest(id);
    ASSERT_TRUE(m.ok());
    ASSERT_TRUE(DropFromStore(**store, *m).ok());  // deleted through a mount, say
  }
  fs::copy_file(leftover, store_ + "/000001.blob");  // as a crash leaves one
  auto store = ColdStore::Open(store_, OpenOptions{});
  ASSERT_TRUE(store.ok()) << store.status().ToString();
  ASSERT_FALSE(fs::exists(store_ + "/000001.blob")) << "the leftover was not set aside";
  auto r = Recover(**store, logdir_);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(r->found_again, 0u);
  EXPECT_FALSE(fs::exists(logdir_ + "/" + late)) << "a file deleted from the store came back";
}

// Red team: a write-back that fails (its folder a symlink now) left the
// store's next id where the cut put it, so the same writer gave the lost
// file's id to the next file it moved, and the lost file was never found
// again (fsck clean). Now the file is recorded lost, its id is not handed
// out again, and it comes back once its folder does.
TEST_F(SalvageTest, AFileThatCannotBeWrittenBackStaysLostUntilItIs) {
  const std::string late = "run_late/late.pt.trace.json", bytes = TraceBytes(20000);
  const uint64_t id = MigrateThenCutBack(logdir_, store_, late, bytes);
  ASSERT_NE(id, 0u);
  fs::create_directories(dir_ / "elsewhere");
  fs::rename(logdir_ + "/run_late", dir_ / "run_late.real");
  fs::create_directory_symlink(dir_ / "elsewhere", logdir_ + "/run_late");
  const std::string other = "run_other/other.pt.trace.json", other_bytes = TraceBytes(9000);
  {
    auto store = ColdStore::Open(store_, OpenOptions{});
    ASSERT_TRUE(store.ok()) << store.status().ToString();
    auto r = Recover(**store, logdir_);
    ASSERT_TRUE(r.ok()) << r.status().ToString();
    EXPECT_EQ(r->found_again, 0u);
    EXPECT_EQ(r->lost, std::vector<std::string>{late});
    EXPECT_TRUE(fs::is_empty(dir_ / "elsewhere")) << "written through the symlink";
    EXPECT_GT((*store)->next_file_id(), id) << "the lost file's id is handed out again";
  }
  {
    OpenOptions ro;
    ro.read_only = true;
    auto reader = ColdStore::Open(store_, ro);
    ASSERT_TRUE(reader.ok()) << reader.status().ToString();
    auto f = Fsck(**reader, &pool_, nullptr);
    ASSERT_TRUE(f.ok());
    EXPECT_FALSE(f->clean());
    ASSERT_EQ(f->lost.size(), 1u);
    EXPECT_EQ(f->lost[0].path, late);
  }
  std::string ignored;
  uint64_t opened = 0, copied = 0;
  const uint64_t other_id =
      MigrateOne(logdir_, store_, other, other_bytes, &ignored, &opened, &copied);
  EXPECT_NE(other_id, id);
  fs::remove(logdir_ + "/run_late");
  fs::rename(dir_ / "run_late.real", logdir_ + "/run_late");
  auto store = ColdStore::Open(store_, OpenOptions{});
  ASSERT_TRUE(store.ok()) << store.status().ToString();
  auto r = Recover(**store, logdir_);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(r->found_again, 1u);
  EXPECT_TRUE(r->lost.empty()) << ::testing::PrintToString(r->lost);
  EXPECT_TRUE(ReadBytes(logdir_ + "/" + late) == bytes) << "not written back, or other bytes";
  std::vector<ColdStore::LostFile> lost;
  ASSERT_TRUE((*store)->ListLost(&lost).ok());
  EXPECT_TRUE(lost.empty());
  auto m = (*store)->Lookup(other);
  ASSERT_TRUE(m.ok()) << m.status().ToString();
  EXPECT_TRUE(VerifyStoredFile(**store, *m, &pool_).ok());
}

// Red team: a lost file whose chunks in the set-aside files do not verify
// (one flipped byte) was said once and then forgotten: no record, fsck
// clean. It is recorded lost.
TEST_F(SalvageTest, ALostFileWhoseChunksDoNotVerifyIsRecordedLost) {
  const std::string late = "run_late/late.pt.trace.json", bytes = TraceBytes(20000);
  ASSERT_NE(MigrateThenCutBack(logdir_, store_, late, bytes), 0u);
  std::string newest;  // the blob file that holds its chunks
  for (const auto& e : fs::directory_iterator(store_)) {
    if (e.path().extension() == ".blob") newest = std::max(newest, e.path().string());
  }
  ASSERT_FALSE(newest.empty());
  std::string blob = ReadBytes(newest);
  blob[blob.size() / 2] ^= 0x10;
  testing::WriteBytes(newest, blob);
  for (int open = 0; open < 2; ++open) {  // and again at the next writer's open
    auto store = ColdStore::Open(store_, OpenOptions{});
    ASSERT_TRUE(store.ok()) << store.status().ToString();
    auto r = Recover(**store, logdir_);
    ASSERT_TRUE(r.ok()) << r.status().ToString();
    EXPECT_EQ(r->lost, std::vector<std::string>{late}) << "open " << open;
    EXPECT_FALSE(fs::exists(logdir_ + "/" + late));
    std::vector<ColdStore::LostFile> lost;
    ASSERT_TRUE((*store)->ListLost(&lost).ok());
    ASSERT_EQ(lost.size(), 1u);
    EXPECT_EQ(lost[0].path, late);
  }
}

// The store as a MANIFEST cut back to `snapshot` (a copy of the store's
// folder) leaves it: the snapshot's files, and every table and blob file
// written since, which that MANIFEST does not list.
void CutBackTo(const std::string& store, const std::string& snapshot) {
  const std::string now = store + ".now";
  fs::rename(store, now);
  fs::copy(snapshot, store, fs::copy_options::recursive);
  for (const auto& e : fs::directory_iterator(now)) {
    const std::string n = e.path().filename();
    if ((n.ends_with(".sst") || n.ends_with(".blob")) && !fs::exists(store + "/" + n))
      fs::copy_file(e.path(), store + "/" + n);
  }
  fs::remove_all(now);
}

// Red team: a file migrated, replaced by a new version migrated again (two
// ids, one path) came back as the old version under its name and the new
// one beside it. The newest version takes the name; the one it replaced
// stays gone. A folder the cut store does not know comes back its file's
// owner's alone (it came back 0755 from 0700).
TEST_F(SalvageTest, OnlyTheNewestVersionOfAPathIsWrittenBackAndInAPrivateFolder) {
  const std::string late = "run_late/late.pt.trace.json";
  const std::string v1 = TraceBytes(20000), v2 = TraceBytes(21000);
  const std::string snapshot = dir_ / "snapshot";
  fs::copy(store_, snapshot, fs::copy_options::recursive);
  std::string manifest;
  uint64_t opened = 0, copied = 0;
  const uint64_t first = MigrateOne(logdir_, store_, late, v1, &manifest, &opened, &copied);
  const uint64_t second = MigrateOne(logdir_, store_, late, v2, &manifest, &opened, &copied);
  ASSERT_GT(second, first);
  CutBackTo(store_, snapshot);
  fs::remove(logdir_ + "/run_late");  // empty now: the user's rmdir
  auto store = ColdStore::Open(store_, OpenOptions{});
  ASSERT_TRUE(store.ok()) << store.status().ToString();
  auto r = Recover(**store, logdir_);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(r->found_again, 1u);
  EXPECT_TRUE(r->lost.empty()) << ::testing::PrintToString(r->lost);
  EXPECT_TRUE(ReadBytes(logdir_ + "/" + late) == v2) << "not the newest version";
  EXPECT_FALSE(fs::exists(logdir_ + "/" + RecoveredName(late, first)));
  EXPECT_FALSE(fs::exists(logdir_ + "/" + RecoveredName(late, second)));
  struct stat st;
  ASSERT_EQ(::stat((logdir_ + "/run_late").c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 07777, 0700u);
}

// Red team: a journal record that named the file under an older id (its
// batch undone, the file migrated again under a new one before the cut)
// stayed recorded lost after the file was written back.
TEST_F(SalvageTest, AFileWrittenBackClearsTheLostRecordsOfItsPath) {
  const std::string late = "run_late/late.pt.trace.json", bytes = TraceBytes(20000);
  const std::string snapshot = dir_ / "snapshot";
  fs::copy(store_, snapshot, fs::copy_options::recursive);
  std::string manifest;
  uint64_t opened = 0, copied = 0;
  const uint64_t id = MigrateOne(logdir_, store_, late, bytes, &manifest, &opened, &copied);
  CutBackTo(store_, snapshot);
  auto store = ColdStore::Open(store_, OpenOptions{});
  ASSERT_TRUE(store.ok()) << store.status().ToString();
  // What the journal's recovery records of the undone batch's older id.
  ASSERT_TRUE((*store)->RecordLost({id - 1, late, 7, 1, "journaled"}).ok());
  auto r = Recover(**store, logdir_);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_TRUE(ReadBytes(logdir_ + "/" + late) == bytes);
  std::vector<ColdStore::LostFile> lost;
  ASSERT_TRUE((*store)->ListLost(&lost).ok());
  EXPECT_TRUE(lost.empty()) << "the file is back, and its path is still recorded lost";
}

// Red team: one flipped byte in a lost file's manifest copy, and no tool
// said anything of it. Its chunks are there (their records' checksums
// hold): it is recorded lost under its id, and fsck says so before that.
TEST_F(SalvageTest, ALostFileWithoutAnIntactManifestCopyIsRecordedLostByItsId) {
  const std::string late = "run_late/late.pt.trace.json";
  const std::string snapshot = dir_ / "snapshot";
  fs::copy(store_, snapshot, fs::copy_options::recursive);
  std::string manifest;
  uint64_t opened = 0, copied = 0;
  const uint64_t id =
      MigrateOne(logdir_, store_, late, TraceBytes(20000), &manifest, &opened, &copied);
  CutBackTo(store_, snapshot);
  bool flipped = false;
  for (const auto& e : fs::directory_iterator(store_)) {
    if (e.path().extension() != ".blob" ||
        fs::exists(snapshot + "/" + e.path().filename().string()))
      continue;
    std::string blob = ReadBytes(e.path());
    const size_t at = blob.find(late);
    if (at == std::string::npos) continue;
    blob[at + 3] ^= 0x01;  // in its manifest copy, the only place that names it
    testing::WriteBytes(e.path(), blob);
    flipped = true;
  }
  ASSERT_TRUE(flipped);
  const std::string what = fmt::format("(file id {})", id);
  {
    OpenOptions ro;
    ro.read_only = true;
    auto reader = ColdStore::Open(store_, ro);
    ASSERT_TRUE(reader.ok()) << reader.status().ToString();
    auto f = Fsck(**reader, &pool_, nullptr);
    ASSERT_TRUE(f.ok());
    EXPECT_FALSE(f->clean()) << "a file in neither place, and fsck says clean";
  }
  auto store = ColdStore::Open(store_, OpenOptions{});
  ASSERT_TRUE(store.ok()) << store.status().ToString();
  auto r = Recover(**store, logdir_);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(r->lost, std::vector<std::string>{what});
  std::vector<ColdStore::LostFile> lost;
  ASSERT_TRUE((*store)->ListLost(&lost).ok());
  ASSERT_EQ(lost.size(), 1u);
  EXPECT_EQ(lost[0].file_id, id);
}

// Red team: a creation marker in a store that holds files (put back by a
// copy of the folder, or by hand) made readers see no store and the next
// writer delete every file of it. It is stale: it goes, and nothing else.
TEST_F(SalvageTest, AStaleCreationMarkerDeletesNothing) {
  testing::WriteBytes(store_ + "/" + kCreatingName, "");
  OpenOptions ro;
  ro.read_only = true;
  {
    auto reader = ColdStore::Open(store_, ro);
    ASSERT_TRUE(reader.ok()) << reader.status().ToString();
  }
  auto store = ColdStore::Open(store_, OpenOptions{});
  ASSERT_TRUE(store.ok()) << store.status().ToString();
  EXPECT_FALSE(fs::exists(store_ + "/" + kCreatingName));
  for (const auto& [path, original] : originals_) {
    auto m = (*store)->Lookup(path);
    ASSERT_TRUE(m.ok()) << path << ": " << m.status().ToString();
    EXPECT_TRUE(VerifyStoredFile(**store, *m, &pool_).ok()) << path;
  }
}

}  // namespace
}  // namespace tbfs::store
