// Recovery (store/recovery.cc) of batches left by a crash, when a recovery
// itself is cut short or cannot finish every file.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <filesystem>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "base/failpoint.h"
#include "store/maintenance.h"
#include "store/migrate.h"
#include "store/migrate_internal.h"
#include "store/restore.h"
#include "store/salvage.h"
#include "store/store_dir.h"
#include "tests/store/crash_fixture.h"
#include "tests/store/migrate_fixture.h"
#include "tests/test_util.h"

namespace tbfs::store {
namespace {

using testing::ReadBytes;
using testing::RunCommand;
using testing::TempDir;
using testing::WriteBytes;

// The first entry of the only journal record of the store at store_dir
// (with `dense`, the first that is not the sparse trace).
storepb::JournalEntry FirstJournalEntry(const std::string& store_dir, bool dense = false) {
  OpenOptions ro;
  ro.read_only = true;
  auto store = ColdStore::Open(store_dir, ro);
  EXPECT_TRUE(store.ok()) << store.status().ToString();
  std::vector<storepb::JournalRecord> journal;
  EXPECT_TRUE(store.ok() && (*store)->ListJournal(&journal).ok());
  EXPECT_EQ(journal.size(), 1u);
  if (journal.empty()) return {};
  for (const storepb::JournalEntry& e : journal[0].entries()) {
    if (!dense || !e.path().ends_with("holes.pt.trace.json")) return e;
  }
  return {};
}

// A user swaps `folder` (absolute) for a symlink to it, renamed aside; and
// puts it back.
void SwapForSymlink(const std::string& folder) {
  ASSERT_EQ(::rename(folder.c_str(), (folder + ".real").c_str()), 0);
  ASSERT_EQ(::symlink((folder + ".real").c_str(), folder.c_str()), 0);
}

void PutFolderBack(const std::string& folder) {
  ASSERT_EQ(::unlink(folder.c_str()), 0);
  ASSERT_EQ(::rename((folder + ".real").c_str(), folder.c_str()), 0);
}

// The name a file goes back under beside a new one at its path: the last
// part of a path gets the suffix, and a name near NAME_MAX gives up its
// last bytes so that the whole fits (it went back under none, hidden).
TEST(Recovery, TheNameBesideANewFileFitsNameMax) {
  EXPECT_EQ(RecoveredName("a.json", 7), "a.json.tbfs-recovered-7");
  EXPECT_EQ(RecoveredName("run/a.json", 7), "run/a.json.tbfs-recovered-7");
  const std::string long_name(255, 'x');
  const std::string beside = RecoveredName("run/d/" + long_name, 12345);
  EXPECT_EQ(beside, "run/d/" + std::string(255 - 21, 'x') + ".tbfs-recovered-12345");
  EXPECT_EQ(BaseName(beside).size(), 255u);
  EXPECT_EQ(RecoveredName(long_name, 12345).size(), 255u);
}

// A recovery killed after it wrote a file back beside a new file that had
// taken its path, before it dropped the store copy: the next recovery
// knows its own write-back (same bytes) and finishes. It used to try the
// write-back again, fail (the beside name taken, by that same write-back)
// and keep the batch's record for good, the copy in the store too.
TEST(Recovery, AWriteBackBesideANewFileCutShortIsFinishedByTheNextRecovery) {
  TempDir dir;
  const std::string logdir = dir / "logdir";
  std::map<std::string, FileState> before;
  std::vector<events::FileDigest> baseline;
  GenerateAndCrash(logdir, "TBFS_FAILPOINT=migrate.all_unlinked", &before, &baseline);
  if (HasFatalFailure()) return;
  const std::string store_dir = JoinPath(logdir, kStoreDirName);
  const storepb::JournalEntry first = FirstJournalEntry(store_dir);
  ASSERT_FALSE(first.path().empty());
  const std::string path = JoinPath(logdir, first.path());
  ASSERT_FALSE(std::filesystem::exists(path)) << "the crash left it cold";
  WriteBytes(path, "a new file under the old name");  // the user's, meanwhile

  auto cut = RunCommand(std::string("TBFS_FAILPOINT=recovery.written_back ") + TBFS_BINARY +
                        " migrate " + logdir + " --older-than 1000d --apply 2>&1");
  ASSERT_EQ(cut.exit_code, kFailpointExitCode) << cut.out;
  const std::string beside = path + ".tbfs-recovered-" + std::to_string(first.file_id());
  ASSERT_TRUE(ReadBytes(beside) == before.at(first.path()).bytes) << "written back beside";

  // And the temporary file of a write-back beside the name, cut short
  // (the red team's kill -9 left one of 3 MB for good).
  const std::string temp =
      JoinPath(ParentPath(path), "." + std::string(BaseName(beside)) + ".tbfs-tmp-" +
                                     std::to_string(first.file_id()));
  WriteBytes(temp, "part of a write-back");

  OpenOptions o;
  auto store = ColdStore::Open(store_dir, o);
  ASSERT_TRUE(store.ok()) << store.status().ToString();
  auto recovered = Recover(**store, logdir);
  ASSERT_TRUE(recovered.ok()) << recovered.status().ToString();
  EXPECT_FALSE(std::filesystem::exists(temp)) << temp;
  for (const std::string& note : recovered->notes) ADD_FAILURE() << "note: " << note;
  EXPECT_TRUE(recovered->lost.empty());
  std::vector<storepb::JournalRecord> journal;
  ASSERT_TRUE((*store)->ListJournal(&journal).ok());
  EXPECT_TRUE(journal.empty()) << "the batch's record stayed";
  EXPECT_FALSE((*store)->Lookup(first.path()).ok()) << "its store copy stayed";
  EXPECT_EQ(ReadBytes(path), "a new file under the old name");
  EXPECT_TRUE(ReadBytes(beside) == before.at(first.path()).bytes);
  for (const auto& [rel, state] : before) {
    if (rel == first.path()) continue;
    EXPECT_TRUE(ReadBytes(JoinPath(logdir, rel)) == state.bytes) << rel;
  }
  WorkPool pool(2);
  auto fsck = Fsck(**store, &pool, nullptr);
  ASSERT_TRUE(fsck.ok());
  EXPECT_TRUE(fsck->clean());
}

// Another user's file at the beside name with the same bytes is not taken
// for recovery's own write-back: the store copy stays (that user could
// delete their file, and the content with it).
TEST(Recovery, AnotherUsersCopyBesideTheNameDoesNotDropTheStoreCopy) {
  TempDir dir;
  const std::string logdir = dir / "logdir";
  std::map<std::string, FileState> before;
  std::vector<events::FileDigest> baseline;
  GenerateAndCrash(logdir, "TBFS_FAILPOINT=migrate.all_unlinked", &before, &baseline);
  if (HasFatalFailure()) return;
  const std::string store_dir = JoinPath(logdir, kStoreDirName);
  const storepb::JournalEntry first = FirstJournalEntry(store_dir, /*dense=*/true);
  ASSERT_FALSE(first.path().empty());
  const std::string path = JoinPath(logdir, first.path());
  WriteBytes(path, "a new file under the old name");
  const std::string beside = path + ".tbfs-recovered-" + std::to_string(first.file_id());
  WriteBytes(beside, before.at(first.path()).bytes);
  ASSERT_EQ(::chown(beside.c_str(), 65534, 65534), 0);

  OpenOptions o;
  auto store = ColdStore::Open(store_dir, o);
  ASSERT_TRUE(store.ok()) << store.status().ToString();
  auto recovered = Recover(**store, logdir);
  ASSERT_TRUE(recovered.ok()) << recovered.status().ToString();
  EXPECT_TRUE((*store)->Lookup(first.path()).ok()) << "the store copy was dropped";
  EXPECT_TRUE(recovered->lost.empty());
}

// A record that must stay (a file whose folder became a symlink cannot go
// back) keeps only that file: the files this recovery wrote back are not
// judged again by the next one. They used to be: one migrated again
// meanwhile (under a new file id, so gone from the logdir, and its old id
// gone from the store) was then recorded as lost.
TEST(Recovery, ARecordThatStaysForOneFileDoesNotJudgeTheOthersAgain) {
  TempDir dir;
  const std::string logdir = dir / "logdir";
  std::map<std::string, FileState> before;
  std::vector<events::FileDigest> baseline;
  GenerateAndCrash(logdir, "TBFS_FAILPOINT=migrate.all_unlinked", &before, &baseline);
  if (HasFatalFailure()) return;
  const std::string store_dir = JoinPath(logdir, kStoreDirName);
  // The folder of the batch's first file: a symlink now.
  const std::string folder = ParentPath(FirstJournalEntry(store_dir).path());
  ASSERT_FALSE(folder.empty());
  SwapForSymlink(JoinPath(logdir, folder));
  if (HasFatalFailure()) return;

  OpenOptions o;
  auto store = ColdStore::Open(store_dir, o);
  ASSERT_TRUE(store.ok()) << store.status().ToString();
  auto first = Recover(**store, logdir);
  ASSERT_TRUE(first.ok()) << first.status().ToString();
  ASSERT_GT(first->restored, 0u) << "the files of the other folders went back";
  ASSERT_FALSE(first->notes.empty()) << "the symlinked folder's files stay cold";

  // The files written back move again (new file ids).
  MigrateOptions mo;
  mo.chunk_bytes = 64 << 10;
  mo.level = 3;
  mo.walk.skip_dirs = {kStoreDirName};
  CandidateOptions co;
  co.older_than_s = 0;
  co.walk.skip_dirs = {kStoreDirName};
  std::vector<Candidate> candidates;
  std::vector<Skipped> skipped;
  ASSERT_TRUE(FindCandidates(logdir, co, &candidates, &skipped).ok());
  ASSERT_FALSE(candidates.empty());
  auto moved = Migrate(**store, logdir, candidates, mo);
  ASSERT_TRUE(moved.ok()) << moved.status().ToString();
  ASSERT_GT(moved->files_moved, 0u);

  auto second = Recover(**store, logdir);
  ASSERT_TRUE(second.ok()) << second.status().ToString();
  for (const std::string& lost : second->lost) ADD_FAILURE() << "recorded as lost: " << lost;
  std::vector<ColdStore::LostFile> lost;
  ASSERT_TRUE((*store)->ListLost(&lost).ok());
  EXPECT_TRUE(lost.empty());
}

// A restore killed after it brought some files back: recovery finishes it
// where the file in place is the one restored. A file that another took
// the name of (the restore left it cold, its only copy) stays cold; it used
// to be dropped from the store because some file stood at its path.
class RecoveryTest : public MigrateTest {
 protected:
  // A migration of `candidates` during which the first is deleted in the
  // logdir as it is copied, and whose commit the engine refuses.
  void MigrateDeletingTheFirstWhileItIsCopied(const std::vector<Candidate>& candidates) {
    const std::string gone = JoinPath(logdir_, candidates[0].path);
    ScopedFailpoint deleted("migrate.copied", [&](const std::string& path) {
      if (path == gone) {
        ASSERT_EQ(::unlink(gone.c_str()), 0);
      }
    });
    ScopedFailpoint refused("migrate.commit");
    auto result = Migrate(*store_, logdir_, candidates, Options());
    ASSERT_TRUE(result.ok()) << result.status().ToString();
    ASSERT_EQ(result->uncommitted_batches, 1u);
    ASSERT_EQ(result->batches[0].files[0].path, candidates[0].path);
    EXPECT_EQ(result->batches[0].files[0].outcome, Outcome::kDeleted);
  }
  // The process ends (with it a commit it held back, ColdStore::Defer); the
  // next writer opens the store and recovers. Expects nothing recorded lost.
  void RecoverAfterARestart() {
    store_.reset();
    auto store = ColdStore::Open(JoinPath(logdir_, kStoreDirName), OpenOptions{});
    ASSERT_TRUE(store.ok()) << store.status().ToString();
    store_ = std::move(store).value();
    auto recovered = Recover(*store_, logdir_);
    ASSERT_TRUE(recovered.ok()) << recovered.status().ToString();
    EXPECT_TRUE(recovered->lost.empty()) << ::testing::PrintToString(recovered->lost);
    std::vector<ColdStore::LostFile> lost;
    ASSERT_TRUE(store_->ListLost(&lost).ok());
    EXPECT_TRUE(lost.empty());
  }
};

TEST_F(RecoveryTest, ARestoreCutShortKeepsTheCopyOfAFileWhoseNameAnotherTook) {
  const std::vector<Candidate> candidates = Candidates();
  ASSERT_GE(candidates.size(), 2u);
  auto moved = Migrate(*store_, logdir_, candidates, Options());
  ASSERT_TRUE(moved.ok());
  ASSERT_EQ(moved->files_moved, candidates.size());
  store_.reset();
  const std::string victim = candidates[0].path;
  WriteBytes(JoinPath(logdir_, victim), "a new trace under the old name");
  auto cut = RunCommand(std::string("TBFS_FAILPOINT=restore.in_place ") + TBFS_BINARY +
                        " restore " + logdir_ + " --apply --all 2>&1");
  ASSERT_EQ(cut.exit_code, kFailpointExitCode) << cut.out;

  OpenOptions o;
  auto store = ColdStore::Open(JoinPath(logdir_, kStoreDirName), o);
  ASSERT_TRUE(store.ok()) << store.status().ToString();
  auto recovered = Recover(**store, logdir_);
  ASSERT_TRUE(recovered.ok()) << recovered.status().ToString();
  EXPECT_TRUE((*store)->Lookup(victim).ok()) << "its only copy was dropped";
  EXPECT_EQ(ReadBytes(JoinPath(logdir_, victim)), "a new trace under the old name");
  size_t restored = 0;
  for (const Candidate& c : candidates) {
    if (c.path == victim || !std::filesystem::exists(JoinPath(logdir_, c.path))) continue;
    restored++;
    EXPECT_TRUE(ReadBytes(JoinPath(logdir_, c.path)) == before_[c.path].bytes) << c.path;
    EXPECT_FALSE((*store)->Lookup(c.path).ok()) << c.path << " is hot and cold";
  }
  EXPECT_GE(restored, 1u);
}

// A file deleted in the logdir while the batch copied it is given up as
// deleted; when the batch's commit does not land and the process ends, the
// recovery that follows knows it was deleted (the batch saw it go), and
// does not record it lost.
TEST_F(RecoveryTest, AFileDeletedWhileItWasCopiedIsNotRecordedLostWhenTheCommitDidNotLand) {
  const std::vector<Candidate> candidates = Candidates();
  ASSERT_GE(candidates.size(), 2u);
  const std::string gone = JoinPath(logdir_, candidates[0].path);
  MigrateDeletingTheFirstWhileItIsCopied(candidates);
  RecoverAfterARestart();
  EXPECT_FALSE(std::filesystem::exists(gone));
  for (size_t i = 1; i < candidates.size(); ++i) {
    const std::string& rel = candidates[i].path;
    EXPECT_TRUE(ReadBytes(JoinPath(logdir_, rel)) == before_[rel].bytes) << rel << " not undone";
  }
  std::map<uint64_t, Mark> marks;
  ASSERT_TRUE(store_->ListBatchMarks(&marks).ok());
  EXPECT_TRUE(marks.empty()) << "the mark outlived its batch's record";
}

// Salvage of the store the crash left judges a journaled file as recovery
// would: one its batch saw deleted is not lost.
TEST_F(RecoveryTest, SalvageDoesNotCallAFileDeletedWhileItWasCopiedLost) {
  MigrateDeletingTheFirstWhileItIsCopied(Candidates());
  store_.reset();
  WorkPool pool(1);
  SalvageOptions o;
  o.store_dir = JoinPath(logdir_, kStoreDirName);
  o.logdir = logdir_;
  o.pool = &pool;
  auto r = Salvage(o);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  for (const auto& l : r->lost) ADD_FAILURE() << l.path << ": " << l.why;
}

// A moved file written back (a rehydration: opened for writing through a
// mount) and then deleted, before its batch committed: when the commit
// does not land, the recovery that follows does not record it lost.
TEST_F(RecoveryTest, AFileRestoredThenDeletedBeforeItsBatchCommittedIsNotRecordedLost) {
  const std::vector<Candidate> candidates = Candidates();
  const std::string rel = candidates[0].path;
  WorkPool pool(1);
  ScopedFailpoint rehydrated("migrate.before_verify", [&](const std::string&) {
    auto m = store_->Lookup(rel);
    ASSERT_TRUE(m.ok()) << m.status().ToString();
    RestoreOptions o;
    o.pool = &pool;
    o.compact = false;
    auto back = Restore(*store_, logdir_, {*m}, o);
    ASSERT_TRUE(back.ok() && back->failed.empty());
    ASSERT_EQ(::unlink(JoinPath(logdir_, rel).c_str()), 0);
  });
  ScopedFailpoint refused("migrate.commit");
  auto result = Migrate(*store_, logdir_, candidates, Options());
  ASSERT_TRUE(result.ok()) << result.status().ToString();
  ASSERT_EQ(result->uncommitted_batches, 1u);
  RecoverAfterARestart();
  EXPECT_FALSE(std::filesystem::exists(JoinPath(logdir_, rel)));
}

// A file gone before its batch began (after the walk that found it) is
// left as it is, and marked so: when the batch's commit does not land, the
// recovery that follows does not record it lost.
TEST_F(RecoveryTest, AFileGoneBeforeItsBatchBeganIsNotRecordedLostWhenTheCommitDidNotLand) {
  const std::vector<Candidate> candidates = Candidates();
  const std::string gone = JoinPath(logdir_, candidates[0].path);
  ASSERT_EQ(::unlink(gone.c_str()), 0);
  ScopedFailpoint refused("migrate.commit");
  auto result = Migrate(*store_, logdir_, candidates, Options());
  ASSERT_TRUE(result.ok()) << result.status().ToString();
  ASSERT_EQ(result->uncommitted_batches, 1u);
  EXPECT_EQ(result->batches[0].files[0].reason, "gone before the batch began");
  RecoverAfterARestart();
}

// The mark is there while the batch runs, and goes with its record.
TEST_F(RecoveryTest, TheMarkOfAFileDeletedWhileItWasCopiedGoesWithItsBatch) {
  const std::vector<Candidate> candidates = Candidates();
  const std::string gone = JoinPath(logdir_, candidates[0].path);
  ScopedFailpoint deleted("migrate.copied", [&](const std::string& path) {
    if (path == gone) {
      ASSERT_EQ(::unlink(gone.c_str()), 0);
    }
  });
  std::map<uint64_t, Mark> during;
  ScopedFailpoint verify("migrate.before_verify", [&](const std::string&) {
    ASSERT_TRUE(store_->ListBatchMarks(&during).ok());
  });
  auto result = Migrate(*store_, logdir_, candidates, Options());
  ASSERT_TRUE(result.ok()) << result.status().ToString();
  EXPECT_TRUE(result->ok());
  EXPECT_EQ(during.size(), 1u);
  std::map<uint64_t, Mark> after;
  ASSERT_TRUE(store_->ListBatchMarks(&after).ok());
  EXPECT_TRUE(after.empty());
}

// A file whose copy had not reached the store when the migration died, in
// a folder that is a symlink now: nothing tells where it is, so it is not
// judged (it used to be recorded as lost, and stayed so); once the folder
// is back, recovery finds it in place.
TEST(Recovery, AFileWhoseFolderIsASymlinkNowWaitsAndIsNotRecordedLost) {
  TempDir dir;
  const std::string logdir = dir / "logdir";
  std::map<std::string, FileState> before;
  std::vector<events::FileDigest> baseline;
  GenerateAndCrash(logdir, "TBFS_FAILPOINT=migrate.copying", &before, &baseline);
  if (HasFatalFailure()) return;
  const std::string store_dir = JoinPath(logdir, kStoreDirName);
  const std::string folder = JoinPath(logdir, ParentPath(FirstJournalEntry(store_dir).path()));
  ASSERT_NE(folder, logdir);
  SwapForSymlink(folder);
  if (HasFatalFailure()) return;

  OpenOptions o;
  auto store = ColdStore::Open(store_dir, o);
  ASSERT_TRUE(store.ok()) << store.status().ToString();
  auto first = Recover(**store, logdir);
  ASSERT_TRUE(first.ok()) << first.status().ToString();
  for (const std::string& lost : first->lost) ADD_FAILURE() << "recorded as lost: " << lost;
  std::vector<storepb::JournalRecord> journal;
  ASSERT_TRUE((*store)->ListJournal(&journal).ok());
  EXPECT_EQ(journal.size(), 1u) << "the record waits for the folder";

  PutFolderBack(folder);
  if (HasFatalFailure()) return;
  auto second = Recover(**store, logdir);
  ASSERT_TRUE(second.ok()) << second.status().ToString();
  EXPECT_TRUE(second->lost.empty());
  std::vector<ColdStore::LostFile> lost;
  ASSERT_TRUE((*store)->ListLost(&lost).ok());
  EXPECT_TRUE(lost.empty());
  ExpectEveryFileOnce(**store, logdir, before, baseline, dir / "check", "symlinked folder");
}

// A file left cold by a recovery that could not write it back (its folder
// a symlink), then deleted from the store on purpose (gc), is no loss when
// its folder is back: it used to be recorded as lost.
TEST(Recovery, AWaitingFileDeletedFromTheStoreMeanwhileIsNotRecordedLost) {
  TempDir dir;
  const std::string logdir = dir / "logdir";
  std::map<std::string, FileState> before;
  std::vector<events::FileDigest> baseline;
  GenerateAndCrash(logdir, "TBFS_FAILPOINT=migrate.all_unlinked", &before, &baseline);
  if (HasFatalFailure()) return;
  const std::string store_dir = JoinPath(logdir, kStoreDirName);
  const storepb::JournalEntry entry = FirstJournalEntry(store_dir);
  const std::string folder = JoinPath(logdir, ParentPath(entry.path()));
  SwapForSymlink(folder);
  if (HasFatalFailure()) return;

  OpenOptions o;
  auto store = ColdStore::Open(store_dir, o);
  ASSERT_TRUE(store.ok()) << store.status().ToString();
  auto first = Recover(**store, logdir);
  ASSERT_TRUE(first.ok()) << first.status().ToString();
  auto cold = (*store)->Lookup(entry.path());
  ASSERT_TRUE(cold.ok()) << "it waits, cold";
  WriteBatch gc;  // what tbfs gc does to it
  ASSERT_TRUE((*store)->RemoveFile(&gc, *cold).ok());
  ASSERT_TRUE((*store)->Commit(gc, true).ok());

  PutFolderBack(folder);
  if (HasFatalFailure()) return;
  auto second = Recover(**store, logdir);
  ASSERT_TRUE(second.ok()) << second.status().ToString();
  for (const std::string& lost : second->lost) ADD_FAILURE() << "recorded as lost: " << lost;
  std::vector<storepb::JournalRecord> journal;
  ASSERT_TRUE((*store)->ListJournal(&journal).ok());
  EXPECT_TRUE(journal.empty());
}

}  // namespace
}  // namespace tbfs::store
