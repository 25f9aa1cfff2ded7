// The mount's background migrator: every interval it looks for quiet
// traces (not modified for cold_after, not open through the mount) and runs
// the store's migration engine on them, with every invariant of the
// offline path (journal, verify each batch, roll back on failure). Inodes
// the kernel knows turn cold in place when their batch commits.
//
// Start/Stop/RunNow are thread-safe; RunNow runs a pass on the caller's
// thread, serialized with the background passes.
#pragma once

#include <atomic>
#include <condition_variable>
#include <map>
#include <mutex>
#include <nlohmann/json_fwd.hpp>
#include <optional>
#include <set>
#include <shared_mutex>
#include <string>
#include <thread>
#include <vector>

#include "base/thread_annotations.h"
#include "fs/filesystem.h"
#include "store/growth.h"
#include "store/maintenance.h"
#include "store/migrate.h"
#include "store/recompress.h"

namespace tbfs::fs {

struct MigratorOptions {
  int64_t cold_after_s = 300;
  int64_t interval_s = 30;
  bool background = true;  // false: only on RunNow (--no-migrate)
  store::Policy policy;
  std::vector<std::string> must_have;
  WalkOptions walk;
  // After each pass, delete the cold files this selects (none if !any()).
  store::Retention retention;
  // Each pass takes a growth sample (store/growth.h); one every
  // growth_keep_every_s is kept in growth_dir's series ("" keeps none).
  std::string growth_dir;
  int64_t growth_keep_every_s = 300;
  // A shared store (ColdStore::shared()): how this mount takes the writer's
  // role when a pass finds it is not the writer (holder, logdir).
  store::OpenOptions writer;
  // True while the mount is read-only (fs/mount_watch.h): no pass runs, so
  // nothing leaves the logdir or is deleted; migrate --now says why.
  const std::atomic<bool>* read_only = nullptr;
};

struct MigratorStats {
  uint64_t passes = 0;
  uint64_t logdir_walks = 0;  // a pass that moves nothing walks once, one that moves twice
  uint64_t batches = 0;
  uint64_t rolled_back = 0;
  uint64_t stopped_store_full = 0;  // passes cut short: the store had no room
  uint64_t over_budget = 0;         // passes cut short by their time budget (kPassBudget)
  uint64_t files_moved = 0;
  uint64_t bytes_moved = 0;
  uint64_t stored_bytes = 0;
  uint64_t hot_files = 0;  // at the last pass
  uint64_t hot_bytes = 0;
  std::string last_verifier;  // "intact", "failed: ...", or "" before any batch
  int64_t last_pass_unix = 0;
  std::string last_error;
  uint64_t retention_files = 0;  // cold files deleted by the retention policy
  uint64_t retention_bytes = 0;  // their logical bytes
  // Runs whose traces stayed hot at the last pass because one of their
  // tfevents files cannot be read (store::BlockedRun), in path order.
  std::vector<store::BlockedRun> blocked_runs;
  // Entries the last pass could not walk (folders it could not enter), and
  // the first few of them.
  uint64_t unwalked = 0;
  std::vector<std::string> unwalked_examples;
  // Traces left hot: more extended attributes than a cold file keeps.
  uint64_t big_xattrs = 0;
  std::vector<std::string> big_xattrs_examples;
  // Sparse traces the last pass left hot (holes are not stored as holes),
  // and the first few of them.
  // Hot files the last pass left in place because another owner's cold
  // file is at their name in a sticky folder (store::kStickyReason).
  uint64_t conflicts = 0;
  std::vector<std::string> conflict_examples;
  // Owners whose traces are all held hot for a while: a tfevents file of
  // theirs failed the check after a batch moved.
  std::vector<uint32_t> held_owners;
};

// Warnings that repeat every pass (a user's unreadable folders, damaged
// runs), said in one line: the count and a few examples, each cut short.
// The line is logged when it differs from the last one or an hour after
// it, so no one's files can flood the log.
// A recompress's report as `tbfs recompress --json` prints it: the mount's
// answer to a recompress request, and the command's own offline.
nlohmann::json RecompressJson(const store::RecompressReport& r, const std::string& store_dir,
                              int level, double seconds);

class RepeatedWarning {
 public:
  explicit RepeatedWarning(std::string what) : what_(std::move(what)) {}
  void Log(const std::vector<std::string>& lines);

 private:
  const std::string what_;
  std::string last_;
  int64_t last_ns_ = 0;
};

class Migrator {
 public:
  // Moves files of `logdir` into `store`, with `fs` watching them move
  // (store::MoveObserver) and deleting what retention selects;
  // `namespace_lock` is the one `fs` was given.
  Migrator(store::ColdStore& store, std::string logdir, SharedMutex* namespace_lock, Filesystem& fs,
           MigratorOptions options);
  ~Migrator();

  void Start();
  // Stops the pass in flight at its next file (store::MigrateOptions::stop:
  // its batch is verified and committed with what moved) and every pass
  // after it, then joins the background thread. A RunNow on another thread
  // returns soon after.
  void Stop();
  // One pass now; 0, -ECANCELED when Stop cut it short, -EROFS on a
  // read-only mount, or -EIO when the pass could not run.
  int RunNow();
  // `tbfs gc MOUNTPOINT --garbage`: finds (and with `apply` removes) the
  // chunks no record names, between passes (no batch in flight: its chunks
  // would look like garbage) and as the store's writer, so it runs while
  // the mount serves (renames through it wait for the scan). With `apply`,
  // Busy on a reader (naming the writer) or a read-only store.
  Status CollectGarbage(bool apply, store::Garbage* out);
  // `tbfs recompress MOUNTPOINT`: the cold files' chunks compressed again
  // (store/recompress.h) while the mount serves them, a file at a time
  // between passes, each file's last step under the namespace lock. Busy
  // on a reader (naming the writer) or while another recompress runs;
  // a stop (unmount) leaves the files not reached as they were.
  Result<store::RecompressReport> Recompress(int level, bool dictionaries);
  MigratorStats stats();
  bool retention_enabled() const { return config_.retention.any(); }
  // The mount is read-only now (-o ro, or remounted so): nothing moves.
  bool ReadOnly() const { return config_.read_only != nullptr && config_.read_only->load(); }
  // The kept series and the last pass's sample after it (empty before the
  // first pass with no series kept).
  std::vector<store::GrowthSample> growth();

 private:
  void Loop();
  Status Pass();
  // A shared store's reader becomes its writer when the lease is free:
  // takes it, then undoes what the last writer left unfinished.
  Status TakeWriterRole() TBFS_REQUIRES(pass_mu_);
  // Without background passes (shared stores): only that.
  Status KeepWriterRole();
  // Moves what the walk finds; counts every file it walks into *walked,
  // and says whether those figures still hold after the pass.
  Status MovePass(store::GrowthSample* walked, bool* walked_is_current) TBFS_REQUIRES(pass_mu_);
  // MovePass's steps: the walk for candidates (counting what it could not
  // walk), the runs and owners held hot now (dropping expired holds), the
  // holds a batch's failed check adds, and the moved figures in the stats.
  Status FindMovable(const store::CandidateOptions& copt, std::vector<store::Candidate>* candidates)
      TBFS_REQUIRES(pass_mu_);
  void CurrentHolds(int64_t now, std::map<std::string, std::string>* runs,
                    std::set<uint32_t>* owners) TBFS_REQUIRES(pass_mu_);
  void HoldFailed(const store::MigrateResult& result, int64_t now, std::set<uint32_t>* owners)
      TBFS_REQUIRES(pass_mu_);
  Status NoteMoved(const store::MigrateResult& result, bool over_budget,
                   const std::set<uint32_t>& held_owners) TBFS_REQUIRES(pass_mu_);
  Status ApplyRetention() TBFS_REQUIRES(pass_mu_);
  void KeepGrowthSample(const store::GrowthSample& sample) TBFS_REQUIRES(pass_mu_);
  void AfterBatch(const store::BatchResult& batch);
  // Commits again what the store refused at the end of a batch (its
  // journal record's removal): the batch is done (copied, unlinked, synced,
  // verified or rolled back), so once the store takes the write, its files
  // stay as they are and nothing is left for a restart's recovery to undo.
  void CommitRefusedBatches() TBFS_REQUIRES(pass_mu_);
  // Refused batches the store has committed since, with a later write
  // (ColdStore::Defer): their files counted as moved, their error gone.
  void NoteRefusedLanded() TBFS_REQUIRES(mu_);
  // The runs the last pass left hot (stats, and the log when they change).
  void NoteBlockedRuns(std::vector<store::BlockedRun> runs) TBFS_REQUIRES(pass_mu_);

  store::ColdStore& store_;
  const std::string logdir_;
  SharedMutex& ns_mu_;
  Filesystem& fs_;
  MigratorOptions config_;
  // Lock order: pass_mu_ -> the namespace lock (and the filesystem's
  // locks after it) -> mu_. pass_mu_ is held for a whole pass, across
  // copies and commits, on purpose: passes (background, migrate --now,
  // takeover) never overlap. The pass takes the namespace lock shared, a
  // step at a time, never across a file's copy.
  Mutex pass_mu_ TBFS_ACQUIRED_BEFORE(ns_mu_, mu_);
  Mutex mu_;  // a leaf, for the fields below
  std::condition_variable_any cv_;
  bool stopping_ TBFS_GUARDED_BY(mu_) = false;
  std::atomic<bool> stop_flag_{false};
  std::atomic<bool> recompressing_{false};  // a Recompress runs (one at a time)
  MigratorStats stats_ TBFS_GUARDED_BY(mu_);
  std::vector<store::GrowthSample> series_ TBFS_GUARDED_BY(mu_);  // as kept
  std::optional<store::GrowthSample> latest_ TBFS_GUARDED_BY(mu_);
  std::thread thread_;
  // Runs whose check after a batch failed: held hot until the time (ns),
  // with why (store::MigrateResult::failed_runs).
  struct Held {
    int64_t until_ns = 0;
    std::string why;
  };
  std::map<std::string, Held> held_ TBFS_GUARDED_BY(pass_mu_);
  // Owners (uid) of those tfevents files: all their traces held until then.
  std::map<uint32_t, int64_t> held_owners_ TBFS_GUARDED_BY(pass_mu_);
  // Only the pass (pass_mu_) logs them.
  RepeatedWarning unwalked_log_ TBFS_GUARDED_BY(pass_mu_){"entries not walked"};
  RepeatedWarning big_xattrs_log_ TBFS_GUARDED_BY(pass_mu_){
      "traces left hot: extended attributes over 64 KiB (a cold file keeps 64 KiB at most)"};
  RepeatedWarning conflict_log_ TBFS_GUARDED_BY(pass_mu_){
      "hot files left in place: another owner's cold file is at their name in a sticky folder "
      "(both kept)"};
  std::vector<std::string> pass_conflicts_ TBFS_GUARDED_BY(mu_);  // this pass's, so far
  // Batches whose end the store refused (store::BatchResult::uncommitted):
  // what they moved, and the store's deferred_landed() as they were deferred.
  struct RefusedBatch {
    uint64_t id, files, bytes, stored_bytes, landed;
  };
  std::vector<RefusedBatch> refused_batches_ TBFS_GUARDED_BY(mu_);
  RepeatedWarning blocked_log_ TBFS_GUARDED_BY(pass_mu_){
      "runs whose traces stay hot: a tfevents file of theirs cannot be read"};
};

}  // namespace tbfs::fs
