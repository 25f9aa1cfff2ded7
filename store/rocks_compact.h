// What the engine's compactions read and copy, chosen so that they never
// meet damage the engine cannot recover from; not for use outside store/.
#pragma once

#include <rocksdb/db.h>
#include <rocksdb/metadata.h>

#include <cstdint>
#include <set>
#include <string>
#include <vector>

#include "base/status.h"

namespace tbfs::store {

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

// Compacts the store's spaces: first the tables alone (deleted keys
// leave, and a blob file no key points into any more leaves with them),
// then the live chunks of the oldest blob files are copied out as far as
// BlobFilesWorthCopying says, within `free_bytes`. `chunks` is the space
// whose values are in blob files. A compaction that reads a damaged block
// or record fails with Corruption, which the engine cannot recover from:
// it would refuse every write until the store is opened again (one
// damaged trace stopped every change to a mount). So every table file a
// compaction would read is checked whole first, and every record of each
// blob file it would copy out of: a space with a damaged table file is not
// compacted (the file goes into *damaged, as MergeSmallTables does), and
// blob files are copied out only up to the first damaged one; each is
// said in a warning. Damage that comes between the check and the
// compaction still fails it. `dir`: the store's folder, for messages.
Status CompactStore(rocksdb::DB* db, const std::vector<rocksdb::ColumnFamilyHandle*>& spaces,
                    rocksdb::ColumnFamilyHandle* chunks, const std::string& dir,
                    uint64_t free_bytes, std::set<uint64_t>* damaged);

// Has the engine delete the files a compaction replaced once no read holds
// them (waiting up to 2 s for the reads in flight). A file a read (Get)
// still held as the compaction ended is otherwise deleted only by the
// engine's next flush or compaction: a mount with nothing to move kept
// 70 MB of a recompressed store's replaced chunks for hours.
void DeleteReplacedFiles(rocksdb::DB* db, const std::vector<rocksdb::ColumnFamilyHandle*>& spaces);

}  // namespace tbfs::store
