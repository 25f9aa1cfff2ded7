#include "store/journal_index.h"

#include <algorithm>
#include <string>

#include "store/cold_store.h"
#include "store/format.h"

namespace tbfs::store {

void JournalIndex::Add(const storepb::JournalRecord& record) {
  if (record.kind() != storepb::JournalRecord::MIGRATE) return;
  MutexLock lock(mu_);
  Batch& b = batches_[record.batch_id()];
  b.files.clear();
  for (const storepb::JournalEntry& e : record.entries()) b.files.insert(e.file_id());
  std::erase_if(b.marked, [&](uint64_t id) { return !b.files.count(id); });
}

void JournalIndex::Forget(uint64_t batch_id) {
  MutexLock lock(mu_);
  batches_.erase(batch_id);
}

void JournalIndex::MarkDeleted(WriteBatch* batch, uint64_t file_id) {
  MutexLock lock(mu_);
  for (auto& [batch_id, b] : batches_) {
    if (!b.files.count(file_id)) continue;
    batch->Put(Space::kMeta, kDeletedInBatchPrefix + EncodeId(file_id), EncodeId(batch_id));
    if (std::find(b.marked.begin(), b.marked.end(), file_id) == b.marked.end())
      b.marked.push_back(file_id);
    return;
  }
}

void JournalIndex::DropMarks(WriteBatch* batch, uint64_t batch_id) {
  MutexLock lock(mu_);
  auto it = batches_.find(batch_id);
  if (it == batches_.end()) return;
  for (uint64_t id : it->second.marked) DropDeletedMark(batch, id);
}

Status ColdStore::ListDeletedMarks(std::set<uint64_t>* ids) {
  ids->clear();
  const std::string prefix = kDeletedInBatchPrefix;
  return backend_->Scan(Space::kMeta, prefix, [&](std::string_view key, std::string_view) {
    uint64_t id = 0;
    if (DecodeId(key.substr(prefix.size()), &id)) ids->insert(id);
    return true;
  });
}

void DropDeletedMark(WriteBatch* batch, uint64_t file_id) {
  batch->Delete(Space::kMeta, kDeletedInBatchPrefix + EncodeId(file_id));
}

}  // namespace tbfs::store
