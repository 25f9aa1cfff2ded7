#include "store/migrate.h"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <filesystem>
#include <future>
#include <map>
#include <thread>

#include "events/verifier.h"
#include "base/failpoint.h"
#include "store/file_io.h"
#include "store/restore.h"
#include "store/maintenance.h"
#include "tests/test_util.h"
#include "tools/gen/gen.h"

namespace tbfs::store {
namespace {

using testing::ReadBytes;
using testing::RunCommand;
using testing::TempDir;
using testing::WriteBytes;

struct FileState {
  std::string bytes;
  mode_t mode;
  int64_t mtime_ns;
};

std::map<std::string, FileState> Snapshot(const std::string& logdir) {
  std::map<std::string, FileState> out;
  WalkOptions w;
  w.skip_dirs = {kStoreDirName};
  EXPECT_TRUE(WalkTree(logdir, w, [&](const WalkEntry& e) {
                out[e.rel] = {ReadBytes(JoinPath(logdir, e.rel)), e.st.st_mode,
                              static_cast<int64_t>(e.st.st_mtim.tv_sec) * 1'000'000'000 +
                                  e.st.st_mtim.tv_nsec};
              }).ok());
  return out;
}

std::vector<events::FileDigest> Baseline(const std::string& logdir) {
  events::VerifyOptions o;
  o.walk.skip_dirs = {kStoreDirName};
  auto r = events::VerifyLogdir(logdir, o);
  EXPECT_TRUE(r.ok());
  return r->digest.files;
}

class MigrateTest : public ::testing::Test {
 protected:
  void SetUp() override {
    gen::GenOptions g;
    g.runs = 2;
    g.steps = 100;
    g.trace_mb = 2;
    gen::GenReport report;
    ASSERT_TRUE(gen::GenerateLogdir(logdir_, g, &report).ok());
    before_ = Snapshot(logdir_);
    baseline_ = Baseline(logdir_);
    OpenOptions o;
    o.create_if_missing = true;
    auto s = ColdStore::Open(JoinPath(logdir_, kStoreDirName), o);
    ASSERT_TRUE(s.ok());
    store_ = std::move(s).value();
  }

  std::vector<Candidate> Candidates() {
    CandidateOptions c;
    c.older_than_s = 0;
    c.walk.skip_dirs = {kStoreDirName};
    std::vector<Candidate> out;
    std::vector<Skipped> skipped;
    EXPECT_TRUE(FindCandidates(logdir_, c, &out, &skipped).ok());
    return out;
  }

  MigrateOptions Options() {
    MigrateOptions o;
    o.chunk_bytes = 64 << 10;
    o.level = 3;
    o.walk.skip_dirs = {kStoreDirName};
    return o;
  }

  TempDir dir_;
  std::string logdir_ = dir_ / "logdir";
  std::map<std::string, FileState> before_;
  std::vector<events::FileDigest> baseline_;
  std::unique_ptr<ColdStore> store_;
};

TEST_F(MigrateTest, MovesEveryTraceAndNoTfevents) {
  auto candidates = Candidates();
  ASSERT_GT(candidates.size(), 4u);
  auto result = Migrate(*store_, logdir_, candidates, Options());
  ASSERT_TRUE(result.ok()) << result.status().ToString();
  EXPECT_TRUE(result->ok());
  EXPECT_EQ(result->files_moved, candidates.size());
  EXPECT_LT(result->stored_bytes, result->bytes_moved);
  auto after = Snapshot(logdir_);
  for (const auto& [path, state] : before_) {
    bool hot = after.count(path) > 0;
    bool cold = store_->Lookup(path).ok();
    EXPECT_NE(hot, cold) << path;  // exactly one place
    if (path.find("tfevents") != std::string::npos) {
      ASSERT_TRUE(hot) << path;  // I1
      EXPECT_EQ(after[path].bytes, state.bytes);
    }
  }
  EXPECT_TRUE(events::CheckBaseline(logdir_, baseline_).empty());
}

TEST_F(MigrateTest, FileModifiedDuringItsMigrationIsLeftInPlace) {
  auto candidates = Candidates();
  std::string victim = candidates[0].path;
  MigrateOptions o = Options();
  o.after_copy_hook = [&](const std::string& path) {
    if (path == JoinPath(logdir_, victim)) {
      // An editor's save: a new file renamed over the old one (a writer
      // that opens the file itself waits for the lease: see below).
      WriteBytes(path + ".new", ReadBytes(path) + "appended by a writer");
      ASSERT_EQ(::rename((path + ".new").c_str(), path.c_str()), 0);
    }
  };
  auto result = Migrate(*store_, logdir_, candidates, o);
  ASSERT_TRUE(result.ok());
  EXPECT_EQ(result->files_moved, candidates.size() - 1);
  EXPECT_EQ(ReadBytes(JoinPath(logdir_, victim)), before_[victim].bytes + "appended by a writer");
  EXPECT_TRUE(store_->Lookup(victim).status().IsNotFound());
  bool reported = false;
  for (const auto& f : result->batches[0].files) {
    if (f.path == victim) reported = f.outcome == Outcome::kChanged;
  }
  EXPECT_TRUE(reported);
}

TEST_F(MigrateTest, AWriterHoldingTheFileOpenKeepsIt) {
  auto candidates = Candidates();
  const std::string rel = candidates[0].path, victim = JoinPath(logdir_, rel);
  auto writer = OpenFile(victim, O_WRONLY | O_APPEND);
  ASSERT_TRUE(writer.ok());
  auto result = Migrate(*store_, logdir_, candidates, Options());
  ASSERT_TRUE(result.ok()) << result.status().ToString();
  ASSERT_TRUE(WriteAll(writer->get(), "+later", 6, victim).ok());
  writer->reset();
  EXPECT_EQ(result->files_moved, candidates.size() - 1);
  EXPECT_TRUE(ReadBytes(victim) == before_[rel].bytes + "+later");
  EXPECT_TRUE(store_->Lookup(rel).status().IsNotFound());
}

// True while some lease of this process is being broken (an open for
// writing waits for it), from /proc/locks.
bool LeaseBreaking() { return ReadBytes("/proc/locks").find("BREAKING") != std::string::npos; }

TEST_F(MigrateTest, AWriterOpeningDuringTheCopyKeepsIt) {
  auto candidates = Candidates();
  const std::string rel = candidates[0].path, victim = JoinPath(logdir_, rel);
  std::promise<void> migrated;
  std::shared_future<void> migrated_f = migrated.get_future().share();
  std::atomic<bool> opened{false};
  std::thread writer;
  MigrateOptions o = Options();
  o.after_copy_hook = [&](const std::string& path) {
    if (path != victim || writer.joinable()) return;
    writer = std::thread([&, migrated_f] {
      auto fd = OpenFile(victim, O_WRONLY | O_APPEND);  // waits while the file is leased
      opened = true;
      if (!fd.ok()) return;
      migrated_f.wait();
      (void)WriteAll(fd->get(), "+late", 5, victim);
    });
    for (int i = 0; i < 1000 && !opened && !LeaseBreaking(); ++i) {
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
  };
  auto result = Migrate(*store_, logdir_, candidates, o);
  migrated.set_value();
  writer.join();
  ASSERT_TRUE(result.ok());
  EXPECT_TRUE(ReadBytes(victim) == before_[rel].bytes + "+late");
  EXPECT_TRUE(store_->Lookup(rel).status().IsNotFound());
  EXPECT_EQ(result->files_moved, candidates.size() - 1);
}

TEST_F(MigrateTest, MigratingAPathThatIsColdAlreadyReplacesItsEntry) {
  Candidate c = Candidates()[0];
  ASSERT_TRUE(Migrate(*store_, logdir_, {c}, Options()).ok());
  const std::string path = JoinPath(logdir_, c.path);
  ASSERT_FALSE(std::filesystem::exists(path));
  WriteBytes(path, "newer content");  // written in the logdir over the cold path
  c.size = 13;
  auto again = Migrate(*store_, logdir_, {c}, Options());
  ASSERT_TRUE(again.ok());
  EXPECT_EQ(again->files_moved, 1u);
  int versions = 0;
  ASSERT_TRUE(store_->ForEachManifest([&](const storepb::Manifest& m) {
                    versions += m.path() == c.path;
                    return true;
                  }).ok());
  EXPECT_EQ(versions, 1);
  WorkPool pool(2);
  auto fsck = Fsck(*store_, &pool, nullptr);
  ASSERT_TRUE(fsck.ok());
  EXPECT_TRUE(fsck->clean());
  EXPECT_EQ(fsck->orphan_chunk_files, 0u);
  std::vector<storepb::Manifest> all;
  std::vector<std::string> missing;
  ASSERT_TRUE(SelectCold(*store_, {}, &all, &missing).ok());
  ASSERT_TRUE(Restore(*store_, logdir_, all, &pool, nullptr).ok());
  EXPECT_EQ(ReadBytes(path), "newer content");
}

TEST_F(MigrateTest, VerifierFailureRollsBackByteIdenticalWithModeAndTimes) {
  ASSERT_EQ(::chmod(JoinPath(logdir_, Candidates()[0].path).c_str(), 0600), 0);
  before_ = Snapshot(logdir_);
  MigrateOptions o = Options();
  o.inject_verify_failure = true;
  auto result = Migrate(*store_, logdir_, Candidates(), o);
  ASSERT_TRUE(result.ok());
  EXPECT_FALSE(result->ok());
  EXPECT_TRUE(result->batches[0].rolled_back);
  auto after = Snapshot(logdir_);
  ASSERT_EQ(after.size(), before_.size());
  for (const auto& [path, state] : before_) {
    ASSERT_TRUE(after.count(path)) << path;
    EXPECT_TRUE(after[path].bytes == state.bytes) << path;
    EXPECT_EQ(after[path].mode, state.mode) << path;
    EXPECT_EQ(after[path].mtime_ns, state.mtime_ns) << path;
  }
  auto totals = store_->ComputeTotals();
  ASSERT_TRUE(totals.ok());
  EXPECT_EQ(totals->files, 0u);
}

TEST_F(MigrateTest, MissingMustHaveTagRollsBack) {
  MigrateOptions o = Options();
  o.must_have = {"loss/train", "no_such_tag"};
  auto result = Migrate(*store_, logdir_, Candidates(), o);
  ASSERT_TRUE(result.ok());
  EXPECT_FALSE(result->ok());
  ASSERT_FALSE(result->batches[0].failures.empty());
  EXPECT_EQ(result->batches[0].failures[0].tag, "no_such_tag");
  EXPECT_EQ(Snapshot(logdir_).size(), before_.size());
}

TEST_F(MigrateTest, ATfeventsCandidateIsRefused) {
  std::vector<Candidate> hostile = {{baseline_[0].path, FileClass::kOtherTrace, 1}};
  auto result = Migrate(*store_, logdir_, hostile, Options());
  EXPECT_FALSE(result.ok());
  EXPECT_EQ(Snapshot(logdir_).size(), before_.size());
}

TEST_F(MigrateTest, CandidatesSkipRecentLinkedAndProtectedFiles) {
  auto all = Candidates();
  ASSERT_GE(all.size(), 3u);
  std::string linked = JoinPath(logdir_, all[0].path);
  ASSERT_EQ(::link(linked.c_str(), (linked + ".hardlink").c_str()), 0);
  CandidateOptions c;
  c.older_than_s = 0;
  c.walk.skip_dirs = {kStoreDirName};
  c.policy.protected_markers = {all[1].path};
  c.min_size_bytes = 1;
  std::vector<Candidate> out;
  std::vector<Skipped> skipped;
  ASSERT_TRUE(FindCandidates(logdir_, c, &out, &skipped).ok());
  for (const auto& cand : out) {
    EXPECT_NE(cand.path, all[0].path);
    EXPECT_NE(cand.path, all[1].path);
  }
  c.older_than_s = 3600;
  ASSERT_TRUE(FindCandidates(logdir_, c, &out, &skipped).ok());
  EXPECT_TRUE(out.empty());  // everything was written seconds ago
}

TEST_F(MigrateTest, RestoreBringsEverythingBackAndExportLeavesTheStore) {
  auto result = Migrate(*store_, logdir_, Candidates(), Options());
  ASSERT_TRUE(result.ok() && result->ok());
  WorkPool pool(2);
  std::vector<storepb::Manifest> cold;
  std::vector<std::string> missing;
  ASSERT_TRUE(SelectCold(*store_, {}, &cold, &missing).ok());
  ASSERT_EQ(cold.size(), result->files_moved);

  std::string out = dir_ / "export";
  auto exported = Export(*store_, out, cold, false, &pool, nullptr);
  ASSERT_TRUE(exported.ok());
  EXPECT_EQ(exported->files, cold.size());
  for (const auto& m : cold) EXPECT_TRUE(ReadBytes(JoinPath(out, m.path())) == before_[m.path()].bytes);
  EXPECT_EQ(store_->ComputeTotals()->files, cold.size());

  auto blob_bytes = [&] {
    uint64_t total = 0;
    for (const auto& e : std::filesystem::directory_iterator(JoinPath(logdir_, kStoreDirName))) {
      if (e.path().extension() == ".blob") total += e.file_size();
    }
    return total;
  };
  uint64_t blobs_before = blob_bytes();
  ASSERT_GT(blobs_before, 0u);
  // A file that reappeared at its path keeps the cold copy cold.
  WriteBytes(JoinPath(logdir_, cold[0].path()), "new file");
  auto restored = Restore(*store_, logdir_, cold, &pool, nullptr);
  ASSERT_TRUE(restored.ok());
  EXPECT_EQ(restored->files, cold.size() - 1);
  ASSERT_EQ(restored->failed.size(), 1u);
  EXPECT_TRUE(store_->Lookup(cold[0].path()).ok());
  // Restoring gives the space back: blob files are garbage collected down
  // to what the one file still cold needs.
  EXPECT_LE(blob_bytes(), cold[0].stored_bytes() + 4096);
  EXPECT_LT(blob_bytes(), blobs_before);
  auto after = Snapshot(logdir_);
  for (size_t i = 1; i < cold.size(); ++i) {
    EXPECT_TRUE(after[cold[i].path()].bytes == before_[cold[i].path()].bytes);
    EXPECT_EQ(after[cold[i].path()].mtime_ns, before_[cold[i].path()].mtime_ns);
  }
}

TEST(NormalizeUserPath, RejectsEscapes) {
  EXPECT_EQ(NormalizeUserPath("/l", "run/x").value(), "run/x");
  EXPECT_EQ(NormalizeUserPath("/l", "./run/").value(), "run");
  EXPECT_EQ(NormalizeUserPath("/l/", "/l/run/x").value(), "run/x");
  EXPECT_EQ(NormalizeUserPath("/l", ".").value(), "");
  EXPECT_FALSE(NormalizeUserPath("/l", "../x").ok());
  EXPECT_FALSE(NormalizeUserPath("/l", "run/../../x").ok());
  EXPECT_FALSE(NormalizeUserPath("/l", "/etc/passwd").ok());
  EXPECT_FALSE(NormalizeUserPath("/l", "/lx/y").ok());
}

// --- crash safety: kill the migration at every phase boundary --------------

struct CrashCase {
  const char* point;
  bool inject_failure;
  friend void PrintTo(const CrashCase& c, std::ostream* os) { *os << c.point; }
};

class CrashTest : public ::testing::TestWithParam<CrashCase> {};

TEST_P(CrashTest, EveryFileIsPresentExactlyOnceAfterRecovery) {
  const CrashCase& c = GetParam();
  TempDir dir;
  std::string logdir = dir / "logdir";
  gen::GenOptions g;
  g.runs = 2;
  g.steps = 100;
  g.trace_mb = 3;
  gen::GenReport report;
  ASSERT_TRUE(gen::GenerateLogdir(logdir, g, &report).ok());
  auto before = Snapshot(logdir);
  auto baseline = Baseline(logdir);

  std::string env = std::string("TBFS_FAILPOINT=") + c.point;
  if (c.inject_failure) env += " TBFS_TEST_INJECT_VERIFY_FAILURE=1";
  auto run = RunCommand(env + " " + TBFS_BINARY + " migrate " + logdir +
                        " --older-than 0 --apply --chunk-size 64K >/dev/null 2>&1");
  ASSERT_EQ(run.exit_code, kFailpointExitCode) << c.point << " was not reached";

  OpenOptions o;
  auto store = ColdStore::Open(JoinPath(logdir, kStoreDirName), o);
  ASSERT_TRUE(store.ok()) << store.status().ToString();
  auto recovered = Recover(**store, logdir);
  ASSERT_TRUE(recovered.ok()) << recovered.status().ToString();

  std::vector<storepb::JournalRecord> journal;
  ASSERT_TRUE((*store)->ListJournal(&journal).ok());
  EXPECT_TRUE(journal.empty());
  auto after = Snapshot(logdir);
  WorkPool pool(2);
  for (const auto& [path, state] : before) {
    bool hot = after.count(path) > 0;
    auto cold = (*store)->Lookup(path);
    ASSERT_NE(hot, cold.ok()) << c.point << ": " << path << (hot ? " in both places" : " lost");
    if (hot) {
      EXPECT_TRUE(after[path].bytes == state.bytes) << c.point << ": " << path;
    } else {
      std::string out = dir / ("check/" + path);
      MaterializeOptions mo;
      mo.pool = &pool;
      std::filesystem::create_directories(dir / "check");
      ASSERT_TRUE(MaterializeFile(**store, *cold, dir / "check", path, mo).ok());
      EXPECT_TRUE(ReadBytes(out) == state.bytes) << c.point << ": " << path;
    }
  }
  for (const auto& [path, state] : after) {
    EXPECT_TRUE(before.count(path)) << c.point << ": stray file " << path;
  }
  EXPECT_TRUE(events::CheckBaseline(logdir, baseline).empty()) << c.point;
  auto fsck = Fsck(**store, &pool, nullptr);
  ASSERT_TRUE(fsck.ok());
  EXPECT_TRUE(fsck->clean()) << c.point;
  EXPECT_EQ(fsck->orphan_chunk_files, 0u) << c.point;
}

INSTANTIATE_TEST_SUITE_P(
    Phases, CrashTest,
    ::testing::Values(CrashCase{"migrate.journaled", false}, CrashCase{"migrate.copying", false},
                      CrashCase{"migrate.stored", false}, CrashCase{"migrate.read_back", false},
                      CrashCase{"migrate.aside", false}, CrashCase{"migrate.unlinked", false},
                      CrashCase{"migrate.all_unlinked", false},
                      CrashCase{"migrate.verified", false},
                      CrashCase{"migrate.rollback_one", true},
                      CrashCase{"migrate.committed", false}),
    [](const auto& info) {
      std::string name = info.param.point;
      return name.substr(name.find('.') + 1);
    });

}  // namespace
}  // namespace tbfs::store
