// The migration engine: moves quiet trace files into the cold store without
// ever losing a byte, and undoes what it cannot finish.
//
// For each batch of candidates:
//   1. digest the tfevents files of every run the batch touches (baseline);
//   2. journal the batch (synced): paths, file ids, the files' identities;
//   3. per file: copy into the store (chunks, then a synced manifest), read
//      it back and compare hashes, check the file is unchanged (inode,
//      size, mtime, ctime) and unlink it (I2); a file that changed is left
//      in place and its copy dropped;
//   4. fsync the folders, re-digest the baseline's files: every record must
//      still be there and every must-have tag present (I3);
//   5. commit (delete the journal record), or roll the batch back: every
//      moved file is written back byte-identical with its mode and times.
// Recover() resolves what a crash left in the journal (I4): an unfinished
// migration is rolled back, an unfinished restore is finished where its file
// is in place and undone otherwise.
//
// Failpoints (base/failpoint.h) sit at every phase boundary:
//   migrate.journaled, migrate.copying, migrate.stored, migrate.read_back,
//   migrate.unlinked, migrate.all_unlinked, migrate.verified,
//   migrate.rollback_one, migrate.committed
// Not thread-safe: one migration per store at a time (the store has one writer).
#pragma once

#include <sys/stat.h>

#include <atomic>
#include <functional>
#include <shared_mutex>
#include <string>
#include <vector>

#include "base/status.h"
#include "events/baseline.h"
#include "store/classify.h"
#include "store/cold_store.h"

namespace tbfs::store {

struct Candidate {
  std::string path;  // relative to the logdir
  FileClass cls = FileClass::kOther;
  uint64_t size = 0;
};

struct Skipped {
  std::string path;
  std::string reason;
};

struct CandidateOptions {
  Policy policy;
  std::vector<FileClass> classes;  // empty: every trace class
  uint64_t min_size_bytes = 0;
  int64_t older_than_s = 300;      // quiet for at least this long
  WalkOptions walk;                // the store folder is skipped
};

// The files a migration would move, and the trace files it would not
// (with why: too recent, linked, too small, ...).
Status FindCandidates(const std::string& logdir, const CandidateOptions& options,
                      std::vector<Candidate>* candidates, std::vector<Skipped>* skipped);

struct MigrateOptions {
  std::vector<std::string> must_have;  // tags some run must hold after each batch
  uint32_t chunk_bytes = kDefaultChunkBytes;
  int level = kDefaultZstdLevel;
  int threads = 0;                     // compression workers; 0: one per core
  uint64_t batch_bytes = 4ull << 30;   // a batch closes at this many bytes...
  size_t batch_files = 512;            // ...or files
  std::atomic<uint64_t>* progress = nullptr;  // bytes copied
  bool inject_verify_failure = false;  // tests: the verifier reports a failure
  // Tests: called after a file's copy is stored and read back, before the
  // checks that precede its unlink (a writer can be simulated here).
  std::function<void(const std::string& path)> after_copy_hook;
  // The mount's hooks. before_unlink may veto the unlink of a file (it is
  // open through the mount); after_batch hears how the batch ended.
  std::function<bool(const std::string& rel_path, const struct stat& st)> before_unlink;
  std::function<void(const struct BatchResult& batch)> after_batch;
  // Stops between batches when it becomes true.
  const std::atomic<bool>* stop = nullptr;
  // Held shared for each batch (the mount's namespace lock: renames and
  // folder removals wait for the batch in flight, not for the whole pass).
  std::shared_mutex* batch_lock = nullptr;
  WalkOptions walk;                    // to find the tfevents files
};

enum class Outcome { kMoved, kChanged, kFailed, kRolledBack };

struct FileResult {
  std::string path;
  dev_t dev = 0;            // the hot file's identity when it was copied
  ino_t ino = 0;
  Outcome outcome = Outcome::kFailed;
  std::string reason;       // for anything but kMoved
  uint64_t bytes = 0;       // logical size
  uint64_t stored_bytes = 0;
};

struct BatchResult {
  uint64_t batch_id = 0;
  std::vector<FileResult> files;
  std::vector<std::string> runs_verified;
  std::vector<events::Failure> failures;  // verifier findings (the batch rolled back)
  bool rolled_back = false;
};

struct MigrateResult {
  std::vector<BatchResult> batches;
  uint64_t files_moved = 0;
  uint64_t bytes_moved = 0;
  uint64_t stored_bytes = 0;
  bool ok() const;  // every batch committed
};

// Migrates the candidates, batch by batch. An error return means the store
// or the logdir could not be used at all; per-file and verifier problems
// are in the result.
Result<MigrateResult> Migrate(ColdStore& store, const std::string& logdir,
                              const std::vector<Candidate>& candidates,
                              const MigrateOptions& options);

struct RecoveryResult {
  uint64_t batches = 0;
  uint64_t restored = 0;   // files written back from the store
  uint64_t dropped = 0;    // store copies dropped (the hot file was there)
  std::vector<std::string> notes;  // anything unusual, one line each
};

// Resolves every journal record left by a crash. Run before any other work
// on a store opened for writing.
Result<RecoveryResult> Recover(ColdStore& store, const std::string& logdir);

}  // namespace tbfs::store

namespace tbfs::store {

// Estimates the compression ratio of the candidates by compressing a
// sample (up to 2 chunks from each of up to 32 files spread over the list)
// exactly as migration would. *sample_bytes receives the bytes sampled.
Result<double> EstimateRatio(const std::string& logdir, const std::vector<Candidate>& candidates,
                             uint32_t chunk_bytes, int level, uint64_t* sample_bytes);

}  // namespace tbfs::store
