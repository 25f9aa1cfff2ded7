// Removing files from a store: retired marks, the runs of chunks a file
// holds, one delete per stored chunk (no range deletions: docs/format.md).
#include <fcntl.h>
#include <sys/stat.h>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <thread>

#include "base/failpoint.h"
#include "base/fs_util.h"
#include "base/time_util.h"
#include "fmt/format.h"
#include "spdlog/spdlog.h"
#include "store/cold_store.h"
#include "store/format.h"
#include "store/gzip_pieces.h"
#include "store/store_dir.h"

namespace tbfs::store {

bool ColdStore::IsRetired(uint64_t file_id) {
  std::string ignored;
  return backend_->Get(Space::kMeta, RetiredKey(file_id), &ignored).ok();
}

Status ColdStore::RemoveFile(WriteBatch* batch, const storepb::Manifest& m) {
  TBFS_RETURN_IF_ERROR(RemoveEntryOf(batch, m));
  RemoveChunks(batch, m.file_id(), StoredRuns(m));
  batch->Delete(Space::kManifests, EncodeId(m.file_id()));
  return Status::OK();
}

void ColdStore::PutManifest(WriteBatch* batch, const storepb::Manifest& m) {
  const std::string bytes = m.SerializeAsString();
  batch->Put(Space::kManifests, EncodeId(m.file_id()), bytes);
  batch->Put(Space::kChunks, ChunkKey(m.file_id(), kManifestCopyIndex),
             ManifestCopyValue(m.file_id(), bytes));
}

Status ColdStore::Retire(WriteBatch* batch, const storepb::Manifest& m) {
  TBFS_RETURN_IF_ERROR(RemoveEntryOf(batch, m));
  batch->Delete(Space::kManifests, EncodeId(m.file_id()));
  // Its chunks stay for the readers; the copy goes, so that nothing (salvage
  // reading the blob files) takes the file for one still in the store.
  batch->Delete(Space::kChunks, ChunkKey(m.file_id(), kManifestCopyIndex));
  // The mark keeps which chunks have values, for DropRetired.
  std::string runs;
  for (const ChunkRun& r : StoredRuns(m)) runs += EncodeId(r.first) + EncodeId(r.end);
  batch->Put(Space::kMeta, RetiredKey(m.file_id()), runs);
  return Status::OK();
}

Status ColdStore::DropRetired(WriteBatch* batch, uint64_t file_id) {
  std::string mark;
  Status read = backend_->Get(Space::kMeta, RetiredKey(file_id), &mark);
  if (read.IsNotFound()) return Status::OK();  // dropped already (another reaper)
  TBFS_RETURN_IF_ERROR(read);
  batch->Delete(Space::kMeta, RetiredKey(file_id));
  // A mark that names a file the store still holds is not that file's: its
  // chunks stay.
  std::string manifest;
  Status live = backend_->Get(Space::kManifests, EncodeId(file_id), &manifest);
  if (!live.IsNotFound()) {
    spdlog::warn(
        "store {}: file {} is marked retired but still in the store: its mark goes, its "
        "chunks stay{}",
        dir_, file_id, live.ok() ? "" : " (" + live.message() + ")");
    return Status::OK();
  }
  std::vector<ChunkRun> runs;
  if (!RunsOfMark(file_id, mark, &runs)) {
    // A mark from before the runs were kept is empty; such marks are gone
    // after the first mount or recovery of this version. A damaged one is
    // read as if it were one.
    if (!mark.empty()) {
      spdlog::warn(
          "store {}: the retired mark of file {} is damaged: its chunks are found by "
          "their keys",
          dir_, file_id);
    }
    runs = ScanRuns(file_id);
  }
  RemoveChunks(batch, file_id, runs);
  return Status::OK();
}

bool ColdStore::RunsOfMark(uint64_t file_id, std::string_view mark, std::vector<ChunkRun>* runs) {
  if (mark.empty() || mark.size() % 16 != 0) return false;
  uint64_t after = 0;  // where the previous run ended
  for (size_t at = 0; at < mark.size(); at += 16) {
    ChunkRun r;
    if (!DecodeId(mark.substr(at, 8), &r.first) || !DecodeId(mark.substr(at + 8, 8), &r.end) ||
        r.first >= r.end || r.first < after || r.end == kManifestCopyIndex) {
      return false;
    }
    // Each run's first and last chunk are in the store (a damaged value
    // still has its key): a mark whose bounds name no chunk is not trusted
    // with a delete per index in between.
    for (uint64_t index : {r.first, r.end - 1}) {
      std::string value;
      if (backend_->Get(Space::kChunks, ChunkKey(file_id, index), &value).IsNotFound()) {
        return false;
      }
    }
    after = r.end;
    runs->push_back(r);
  }
  return true;
}

Status ColdStore::ListRetired(std::vector<uint64_t>* ids) {
  ids->clear();
  const std::string prefix = kRetiredPrefix;
  return backend_->Scan(Space::kMeta, prefix, [&](std::string_view key, std::string_view) {
    uint64_t id = 0;
    if (DecodeId(key.substr(prefix.size()), &id)) ids->push_back(id);
    return true;
  });
}

Status ColdStore::DropAllRetired() {
  std::vector<uint64_t> ids;
  TBFS_RETURN_IF_ERROR(ListRetired(&ids));
  if (ids.empty()) return Status::OK();
  WriteBatch batch;
  for (uint64_t id : ids) TBFS_RETURN_IF_ERROR(DropRetired(&batch, id));
  return Commit(batch, true);
}

std::vector<ChunkRun> ColdStore::StoredRuns(const storepb::Manifest& m) {
  const storepb::Manifest stored = ContentManifest(m);
  // A manifest of no chunks: an empty file, or a stub for a file whose copy
  // was given up or cut short by a crash (its chunks are what was written).
  if (stored.chunks() == 0) return ScanRuns(m.file_id());
  return DataRuns(stored);
}

std::vector<ChunkRun> ColdStore::ScanRuns(uint64_t file_id) {
  std::vector<ChunkRun> runs;
  Status st = backend_->Scan(Space::kChunks, EncodeId(file_id),
                             [&](std::string_view key, std::string_view) {
                               uint64_t id = 0, index = 0;
                               if (!DecodeChunkKey(key, &id, &index) || index == kManifestCopyIndex)
                                 return true;
                               if (!runs.empty() && runs.back().end == index) {
                                 runs.back().end = index + 1;
                               } else {
                                 runs.push_back({index, index + 1});
                               }
                               return true;
                             });
  if (!st.ok()) {
    // The scan reads the values too: a damaged one ends it. What it did not
    // reach stays, garbage for `tbfs gc --garbage` (the file is gone
    // either way; a writer must still open).
    spdlog::warn("store {}: the chunks of removed file {} past chunk {} stay as garbage: {}", dir_,
                 file_id, runs.empty() ? 0 : runs.back().end, st.message());
  }
  return runs;
}

void ColdStore::RemoveChunks(WriteBatch* batch, uint64_t file_id,
                             const std::vector<ChunkRun>& runs) {
  // One delete per chunk that has a value, never a range: RocksDB 7.8
  // (Debian 12) aborts or frees twice in a scan that meets both a range
  // deletion and a table file it cannot read (docs/format.md, "No range
  // deletions"). Holes have no value, hence no delete.
  for (const ChunkRun& r : runs) {
    for (uint64_t index = r.first; index < r.end; ++index) {
      batch->Delete(Space::kChunks, ChunkKey(file_id, index));
    }
  }
  batch->Delete(Space::kChunks, ChunkKey(file_id, kManifestCopyIndex));
}

void ColdStore::UpdateManifest(WriteBatch* batch, const storepb::Manifest& m) {
  PutManifest(batch, m);
  if (m.codec() == kCodecZstdNumbers) PutFormat(batch, kFormatVersionNumbers);
}

void ColdStore::PutFormat(WriteBatch* batch, uint32_t version) {
  uint32_t put = format_put_.load();
  while (put < version && !format_put_.compare_exchange_weak(put, version)) {
  }
  storepb::StoreInfo info = info_;
  info.set_format_version(std::max({put, version, info_.format_version()}));
  batch->Put(Space::kMeta, kMetaInfoKey, info.SerializeAsString());
}

}  // namespace tbfs::store
