// Compactions and merges of a store's engine (store/rocks_compact.h).
#include "store/rocks_compact.h"

#include <rocksdb/options.h>
#include <rocksdb/sst_file_reader.h>
#include <sys/stat.h>
#include <sys/statvfs.h>

#include <algorithm>
#include <chrono>
#include <thread>

#include "base/failpoint.h"
#include "fmt/format.h"
#include "spdlog/spdlog.h"
#include "store/blob_scan.h"
#include "store/rocks_env.h"

namespace tbfs::store {

namespace {

// Whether every block of a table file checks out. A merge that reads a
// damaged block fails with Corruption, which the engine takes as an error
// it cannot recover from: it would refuse every write after it.
bool TableIntact(const rocksdb::Options& options, const rocksdb::SstFileMetaData& f) {
  rocksdb::SstFileReader reader(options);
  const std::string path = f.db_path + f.name;  // the name starts with '/'
  // No regular file (a FIFO would hang the engine's open) is no table.
  struct stat st;
  if (::lstat(path.c_str(), &st) != 0 || !S_ISREG(st.st_mode)) return false;
  return reader.Open(path).ok() && reader.VerifyChecksum().ok();
}

// The first table file of `space` that does not check out whole (not in
// *damaged already), or nullptr; it is added to *damaged.
const rocksdb::SstFileMetaData* FirstDamagedTable(rocksdb::DB* db,
                                                  rocksdb::ColumnFamilyHandle* space,
                                                  const rocksdb::ColumnFamilyMetaData& meta,
                                                  std::set<uint64_t>* damaged) {
  const rocksdb::Options options(db->GetDBOptions(), db->GetOptions(space));
  for (const rocksdb::LevelMetaData& level : meta.levels) {
    for (const rocksdb::SstFileMetaData& f : level.files) {
      if (damaged->count(f.file_number)) return &f;
      // A file the engine's own compactions replaced since the listing
      // (gone: it cannot be opened) is no damage.
      struct stat st;
      if (!TableIntact(options, f) && ::lstat((f.db_path + f.name).c_str(), &st) == 0) {
        damaged->insert(f.file_number);
        return &f;
      }
    }
  }
  return nullptr;
}

}  // namespace

size_t BlobFilesWorthCopying(std::vector<rocksdb::BlobMetaData> files, uint64_t free_bytes,
                             uint64_t* kept) {
  // Room for the copies, and then some: the engine's own writes go on.
  constexpr uint64_t kMargin = 64 << 20;
  std::sort(files.begin(), files.end(),
            [](const auto& a, const auto& b) { return a.blob_file_number < b.blob_file_number; });
  size_t fits = 0;
  uint64_t total = 0, garbage = 0, wanted_garbage = 0, fits_garbage = 0;
  for (size_t k = 1; k <= files.size(); ++k) {
    const rocksdb::BlobMetaData& f = files[k - 1];
    total += f.total_blob_bytes;
    garbage += std::min(f.garbage_blob_bytes, f.total_blob_bytes);
    if (garbage == 0 || 4 * garbage < total) continue;
    wanted_garbage = garbage;
    if (total - garbage + kMargin <= free_bytes) {
      fits = k;
      fits_garbage = garbage;
    }
  }
  *kept = wanted_garbage - fits_garbage;
  return fits;
}

void MergeSmallTables(rocksdb::DB* db, const std::vector<rocksdb::ColumnFamilyHandle*>& spaces,
                      const std::string& dir, std::set<uint64_t>* damaged) {
  constexpr uint64_t kSmallTable = 4 << 20, kMergeMostBytes = 64 << 20, kMergeMargin = 8 << 20;
  constexpr size_t kMergeAt = 8, kMergeMost = 64;
  rocksdb::CompactionOptions merge;
  merge.compression = rocksdb::kDisableCompressionOption;  // the space's own (default: snappy)
  // Never the write that fills the store's filesystem: a merge writes its
  // files whole before it drops the old ones.
  struct statvfs vfs;
  if (::statvfs(dir.c_str(), &vfs) != 0) return;
  const uint64_t room = static_cast<uint64_t>(vfs.f_bavail) * vfs.f_frsize;
  // The first run of a space's level worth merging: neighbours in key
  // order (levels 1+ are sorted), small, not at work, not known damaged.
  auto first_run = [&](const rocksdb::LevelMetaData& level) {
    std::vector<const rocksdb::SstFileMetaData*> run;
    uint64_t bytes = 0;
    for (const rocksdb::SstFileMetaData& f : level.files) {
      if (f.size < kSmallTable && !f.being_compacted && !damaged->count(f.file_number)) {
        run.push_back(&f);
        bytes += f.size;
        if (run.size() < kMergeMost && bytes < kMergeMostBytes) continue;
      }
      if (run.size() >= kMergeAt) break;
      run.clear();
      bytes = 0;
    }
    if (run.size() < kMergeAt || room < 2 * bytes + kMergeMargin) run.clear();
    return run;
  };
  for (auto* h : spaces) {
    rocksdb::ColumnFamilyMetaData meta;
    db->GetColumnFamilyMetaData(h, &meta);
    const rocksdb::Options options(db->GetDBOptions(), db->GetOptions(h));
    for (const rocksdb::LevelMetaData& level : meta.levels) {
      if (level.level == 0) continue;  // the engine's own compactions empty level 0
      std::vector<const rocksdb::SstFileMetaData*> run = first_run(level);
      if (run.empty()) continue;
      std::vector<std::string> names;
      for (const rocksdb::SstFileMetaData* f : run) {
        // A damaged table stays as it is (the reads that need it fail,
        // fsck names it); the files around it merge at later flushes.
        if (!TableIntact(options, *f)) {
          damaged->insert(f->file_number);
          spdlog::warn("store {}: table file {} of {} is damaged: not merged (tbfs fsck LOGDIR)",
                       WithFolderPaths(dir), WithFolderPaths(f->db_path + f->name), meta.name);
          return;
        }
        names.push_back(f->name);
      }
      rocksdb::Status s = db->CompactFiles(merge, h, names, level.level);
      if (!s.ok()) {
        spdlog::warn("store {}: merging {} small table files of {}: {}", WithFolderPaths(dir),
                     names.size(), meta.name, WithFolderPaths(s.ToString()));
        return;
      }
      break;  // one merge per space and flush
    }
  }
}

Status CompactStore(rocksdb::DB* db, const std::vector<rocksdb::ColumnFamilyHandle*>& spaces,
                    rocksdb::ColumnFamilyHandle* chunks, const std::string& dir,
                    uint64_t free_bytes, std::set<uint64_t>* damaged) {
  const std::string store = WithFolderPaths(dir);
  rocksdb::CompactRangeOptions options;
  options.bottommost_level_compaction = rocksdb::BottommostLevelCompaction::kForce;
  bool chunks_intact = true;
  for (auto* h : spaces) {
    rocksdb::ColumnFamilyMetaData meta;
    db->GetColumnFamilyMetaData(h, &meta);
    if (const rocksdb::SstFileMetaData* f = FirstDamagedTable(db, h, meta, damaged)) {
      spdlog::warn(
          "store {}: table file {} of {} is damaged: {} is not compacted (tbfs fsck LOGDIR)", store,
          WithFolderPaths(f->db_path + f->name), meta.name, meta.name);
      if (h == chunks) chunks_intact = false;
      continue;
    }
    TBFS_RETURN_IF_ERROR(
        FromRocks(db->CompactRange(options, h, nullptr, nullptr), "compact store " + store));
  }
  if (!chunks_intact) return Status::OK();
  // Then the chunks of the oldest blob files, oldest first (RocksDB
  // relocates blobs by age: every file older than a cutoff).
  rocksdb::ColumnFamilyMetaData meta;
  db->GetColumnFamilyMetaData(chunks, &meta);
  std::vector<rocksdb::BlobMetaData> files = meta.blob_files;
  std::sort(files.begin(), files.end(),
            [](const auto& a, const auto& b) { return a.blob_file_number < b.blob_file_number; });
  uint64_t kept = 0;
  size_t oldest = BlobFilesWorthCopying(files, free_bytes, &kept);
  if (kept > 0) {
    spdlog::warn(
        "store {}: {:.1f} MiB of deleted chunks stay in its blob files until its "
        "filesystem has room to copy the live chunks beside them out",
        store, static_cast<double>(kept) / (1 << 20));
  }
  for (size_t i = 0; i < oldest; ++i) {
    const std::string& name = files[i].blob_file_name;  // "/000012.blob" in RocksDB 7.8
    const std::string path = files[i].blob_file_path + (name.starts_with('/') ? "" : "/") + name;
    if (Status st = CheckBlobFile(path, chunks->GetID()); !st.ok()) {
      spdlog::warn(
          "store {}: {}: no chunk of it or of a newer blob file is copied out, so the deleted "
          "chunks they hold stay on disk until this file holds no live one (tbfs fsck LOGDIR "
          "names the cold file the damage is in, when it is a live one's)",
          store, WithFolderPaths(st.message()));
      files.resize(i);
      oldest = BlobFilesWorthCopying(files, free_bytes, &kept);
      break;
    }
  }
  if (oldest == 0) return Status::OK();
  // The files older than the one at cutoff * count (rounded down, by the
  // count when the compaction starts): just above `oldest`, so that a file
  // a flush adds meanwhile (the newest) does not move the cutoff past an
  // unchecked file (but when every file was to be copied out of: then the
  // new one too, just written).
  const double cutoff =
      (static_cast<double>(oldest) + 1e-3) / static_cast<double>(meta.blob_files.size());
  TBFS_RETURN_IF_ERROR(
      FromRocks(db->SetOptions(chunks, {{"enable_blob_garbage_collection", "true"},
                                        {"blob_garbage_collection_age_cutoff",
                                         fmt::format("{:.9f}", std::min(cutoff, 1.0))}}),
                "configure store " + store));
  FailpointHook("compact.checked", dir);  // a test's own process
  MaybePause("compact.checked");          // a daemon or a command (TBFS_PAUSE)
  Status result =
      FromRocks(db->CompactRange(options, chunks, nullptr, nullptr), "compact store " + store);
  Status reset = FromRocks(db->SetOptions(chunks, {{"enable_blob_garbage_collection", "false"}}),
                           "configure store " + store);
  return result.ok() ? reset : result;
}

void DeleteReplacedFiles(rocksdb::DB* db, const std::vector<rocksdb::ColumnFamilyHandle*>& spaces) {
  const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(2);
  for (;;) {
    bool held = false;
    for (auto* h : spaces) {
      uint64_t versions = 0;
      held |= db->GetIntProperty(h, rocksdb::DB::Properties::kNumLiveVersions, &versions) &&
              versions > 1;
    }
    if (!held || std::chrono::steady_clock::now() >= until) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  // With deletions enabled (tbfs never disables them), this only has the
  // engine look for the files no version needs and delete them.
  uint64_t enabled = 0;
  if (db->GetIntProperty(rocksdb::DB::Properties::kIsFileDeletionsEnabled, &enabled) &&
      enabled == 1) {
    rocksdb::Status s = db->EnableFileDeletions(/*force=*/false);
    if (!s.ok()) spdlog::warn("store: deleting the files a compaction replaced: {}", s.ToString());
  }
}

}  // namespace tbfs::store
