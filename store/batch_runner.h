// The batch engine's runner (migrate.h's step 3, one batch): what
// migrate.cc, batch_runner.cc and batch_files.cc share; not for use outside
// store/.
#pragma once

#include <sys/stat.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <future>
#include <memory>
#include <mutex>
#include <optional>
#include <set>
#include <shared_mutex>
#include <string>
#include <vector>

#include "base/fs_util.h"
#include "base/work_pool.h"
#include "events/logdir_digest.h"
#include "store/cold_store.h"
#include "store/file_io.h"
#include "store/migrate.h"

namespace tbfs::store {

inline constexpr char kStoppedReason[] =
    "the migration was stopped (or its time budget ran out); left in place";

// A file copied into the store and renamed aside in its folder, waiting for
// its unlink while the next files of its group are copied.
struct Staged {
  size_t index = 0;
  std::chrono::steady_clock::time_point aside_at;
  storepb::Manifest manifest;
  UniqueFd dir;   // its folder (O_PATH)
  UniqueFd file;  // the file, read-only, holding the read lease
  std::string name, aside;
};

// The copy of one file on a thread beside the batch's (MoveFiles).
struct SideCopy {
  size_t index = 0;
  std::string store_full;  // why the store could take no more, if it could not
  std::mutex mu;
  std::condition_variable cv;
  bool copied = false;  // the copy is done (guarded by mu)
  bool taken = false;   // the batch's thread waits for it (guarded by mu)
  // Last: destroyed first, it waits for the thread that uses the rest.
  std::future<std::optional<Staged>> staged;
};

class BatchRunner {
 public:
  BatchRunner(ColdStore& store, const std::string& logdir, int root_fd,
              const MigrateOptions& options, WorkPool& pool)
      : store_(store), logdir_(logdir), root_fd_(root_fd), options_(options), pool_(pool) {
    if (pool.size() > 1) side_pool_ = std::make_unique<WorkPool>(1);
  }

  BatchResult Run(const std::vector<Candidate>& batch, const std::vector<std::string>& event_files,
                  events::LogdirDigest* full);

 private:
  std::string StickyConflict(int dir_fd, const struct stat& st, const std::string& rel);
  // The steps of Run, in order. Each false return ends the batch before
  // any file moved (result->not_run says why).
  bool TakeBaseline(const std::vector<std::string>& affected,
                    std::vector<events::FileDigest>* before, BatchResult* result);
  bool Journal(const std::vector<Candidate>& batch, storepb::JournalRecord* record,
               std::vector<bool>* present, BatchResult* result);
  // Moves the files of the batch present when it was journaled; returns
  // the folders files left.
  std::set<std::string> MoveFiles(const std::vector<Candidate>& batch,
                                  const storepb::JournalRecord& record,
                                  const std::vector<bool>& present,
                                  std::vector<storepb::Manifest>* moved, BatchResult* result);
  // Unlinks (or puts back) a group of staged files after one flush (I2).
  void FinishGroup(std::vector<Staged>* group, const std::vector<Candidate>& batch,
                   std::set<std::string>* folders, std::vector<storepb::Manifest>* moved,
                   BatchResult* result);
  void SyncFolders(const std::set<std::string>& folders, BatchResult* result);
  void Verify(const std::vector<std::string>& affected,
              const std::vector<events::FileDigest>& before, events::LogdirDigest* full,
              BatchResult* result);
  void CommitBatch(size_t files_checked, BatchResult* result);

  // The file opened, checked, leased, copied into the store with `pool`
  // and read back; the Staged holds its manifest, no aside name yet.
  // Touches no state of the runner but *result and, when the store is full,
  // *store_full: safe beside another Copy, a MoveAside or a FinishGroup on
  // another thread.
  std::optional<Staged> Copy(const storepb::JournalEntry& entry, const Candidate& c, size_t index,
                             FileResult* result, WorkPool& pool, std::string* store_full);
  // Copy on the side thread, with side_pool_; then, until the batch's
  // thread takes the copy, a writer that opens the file is let in at once
  // (the file stays in place), not kept waiting for the lease's break.
  std::optional<Staged> CopyBeside(const storepb::JournalEntry& entry, const Candidate& c,
                                   size_t index, FileResult* result, SideCopy* side);
  // Then, under the namespace lock: the checks of I2 once the copy is in
  // the store, then the file renamed aside; nothing when it stays in place
  // (*result says why).
  std::optional<Staged> MoveAside(Staged copied, const storepb::JournalEntry& entry,
                                  FileResult* result);
  // Unlinks a staged file, or puts it back where a writer showed up or
  // where the store could not make its copy durable (`durable` not ok).
  void Finish(Staged staged, const Status& durable, FileResult* result,
              std::vector<storepb::Manifest>* moved);
  // A file moved aside that is not the one copied goes back under `name`
  // (beside it when that is taken again); returns the name it has now.
  std::string PutAsideBack(int dir_fd, const std::string& name, const std::string& aside,
                           uint64_t file_id);
  // The folder of `rel` beneath the logdir, made where missing; *name gets
  // the last component.
  Result<UniqueFd> FolderFor(const std::string& rel, std::string* name);
  // The file stays hot: its copy leaves the store (by the file id's
  // current manifest: a rename through the mount may have moved it).
  void GiveUp(uint64_t file_id, const storepb::JournalEntry* entry, FileResult* result,
              Outcome outcome, const std::string& reason);
  void Rollback(const std::vector<storepb::Manifest>& moved, BatchResult* result);
  // The engine's flush (I2), counted and timed in *result.
  Status Flush(BatchResult* result) {
    const auto start = std::chrono::steady_clock::now();
    Status st = store_.Flush();
    result->flushes++;
    result->flush_seconds +=
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    return st;
  }
  std::shared_lock<SharedMutex> NamespaceLock() {
    if (options_.batch_lock == nullptr) return {};
    return std::shared_lock(*options_.batch_lock);
  }
  bool retire() const { return options_.observer != nullptr; }
  // Asked to stop (an unmount, SIGTERM): even a copy in flight ends.
  bool stopped() const { return StopAsked(options_); }
  // Or out of the pass's budget: no new file starts (a copy in flight ends
  // as it would, or a file longer to copy than the budget never moves).
  bool stopping() const {
    return stopped() || std::chrono::steady_clock::now() >= options_.deadline;
  }

 public:
  // Why the store could take no more (empty while it could).
  std::string store_full_;
  // The folders this batch changes get their mtime back at its end.
  FolderTimes folder_times_;

 private:
  ColdStore& store_;
  const std::string& logdir_;
  const int root_fd_;
  const MigrateOptions& options_;
  WorkPool& pool_;
  // For the copy beside the others (MoveFiles); none when the migration
  // runs on one thread.
  std::unique_ptr<WorkPool> side_pool_;
};

}  // namespace tbfs::store
