// One batch of a migration, its five steps in order (store/migrate.h):
// baseline, journal, move, verify, commit or roll back.
#include "store/batch_runner.h"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <future>
#include <set>
#include <system_error>
#include <thread>

#include "base/alarm.h"
#include "base/failpoint.h"
#include "base/time_util.h"
#include "events/verifier.h"
#include "nlohmann/json.hpp"
#include "spdlog/spdlog.h"
#include "store/format.h"
#include "store/gzip_pieces.h"
#include "store/migrate_internal.h"

namespace tbfs::store {

namespace {

// How long the last staged file of a group waits aside, at least, for a
// writer that found it by name just before it moved (the others wait the
// next files' copies too).
constexpr auto kAsideGrace = std::chrono::milliseconds(20);

// Staged files wait aside in groups: before the first unlink of a group the
// engine flushes, so that nothing a moved file needs lives only in its
// write-ahead log (I2; docs/format.md). A group closes at this many files
// or when its first file has waited this long.
constexpr size_t kGroupFiles = 256;
constexpr auto kGroupAge = std::chrono::seconds(1);

// A gzip file bigger than this is copied with the whole pool: stored as it
// is, its copy is compression, which one thread would do at half speed.
constexpr uint64_t kSideMaxBytes = 256 << 20;

// The tfevents files of every run that holds one of the candidates: those
// whose folder is the candidate's folder or one of its ancestors.
std::vector<std::string> AffectedEventFiles(const std::vector<std::string>& event_files,
                                            const std::vector<Candidate>& batch) {
  std::set<std::string> folders;
  for (const Candidate& c : batch) {
    std::string dir = ParentPath(c.path);
    for (;;) {
      folders.insert(dir);
      if (dir.empty()) break;
      dir = ParentPath(dir);
    }
  }
  std::vector<std::string> out;
  for (const std::string& f : event_files) {
    if (folders.count(ParentPath(f))) out.push_back(f);
  }
  return out;
}
}  // namespace

BatchResult BatchRunner::Run(const std::vector<Candidate>& batch,
                             const std::vector<std::string>& event_files,
                             events::LogdirDigest* full) {
  MaybePause("migrate.batch");
  // Every batch is heard of, the ones that never ran too (their why).
  auto heard = [this](BatchResult r) {
    if (options_.after_batch) options_.after_batch(r);
    return r;
  };
  BatchResult result;
  result.batch_id = store_.NewBatchId();
  for (const Candidate& c : batch) {
    FileResult f;
    f.path = c.path;
    f.bytes = c.size;
    result.files.push_back(std::move(f));
  }

  // 1. Baseline of every run the batch touches.
  std::vector<std::string> affected = AffectedEventFiles(event_files, batch);
  std::vector<events::FileDigest> before;
  if (!TakeBaseline(affected, &before, &result)) return heard(std::move(result));

  // 2. Journal first.
  storepb::JournalRecord record;
  std::vector<bool> present;
  if (!Journal(batch, &record, &present, &result)) return heard(std::move(result));
  MaybeCrash("migrate.journaled");

  // 3. Move the files: each is staged aside while the next ones of its
  // group are copied; the engine flushes; then the group is unlinked.
  std::vector<storepb::Manifest> moved;
  std::set<std::string> folders = MoveFiles(batch, record, present, &moved, &result);
  // Before the folders are synced: their times as the users left them.
  folder_times_.Restore();
  FailpointHook("migrate.before_folder_sync", logdir_);
  SyncFolders(folders, &result);
  MaybeCrash("migrate.all_unlinked");
  FailpointHook("migrate.before_verify", logdir_);

  // 4. Verify every run the batch touched.
  auto lock = NamespaceLock();
  Verify(affected, before, full, &result);

  // 5. Commit or roll back.
  if (!result.failures.empty()) {
    Rollback(moved, &result);
  } else {
    MaybeCrash("migrate.verified");
  }
  CommitBatch(before.size(), &result);
  MaybeCrash("migrate.committed");
  result.store_full = !store_full_.empty();
  return heard(std::move(result));
}

bool BatchRunner::TakeBaseline(const std::vector<std::string>& affected,
                               std::vector<events::FileDigest>* before, BatchResult* result) {
  const std::vector<Status> statuses =
      events::DigestEach(logdir_, affected, options_.threads, before);
  for (size_t i = 0; i < affected.size(); ++i) {
    const Status& st = statuses[i];
    if (!st.ok()) {
      result->not_run = "cannot take the verifier baseline: " + st.message();
      for (FileResult& f : result->files) f.reason = result->not_run;
      return false;
    }
    result->runs_verified.push_back(events::RunOf(affected[i]));
  }
  std::sort(result->runs_verified.begin(), result->runs_verified.end());
  result->runs_verified.erase(
      std::unique(result->runs_verified.begin(), result->runs_verified.end()),
      result->runs_verified.end());
  return true;
}

bool BatchRunner::Journal(const std::vector<Candidate>& batch, storepb::JournalRecord* record,
                          std::vector<bool>* present, BatchResult* result) {
  record->set_kind(storepb::JournalRecord::MIGRATE);
  record->set_batch_id(result->batch_id);
  record->set_started_ns(NowNs());
  present->assign(batch.size(), false);
  for (size_t i = 0; i < batch.size(); ++i) {
    storepb::JournalEntry* e = record->add_entries();
    e->set_path(batch[i].path);
    e->set_file_id(store_.NewFileId());
    auto fd = OpenBeneath(root_fd_, batch[i].path, O_PATH);
    struct stat st;
    if (fd.ok() && ::fstat(fd->get(), &st) == 0 && S_ISREG(st.st_mode)) {
      e->set_ino(st.st_ino);
      e->set_size(static_cast<uint64_t>(st.st_size));
      e->set_mtime_ns(ToNs(st.st_mtim));
      e->set_ctime_ns(ToNs(st.st_ctim));
      (*present)[i] = true;
    }
  }
  Status st = ShouldFail("migrate.journal")
                  ? Status::FromErrno(EIO, "write to store", "(failpoint migrate.journal)")
                  : store_.PutJournal(*record);
  // In the engine's tables before the first file moves aside: recovery
  // finds the files aside by their journal record, and a damaged log must
  // not take it with it.
  if (st.ok()) {
    st = Flush(result);
    if (!st.ok() && !store_.DeleteJournal(result->batch_id).ok()) {
      spdlog::error("migrate: batch {}: its journal record stays (recovery drops it)",
                    result->batch_id);
    }
  }
  if (!st.ok()) {
    result->not_run = "the store refused its journal record: " + st.message();
    result->journal_refused = true;
    for (FileResult& f : result->files) f.reason = result->not_run;
    return false;
  }
  return true;
}

std::set<std::string> BatchRunner::MoveFiles(const std::vector<Candidate>& batch,
                                             const storepb::JournalRecord& record,
                                             const std::vector<bool>& present,
                                             std::vector<storepb::Manifest>* moved,
                                             BatchResult* result) {
  std::set<std::string> folders;
  std::vector<Staged> group;
  // A gzip file's copy (store/file_io.h) is mostly one thread's work: its
  // recipe search inflates and deflates the whole content again.
  // It runs on a thread of its own, with a pool of one, beside the next
  // files' copies; its move aside, like every other, is this thread's.
  // (`tbfs-bench cold`'s logdir: the process busy 150% -> 170% of two
  // cores.) Only where files after it can fill the second core.
  SideCopy side;
  // Declared after what its task uses: it goes first.
  Alarm alarm("aside group");
  auto side_done = [&](bool wait) {
    if (!side.staged.valid()) return;
    {
      std::lock_guard lock(side.mu);
      if (!side.copied && !wait) return;
      side.taken = true;
    }
    side.cv.notify_all();
    std::optional<Staged> copied = side.staged.get();
    if (store_full_.empty()) store_full_ = side.store_full;
    const auto& entry = record.entries(static_cast<int>(side.index));
    if (copied) copied = MoveAside(std::move(*copied), entry, &result->files[side.index]);
    if (copied) group.push_back(std::move(*copied));
  };
  WriteBatch left;  // the marks of the files left in place unread
  for (size_t i = 0; i < batch.size(); ++i) {
    side_done(false);
    if (!present[i] || !store_full_.empty() || stopping()) {
      store_.journal_index().Put(&left, record.entries(static_cast<int>(i)).file_id(),
                                 Mark::kLeftInPlace);
      result->files[i].outcome = Outcome::kChanged;
      result->files[i].reason = !present[i]           ? "gone before the batch began"
                                : store_full_.empty() ? kStoppedReason
                                                      : "the store has no room";
      continue;
    }
    // Tests: a pass that takes its time (a mount stopped in the middle).
    if (ShouldFail("migrate.slow_file"))
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
    const auto& entry = record.entries(static_cast<int>(i));
    if (!side.staged.valid() && side_pool_ != nullptr && i + 1 < batch.size() &&
        MayBeGzip(batch[i].path) && batch[i].size <= kSideMaxBytes) {
      {
        std::lock_guard lock(side.mu);
        side.index = i;
        side.store_full.clear();
        side.copied = side.taken = false;
      }
      try {
        side.staged = std::async(std::launch::async, [this, &entry, &batch, i, result, &side] {
          return CopyBeside(entry, batch[i], i, &result->files[i], &side);
        });
        continue;
      } catch (const std::system_error& e) {  // no thread to be had: copied in turn
        spdlog::warn("migrate: {}: no thread for a copy beside the others ({})", batch[i].path,
                     e.what());
      }
    }
    // The files aside do not wait for this copy longer than their group's
    // second: the alarm finishes the group meanwhile (the real Kineto trace
    // at level 19 after repetitive files kept them aside 10.8 s; README).
    // Copy touches nothing FinishGroup does; the group is the alarm's until
    // the Disarm.
    const bool armed = !group.empty() && alarm.Arm(group.front().aside_at + kGroupAge, [&] {
      FinishGroup(&group, batch, &folders, moved, result);
    });
    auto copied = Copy(entry, batch[i], i, &result->files[i], pool_, &store_full_);
    if (armed) alarm.Disarm();
    if (copied) {
      auto next = MoveAside(std::move(*copied), entry, &result->files[i]);
      if (next) group.push_back(std::move(*next));
    }
    if (!group.empty() &&
        (group.size() >= kGroupFiles ||
         std::chrono::steady_clock::now() - group.front().aside_at >= kGroupAge)) {
      FinishGroup(&group, batch, &folders, moved, result);
    }
  }
  // The files aside do not wait for the copy beside them (a 256 MiB gzip
  // file's takes seconds): their writers would.
  FinishGroup(&group, batch, &folders, moved, result);
  side_done(true);
  FinishGroup(&group, batch, &folders, moved, result);
  // Needed by a recovery only when the batch's commit does not land: so
  // synced, or a power cut before that commit loses them (and a file
  // deleted since is called lost).
  if (Status st = left.empty() ? Status::OK() : store_.Commit(left, true); !st.ok())
    spdlog::warn("migrate: batch {}: the marks of the files left in place: {}", result->batch_id,
                 st.message());
  return folders;
}

void BatchRunner::FinishGroup(std::vector<Staged>* group, const std::vector<Candidate>& batch,
                              std::set<std::string>* folders, std::vector<storepb::Manifest>* moved,
                              BatchResult* result) {
  if (group->empty()) return;
  const auto waited = std::chrono::steady_clock::now() - group->back().aside_at;
  if (waited < kAsideGrace) std::this_thread::sleep_for(kAsideGrace - waited);
  // I2: the copies, their manifests and the journal record in the engine's
  // flushed, checksummed files, not only in its log, before any unlink.
  Status durable = Flush(result);
  if (ShouldFail("migrate.flush"))
    durable =
        Status::FromErrno(EIO, "flush", "failure injected for testing (failpoint migrate.flush)");
  if (!durable.ok()) {
    spdlog::error("migrate: batch {}: {}", result->batch_id, durable.message());
  } else {
    MaybeCrash("migrate.flushed");
  }
  for (Staged& s : *group) {
    const size_t i = s.index;
    Finish(std::move(s), durable, &result->files[i], moved);
    if (result->files[i].outcome == Outcome::kMoved) folders->insert(ParentPath(batch[i].path));
  }
  group->clear();
}

void BatchRunner::SyncFolders(const std::set<std::string>& folders, BatchResult* result) {
  for (const std::string& dir : folders) {
    auto fd = dir.empty() ? OpenFile(logdir_, O_RDONLY | O_DIRECTORY)
                          : OpenBeneath(root_fd_, dir, O_RDONLY | O_DIRECTORY);
    // The unlinks reach the disk before the verdict. A folder that cannot
    // be synced leaves them to the journal: its record stays, and recovery
    // finishes or undoes the batch whichever way the disk kept it.
    Status synced = fd.status();
    if (fd.ok() && ::fsync(fd->get()) != 0)
      synced = Status::FromErrno(errno, "fsync", JoinPath(logdir_, dir));
    const int gone = fd.ok() ? 0 : fd.status().sys_errno();
    if (gone == ENOENT || gone == ENOTDIR) {
      // Renamed or removed since (a user's rename through the mount): the
      // unlinks made in it reach the disk with the whole filesystem. Left
      // to the journal, the record would name files the batch skipped
      // because their folder moved, which recovery finds nowhere.
      auto top = OpenFile(logdir_, O_RDONLY | O_DIRECTORY);
      synced = top.status();
      if (top.ok() && ::syncfs(top->get()) != 0)
        synced = Status::FromErrno(errno, "syncfs", logdir_);
    }
    if (synced.ok() && ShouldFail("migrate.fsync_folder"))
      synced = Status::FromErrno(EIO, "fsync", JoinPath(logdir_, dir) + " (failpoint)");
    if (!synced.ok()) {
      spdlog::error("migrate: batch {}: {}; its journal record stays", result->batch_id,
                    synced.message());
      if (result->unsynced.empty()) result->unsynced = synced.message();
    }
  }
}

void BatchRunner::Verify(const std::vector<std::string>& affected,
                         const std::vector<events::FileDigest>& before, events::LogdirDigest* full,
                         BatchResult* result) {
  std::vector<events::FileDigest> now;
  result->failures = events::VerifyFiles(logdir_, before, options_.threads, &now);
  for (size_t i = 0; i < affected.size(); ++i) {
    for (events::FileDigest& f : full->files) {
      if (f.path == affected[i] && now[i].offset_bytes > 0) f = now[i];
    }
  }
  events::MergeRuns(full);
  for (events::Failure& f : events::CheckMustHave(*full, options_.must_have)) {
    result->failures.push_back(std::move(f));
  }
  if (ShouldFail("migrate.verify")) {
    result->failures.push_back(
        {"*", "", "", 0, "failure injected for testing (failpoint migrate.verify)"});
  }
}

void BatchRunner::CommitBatch(size_t files_checked, BatchResult* result) {
  WriteBatch commit;
  if (result->unsynced.empty()) {
    commit.Delete(Space::kJournal, EncodeId(result->batch_id));
    store_.journal_index().DropMarks(&commit, result->batch_id);
  }
  commit.Put(Space::kBaselines, kLastBaselineKey,
             nlohmann::json{{"batch", result->batch_id},
                            {"time_ns", NowNs()},
                            {"intact", result->failures.empty()},
                            {"files_checked", files_checked}}
                 .dump());
  // The failpoint stands for an engine that refuses the write (a failing
  // disk): nothing is committed.
  Status st = ShouldFail("migrate.commit")
                  ? Status::FromErrno(EIO, "commit", "the batch's record (failpoint)")
                  : store_.Commit(commit, true);
  if (!st.ok()) {
    result->uncommitted = st.message();
    spdlog::error("migrate: commit batch {}: {}; its journal record stays", result->batch_id,
                  st.message());
    // Done but for its record: the next write the store takes commits it.
    if (result->unsynced.empty()) result->deferred_at = store_.Defer(commit);
  } else if (result->unsynced.empty()) {
    store_.journal_index().Forget(result->batch_id);
  }
}

void BatchRunner::GiveUp(uint64_t file_id, const storepb::JournalEntry* entry, FileResult* result,
                         Outcome outcome, const std::string& reason) {
  result->outcome = outcome;
  result->reason = reason;
  auto current = store_.GetManifest(file_id);
  // Marked (seen deleted, or left in place): a recovery after a commit of
  // this batch that did not land must not take it for a file the store
  // lost, whatever happens to it meanwhile (store/journal_index.h).
  const Mark mark = outcome == Outcome::kDeleted ? Mark::kDeleted : Mark::kLeftInPlace;
  Status st;
  if (current.ok()) {
    st = DropFromStore(store_, *current, retire(), mark);
    if (st.ok() && options_.observer != nullptr) options_.observer->Retired();
  } else if (current.status().IsNotFound() && entry != nullptr) {
    st = DropFromStore(store_, Stub(*entry), false, mark);  // chunks of a copy cut short
  } else {
    st = current.status();
  }
  if (!st.ok()) spdlog::error("migrate: drop the copy of {}: {}", result->path, st.message());
}

void BatchRunner::Rollback(const std::vector<storepb::Manifest>& moved, BatchResult* result) {
  bool first = true;
  for (const storepb::Manifest& was : moved) {
    // Its current path: a rename through the mount may have moved it.
    auto m = store_.GetManifest(was.file_id());
    if (!m.ok()) {
      // Deleted through the mount meanwhile: there is nothing to put back.
      if (!m.status().IsNotFound())
        spdlog::error("migrate rollback of {}: {}", was.path(), m.status().message());
      continue;
    }
    std::string dest, note;
    Status st = PutBack(store_, logdir_, *m, &pool_, options_.observer, &dest, &note);
    if (!note.empty()) spdlog::warn("migrate rollback: {}", note);
    if (!st.ok()) {
      // The store copy stays (and the journal record with it): recovery
      // tries again; nothing is lost.
      spdlog::error("migrate rollback of {}: {}", m->path(), st.message());
      continue;
    }
    if (first) MaybeCrash("migrate.rollback_one");
    first = false;
    st = DropFromStore(store_, *m, retire(), Mark::kLeftInPlace);
    if (!st.ok()) spdlog::error("migrate rollback: drop {}: {}", m->path(), st.message());
    for (FileResult& f : result->files) {
      if (f.path == was.path()) {
        f.outcome = Outcome::kRolledBack;
        f.reason = "verifier failure: batch rolled back";
      }
    }
  }
  if (options_.observer != nullptr) options_.observer->Retired();
  result->rolled_back = true;
}

}  // namespace tbfs::store
