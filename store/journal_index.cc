#include "store/journal_index.h"

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
  std::erase_if(b.marked, [&](const auto& m) { return !b.files.count(m.first); });
}

void JournalIndex::Forget(uint64_t batch_id) {
  MutexLock lock(mu_);
  batches_.erase(batch_id);
}

void JournalIndex::Put(WriteBatch* batch, uint64_t file_id, Mark mark) {
  MutexLock lock(mu_);
  for (auto& [batch_id, b] : batches_) {
    if (!b.files.count(file_id)) continue;
    auto [it, fresh] = b.marked.emplace(file_id, mark);
    if (!fresh && it->second == Mark::kDeleted) return;
    it->second = mark;
    batch->Put(Space::kMeta, kBatchMarkPrefix + EncodeId(file_id),
               EncodeId(batch_id) + static_cast<char>(mark));
    return;
  }
}

void JournalIndex::DropMarks(WriteBatch* batch, uint64_t batch_id) {
  MutexLock lock(mu_);
  auto it = batches_.find(batch_id);
  if (it == batches_.end()) return;
  for (const auto& [id, mark] : it->second.marked) DropBatchMark(batch, id);
}

Status ColdStore::ListBatchMarks(std::map<uint64_t, Mark>* marks) {
  marks->clear();
  const std::string prefix = kBatchMarkPrefix;
  return backend_->Scan(Space::kMeta, prefix, [&](std::string_view key, std::string_view value) {
    uint64_t id = 0;
    // A value that is not one of the kinds (damage) is left in place's:
    // it may spare a loss record, never unlink a file.
    const Mark mark = value.size() == 9 && value[8] == static_cast<char>(Mark::kDeleted)
                          ? Mark::kDeleted
                          : Mark::kLeftInPlace;
    if (DecodeId(key.substr(prefix.size()), &id)) (*marks)[id] = mark;
    return true;
  });
}

void DropBatchMark(WriteBatch* batch, uint64_t file_id) {
  batch->Delete(Space::kMeta, kBatchMarkPrefix + EncodeId(file_id));
}

}  // namespace tbfs::store
