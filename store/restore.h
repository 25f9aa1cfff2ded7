// Bringing cold files back: `tbfs restore` (back to their paths, out of the
// store) and `tbfs export` (copies elsewhere, the store unchanged).
//
// Restore journals its batch first (invariant I4): after a crash, Recover()
// finishes the files already in place and leaves the others cold. Neither
// operation ever replaces a file that exists at the destination unless
// asked (export --force). Not thread-safe: one writer per store.
#pragma once

#include <atomic>
#include <functional>
#include <string>
#include <vector>

#include "base/status.h"
#include "base/work_pool.h"
#include "store/cold_store.h"

namespace tbfs::store {

// Turns what a user typed (relative to the logdir, or absolute under it,
// "./" and trailing '/' allowed) into a clean relative path.
// InvalidArgument for a path that escapes the logdir ("..") or lies outside it.
Result<std::string> NormalizeUserPath(const std::string& logdir, const std::string& arg);

// The cold files named by `paths` (files, or folders meaning everything
// below), or every cold file when `paths` is empty. Paths with no cold
// entry go to *not_found.
Status SelectCold(ColdStore& store, const std::vector<std::string>& paths,
                  std::vector<storepb::Manifest>* out, std::vector<std::string>* not_found);

// For a read-only view beside an unfinished migration (a writer killed
// mid-batch, not yet recovered): drops from *files every one whose source
// is still at its path in the logdir with the identity its journal entry
// recorded. Recovery keeps that source and drops the store's copy: the
// file is hot, not also cold. A no-op when the journal is empty.
Status DropInFlight(ColdStore& store, const std::string& logdir,
                    std::vector<storepb::Manifest>* files);

struct CopyResult {
  uint64_t files = 0;
  uint64_t bytes = 0;
  std::vector<std::pair<std::string, std::string>> failed;  // path, reason
  int first_errno = 0;  // of the first failure, when a syscall failed
  // The compaction after a restore (RestoreOptions::compact) that failed:
  // the files are restored; the space they held is not given back yet.
  std::string compact_error;
};

struct RestoreOptions {
  WorkPool* pool = nullptr;                   // required
  std::atomic<uint64_t>* progress = nullptr;  // bytes written, optional
  // Give the space back at once (a restore of many files); the mount's
  // single-file rehydrations leave that to RocksDB.
  bool compact = true;
  // Retire the files instead of removing them (ColdStore::Retire): a
  // mount's open handles may still read their chunks.
  bool retire = false;
  // Called with the file's new backing file (open as fd) just before it
  // takes its name; then, once it has, `placed`; both before the file
  // leaves the store.
  std::function<void(const storepb::Manifest& m, int fd)> placing;
  std::function<void(const storepb::Manifest& m)> placed;
};

// Writes each file back to its path in the logdir (mode, owner and times
// kept, hash checked), then drops it from the store, under one journal
// record. A path where a file exists now is skipped (reported in failed)
// and stays cold.
Result<CopyResult> Restore(ColdStore& store, const std::string& logdir,
                           const std::vector<storepb::Manifest>& files,
                           const RestoreOptions& options);
inline Result<CopyResult> Restore(ColdStore& store, const std::string& logdir,
                                  const std::vector<storepb::Manifest>& files, WorkPool* pool,
                                  std::atomic<uint64_t>* progress) {
  RestoreOptions options;
  options.pool = pool;
  options.progress = progress;
  return Restore(store, logdir, files, options);
}

// One file of a restore whose journal record the caller wrote: in place,
// then out of the store. The error keeps the errno of the failed write
// (ENOSPC, EDQUOT, ...); EEXIST when a file is at the path now.
Status RestoreOne(ColdStore& store, const std::string& logdir, const storepb::Manifest& m,
                  const RestoreOptions& options);

// Writes each file under to_dir at its relative path; the store is not
// changed. Existing files are replaced only with `force`.
Result<CopyResult> Export(ColdStore& store, const std::string& to_dir,
                          const std::vector<storepb::Manifest>& files, bool force, WorkPool* pool,
                          std::atomic<uint64_t>* progress);

}  // namespace tbfs::store
