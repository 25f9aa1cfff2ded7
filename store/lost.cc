// Lost files: what recovery could find neither in the logdir nor in the
// store (store/cold_store.h: RecordLost); the set-aside files it has read.
#include <algorithm>

#include "nlohmann/json.hpp"
#include "store/cold_store.h"
#include "store/format.h"

namespace tbfs::store {

Status ColdStore::RecordLost(const std::vector<LostFile>& files, uint64_t next_file_id) {
  WriteBatch batch;
  for (const LostFile& f : files) {
    batch.Put(Space::kMeta, kLostPrefix + EncodeId(f.file_id),
              nlohmann::json{
                  {"path", f.path}, {"batch", f.batch_id}, {"found_ns", f.found_ns}, {"why", f.why}}
                  .dump(-1, ' ', false, nlohmann::json::error_handler_t::replace));
  }
  if (next_file_id == 0) return Commit(batch, true);
  // Ids a MANIFEST cut back would hand out again (store/set_aside.h); the
  // next id's records land in increasing order (PutJournal).
  MutexLock lock(journal_mu_);
  const uint64_t next = std::max(next_file_id, next_file_id_.load());
  batch.Put(Space::kMeta, kMetaNextFileIdKey, EncodeId(next));
  Status st = Write(batch, true);
  commits_.fetch_add(1, std::memory_order_acq_rel);
  for (uint64_t was = next_file_id_.load(); st.ok() && was < next;)
    next_file_id_.compare_exchange_weak(was, next);
  return st;
}

Status ColdStore::ListLost(std::vector<LostFile>* out) {
  out->clear();
  const std::string prefix = kLostPrefix;
  return backend_->Scan(Space::kMeta, prefix, [&](std::string_view key, std::string_view value) {
    LostFile f;
    (void)DecodeId(key.substr(prefix.size()), &f.file_id);
    auto j = nlohmann::json::parse(value, nullptr, false);
    if (j.is_object()) {
      f.path = j.value("path", "");
      f.batch_id = j.value("batch", uint64_t{0});
      f.found_ns = j.value("found_ns", uint64_t{0});
      f.why = j.value("why", "");
    } else {
      f.why = "(the record does not parse)";
    }
    out->push_back(std::move(f));
    return true;
  });
}

Status ColdStore::ClearLost(uint64_t* cleared) {
  std::vector<LostFile> lost;
  TBFS_RETURN_IF_ERROR(ListLost(&lost));
  *cleared = lost.size();
  if (lost.empty()) return Status::OK();
  WriteBatch batch;
  for (const LostFile& f : lost) batch.Delete(Space::kMeta, kLostPrefix + EncodeId(f.file_id));
  return Commit(batch, true);
}

Status ColdStore::ListSetAsideRead(std::set<std::string>* names) {
  names->clear();
  const std::string prefix = kSetAsideReadPrefix;
  return backend_->Scan(Space::kMeta, prefix, [&](std::string_view key, std::string_view) {
    names->emplace(key.substr(prefix.size()));
    return true;
  });
}

void ColdStore::MarkSetAsideRead(WriteBatch* batch, std::string_view name) {
  batch->Put(Space::kMeta, kSetAsideReadPrefix + std::string(name), "");
}

}  // namespace tbfs::store
