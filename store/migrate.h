// The migration engine: moves quiet trace files into the cold store without
// ever losing a byte, and undoes what it cannot finish.
//
// For each batch of candidates:
//   1. digest the tfevents files of every run the batch touches (baseline);
//   2. journal the batch (synced): paths, file ids, the files' identities;
//   3. per file, each opened beneath the logdir without following symlinks:
//      take a read lease (fcntl F_SETLEASE: refused while any process has
//      the file open for writing, broken when one opens it for writing or
//      truncates it), copy it into the store (chunks, then a synced
//      manifest), read it back and compare hashes, check that the lease
//      still holds and the file is unchanged (inode, size, mtime, ctime,
//      one link), then rename it aside in its folder. It stays there, still
//      leased, while the next file is copied: a writer that had found it by
//      its name just before shows up as a broken lease, and the file goes
//      back to its name, untouched. Otherwise it is unlinked (I2).
//   4. fsync the folders, re-digest the baseline's files: every record must
//      still be there and every must-have tag present (I3);
//   5. commit (delete the journal record), or roll the batch back: every
//      moved file is written back byte-identical with its mode and times.
// A file whose lease cannot be taken (a filesystem without leases, such as
// NFS or FUSE, or a file owned by someone else when not root) stays in
// place: nothing can then prove that no process writes it.
// Recover() resolves what a crash left in the journal (I4): an unfinished
// migration is rolled back, an unfinished restore is finished where its file
// is in place and undone otherwise.
//
// Failpoints (base/failpoint.h) sit at every phase boundary:
//   migrate.journaled, migrate.copying, migrate.stored, migrate.read_back,
//   migrate.aside, migrate.unlinked, migrate.all_unlinked, migrate.verified,
//   migrate.rollback_one, migrate.committed; and the pause point migrate.batch.
// Not thread-safe: one migration per store at a time (the store has one writer).
#pragma once

#include <sys/stat.h>

#include <atomic>
#include <chrono>
#include <functional>
#include <map>
#include <set>
#include <shared_mutex>
#include <string>
#include <vector>

#include "base/status.h"
#include "base/thread_annotations.h"
#include "events/baseline.h"
#include "store/classify.h"
#include "store/cold_store.h"

namespace tbfs::store {

struct Candidate {
  std::string path;  // relative to the logdir
  FileClass cls = FileClass::kOther;
  uint64_t size = 0;
  uint32_t uid = 0;  // its owner when found
};

struct Skipped {
  std::string path;
  std::string reason;
};

// How a Skipped reason starts for a trace whose extended attributes pass
// what a manifest keeps (kMaxXattrBytes): it stays hot.
inline constexpr std::string_view kXattrsReason = "extended attributes over 64 KiB";
// A hot file that would replace another owner's cold file in a sticky
// folder (only that file's owner, the folder's, or root may): both stay,
// the hot one in place (it shows at the name), the cold one in the store.
inline constexpr std::string_view kStickyReason = "another owner's cold file is at its name";
// The sticky-folder rule for a file of `newcomer` at the name of a cold
// file of `owner` in `folder`: it may replace (or take with it) the cold
// one only where the folder is not sticky, or it is the owner's, the
// folder owner's or root's.
inline bool MayReplaceInFolder(const struct stat& folder, uid_t newcomer, uid_t owner) {
  return !(folder.st_mode & S_ISVTX) || newcomer == 0 || newcomer == folder.st_uid ||
         newcomer == owner;
}

struct CandidateOptions {
  Policy policy;
  std::vector<FileClass> classes;  // empty: every trace class
  uint64_t min_size_bytes = 0;
  int64_t older_than_s = 300;  // quiet for at least this long
  WalkOptions walk;            // the store folder is skipped
  // Called for every entry the walk visits, candidate or not (a caller
  // that needs the whole logdir's figures walks it only once).
  std::function<void(const WalkEntry&)> on_entry;
};

// The files a migration would move, and the trace files it would not
// (with why: too recent, linked, too small, ...).
Status FindCandidates(const std::string& logdir, const CandidateOptions& options,
                      std::vector<Candidate>* candidates, std::vector<Skipped>* skipped);
// The same, handed over one by one as the walk finds them (in path order).
Status ForEachCandidate(const std::string& logdir, const CandidateOptions& options,
                        const std::function<void(Candidate&&)>& on_candidate,
                        const std::function<void(Skipped&&)>& on_skipped);

// What a mount needs to hear while its files change place, so that every
// path stays visible and every open handle keeps reading (invariant I7).
// Called on the migrating thread, with the namespace lock held shared.
class MoveObserver {
 public:
  virtual ~MoveObserver() = default;
  // The file open as fd (identity st) is about to leave the backing folder;
  // its content is in the store as m, which serves it from now on. false
  // vetoes the move (the file is open for writing through the mount).
  virtual bool BeginMove(int fd, const struct stat& st, const storepb::Manifest& m) = 0;
  // The move that BeginMove announced ended: moved, or not (the backing
  // file is back at its name, or beside it, and is served again).
  virtual void EndMove(uint64_t file_id, bool moved) = 0;
  // A rolled-back file is coming back into the backing folder as the file
  // open as fd, with identity st (told before it takes its name; told
  // again should it end up under another one).
  virtual void PutBack(uint64_t file_id, int fd, const struct stat& st) = 0;
  // Files were retired (ColdStore::Retire): their chunks may go once no
  // open handle reads them.
  virtual void Retired() = 0;
};

struct MigrateOptions {
  std::vector<std::string> must_have;  // tags some run must hold after each batch
  uint32_t chunk_bytes = kDefaultChunkBytes;
  uint32_t head_chunk_bytes = kHeadChunkBytes;  // IngestOptions::head_chunk_bytes
  int level = kDefaultZstdLevel;
  bool dictionaries = true;                   // IngestOptions::dictionaries
  int threads = 0;                            // compression workers; 0: one per core
  uint64_t batch_bytes = 4ull << 30;          // a batch closes at this many bytes...
  size_t batch_files = 512;                   // ...or files
  std::atomic<uint64_t>* progress = nullptr;  // bytes copied
  // The mount, which serves files while they move (see MoveObserver); with
  // one, files leave the store by ColdStore::Retire.
  class MoveObserver* observer = nullptr;
  // Hears how each batch ended.
  std::function<void(const struct BatchResult& batch)> after_batch;
  // When it becomes true the migration stops at the next file: the copy in
  // flight is given up, the files not yet copied stay in place, and the
  // batch is verified and committed with what moved; no batch follows.
  const std::atomic<bool>* stop = nullptr;
  // A second stop, the same in every way: a mount that turned read-only
  // (nothing more leaves the logdir).
  const std::atomic<bool>* read_only = nullptr;
  // The same stop once this time has come (a pass's time budget): what is
  // not moved by then waits for the next pass. Never, by default.
  std::chrono::steady_clock::time_point deadline = std::chrono::steady_clock::time_point::max();
  // Held shared around each short step that changes the namespace (a
  // manifest's commit, a file's move aside and its unlink, the verifier and
  // a rollback): the mount's namespace lock, so renames never interleave
  // with them. Never held across a file's copy.
  SharedMutex* batch_lock = nullptr;
  WalkOptions walk;  // to find the tfevents files
  // The digest of every tfevents file when the caller has just taken it
  // (tbfs migrate's check before anything moves): MigrateFrom then neither
  // walks for them nor digests them again (each file has its FileDigest,
  // errors too).
  const events::LogdirDigest* events_digest = nullptr;
  // Runs (folder -> why) whose traces stay in place this time: a mount's
  // runs whose verification failed lately (MigrateResult::failed_runs).
  const std::map<std::string, std::string>* held_runs = nullptr;
  // Owners (uid) whose traces stay in place this time: a tfevents file of
  // theirs failed the check after a batch lately (failed_owners).
  const std::set<uint32_t>* held_owners = nullptr;
  // false: MigrateResult::batches stays empty (after_batch sees each
  // batch), so that memory does not grow with the number of files.
  bool keep_batches = true;
};

// MigrateOptions::stop or ::read_only has come true.
inline bool StopAsked(const MigrateOptions& o) {
  return (o.stop != nullptr && o.stop->load()) || (o.read_only != nullptr && o.read_only->load());
}

// kChanged: left in place (a writer, a rename, ...: the reason says);
// kDeleted: deleted by its user as it moved, so neither kept nor stored.
enum class Outcome { kMoved, kChanged, kDeleted, kFailed, kRolledBack };

struct FileResult {
  std::string path;
  dev_t dev = 0;  // the hot file's identity when it was copied
  ino_t ino = 0;
  Outcome outcome = Outcome::kFailed;
  std::string reason;  // for anything but kMoved
  uint64_t bytes = 0;  // logical size
  uint64_t stored_bytes = 0;
};

struct BatchResult {
  uint64_t batch_id = 0;
  std::vector<FileResult> files;
  std::vector<std::string> runs_verified;
  std::vector<events::Failure> failures;  // verifier findings (the batch rolled back)
  bool rolled_back = false;
  // Why the batch did not run at all (its baseline or its journal record
  // could not be taken): every file stayed in place. Empty when it ran.
  std::string not_run;
  bool journal_refused = false;  // not_run: the store refused the journal record
  bool store_full = false;       // the store ran out of room: the rest stayed in place
  // A folder of the moved files could not be synced: the batch's journal
  // record stays, and recovery (at the next start of a writer) decides it
  // whichever way the disk kept the unlinks. Empty when all were synced.
  std::string unsynced;
  // The commit of the batch's record failed (the engine refused the write):
  // the record stays, and the next writer's recovery puts the batch's files
  // back in place. No batch follows it. Empty when it committed. The
  // commit is deferred (ColdStore::Defer): it lands with the store's next
  // write, once deferred_landed() has passed `deferred_at`.
  std::string uncommitted;
  uint64_t deferred_at = 0;
  // The engine's flushes before the unlinks (I2): how many, and the time
  // they took.
  uint64_t flushes = 0;
  double flush_seconds = 0;
};

// A run (the folder of a tfevents file) whose tfevents file cannot be
// digested (damaged, unreadable, no longer a regular file): nothing can
// prove its curves intact, so none of the traces beneath it moves; every
// other run's traces do.
struct BlockedRun {
  std::string run;      // relative folder ("" for the logdir itself)
  std::string file;     // the tfevents file that failed, relative
  std::string reason;   // one line
  uint64_t traces = 0;  // candidates left in place for it
};

struct MigrateResult {
  std::vector<BatchResult> batches;      // with MigrateOptions::keep_batches
  std::vector<BlockedRun> blocked_runs;  // in path order
  // Runs whose verification failed after their batch moved (a tfevents
  // file changed or damaged meanwhile): the batch rolled back, and ran
  // again at once without their traces. (folder, why)
  std::vector<std::pair<std::string, std::string>> failed_runs;
  // The owners of the tfevents files that failed so: their traces were
  // held for the rest of the migration (one user cannot make every retry
  // fail with a run of theirs after another).
  std::set<uint32_t> failed_owners;
  uint64_t rolled_back_batches = 0;
  uint64_t unsynced_batches = 0;     // BatchResult::unsynced
  uint64_t uncommitted_batches = 0;  // BatchResult::uncommitted
  uint64_t unrun_batches = 0;        // BatchResult::not_run
  uint64_t refused_batches = 0;      // BatchResult::journal_refused
  std::string first_refusal;         // the first of those batches' not_run
  uint64_t flushes = 0;              // BatchResult::flushes, summed
  double flush_seconds = 0;
  uint64_t files_moved = 0;
  uint64_t bytes_moved = 0;
  uint64_t stored_bytes = 0;
  // The store had no room (ColdStore::CheckRoom, or a write failed with
  // ENOSPC): the migration stopped there; what moved before is cold, the
  // rest is in place. `store_full_reason` says how full.
  bool store_full = false;
  std::string store_full_reason;
  // Every batch ran and committed: none rolled back, left unsynced or
  // uncommitted, none not run.
  bool ok() const;
};

// Migrates the candidates, batch by batch. An error return means the store
// or the logdir could not be used at all; per-file and verifier problems
// are in the result.
Result<MigrateResult> Migrate(ColdStore& store, const std::string& logdir,
                              const std::vector<Candidate>& candidates,
                              const MigrateOptions& options);
// The same, with candidates as `source` finds them: it calls its argument
// with each one (ForEachCandidate, say); batches run as they fill, so only
// one batch's candidates are held. source's error ends the migration (what
// moved before stays cold) and is returned.
using CandidateSource = std::function<Status(const std::function<void(Candidate&&)>& sink)>;
Result<MigrateResult> MigrateFrom(ColdStore& store, const std::string& logdir,
                                  const CandidateSource& source, const MigrateOptions& options);

struct RecoveryResult {
  uint64_t batches = 0;
  uint64_t restored = 0;           // files written back from the store
  uint64_t dropped = 0;            // store copies dropped (the hot file was there)
  std::vector<std::string> notes;  // anything unusual, one line each
  // Paths (relative to the logdir) whose file went from cold to hot or
  // whose store copy went: a mount tells the kernel to forget their names.
  std::vector<std::string> changed;
  // Files found neither in the logdir nor in the store (paths relative to
  // the logdir): journaled ones, and ones a MANIFEST cut back lost that
  // cannot be written back now. Each is recorded (ColdStore::RecordLost).
  // A caller reports them and fails; they are never a success.
  std::vector<std::string> lost;
  // Files the store no longer knew, found in the table and blob files a
  // writer's open set aside and written back into the logdir
  // (PutBackSetAside, store/recovery.cc); each is in `changed` and `notes`.
  uint64_t found_again = 0;
};

// Resolves every journal record left by a crash. Run before any other work
// on a store opened for writing.
Result<RecoveryResult> Recover(ColdStore& store, const std::string& logdir);
// The same, in a mount that has served the store until now (a reader that
// became the writer): handles open on its cold files survive, so a store
// copy recovery drops is retired (its chunks stay until the mount's last
// reader is gone: the caller reaps them), and retired chunks are kept.
Result<RecoveryResult> RecoverServing(ColdStore& store, const std::string& logdir);

}  // namespace tbfs::store

namespace tbfs::store {

// Estimates the compression ratio of the candidates by compressing a
// sample (up to 2 chunks from each of up to 32 files spread over the list)
// exactly as migration would. *sample_bytes receives the bytes sampled.
Result<double> EstimateRatio(const std::string& logdir, const std::vector<Candidate>& candidates,
                             uint32_t chunk_bytes, int level, uint64_t* sample_bytes);

}  // namespace tbfs::store
