#include "base/time_util.h"
#include "store/maintenance.h"

#include <algorithm>
#include <chrono>
#include <set>

#include "store/file_io.h"
#include "store/format.h"

namespace tbfs::store {

Result<FsckResult> Fsck(ColdStore& store, WorkPool* pool, std::atomic<uint64_t>* progress) {
  FsckResult result;
  std::vector<storepb::Manifest> manifests;
  std::set<uint64_t> ids;
  TBFS_RETURN_IF_ERROR(store.ForEachManifest([&](const storepb::Manifest& m) {
    manifests.push_back(m);
    ids.insert(m.file_id());
    return true;
  }));
  for (const storepb::Manifest& m : manifests) {
    result.files++;
    result.bytes += m.size();
    Status st = VerifyStoredFile(store, m, pool);
    if (!st.ok()) result.damaged.push_back({m.path(), st.message()});
    auto entry = store.GetEntry(m.path());
    if (!entry.ok() || entry->file_id() != m.file_id()) {
      result.damaged.push_back({m.path(), "no namespace entry points to this file"});
    }
    if (progress) progress->fetch_add(m.size(), std::memory_order_relaxed);
  }
  std::vector<uint64_t> retired;
  TBFS_RETURN_IF_ERROR(store.ListRetired(&retired));
  result.retired_files = retired.size();
  std::set<uint64_t> chunk_ids;
  TBFS_RETURN_IF_ERROR(store.backend().Scan(Space::kChunks, "", [&](std::string_view k, std::string_view) {
    uint64_t id = 0, index = 0;
    if (DecodeChunkKey(k, &id, &index) && !ids.count(id) &&
        !std::binary_search(retired.begin(), retired.end(), id)) {
      chunk_ids.insert(id);
    }
    return true;
  }));
  result.orphan_chunk_files = chunk_ids.size();
  TBFS_RETURN_IF_ERROR(store.backend().Scan(Space::kNamespace, "", [&](std::string_view, std::string_view v) {
    storepb::Entry e;
    if (e.ParseFromArray(v.data(), static_cast<int>(v.size())) &&
        e.kind() == storepb::Entry::FILE && !ids.count(e.file_id())) {
      result.dangling_entries++;
    }
    return true;
  }));
  std::vector<storepb::JournalRecord> journal;
  TBFS_RETURN_IF_ERROR(store.ListJournal(&journal));
  result.journal_records = journal.size();
  return result;
}

Status SelectOlderThan(ColdStore& store, int64_t older_than_s, std::vector<storepb::Manifest>* out) {
  out->clear();
  int64_t cutoff = NowNs() - older_than_s * 1'000'000'000;
  return store.ForEachManifest([&](const storepb::Manifest& m) {
    if (m.mtime_ns() < cutoff) out->push_back(m);
    return true;
  });
}

Status DeleteCold(ColdStore& store, const std::vector<storepb::Manifest>& files) {
  WriteBatch batch;
  for (const storepb::Manifest& m : files) {
    store.RemoveFile(&batch, m);
    if (batch.bytes() > (1 << 20)) {
      TBFS_RETURN_IF_ERROR(store.Commit(batch, true));
      batch.Clear();
    }
  }
  TBFS_RETURN_IF_ERROR(store.Commit(batch, true));
  return store.backend().Compact();
}

}  // namespace tbfs::store
