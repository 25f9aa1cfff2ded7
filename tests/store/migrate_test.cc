#include "store/migrate.h"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <condition_variable>
#include <filesystem>
#include <future>
#include <map>
#include <mutex>
#include <set>
#include <thread>

#include "base/failpoint.h"
#include "events/verifier.h"
#include "store/file_io.h"
#include "store/format.h"
#include "store/maintenance.h"
#include "store/restore.h"
#include "tests/store/crash_fixture.h"
#include "tests/store/migrate_fixture.h"
#include "tests/test_util.h"
#include "tools/gen/gen.h"

namespace tbfs::store {
namespace {

using testing::ReadBytes;
using testing::RunCommand;
using testing::TempDir;
using testing::WaitUntil;
using testing::WriteBytes;

// An editor's save: a new file written beside `path`, then renamed over it.
void SaveOver(const std::string& path, const std::string& bytes) {
  WriteBytes(path + ".new", bytes);
  ASSERT_EQ(::rename((path + ".new").c_str(), path.c_str()), 0);
}

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
  ScopedFailpoint hook("migrate.copied", [&](const std::string& path) {
    if (path == JoinPath(logdir_, victim)) {
      // An editor's save (a writer that opens the file itself waits for
      // the lease: see below).
      SaveOver(path, ReadBytes(path) + "appended by a writer");
    }
  });
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

// A file deleted as it is copied is gone: it is reported as deleted (the
// report said "left in place"), and the store keeps no copy of it. One is deleted
// before its copy is committed, one after.
TEST_F(MigrateTest, AFileDeletedDuringItsCopyIsReportedDeleted) {
  auto candidates = Candidates();
  ASSERT_GE(candidates.size(), 2u);
  const std::string first = candidates[0].path, second = candidates[1].path;
  auto unlink_if = [&](const std::string& victim) {
    return [this, victim](const std::string& path) {
      if (path == JoinPath(logdir_, victim)) {
        ASSERT_EQ(::unlink(path.c_str()), 0);
      }
    };
  };
  ScopedFailpoint before_commit("ingest.commit", unlink_if(first));
  ScopedFailpoint after_commit("migrate.copied", unlink_if(second));
  auto result = Migrate(*store_, logdir_, candidates, Options());
  ASSERT_TRUE(result.ok()) << result.status().ToString();
  EXPECT_EQ(result->files_moved, candidates.size() - 2);
  for (const auto& f : result->batches[0].files) {
    if (f.path != first && f.path != second) continue;
    EXPECT_FALSE(std::filesystem::exists(JoinPath(logdir_, f.path)));
    EXPECT_TRUE(store_->Lookup(f.path).status().IsNotFound()) << f.path;
    EXPECT_EQ(f.outcome, Outcome::kDeleted) << f.path;
    EXPECT_EQ(f.reason, "deleted while it was copied");
  }
}

// The generated TensorFlow run's memory profile: the first file of its
// batch and a gzip file, copied beside the files after it.
std::string MemoryProfile(const std::vector<Candidate>& candidates) {
  for (const Candidate& c : candidates) {
    if (c.path.ends_with("memory_profile.json.gz")) return c.path;
  }
  ADD_FAILURE() << "the generated logdir has no memory profile";
  return "";
}

// A gzip file's copy runs on a thread of its own beside the next files'
// copies (store/batch_runner.cc): the memory profile waits in its copy
// until a file after it in its batch is copied, which
// a migration that copies one file at a time never does. Everything moves,
// each file exactly once and bit for bit, the gzip files by their content.
TEST_F(MigrateTest, AGzipFileIsCopiedBesideTheFilesAfterIt) {
  std::vector<Candidate> candidates = Candidates();
  const std::string gz_path = JoinPath(logdir_, MemoryProfile(candidates));
  std::atomic<bool> waiting{false}, other_copied{false}, overlapped{false};
  std::atomic<int> gzip_waits{0};
  ScopedFailpoint copied("migrate.copied", [&](const std::string& path) {
    if (waiting && path != gz_path) other_copied = true;
  });
  ScopedFailpoint wave("ingest.wave", [&](const std::string& path) {
    if (path != gz_path || ++gzip_waits != 1) return;
    waiting = true;
    overlapped = WaitUntil([&] { return other_copied.load(); }, std::chrono::seconds(10));
    waiting = false;
  });
  MigrateOptions o = Options();
  o.chunk_bytes = 1 << 20;  // the defaults: the generated gzip content stores smaller at them
  o.level = 9;
  auto result = Migrate(*store_, logdir_, candidates, o);
  ASSERT_TRUE(result.ok()) << result.status().ToString();
  ASSERT_GT(gzip_waits.load(), 0)
      << "the generated logdir has no gzip trace: the test tests nothing";
  EXPECT_TRUE(overlapped) << "no file was copied while the gzip file's copy waited";
  EXPECT_EQ(result->files_moved, candidates.size());
  size_t by_content = 0;
  for (const Candidate& c : candidates) {
    auto m = store_->Lookup(c.path);
    ASSERT_TRUE(m.ok()) << c.path;
    by_content += IsGzipContent(*m);
  }
  EXPECT_GT(by_content, 0u);
  tbfs::testing::TempDir scratch;
  ExpectEveryFileOnce(*store_, logdir_, before_, baseline_, scratch / "check", "beside");
}

// Two copies committed at once, each into folders the store has not made
// yet (the gzip file beside the file after it, in one new profile folder):
// both must land under one folder. Each made the folders it found missing,
// the second overwrote the first's, and the first file was in the store
// under a folder no path led to (fsck: "no namespace entry points to this
// file"). The two copies meet before their commits here.
TEST_F(MigrateTest, TwoCopiesThatMakeTheSameNewFoldersAtOnceShareThem) {
  std::vector<Candidate> candidates = Candidates();
  std::mutex mu;
  std::condition_variable cv;
  int arrived = 0;
  bool gzip_met = false;
  ScopedFailpoint meet("ingest.commit", [&](const std::string& path) {
    std::unique_lock lock(mu);
    if (gzip_met || arrived == 2) return;
    if (++arrived == 2) {
      cv.notify_all();
    } else {
      cv.wait_for(lock, std::chrono::seconds(5), [&] { return arrived == 2; });
    }
    gzip_met = gzip_met || (arrived == 2 && path.ends_with(".gz"));
  });
  auto result = Migrate(*store_, logdir_, candidates, Options());
  ASSERT_TRUE(result.ok()) << result.status().ToString();
  EXPECT_TRUE(gzip_met) << "no two copies met at their commits, one a gzip file";
  EXPECT_EQ(result->files_moved, candidates.size());
  tbfs::testing::TempDir scratch;
  ExpectEveryFileOnce(*store_, logdir_, before_, baseline_, scratch / "check", "met");
  WorkPool pool(2);
  auto report = Fsck(*store_, &pool, nullptr);
  ASSERT_TRUE(report.ok()) << report.status().ToString();
  EXPECT_TRUE(report->clean()) << (report->problems.empty() ? "" : report->problems.front());
}

// A writer opens the gzip file once its copy beside the others is done,
// while the batch's thread is still busy with the next file: it gets in
// at once and the file stays in place. It waited for the batch's thread,
// up to the kernel's lease-break time (45 s).
TEST_F(MigrateTest, AWriterOfAGzipFileCopiedBesideTheOthersIsLetInAtOnce) {
  std::vector<Candidate> candidates = Candidates();
  const std::string gz = MemoryProfile(candidates), gz_path = JoinPath(logdir_, gz);
  std::atomic<bool> writer_in{false}, held{false}, in_time{false};
  std::thread writer;
  ScopedFailpoint copied("migrate.copied", [&](const std::string& path) {
    if (path != gz_path) return;
    writer = std::thread([&] {
      const int fd = ::open(gz_path.c_str(), O_WRONLY | O_APPEND | O_CLOEXEC);  // breaks the lease
      EXPECT_GE(fd, 0) << std::strerror(errno);
      if (fd >= 0) {
        EXPECT_EQ(::write(fd, "x", 1), 1);
        ::close(fd);
      }
      writer_in = true;
    });
  });
  ScopedFailpoint wave("ingest.wave", [&](const std::string& path) {
    // The batch's thread, at the next file of the gzip file's folder.
    if (path == gz_path || ParentPath(path) != ParentPath(gz_path) || held.exchange(true)) return;
    in_time = WaitUntil([&] { return writer_in.load(); }, std::chrono::seconds(10));
  });
  auto result = Migrate(*store_, logdir_, candidates, Options());
  if (writer.joinable()) writer.join();
  ASSERT_TRUE(result.ok()) << result.status().ToString();
  EXPECT_TRUE(held) << "no file after the gzip file in its folder";
  EXPECT_TRUE(in_time) << "the writer waited for the batch's thread";
  EXPECT_TRUE(ReadBytes(gz_path) == before_[gz].bytes + "x");
  EXPECT_TRUE(store_->Lookup(gz).status().IsNotFound());
  EXPECT_EQ(result->files_moved, candidates.size() - 1);
  EXPECT_TRUE(events::CheckBaseline(logdir_, baseline_).empty());
}

// Each of `paths` gone from the logdir, and no file aside in its folder.
bool AllUnlinked(const std::string& logdir, const std::vector<std::string>& paths) {
  for (const std::string& p : paths) {
    const std::string path = JoinPath(logdir, p);
    if (std::filesystem::exists(path)) return false;
    for (const auto& e : std::filesystem::directory_iterator(ParentPath(path))) {
      if (e.path().filename().string().find(".tbfs-mig-") != std::string::npos) return false;
    }
  }
  return true;
}

// The files after the gzip file in its batch, moved aside, are unlinked
// once copied; they do not wait aside for the copy beside them to end (a
// 256 MiB gzip file's takes seconds, and a writer of theirs would wait).
TEST_F(MigrateTest, FilesAsideDoNotWaitForTheCopyBesideThem) {
  std::vector<Candidate> candidates = Candidates();
  const std::string gz = MemoryProfile(candidates), gz_path = JoinPath(logdir_, gz);
  std::vector<std::string> after;
  for (const Candidate& c : candidates) {
    if (c.path != gz && ParentPath(c.path) == ParentPath(gz)) after.push_back(c.path);
  }
  ASSERT_FALSE(after.empty());
  std::atomic<bool> held{false}, in_time{false};
  ScopedFailpoint wave("ingest.wave", [&](const std::string& path) {
    if (path != gz_path || held.exchange(true)) return;
    in_time = WaitUntil([&] { return AllUnlinked(logdir_, after); }, std::chrono::seconds(10));
  });
  auto result = Migrate(*store_, logdir_, candidates, Options());
  ASSERT_TRUE(result.ok()) << result.status().ToString();
  EXPECT_TRUE(held);
  EXPECT_TRUE(in_time) << "the files after the gzip file waited aside for its copy";
  EXPECT_EQ(result->files_moved, candidates.size());
  tbfs::testing::TempDir scratch;
  ExpectEveryFileOnce(*store_, logdir_, before_, baseline_, scratch / "check", "aside");
}

// The files aside wait for the next file's copy no longer than their
// group's second, however short that copy looked beforehand: here small
// files copy fast and the file after them, small too, takes long (as a
// real Kineto trace at level 19 after repetitive ones: 10.8 s aside).
TEST_F(MigrateTest, FilesAsideDoNotWaitForALongCopyAfterThem) {
  std::vector<Candidate> candidates;
  for (const Candidate& c : Candidates()) {
    if (!c.path.ends_with(".gz")) candidates.push_back(c);  // no copy beside
  }
  ASSERT_GE(candidates.size(), 2u);
  const std::string big = JoinPath(ParentPath(candidates[0].path), "zz_long.pt.trace.json");
  std::string bytes = "{\"traceEvents\": [\n";
  for (int i = 0; bytes.size() < (2u << 20); ++i) {
    bytes +=
        fmt::format("{{\"ph\": \"X\", \"name\": \"op{}\", \"ts\": {}, \"dur\": 7}},\n", i % 977, i);
  }
  WriteBytes(JoinPath(logdir_, big), bytes + "{}]}\n");
  before_ = Snapshot(logdir_);
  for (const Candidate& c : Candidates()) {
    if (c.path == big) candidates.push_back(c);  // last
  }
  ASSERT_EQ(candidates.back().path, big);
  std::vector<std::string> before_it;
  for (size_t i = 0; i + 1 < candidates.size(); ++i) before_it.push_back(candidates[i].path);
  const std::string big_path = JoinPath(logdir_, big);
  std::atomic<bool> held{false}, in_time{false};
  ScopedFailpoint wave("ingest.wave", [&](const std::string& path) {
    if (path != big_path || held.exchange(true)) return;
    in_time = WaitUntil([&] { return AllUnlinked(logdir_, before_it); }, std::chrono::seconds(10));
  });
  auto result = Migrate(*store_, logdir_, candidates, Options());
  ASSERT_TRUE(result.ok()) << result.status().ToString();
  EXPECT_TRUE(held);
  EXPECT_TRUE(in_time) << "the files before the long copy waited aside for it";
  EXPECT_EQ(result->files_moved, candidates.size());
  tbfs::testing::TempDir scratch;
  ExpectEveryFileOnce(*store_, logdir_, before_, baseline_, scratch / "check", "long");
}

// The gzip file copied beside the others is renamed over as its copy ends
// (an editor's save): its move aside, back on the batch's thread, sees
// another file under its name and leaves it; the others move.
TEST_F(MigrateTest, AGzipFileSavedOverAsItIsCopiedBesideTheOthersStaysInPlace) {
  std::vector<Candidate> candidates = Candidates();
  const std::string victim = MemoryProfile(candidates);
  const std::string newer = before_[victim].bytes + "saved by an editor";
  ScopedFailpoint hook("migrate.copied", [&](const std::string& path) {
    if (path == JoinPath(logdir_, victim)) SaveOver(path, newer);
  });
  auto result = Migrate(*store_, logdir_, candidates, Options());
  ASSERT_TRUE(result.ok()) << result.status().ToString();
  EXPECT_EQ(result->files_moved, candidates.size() - 1);
  EXPECT_TRUE(ReadBytes(JoinPath(logdir_, victim)) == newer);
  EXPECT_TRUE(store_->Lookup(victim).status().IsNotFound());
  for (const Candidate& c : candidates) {
    if (c.path != victim) {
      EXPECT_TRUE(store_->Lookup(c.path).ok()) << c.path;
    }
  }
  EXPECT_TRUE(events::CheckBaseline(logdir_, baseline_).empty());
}

// A copy that reads back wrong (I2) leaves its file in place and the store
// without it; the batch goes on with the next file.
TEST_F(MigrateTest, AFileWhoseCopyReadsBackWrongStaysInPlace) {
  auto candidates = Candidates();
  ASSERT_GE(candidates.size(), 2u);
  ScopedFailpoint fail("migrate.read_back");
  auto result = Migrate(*store_, logdir_, candidates, Options());
  ASSERT_TRUE(result.ok()) << result.status().ToString();
  EXPECT_EQ(result->files_moved, 0u);
  size_t failed = 0;
  for (const auto& b : result->batches) {
    for (const auto& f : b.files) {
      EXPECT_EQ(f.outcome, Outcome::kFailed) << f.path << ": " << f.reason;
      EXPECT_NE(f.reason.find("read back"), std::string::npos) << f.reason;
      failed += f.outcome == Outcome::kFailed;
    }
  }
  EXPECT_EQ(failed, candidates.size());
  for (const Candidate& c : candidates) {
    EXPECT_TRUE(ReadBytes(JoinPath(logdir_, c.path)) == before_[c.path].bytes) << c.path;
    EXPECT_TRUE(store_->Lookup(c.path).status().IsNotFound()) << c.path;
  }
  EXPECT_TRUE(events::CheckBaseline(logdir_, baseline_).empty());
}

// A new file renamed over the name between its last check and its move
// aside (an editor's save at that instant): the new file went aside instead
// of the one copied, and was then unlinked, its bytes in no place. It stays
// in place now; the old content, replaced by the user, leaves the store.
TEST_F(MigrateTest, AFileRenamedOverTheNameAsItMovesAsideStaysInPlace) {
  auto candidates = Candidates();
  const std::string victim = candidates[0].path;
  const std::string newer = before_[victim].bytes + "saved by an editor";
  ScopedFailpoint hook("migrate.named", [&](const std::string& path) {
    if (path == JoinPath(logdir_, victim)) SaveOver(path, newer);
  });
  auto result = Migrate(*store_, logdir_, candidates, Options());
  ASSERT_TRUE(result.ok());
  EXPECT_EQ(result->files_moved, candidates.size() - 1);
  EXPECT_TRUE(ReadBytes(JoinPath(logdir_, victim)) == newer);
  EXPECT_TRUE(store_->Lookup(victim).status().IsNotFound());
  for (const auto& f : result->batches[0].files) {
    if (f.path == victim) {
      EXPECT_EQ(f.outcome, Outcome::kChanged) << f.reason;
    }
  }
  std::vector<std::string> names;
  for (const auto& e : std::filesystem::directory_iterator(JoinPath(logdir_, ParentPath(victim))))
    names.push_back(e.path().filename().string());
  for (const std::string& n : names) EXPECT_EQ(n.find(".tbfs-"), std::string::npos) << n;
}

// Its folder renamed as the copy ends: committed at the old path, the file
// would leave the new one and show up (cold) at a path it has left.
TEST_F(MigrateTest, AFileWhoseFolderIsRenamedDuringItsCopyStaysWhereItIs) {
  auto candidates = Candidates();
  std::string victim;
  for (const Candidate& c : candidates) {
    if (!ParentPath(c.path).empty()) victim = c.path;
  }
  ASSERT_NE(victim, "");
  const std::string from = ParentPath(victim), to = from + "-renamed";
  const std::string moved = JoinPath(to, std::string(BaseName(victim)));
  ScopedFailpoint hook("ingest.commit", [&](const std::string& path) {
    if (path == JoinPath(logdir_, victim)) {
      ASSERT_EQ(::rename(JoinPath(logdir_, from).c_str(), JoinPath(logdir_, to).c_str()), 0);
    }
  });
  auto result = Migrate(*store_, logdir_, candidates, Options());
  ASSERT_TRUE(result.ok()) << result.status().ToString();
  EXPECT_TRUE(ReadBytes(JoinPath(logdir_, moved)) == before_[victim].bytes) << moved;
  EXPECT_TRUE(store_->Lookup(victim).status().IsNotFound());
  EXPECT_TRUE(store_->Lookup(moved).status().IsNotFound());
  bool reported = false;
  for (const auto& b : result->batches) {
    for (const auto& f : b.files) {
      if (f.path == victim) reported = f.outcome == Outcome::kChanged;
    }
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
  ScopedFailpoint hook("migrate.copied", [&](const std::string& path) {
    if (path != victim || writer.joinable()) return;
    writer = std::thread([&, migrated_f] {
      auto fd = OpenFile(victim, O_WRONLY | O_APPEND);  // waits while the file is leased
      opened = true;
      if (!fd.ok()) return;
      migrated_f.wait();
      (void)WriteAll(fd->get(), "+late", 5, victim);
    });
    WaitUntil([&] { return opened || LeaseBreaking(); }, std::chrono::milliseconds(10000));
  });
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
  ASSERT_TRUE(store_
                  ->ForEachManifest([&](const storepb::Manifest& m) {
                    versions += m.path() == c.path;
                    return true;
                  })
                  .ok());
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
  ScopedFailpoint fail("migrate.verify");
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

// One user's damaged tfevents file keeps that run's traces hot, said once
// per run with the file and the reason; every other run's traces move.
TEST_F(MigrateTest, ADamagedTfeventsFileHoldsOnlyItsOwnRunsTraces) {
  const std::string damaged =
      "resnet50_lr1e-01_run0/events.out.tfevents.1786042792.gpu-node-42.54595.0";
  std::string bytes = ReadBytes(JoinPath(logdir_, damaged));
  ASSERT_GT(bytes.size(), 1000u) << damaged;
  bytes[bytes.size() / 2] ^= 0x40;
  WriteBytes(JoinPath(logdir_, damaged), bytes);
  auto candidates = Candidates();
  size_t held = 0;
  for (const Candidate& c : candidates) held += c.path.starts_with("resnet50_lr1e-01_run0/");
  ASSERT_GT(held, 0u);
  ASSERT_LT(held, candidates.size());

  MigrateOptions o = Options();
  o.batch_files = 2;  // batches mixing both runs' traces, as a mount's do
  auto result = Migrate(*store_, logdir_, candidates, o);
  ASSERT_TRUE(result.ok()) << result.status().ToString();
  EXPECT_EQ(result->files_moved, candidates.size() - held);
  ASSERT_EQ(result->blocked_runs.size(), 1u);
  EXPECT_EQ(result->blocked_runs[0].run, "resnet50_lr1e-01_run0");
  EXPECT_EQ(result->blocked_runs[0].file, damaged);
  EXPECT_EQ(result->blocked_runs[0].traces, held);
  EXPECT_FALSE(result->blocked_runs[0].reason.empty());
  for (const Candidate& c : candidates) {
    const bool hot = ::access(JoinPath(logdir_, c.path).c_str(), F_OK) == 0;
    EXPECT_EQ(hot, c.path.starts_with("resnet50_lr1e-01_run0/")) << c.path;
  }
}

// A tfevents file damaged after its batch moved (a user timing it between
// the baseline and the check after): the batch rolls back, then runs again
// at once without that run's traces; the run is held for the rest of the
// migration and named, so one user cannot hold everyone's batches back.
TEST_F(MigrateTest, ARunThatFailsTheCheckAfterItsBatchIsHeldAndTheRestMove) {
  const std::string damaged =
      "resnet50_lr1e-01_run0/events.out.tfevents.1786042792.gpu-node-42.54595.0";
  const std::string path = JoinPath(logdir_, damaged);
  const std::string good = ReadBytes(path);
  int hits = 0;
  ScopedFailpoint flip("migrate.before_verify", [&](const std::string&) {
    if (hits++ > 0) return;
    std::string bad = good;
    bad[bad.size() / 2] ^= 0x40;
    WriteBytes(path, bad);
  });
  // The other run is another user's: the failing file's owner (root
  // here) has all their traces held, the others' move.
  for (const auto& e : std::filesystem::recursive_directory_iterator(logdir_)) {
    if (e.path().string().find("resnet50_lr1e-01_run0") == std::string::npos &&
        e.path().string().find(kStoreDirName) == std::string::npos) {
      ASSERT_EQ(::lchown(e.path().c_str(), 1001, 1001), 0);
    }
  }
  auto candidates = Candidates();
  size_t held = 0;
  for (const Candidate& c : candidates) held += c.path.starts_with("resnet50_lr1e-01_run0/");
  ASSERT_GT(held, 0u);
  MigrateOptions o = Options();
  o.batch_files = 1000;  // one batch with both runs' traces
  auto result = Migrate(*store_, logdir_, candidates, o);
  ASSERT_TRUE(result.ok()) << result.status().ToString();
  WriteBytes(path, good);
  EXPECT_EQ(result->rolled_back_batches, 1u);
  ASSERT_EQ(result->failed_runs.size(), 1u);
  EXPECT_EQ(result->failed_runs[0].first, "resnet50_lr1e-01_run0");
  EXPECT_EQ(result->failed_owners, std::set<uint32_t>{0});
  EXPECT_EQ(result->files_moved, candidates.size() - held);
  ASSERT_EQ(result->blocked_runs.size(), 1u);
  EXPECT_EQ(result->blocked_runs[0].traces, held);
  for (const Candidate& c : candidates) {
    const bool hot = ::access(JoinPath(logdir_, c.path).c_str(), F_OK) == 0;
    EXPECT_EQ(hot, c.path.starts_with("resnet50_lr1e-01_run0/")) << c.path;
  }
  // Held by the caller (a mount's next passes), it is not tried at all.
  std::map<std::string, std::string> hold = {{"resnet50_lr1e-01_run0", "held"}};
  o.held_runs = &hold;
  const std::set<uint32_t> owners = {0};
  o.held_owners = &owners;
  auto again = Migrate(*store_, logdir_, Candidates(), o);
  ASSERT_TRUE(again.ok());
  EXPECT_EQ(again->files_moved, 0u);
  EXPECT_EQ(again->rolled_back_batches, 0u);
  ASSERT_EQ(again->blocked_runs.size(), 1u);
  EXPECT_EQ(again->blocked_runs[0].reason, "held");
}

// A FIFO swapped in for a tfevents file between the walk's check and the
// digest's open (a user's rename loop): the pass neither hangs nor reads it;
// that run waits for the next pass, the others move.
TEST_F(MigrateTest, AFifoSwappedInForATfeventsFileCannotHangAPass) {
  const std::string events =
      "resnet50_lr1e-01_run0/events.out.tfevents.1786042792.gpu-node-42.54595.0";
  const std::string path = JoinPath(logdir_, events);
  std::atomic<bool> swapped{false};
  ScopedFailpoint swap("open_regular.before", [&](const std::string& p) {
    if (p != path || swapped.exchange(true)) return;
    ASSERT_EQ(::rename(path.c_str(), (path + ".real").c_str()), 0);
    ASSERT_EQ(::mkfifo(path.c_str(), 0644), 0);
  });
  auto candidates = Candidates();
  auto run = std::async(std::launch::async,
                        [&] { return Migrate(*store_, logdir_, candidates, Options()); });
  if (run.wait_for(std::chrono::seconds(60)) != std::future_status::ready) {
    ADD_FAILURE() << "the pass hangs on a FIFO";
    while (run.wait_for(std::chrono::milliseconds(100)) != std::future_status::ready) {
      ::close(::open(path.c_str(), O_WRONLY | O_NONBLOCK));  // release it
    }
  }
  auto result = run.get();
  ASSERT_TRUE(result.ok()) << result.status().ToString();
  EXPECT_TRUE(swapped);
  ASSERT_EQ(result->blocked_runs.size(), 1u);
  EXPECT_EQ(result->blocked_runs[0].file, events);
  EXPECT_NE(result->blocked_runs[0].reason.find("not a regular file"), std::string::npos)
      << result->blocked_runs[0].reason;
  EXPECT_GT(result->files_moved, 0u);
}

// A sparse trace (a user's `truncate -s 1T` and a few writes) is stored
// with its holes: only the chunks that hold data are read and stored, it
// reads back as zeros where the holes are, and it comes back from the
// store sparse, taking on disk about what it took before. (Read whole, the
// old way, its migration would read 1 TiB of zeros.)
// A tfevents file that cannot be read when a batch takes its baseline
// (a user swapped a FIFO in after the walk that listed it): the batch does
// not run, and whoever hears of batches hears of it and why (red team:
// tbfs migrate said only "moved 0 files" and exit 1).
TEST_F(MigrateTest, ABatchThatCannotTakeItsBaselineIsHeardOfWithWhy) {
  const auto candidates = Candidates();
  std::vector<std::string> listed;  // the tfevents files as the walk found them
  for (const auto& [path, state] : before_) {
    if (path.find("tfevents") != std::string::npos) listed.push_back(path);
  }
  ASSERT_FALSE(listed.empty());
  const std::string swapped = JoinPath(logdir_, listed[0]);
  ASSERT_EQ(::unlink(swapped.c_str()), 0);
  ASSERT_EQ(::mkfifo(swapped.c_str(), 0644), 0);
  events::LogdirDigest digest;  // the check's, before the swap
  for (const std::string& path : listed) digest.files.push_back({.path = path});
  MigrateOptions o = Options();
  o.events_digest = &digest;
  std::vector<std::string> heard;
  o.after_batch = [&](const BatchResult& b) { heard.push_back(b.not_run); };
  auto result = Migrate(*store_, logdir_, candidates, o);
  ASSERT_TRUE(result.ok()) << result.status().ToString();
  EXPECT_EQ(result->unrun_batches, 1u);
  ASSERT_EQ(heard.size(), 1u);
  EXPECT_NE(heard[0].find("cannot take the verifier baseline"), std::string::npos) << heard[0];
  EXPECT_NE(heard[0].find(listed[0]), std::string::npos) << heard[0];
  for (const Candidate& c : candidates) EXPECT_FALSE(store_->Lookup(c.path).ok()) << c.path;
}

TEST_F(MigrateTest, ASparseTraceIsStoredWithItsHolesAndComesBackSparse) {
  const std::string rel = "resnet50_lr1e-01_run0/huge.pt.trace.json";
  const std::string path = JoinPath(logdir_, rel);
  const uint64_t size = uint64_t{1} << 40;  // 1 TiB, 16M chunks of 64 KiB
  const std::string head = "{\"traceEvents\": [";
  const std::string middle = tbfs::testing::RandomBytes(3 << 20, 7);  // over 49 chunks, not aligned
  const uint64_t middle_at = (size / 2) + 12345;
  const std::string tail = "]}\n";
  {
    UniqueFd fd(::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644));
    ASSERT_TRUE(fd.valid());
    ASSERT_EQ(::pwrite(fd.get(), head.data(), head.size(), 0), static_cast<ssize_t>(head.size()));
    ASSERT_EQ(::pwrite(fd.get(), middle.data(), middle.size(), static_cast<off_t>(middle_at)),
              static_cast<ssize_t>(middle.size()));
    ASSERT_EQ(::pwrite(fd.get(), tail.data(), tail.size(), static_cast<off_t>(size - tail.size())),
              static_cast<ssize_t>(tail.size()));
  }
  struct timespec old[2] = {{1700000000, 0}, {1700000000, 0}};
  ASSERT_EQ(::utimensat(AT_FDCWD, path.c_str(), old, 0), 0);
  auto at = [&](uint64_t offset, size_t n) {
    std::string out(n, '\0');
    UniqueFd fd(::open(path.c_str(), O_RDONLY | O_CLOEXEC));
    EXPECT_EQ(::pread(fd.get(), out.data(), n, static_cast<off_t>(offset)),
              static_cast<ssize_t>(n));
    return out;
  };
  const std::string hole_bytes = at(size / 4, 100000);

  const auto candidates = Candidates();
  ASSERT_TRUE(std::any_of(candidates.begin(), candidates.end(),
                          [&](const Candidate& c) { return c.path == rel; }));
  // And one with data in every chunk (4 KiB of each 64 KiB): no chunk is a
  // hole, yet it must come back taking what it took, not 16 times that.
  const std::string every_rel = "resnet50_lr1e-01_run0/every.pt.trace.json";
  const std::string every_path = JoinPath(logdir_, every_rel);
  std::string every_bytes(64 * (64 << 10), '\0');
  {
    UniqueFd fd(::open(every_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644));
    ASSERT_TRUE(fd.valid());
    for (size_t c = 0; c < 64; ++c) {
      const std::string block = tbfs::testing::RandomBytes(4096, c);
      every_bytes.replace(c * (64 << 10), block.size(), block);
      ASSERT_EQ(::pwrite(fd.get(), block.data(), block.size(), static_cast<off_t>(c * (64 << 10))),
                4096);
    }
    ASSERT_EQ(::ftruncate(fd.get(), static_cast<off_t>(every_bytes.size())), 0);
  }
  ASSERT_EQ(::utimensat(AT_FDCWD, every_path.c_str(), old, 0), 0);

  auto result = Migrate(*store_, logdir_,
                        {{rel, FileClass::kPytorchTrace, size},
                         {every_rel, FileClass::kPytorchTrace, every_bytes.size()}},
                        Options());
  ASSERT_TRUE(result.ok()) << result.status().ToString();
  ASSERT_EQ(result->files_moved, 2u) << result->batches[0].files[0].reason;
  EXPECT_FALSE(std::filesystem::exists(path));

  auto entry = store_->GetEntry(rel);
  ASSERT_TRUE(entry.ok());
  auto m = store_->GetManifest(entry->file_id());
  ASSERT_TRUE(m.ok());
  EXPECT_EQ(m->size(), size);
  EXPECT_TRUE(HasHoles(*m));
  // The first chunk, the 49 or 50 in the middle, the last: about 3 MiB.
  EXPECT_LE(DataBytes(*m), uint64_t{4} << 20) << DataBytes(*m);
  EXPECT_LT(m->stored_bytes(), uint64_t{4} << 20);
  EXPECT_EQ(store_->info().format_version(), kFormatVersionTree);  // as made
  ChunkCodec codec;
  std::string got(middle.size() + 20, '\0');
  size_t n = 0;
  ASSERT_TRUE(store_->ReadRange(*m, middle_at - 10, got.size(), got.data(), &n, &codec).ok());
  EXPECT_TRUE(got == std::string(10, '\0') + middle + std::string(10, '\0'));
  ASSERT_TRUE(store_->ReadRange(*m, size / 4, 100000, got.data(), &n, &codec).ok());
  EXPECT_TRUE(std::string(got.data(), n) == hole_bytes);
  WorkPool pool(2);
  EXPECT_TRUE(VerifyStoredFile(*store_, *m, &pool).ok());
  auto fsck = Fsck(*store_, &pool, nullptr);
  ASSERT_TRUE(fsck.ok());
  EXPECT_TRUE(fsck->clean());

  // Format 4 reads holes: the version does not change for them.
  store_.reset();
  OpenOptions ro;
  ro.read_only = true;
  {
    auto reopened = ColdStore::Open(JoinPath(logdir_, kStoreDirName), ro);
    ASSERT_TRUE(reopened.ok());
    EXPECT_GE((*reopened)->info().format_version(), kFormatVersionTree);
  }
  auto s = ColdStore::Open(JoinPath(logdir_, kStoreDirName), OpenOptions());
  ASSERT_TRUE(s.ok());
  store_ = std::move(s).value();

  std::vector<storepb::Manifest> all;
  std::vector<std::string> missing;
  ASSERT_TRUE(SelectCold(*store_, {rel, every_rel}, &all, &missing).ok());
  ASSERT_EQ(all.size(), 2u);
  ASSERT_TRUE(Restore(*store_, logdir_, all, &pool, nullptr).ok());
  struct stat st;
  ASSERT_EQ(::stat(every_path.c_str(), &st), 0);
  EXPECT_TRUE(ReadBytes(every_path) == every_bytes);
  EXPECT_LE(static_cast<uint64_t>(st.st_blocks) * 512, uint64_t{64} * 4096 + (64 << 10))
      << "a file with data in every chunk came back dense";
  ASSERT_EQ(::stat(path.c_str(), &st), 0);
  EXPECT_EQ(static_cast<uint64_t>(st.st_size), size);
  EXPECT_LT(static_cast<uint64_t>(st.st_blocks) * 512, uint64_t{8} << 20);  // sparse again
  EXPECT_EQ(at(0, head.size()), head);
  EXPECT_TRUE(at(middle_at, middle.size()) == middle);
  EXPECT_EQ(at(size - tail.size(), tail.size()), tail);
  EXPECT_TRUE(at(size / 4, 100000) == hole_bytes);
  EXPECT_EQ(st.st_mtim.tv_sec, 1700000000);
}

// A manifest whose holes do not add up is damaged, not trusted.
TEST(ManifestShape, HoleRunsMustBePairsAscendingAndWithinTheFile) {
  storepb::Manifest m;
  m.set_path("a/b.pt.trace.json");
  m.set_size(10 * 4096 + 1);
  m.set_chunk_bytes(4096);
  m.set_chunks(11);
  EXPECT_TRUE(WellFormed(m));
  for (std::vector<uint64_t> runs :
       std::vector<std::vector<uint64_t>>{{0, 11}, {1, 3, 5, 6}, {0, 1, 1, 2}, {10, 11}}) {
    m.clear_hole_runs();
    for (uint64_t r : runs) m.add_hole_runs(r);
    EXPECT_TRUE(WellFormed(m)) << ::testing::PrintToString(runs);
  }
  for (std::vector<uint64_t> runs : std::vector<std::vector<uint64_t>>{
           {3}, {3, 3}, {4, 2}, {5, 12}, {4, 6, 5, 7}, {6, 8, 1, 2}}) {
    m.clear_hole_runs();
    for (uint64_t r : runs) m.add_hole_runs(r);
    EXPECT_FALSE(WellFormed(m)) << ::testing::PrintToString(runs);
  }
  m.clear_hole_runs();
  m.set_chunks(12);
  EXPECT_FALSE(WellFormed(m));
  m.set_chunks(11);
  m.add_hole_runs(1);
  m.add_hole_runs(3);
  m.add_hole_runs(5);
  m.add_hole_runs(6);
  EXPECT_TRUE(IsHoleChunk(m, 1));
  EXPECT_TRUE(IsHoleChunk(m, 2));
  EXPECT_FALSE(IsHoleChunk(m, 3));
  EXPECT_FALSE(IsHoleChunk(m, 0));
  EXPECT_TRUE(IsHoleChunk(m, 5));
  EXPECT_FALSE(IsHoleChunk(m, 6));
  EXPECT_EQ(DataRuns(m), (std::vector<ChunkRun>{{0, 1}, {3, 5}, {6, 11}}));
  EXPECT_EQ(DataBytes(m), 7 * 4096u + 1);
  // Data chunks 0 3 4 6 7 8 9 10: the fifth of eight.
  EXPECT_EQ(MiddleDataChunk(DataRuns(m)), 7u);
  EXPECT_EQ(MiddleDataChunk({{2, 3}}), 2u);
  EXPECT_EQ(MiddleDataChunk({}), std::nullopt);
}

// Format 7's head chunk: chunk 0 short, every later one a whole chunk from
// its end; a manifest claims one only where a new file would get it.
TEST(ManifestShape, AHeadChunkIsShortAndTheChunksAfterItStartAtItsEnd) {
  const ChunkGeometry g = NewGeometry(1000, 300, 100);
  EXPECT_EQ(g.head, 100u);
  EXPECT_EQ(g.Count(), 4u);  // 100 + 3 * 300
  for (auto [index, start, length] : std::vector<std::tuple<uint64_t, uint64_t, uint32_t>>{
           {0, 0, 100}, {1, 100, 300}, {2, 400, 300}, {3, 700, 300}, {4, 1000, 0}}) {
    EXPECT_EQ(g.Start(index), start) << index;
    EXPECT_EQ(g.Length(index), length) << index;
  }
  for (auto [offset, index] : std::vector<std::pair<uint64_t, uint64_t>>{
           {0, 0}, {99, 0}, {100, 1}, {399, 1}, {400, 2}, {999, 3}}) {
    EXPECT_EQ(g.IndexAt(offset), index) << offset;
  }
  EXPECT_EQ(g.ChunksBefore(0), 0u);
  EXPECT_EQ(g.ChunksBefore(100), 1u);
  EXPECT_EQ(g.ChunksBefore(101), 2u);
  EXPECT_EQ(g.ChunksBefore(1000), 4u);
  // No head where it would not be shorter than a chunk, or the whole file.
  EXPECT_EQ(NewGeometry(100, 300, 100).head, 0u);
  EXPECT_EQ(NewGeometry(1000, 300, 300).head, 0u);
  EXPECT_EQ(NewGeometry(1000, 300, 0).head, 0u);
  EXPECT_EQ(NewGeometry(1001, 300, 100).Count(), 5u);

  storepb::Manifest m;
  m.set_path("a/b.pt.trace.json");
  m.set_size(1001);
  m.set_chunk_bytes(300);
  m.set_head_chunk_bytes(100);
  m.set_chunks(5);
  EXPECT_TRUE(WellFormed(m));
  EXPECT_EQ(ChunkLength(m, 4), 1u);
  m.add_hole_runs(1);
  m.add_hole_runs(3);
  EXPECT_EQ(DataBytes(m), 100u + 300 + 1);
  m.clear_hole_runs();
  m.set_chunks(4);  // what the file would have without its head
  EXPECT_FALSE(WellFormed(m));
  m.set_chunks(5);
  for (uint32_t head : {300u, 400u}) {  // not shorter than a chunk
    m.set_head_chunk_bytes(head);
    EXPECT_FALSE(WellFormed(m)) << head;
  }
  m.set_head_chunk_bytes(100);
  m.set_size(100);  // no longer than its head
  m.set_chunks(1);
  EXPECT_FALSE(WellFormed(m));
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
  std::string env = std::string("TBFS_FAILPOINT=") + c.point;
  if (c.inject_failure) env += " TBFS_FAIL=migrate.verify";
  std::map<std::string, FileState> before;
  std::vector<events::FileDigest> baseline;
  GenerateAndCrash(logdir, env, &before, &baseline);
  if (HasFatalFailure()) return;

  OpenOptions o;
  auto store = ColdStore::Open(JoinPath(logdir, kStoreDirName), o);
  ASSERT_TRUE(store.ok()) << store.status().ToString();
  auto recovered = Recover(**store, logdir);
  ASSERT_TRUE(recovered.ok()) << recovered.status().ToString();

  ExpectEveryFileOnce(**store, logdir, before, baseline, dir / "check", c.point);
}

INSTANTIATE_TEST_SUITE_P(
    Phases, CrashTest,
    ::testing::Values(CrashCase{"migrate.journaled", false}, CrashCase{"migrate.copying", false},
                      CrashCase{"migrate.stored", false}, CrashCase{"migrate.read_back", false},
                      CrashCase{"migrate.aside", false}, CrashCase{"migrate.unlinked", false},
                      CrashCase{"migrate.all_unlinked", false},
                      CrashCase{"migrate.verified", false}, CrashCase{"migrate.rollback_one", true},
                      CrashCase{"migrate.committed", false}),
    [](const auto& info) {
      std::string name = info.param.point;
      return name.substr(name.find('.') + 1);
    });

// A read-only view (ls, export) beside a writer killed mid-batch, before
// any recovery: a file the batch copied but did not yet unlink is hot (at
// its path, where recovery keeps it), not also cold; one it unlinked is
// cold. Every file is in exactly one place.
TEST(ReadOnlyView, AFileOfAnUnfinishedBatchIsHotOrColdNeverBoth) {
  for (const char* point : {"migrate.stored", "migrate.read_back", "migrate.aside",
                            "migrate.unlinked", "migrate.all_unlinked"}) {
    TempDir dir;
    std::string logdir = dir / "logdir";
    std::map<std::string, FileState> before;
    std::vector<events::FileDigest> baseline;
    GenerateAndCrash(logdir, std::string("TBFS_FAILPOINT=") + point, &before, &baseline);
    if (::testing::Test::HasFatalFailure()) return;
    OpenOptions ro;
    ro.read_only = true;
    auto store = ColdStore::Open(JoinPath(logdir, kStoreDirName), ro);
    ASSERT_TRUE(store.ok()) << point << ": " << store.status().ToString();
    std::vector<storepb::Manifest> cold;
    std::vector<std::string> missing;
    ASSERT_TRUE(SelectCold(**store, {}, &cold, &missing).ok());
    ASSERT_TRUE(DropInFlight(**store, logdir, &cold).ok());
    std::set<std::string> in_view;
    for (const auto& m : cold) in_view.insert(m.path());
    for (const auto& [path, state] : before) {
      struct stat st;
      const bool hot = ::lstat(JoinPath(logdir, path).c_str(), &st) == 0;
      EXPECT_NE(hot, in_view.count(path) > 0)
          << point << ": " << path << (hot ? " is hot and cold" : " is neither hot nor cold");
    }
  }
}

// Damage to the engine's write-ahead log after a crash costs at most what
// was written since the last flush, and no file is unlinked before the
// flush that holds its copy (I2): killed just after the first unlink, with
// a block of every log zeroed, recovery still finds every file once.
TEST(LogDamage, ACrashAfterTheFirstUnlinkAndADamagedLogLoseNothing) {
  TempDir dir;
  std::string logdir = dir / "logdir";
  std::map<std::string, FileState> before;
  std::vector<events::FileDigest> baseline;
  GenerateAndCrash(logdir, "TBFS_FAILPOINT=migrate.unlinked", &before, &baseline);
  if (::testing::Test::HasFatalFailure()) return;
  const std::string store_dir = JoinPath(logdir, kStoreDirName);
  int damaged = 0;
  for (const auto& e : std::filesystem::directory_iterator(store_dir)) {
    if (e.path().extension() != ".log" || e.file_size() == 0) continue;
    // One 4 KiB block of zeros in its middle (or its first bytes).
    const uint64_t size = e.file_size();
    const uint64_t at = size > 8192 ? (size / 2) & ~uint64_t{4095} : 0;
    const std::string zeros(std::min<uint64_t>(4096, size - at), '\0');
    int fd = ::open(e.path().c_str(), O_WRONLY);
    ASSERT_GE(fd, 0);
    ASSERT_EQ(::pwrite(fd, zeros.data(), zeros.size(), static_cast<off_t>(at)),
              static_cast<ssize_t>(zeros.size()));
    ::close(fd);
    damaged++;
  }
  OpenOptions o;
  auto store = ColdStore::Open(store_dir, o);
  ASSERT_TRUE(store.ok()) << "damaged " << damaged << " logs: " << store.status().ToString();
  auto recovered = Recover(**store, logdir);
  ASSERT_TRUE(recovered.ok()) << recovered.status().ToString();
  EXPECT_TRUE(recovered->lost.empty())
      << recovered->lost.size() << " lost, first " << recovered->lost.front();
  ExpectEveryFileOnce(**store, logdir, before, baseline, dir / "check", "damaged log");
}

// A pass's time budget (MigrateOptions::deadline): once it has run out,
// no file starts moving; the files wait, untouched, for the next pass.
TEST_F(MigrateTest, APassWhoseBudgetRanOutMovesNothingMoreAndTheNextMovesTheRest) {
  const std::vector<Candidate> candidates = Candidates();
  MigrateOptions spent = Options();
  spent.deadline = std::chrono::steady_clock::now();
  auto first = Migrate(*store_, logdir_, candidates, spent);
  ASSERT_TRUE(first.ok()) << first.status().ToString();
  EXPECT_EQ(first->files_moved, 0u);
  for (const Candidate& c : candidates) {
    EXPECT_FALSE(store_->Lookup(c.path).ok()) << c.path << " moved after the deadline";
  }
  auto next = Migrate(*store_, logdir_, Candidates(), Options());
  ASSERT_TRUE(next.ok() && next->ok());
  EXPECT_EQ(next->files_moved, candidates.size());
  TempDir scratch;
  ExpectEveryFileOnce(*store_, logdir_, before_, baseline_, scratch / "check", "budget");
}

// The budget stops new files from starting, not a copy in flight: a file
// whose copy outlasts the budget still moves (abandoned at each pass's
// deadline, it never would), and nothing after it starts.
TEST_F(MigrateTest, ACopyThatOutlastsThePassBudgetFinishesAndNothingMoreStarts) {
  std::vector<Candidate> candidates = Candidates();
  ASSERT_GE(candidates.size(), 2u);
  std::sort(candidates.begin(), candidates.end(),
            [](const Candidate& a, const Candidate& b) { return a.size > b.size; });
  MigrateOptions o = Options();
  o.batch_files = 1;
  o.deadline = std::chrono::steady_clock::now() + std::chrono::hours(1);
  int waves = 0;
  ScopedFailpoint hook("ingest.wave", [&](const std::string&) {
    if (++waves == 1) o.deadline = std::chrono::steady_clock::now();  // the biggest file's first
  });
  auto result = Migrate(*store_, logdir_, candidates, o);
  ASSERT_TRUE(result.ok()) << result.status().ToString();
  EXPECT_GT(waves, 1) << "the biggest file's copy took one wave: make it bigger";
  EXPECT_EQ(result->files_moved, 1u) << "the copy in flight was abandoned, or more started";
  EXPECT_TRUE(store_->Lookup(candidates[0].path).ok()) << "the copy in flight was abandoned";
  for (size_t i = 1; i < candidates.size(); ++i) {
    EXPECT_FALSE(store_->Lookup(candidates[i].path).ok()) << candidates[i].path << " started";
  }
}

// The store holds one journal record (a batch left to recovery), and
// recovery undoes it: every file in one place with its bytes, none lost.
void ExpectOneRecordThatRecoveryUndoes(ColdStore& store, const std::string& logdir,
                                       const std::map<std::string, FileState>& before,
                                       const std::vector<events::FileDigest>& baseline,
                                       const std::string& what) {
  std::vector<storepb::JournalRecord> journal;
  ASSERT_TRUE(store.ListJournal(&journal).ok());
  ASSERT_EQ(journal.size(), 1u) << what;
  auto recovered = Recover(store, logdir);
  ASSERT_TRUE(recovered.ok()) << recovered.status().ToString();
  EXPECT_TRUE(recovered->lost.empty()) << what;
  tbfs::testing::TempDir scratch;
  ExpectEveryFileOnce(store, logdir, before, baseline, scratch / "check", what);
}

// A folder that cannot be synced after the unlinks keeps the batch's
// journal record: recovery decides it, whichever way the disk kept them.
TEST_F(MigrateTest, AFolderThatCannotBeSyncedKeepsTheJournalRecord) {
  ScopedFailpoint unsynced("migrate.fsync_folder");
  auto result = Migrate(*store_, logdir_, Candidates(), Options());
  ASSERT_TRUE(result.ok()) << result.status().ToString();
  EXPECT_FALSE(result->ok());
  EXPECT_EQ(result->unsynced_batches, 1u);
  ExpectOneRecordThatRecoveryUndoes(*store_, logdir_, before_, baseline_, "unsynced");
}

// A batch whose record the engine refuses to commit is a failure, not a
// success (red team: `migrate --apply` said "moved" and exited 0): its
// record stays for recovery, and no batch follows, so nothing more leaves
// the logdir while the store refuses writes.
TEST_F(MigrateTest, ACommitTheEngineRefusesFailsTheMigrationAndNoBatchFollows) {
  auto candidates = Candidates();
  ASSERT_GE(candidates.size(), 2u);
  MigrateOptions o = Options();
  o.batch_files = 1;
  ScopedFailpoint refused("migrate.commit");
  auto result = Migrate(*store_, logdir_, candidates, o);
  ASSERT_TRUE(result.ok()) << result.status().ToString();
  EXPECT_FALSE(result->ok());
  EXPECT_EQ(result->uncommitted_batches, 1u);
  ASSERT_EQ(result->batches.size(), 1u) << "a batch ran after the engine refused a commit";
  EXPECT_NE(result->batches[0].uncommitted.find("failpoint"), std::string::npos);
  for (size_t i = 1; i < candidates.size(); ++i) {
    EXPECT_FALSE(store_->Lookup(candidates[i].path).ok()) << candidates[i].path << " moved";
  }
  ExpectOneRecordThatRecoveryUndoes(*store_, logdir_, before_, baseline_, "uncommitted");
}

// A folder the batch touched that a user renames before its sync (red
// team, issue 23): the unlinks reach the disk with the filesystem's sync,
// the record goes, and recovery has nothing to call lost.
TEST_F(MigrateTest, AFolderRenamedBeforeItsSyncLeavesNoJournalRecord) {
  auto candidates = Candidates();
  const std::string folder = ParentPath(candidates[0].path);
  ScopedFailpoint moved("migrate.before_folder_sync", [&](const std::string&) {
    ASSERT_EQ(
        ::rename(JoinPath(logdir_, folder).c_str(), JoinPath(logdir_, folder + "-moved").c_str()),
        0);
  });
  auto result = Migrate(*store_, logdir_, candidates, Options());
  ASSERT_TRUE(result.ok()) << result.status().ToString();
  EXPECT_TRUE(result->ok());
  EXPECT_EQ(result->unsynced_batches, 0u);
  std::vector<storepb::JournalRecord> journal;
  ASSERT_TRUE(store_->ListJournal(&journal).ok());
  EXPECT_TRUE(journal.empty());
  auto recovered = Recover(*store_, logdir_);
  ASSERT_TRUE(recovered.ok()) << recovered.status().ToString();
  EXPECT_TRUE(recovered->lost.empty());
}

// A store that cannot flush moves nothing: every file stays in place.
TEST_F(MigrateTest, AStoreThatCannotFlushMovesNothing) {
  ScopedFailpoint no_flush("migrate.flush");
  auto candidates = Candidates();
  auto result = Migrate(*store_, logdir_, candidates, Options());
  ASSERT_TRUE(result.ok()) << result.status().ToString();
  EXPECT_EQ(result->files_moved, 0u);
  for (const auto& f : result->batches[0].files) {
    EXPECT_NE(f.reason.find("could not make its copy durable"), std::string::npos) << f.reason;
  }
  EXPECT_EQ(Snapshot(logdir_).size(), before_.size());
  auto totals = store_->ComputeTotals();
  ASSERT_TRUE(totals.ok());
  EXPECT_EQ(totals->files, 0u);
}

}  // namespace
}  // namespace tbfs::store
