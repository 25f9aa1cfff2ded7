// ColdStore: commits, and the cold files' totals they keep in step.
#include <set>

#include "fmt/format.h"
#include "store/cold_store.h"
#include "store/format.h"

namespace tbfs::store {

namespace {

std::string TopFolder(std::string_view path) {
  const size_t slash = path.find('/');
  return slash == std::string_view::npos ? "." : std::string(path.substr(0, slash));
}

// What one manifest adds to the totals.
void Count(const storepb::Manifest& m, int sign, ColdStore::Totals* t) {
  const auto s = static_cast<uint64_t>(sign);  // wraps: adding -x subtracts x
  t->files += s;
  t->logical_bytes += s * DataBytes(m);
  t->stored_bytes += s * m.stored_bytes();
  t->top_folder_bytes[TopFolder(m.path())] += s * DataBytes(m);
}

}  // namespace

Status ColdStore::Commit(const WriteBatch& batch, bool sync) {
  std::set<std::string> keys;  // manifests the batch writes or deletes
  for (const WriteBatch::Op& op : batch.ops()) {
    if (op.space == Space::kManifests) keys.insert(op.key);
  }
  if (keys.empty() && !batch.totals_in_doubt) {
    Status st = Write(batch, sync);
    commits_.fetch_add(1, std::memory_order_acq_rel);  // after the write, even a failed one
    return st;
  }
  MutexLock lock(totals_mu_);
  // Before: the manifests as the store has them; after: the batch's last
  // word on each key.
  std::optional<Totals> delta;
  if (totals_ && !shared() && !batch.totals_in_doubt) {
    delta = Totals();
    bool ok = true;
    std::map<uint64_t, std::string> folders;  // paths by folder id
    for (const std::string& key : keys) {
      std::string old;
      storepb::Manifest m;
      Status st = backend_->Get(Space::kManifests, key, &old);
      if (st.ok()) {
        // Counted where the namespace places it now: a folder renamed since
        // it was written has not rewritten its path (format 4).
        ok = ok && m.ParseFromString(old) && DerivePath(&m, &folders).ok();
        if (ok) Count(m, -1, &*delta);
      } else if (!st.IsNotFound()) {
        ok = false;
      }
    }
    std::map<std::string_view, const WriteBatch::Op*> last;
    for (const WriteBatch::Op& op : batch.ops()) {
      if (op.space == Space::kManifests) last[op.key] = &op;
    }
    for (const auto& [key, op] : last) {
      if (op->is_delete) continue;
      storepb::Manifest m;
      ok = ok && m.ParseFromString(op->value);
      // Its folder's path as the store has it; a folder this batch makes is
      // not there yet, and then the path written is the file's (AddFile).
      storepb::Manifest placed = m;
      if (ok && DerivePath(&placed, &folders).ok()) m = std::move(placed);
      if (ok) Count(m, +1, &*delta);
    }
    if (!ok) delta.reset();
  }
  Status st = Write(batch, sync);
  commits_.fetch_add(1, std::memory_order_acq_rel);
  manifest_commits_++;
  if (!st.ok() || !delta) {
    totals_.reset();  // counted again when next asked
  } else {
    totals_->files += delta->files;
    totals_->logical_bytes += delta->logical_bytes;
    totals_->stored_bytes += delta->stored_bytes;
    for (const auto& [top, bytes] : delta->top_folder_bytes) {
      auto it = totals_->top_folder_bytes.emplace(top, 0).first;
      it->second += bytes;
      if (it->second == 0) totals_->top_folder_bytes.erase(it);
    }
  }
  return st;
}

Result<ColdStore::Totals> ColdStore::GetTotals() {
  {
    MutexLock lock(totals_mu_);
    if (totals_ && !shared()) return *totals_;
  }
  // Counted outside the lock (commits go on); kept only if no manifest
  // changed meanwhile.
  uint64_t before;
  {
    MutexLock lock(totals_mu_);
    before = manifest_commits_;
  }
  auto counted = ComputeTotals();
  if (!counted.ok() || shared()) return counted;
  MutexLock lock(totals_mu_);
  if (manifest_commits_ == before) totals_ = *counted;
  return counted;
}

Result<ColdStore::Totals> ColdStore::ComputeTotals() {
  Totals t;
  TBFS_RETURN_IF_ERROR(ForEachManifest([&](const storepb::Manifest& m) {
    t.files++;
    t.logical_bytes += DataBytes(m);
    t.stored_bytes += m.stored_bytes();
    t.top_folder_bytes[TopFolder(m.path())] += DataBytes(m);
    return true;
  }));
  std::erase_if(t.top_folder_bytes,
                [](const auto& r) { return r.second == 0; });  // as Commit keeps them
  return t;
}

}  // namespace tbfs::store
