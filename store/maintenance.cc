#include "base/time_util.h"
#include "store/maintenance.h"

#include <algorithm>
#include <chrono>
#include <filesystem>
#include <set>

#include "store/file_io.h"
#include "store/format.h"
#include "store/store_dir.h"

namespace tbfs::store {

Result<FsckResult> Fsck(ColdStore& store, WorkPool* pool, std::atomic<uint64_t>* progress) {
  FsckResult result;
  std::vector<storepb::Manifest> manifests;
  std::set<uint64_t> ids;
  auto collect = [&](const storepb::Manifest& m) {
    if (ids.insert(m.file_id()).second) manifests.push_back(m);
    return true;
  };
  if (Status st = store.ForEachManifest(collect); !st.ok()) {
    result.problems.push_back("manifests: " + st.message());
    result.manifests_from_copies = true;
    if (Status copies = store.ForEachManifestCopy(collect); !copies.ok()) {
      result.problems.push_back("manifest copies: " + copies.message());
    }
  }
  for (const storepb::Manifest& m : manifests) {
    result.files++;
    result.bytes += m.size();
    Status st = VerifyStoredFile(store, m, pool);
    if (!st.ok()) result.damaged.push_back({m.path(), st.message()});
    auto entry = store.GetEntry(m.path());
    if (!entry.ok() || entry->file_id() != m.file_id()) {
      result.damaged.push_back({m.path(), entry.ok() || entry.status().IsNotFound()
                                              ? "no namespace entry points to this file"
                                              : "its namespace entry: " + entry.status().message()});
    }
    if (progress) progress->fetch_add(m.size(), std::memory_order_relaxed);
  }
  std::vector<uint64_t> retired;
  if (Status st = store.ListRetired(&retired); !st.ok()) result.problems.push_back("retired files: " + st.message());
  result.retired_files = retired.size();
  std::set<uint64_t> chunk_ids;
  Status chunks = store.ForEachChunkKey([&](uint64_t id, uint64_t) {
    if (!ids.count(id) && !std::binary_search(retired.begin(), retired.end(), id)) chunk_ids.insert(id);
    return true;
  });
  if (!chunks.ok()) result.problems.push_back("chunks: " + chunks.message());
  result.orphan_chunk_files = chunk_ids.size();
  Status names = store.ForEachEntry([&](const std::string&, const storepb::Entry& e) {
    if (e.kind() == storepb::Entry::FILE && !ids.count(e.file_id())) result.dangling_entries++;
    return true;
  });
  if (!names.ok()) result.problems.push_back("namespace: " + names.message());
  std::vector<storepb::JournalRecord> journal;
  if (Status st = store.ListJournal(&journal); !st.ok()) result.problems.push_back("journal: " + st.message());
  result.journal_records = journal.size();
  std::error_code ec;
  for (const auto& e : std::filesystem::directory_iterator(store.dir() + "/" + kLostFoundName, ec)) {
    (void)e;
    result.set_aside_files++;
  }
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
  return store.Compact();
}

}  // namespace tbfs::store
