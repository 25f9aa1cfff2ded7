// The engine's environment, options and log for tbfs's stores; not for
// use outside store/.
#pragma once

#include <rocksdb/db.h>
#include <rocksdb/env.h>
#include <rocksdb/metadata.h>
#include <rocksdb/options.h>

#include <array>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include "base/fs_util.h"
#include "base/status.h"
#include "spdlog/spdlog.h"
#include "store/backend.h"

namespace tbfs::store {

// RocksDB's Env for every store: its files made 0600 as they are created,
// whatever the process's umask (the mount runs with umask 0 so that what
// users create has exactly the mode they asked for); and, while a writer
// opens a store (OpeningWriter), the table and blob files its MANIFEST does
// not list set aside in kLostFoundName instead of deleted.
rocksdb::Env* PrivateEnv();

// The engine's options for a store opened with `options`, and for the
// column family of `space`.
rocksdb::DBOptions EngineOptions(const BackendOptions& options);
rocksdb::ColumnFamilyOptions SpaceOptions(Space space);

// A writer opening a store, for as long as it lives (see PrivateEnv).
class OpeningWriter {
 public:
  OpeningWriter();
  ~OpeningWriter();
  OpeningWriter(const OpeningWriter&) = delete;
  OpeningWriter& operator=(const OpeningWriter&) = delete;
};

// Every flush leaves one small table file in each space it wrote, and
// most keys grow (file ids, batch ids), so the engine moves those files
// down whole and never merges them: a store of 100,000 small cold files had
// 744 table files, each held open with its index and properties (about
// 6 KiB of heap apiece: the daemon's memory grew with the store). Merges
// each run of 8 or more neighbouring table files under 4 MiB of a level
// (one run of at most 64 files or 64 MiB per space and flush, so a store
// from before this catches up over several flushes), so that a space keeps
// about one file per 4 MiB of records plus a few. Called by the writer
// after a flush. Skipped where the store's filesystem has less than twice
// the run plus 8 MiB free. Every file of a run is checked whole first: a
// merge that met a damaged block would fail with Corruption, which the
// engine cannot recover from, and it would refuse every write after it. A
// damaged file is added to *damaged and left out of merges from then on;
// any other failure (a compaction already at work) is logged and left for
// the next flush.
void MergeSmallTables(rocksdb::DB* db, const std::vector<rocksdb::ColumnFamilyHandle*>& spaces,
                      const std::string& dir, std::set<uint64_t>* damaged);

// How many of the chunk space's oldest blob files a compaction copies the
// live chunks out of (RocksDB relocates blobs by age: every file older
// than a cutoff), so that their garbage (deleted chunks) leaves the disk:
// the largest k for which garbage is at least a quarter of the k oldest
// files, so that what stays garbage is less than a quarter of the store,
// and no more than 3 bytes are copied per byte freed; at most as many as
// the copies fit in `free_bytes` with a margin. 0 when none. *kept: the
// garbage a larger k would have freed had there been room (0 otherwise).
size_t BlobFilesWorthCopying(std::vector<rocksdb::BlobMetaData> files, uint64_t free_bytes,
                             uint64_t* kept);

// The engine's column family of each space (the first is RocksDB's default).
inline constexpr std::array<const char*, kNumSpaces> kSpaceNames = {
    "namespace", "manifests", "chunks", "journal", "baselines", "meta"};

// The engine's spaces (column families), each with its options.
std::vector<rocksdb::ColumnFamilyDescriptor> SpaceDescriptors();

// Has the engine delete the files a compaction replaced once no read holds
// them (waiting up to 2 s for the reads in flight). A file a read (Get)
// still held as the compaction ended is otherwise deleted only by the
// engine's next flush or compaction: a mount with nothing to move kept
// 70 MB of a recompressed store's replaced chunks for hours.
void DeleteReplacedFiles(rocksdb::DB* db, const std::vector<rocksdb::ColumnFamilyHandle*>& spaces);

// The store folder as the engine names it: "/proc/self/fd/N" for a
// descriptor of the folder opened once (never through a symbolic link;
// made 0700 first when `create`). The engine makes its files by path: held
// so, a store folder renamed, or swapped for a symbolic link, while the
// store is open keeps every file the engine writes (a migration's chunks
// went into the link's target, its originals were deleted, and the store
// left in place no longer opened).
// A writer's hold also claims the folder in this process: the engine's own
// check for a second writer in one process goes by path, and each hold's
// path is another (Busy when another hold of this process has it).
struct EngineFolder {
  UniqueFd fd;
  std::string path;
  std::shared_ptr<void> claim;  // a writer's, given up when the hold goes
};
Result<EngineFolder> HoldEngineFolder(const std::string& dir, bool create, bool writer);
// `text` with every "/proc/self/fd/N/" of an EngineFolder written as the
// folder's own path (the engine's messages name its files by its path).
std::string WithFolderPaths(std::string text);

// Moves the engine's log files (NNNNNN.log) of the folder the engine
// names `at` into its kLostFoundName; returns each (from, to), to be
// renamed back if the open without them fails too.
std::vector<std::pair<std::string, std::string>> SetLogsAside(const std::string& at);

// RocksDB's own log, into tbfs's at `level` (warnings and errors only;
// RocksDB's LOG file is not used: on a full disk a write to it aborts the
// process).
std::shared_ptr<rocksdb::Logger> NewEngineLog(spdlog::level::level_enum level);

}  // namespace tbfs::store
