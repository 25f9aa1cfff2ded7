// Bringing cold files back: `tbfs restore` (back to their paths, out of the
// store) and `tbfs export` (copies elsewhere, the store unchanged).
//
// Restore journals its batch first (invariant I4): after a crash, Recover()
// finishes the files already in place and leaves the others cold. Neither
// operation ever replaces a file that exists at the destination unless
// asked (export --force). Not thread-safe: one writer per store.
#pragma once

#include <atomic>
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

struct CopyResult {
  uint64_t files = 0;
  uint64_t bytes = 0;
  std::vector<std::pair<std::string, std::string>> failed;  // path, reason
};

// Writes each file back to its path in the logdir (mode, owner and times
// kept, hash checked), then drops it from the store. A path where a file
// exists now is skipped (reported in failed) and stays cold.
// `compact` gives the space back at once (a restore of many files); the
// mount's single-file rehydrations leave that to RocksDB.
Result<CopyResult> Restore(ColdStore& store, const std::string& logdir,
                           const std::vector<storepb::Manifest>& files, WorkPool* pool,
                           std::atomic<uint64_t>* progress, bool compact = true);

// Writes each file under to_dir at its relative path; the store is not
// changed. Existing files are replaced only with `force`.
Result<CopyResult> Export(ColdStore& store, const std::string& to_dir,
                          const std::vector<storepb::Manifest>& files, bool force, WorkPool* pool,
                          std::atomic<uint64_t>* progress);

}  // namespace tbfs::store
