// Store upkeep: `tbfs fsck` (every chunk checksum and every file hash) and
// `tbfs gc` (retention: drop cold files older than a cutoff).
#pragma once

#include <atomic>
#include <optional>
#include <string>
#include <vector>

#include "base/status.h"
#include "base/work_pool.h"
#include "store/cold_store.h"

namespace tbfs::store {

struct FsckResult {
  uint64_t files = 0;
  uint64_t bytes = 0;
  std::vector<std::pair<std::string, std::string>> damaged;  // path, what is wrong
  uint64_t orphan_chunk_files = 0;  // file ids with chunks but no manifest (nor retired)
  uint64_t retired_files = 0;       // files a mount's open handles still read
  uint64_t dangling_entries = 0;    // namespace entries without a manifest
  uint64_t journal_records = 0;     // unfinished batches (recovery pending)
  // Parts of the store that could not be read (a damaged table file): one
  // line each. Fsck reads past them and checks what it can reach.
  std::vector<std::string> problems;
  bool manifests_from_copies = false;  // the manifests space was unreadable
  uint64_t set_aside_files = 0;        // in STORE/lost+found (store/store_dir.h)
  // Files a recovery found neither in the logdir nor in the store, until an
  // admin clears them (ColdStore::ClearLost): never clean while any is.
  std::vector<ColdStore::LostFile> lost;
  bool clean() const {
    return damaged.empty() && dangling_entries == 0 && problems.empty() && lost.empty();
  }
};

// Reads every chunk of every cold file, checks checksums and whole-file
// hashes, and cross-checks manifests, namespace and chunks. Read-only. An
// unreadable part of the store is a problem in the result, not an error:
// fsck goes on with the rest (and takes the files from the manifests'
// second copies when the manifests space is unreadable).
Result<FsckResult> Fsck(ColdStore& store, WorkPool* pool, std::atomic<uint64_t>* progress);

// Chunks no record names: no manifest, not retired, no unfinished batch's
// journal entry. A crash between a RADOS commit's steps leaves them (chunks
// written before the commit point, or not yet removed after it), and so
// can damage. Nothing reads them.
struct Garbage {
  std::vector<std::pair<uint64_t, uint64_t>> chunks;  // file id, index
  uint64_t files = 0;                                 // distinct file ids
};
Status FindGarbage(ColdStore& store, Garbage* out);
// Deletes them (and their files' manifest copies). Writers only, after
// recovery: a batch in flight would look like garbage.
Status RemoveGarbage(ColdStore& store, const Garbage& garbage);

// What `tbfs gc` deletes: the cold files any of the set policies selects.
struct Retention {
  std::optional<int64_t> older_than_s;       // modified more than this long ago
  std::optional<int64_t> migrated_before_s;  // moved to the store more than this long ago
  // Keep only the newest N profiles of each run. A profile is a TensorFlow
  // profiler session (the folder plugins/profile/SESSION, every file in
  // it) or one trace file; its run is the folder holding plugins/ (TF) or
  // the trace file; newest by the latest modification time of its files.
  std::optional<uint64_t> keep_last;
  // Delete the longest-migrated files first until the store's files take at
  // most this many bytes (their stored size).
  std::optional<uint64_t> max_store_bytes;
  // keep_last and max_store_bytes count each owner's files (uid) on their
  // own: one user's files never make another's go. true: across owners.
  bool across_owners = false;
  bool any() const { return older_than_s || migrated_before_s || keep_last || max_store_bytes; }
};
// The files to delete, oldest migration first; *why gets one reason each.
Status SelectForRetention(ColdStore& store, const Retention& policy,
                          std::vector<storepb::Manifest>* out, std::vector<std::string>* why);
// The profile and the run of a cold file, as Retention counts them.
std::string ProfileOf(const std::string& path);
std::string RunOfProfile(const std::string& profile);

// True when the store's files take a quarter more than its cold files'
// chunks (and 256 KiB of the engine's own beside them): deleted or
// replaced chunks a compaction would give back.
bool HoldsGarbage(ColdStore& store);

// Deletes cold files for good, then compacts so the space is returned.
// *compact_error: the compaction after it that failed (the files are
// deleted; the space they held is not given back yet).
Status DeleteCold(ColdStore& store, const std::vector<storepb::Manifest>& files,
                  std::string* compact_error);

}  // namespace tbfs::store
