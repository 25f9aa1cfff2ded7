// `tbfs salvage`: every cold file that can still be proven intact, written
// out of a damaged store into a new folder. The store is only read.
//
// What it reads, each source only where the one before fails:
//  1. the engine, opened read-only without checking every table file up
//     front (a damaged table fails only the reads that need it);
//  2. when that does not open (CURRENT or the engine's MANIFEST damaged):
//     the engine's best-efforts recovery on a scratch copy of the store
//     (hard links to the table and blob files, copies of the rest) in a
//     folder inside the store's private folder, removed at the end;
//  3. the blob files read directly (store/blob_scan.h): every chunk and
//     every manifest copy they hold.
// Manifests come from the manifests space, or from their copies in the
// chunks space (store/format.h) when that is damaged. A chunk is believed
// only when its checksum, bound to its file id and index, verifies, and a
// file is written only when its whole content hashes to its manifest's
// XXH3-128: salvage writes right bytes or nothing.
//
// Files whose manifest copy is in the blob files but whose manifest the
// engine does not list are deleted ones (blob files keep them until a
// compaction) or ones a damaged MANIFEST lost: when the engine's view is
// sound they are written apart, under kUnlisted; when it is not (no format
// record, manifests unreadable, no engine) they are taken as the store's.
// Blob files a writer's open set aside (kLostFoundName) are read as well.
#pragma once

#include <atomic>
#include <string>
#include <vector>

#include "base/status.h"
#include "base/work_pool.h"

namespace tbfs::store {

inline constexpr char kUnlisted[] = ".tbfs-unlisted";

struct SalvageOptions {
  std::string store_dir;
  // Made (0700) when missing; an existing one must be an empty folder of
  // this user's that no one else may write to.
  // Empty: a check only (fsck of a store that does not open): every file is
  // read and verified, nothing is written.
  std::string to;
  bool keep_owner = true;  // chown to the manifest's owner (as root)
  // The logdir, when known: a file an unfinished migration's journal names
  // that is there (under its name, or aside) is not lost.
  std::string logdir;
  WorkPool* pool = nullptr;                   // required
  std::atomic<uint64_t>* progress = nullptr;  // bytes written
};

struct SalvageReport {
  // "read-only", "best-efforts recovery", or "none (why)".
  std::string engine;
  std::vector<std::string> problems;  // what was found damaged, one line each
  uint64_t blob_files = 0;
  uint64_t blob_values = 0;            // record-shaped values found in them
  uint64_t manifests_from_copies = 0;  // files known only by a manifest copy
  bool blob_files_only = false;        // no engine view: deleted files may come back
  // Files only the blob files know while the engine's view is sound:
  // deleted since the last compaction, or lost from a damaged MANIFEST.
  // Written under `to`/kUnlisted, apart from the rest.
  uint64_t unlisted = 0;
  // Files a recovery recorded as lost, found intact all the same (their
  // chunks in engine files a damaged MANIFEST left out) and written.
  uint64_t found_again = 0;
  uint64_t files = 0;  // written (or, with no `to`, readable), each verified
  uint64_t bytes = 0;
  struct Lost {
    std::string path;
    uint64_t file_id = 0;
    std::string why;
  };
  std::vector<Lost> lost;
};

Result<SalvageReport> Salvage(const SalvageOptions& options);

}  // namespace tbfs::store
