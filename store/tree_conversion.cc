// ColdStore: the conversion of a format 2 or 3 store to format 4's tree of
// folder ids (docs/format.md, "Versions 2 and 3 to 4").
#include <map>
#include <set>

#include "base/failpoint.h"
#include "base/fs_util.h"
#include "base/text.h"
#include "base/time_util.h"
#include "spdlog/spdlog.h"
#include "store/cold_store.h"
#include "store/format.h"
#include "store/namespace_internal.h"

namespace tbfs::store {

Status ColdStore::ConvertToTree(const storepb::StoreInfo& current) {
  // 1. Records a conversion cut short left: gone, so that ids are handed
  //    out afresh.
  WriteBatch batch;
  auto flush = [&](bool sync) -> Status {
    if (batch.empty()) return Status::OK();
    TBFS_RETURN_IF_ERROR(CheckRoom(batch.bytes()));
    TBFS_RETURN_IF_ERROR(backend_->Commit(batch, sync));
    batch.Clear();
    return Status::OK();
  };
  //    A folder link's copy goes too, if it is one still (an older tbfs may
  //    since have given its id to a file, whose manifest copy stays).
  std::vector<uint64_t> former;
  TBFS_RETURN_IF_ERROR(backend_->Scan(Space::kNamespace, kTreeKeyPrefix,
                                      [&](std::string_view key, std::string_view) {
                                        batch.Delete(Space::kNamespace, key);
                                        uint64_t id = 0;
                                        if (key.size() == 9 && DecodeId(key.substr(1), &id))
                                          former.push_back(id);
                                        return true;
                                      }));
  for (const uint64_t id : former) {
    std::string value, link;
    Status st = backend_->Get(Space::kChunks, ChunkKey(id, kManifestCopyIndex), &value);
    if (st.ok() && ParseDirCopy(id, value, &link)) {
      batch.Delete(Space::kChunks, ChunkKey(id, kManifestCopyIndex));
    } else if (!st.ok() && !st.IsNotFound()) {
      return st;
    }
  }
  TBFS_RETURN_IF_ERROR(flush(false));
  // 2. An id for every folder: those with an entry, and any ancestor of an
  //    entry or a manifest that has none (damage; it gets one). Held in
  //    memory: one path per folder, never one per file.
  std::map<std::string, uint64_t> ids = {{"", kTopDirId}};
  std::set<std::string> with_entry;
  auto id_of = [&](const std::string& folder) -> uint64_t {
    for (std::string missing = folder; !ids.count(missing); missing = ParentPath(missing)) {
      ids[missing] = NewFileId();
    }
    return ids[folder];
  };
  // fn(path, entry) for every sound entry of the old namespace.
  auto for_each_old = [&](const std::function<void(const std::string&, storepb::Entry&)>& fn) {
    return backend_->Scan(Space::kNamespace, "", [&](std::string_view key, std::string_view value) {
      if (key.starts_with(kTreeKeyPrefix)) return true;
      const std::string path = PathOfEntryKey(key);
      storepb::Entry e;
      if (!IsSafeRelativePath(path) ||
          !e.ParseFromArray(value.data(), static_cast<int>(value.size()))) {
        // fsck names it; it stays out of the tree (and goes with the old keys).
        spdlog::error("store {}: converting: a damaged namespace entry is left out: {}", dir_,
                      Printable(path));
        return true;
      }
      fn(path, e);
      return true;
    });
  };
  TBFS_RETURN_IF_ERROR(for_each_old([&](const std::string& path, storepb::Entry& e) {
    if (e.kind() == storepb::Entry::DIR) {
      id_of(path);
      with_entry.insert(path);
    } else {
      id_of(ParentPath(path));
    }
  }));
  // 3. Every manifest names its folder (both copies).
  Status inner;
  TBFS_RETURN_IF_ERROR(ForEachManifest([&](const storepb::Manifest& m) {
    storepb::Manifest placed = m;
    placed.set_parent_dir(id_of(ParentPath(m.path())));
    PutManifest(&batch, placed);
    if (batch.bytes() > (16u << 20)) inner = flush(false);
    return inner.ok();
  }));
  TBFS_RETURN_IF_ERROR(inner);
  // 4. Every entry under its parent's id; every folder's link, and an
  //    entry for a folder that had none.
  uint64_t count = 0;
  TBFS_RETURN_IF_ERROR(for_each_old([&](const std::string& path, storepb::Entry& e) {
    if (!inner.ok()) return;
    if (e.kind() == storepb::Entry::DIR) e.set_dir_id(ids[path]);
    batch.Put(Space::kNamespace, TreeKey(ids[ParentPath(path)], BaseName(path)),
              e.SerializeAsString());
    count++;
    if (batch.bytes() > (16u << 20)) inner = flush(false);
  }));
  TBFS_RETURN_IF_ERROR(inner);
  for (const auto& [folder, id] : ids) {
    if (folder.empty()) continue;
    const uint64_t parent = ids[ParentPath(folder)];
    PutDirLink(&batch, id, parent, BaseName(folder));
    if (!with_entry.count(folder)) {
      storepb::Entry e = FolderEntry(nullptr, folder, NowNs());
      e.set_dir_id(id);
      batch.Put(Space::kNamespace, TreeKey(parent, BaseName(folder)), e.SerializeAsString());
    }
    if (batch.bytes() > (16u << 20)) TBFS_RETURN_IF_ERROR(flush(false));
  }
  TBFS_RETURN_IF_ERROR(flush(false));
  MaybeCrash("store.convert.before_switch");
  // 5. The switch: the ids' floor and the version, in one commit.
  batch.Put(Space::kMeta, kMetaNextFileIdKey, EncodeId(next_file_id_.load()));
  storepb::StoreInfo info = current;
  info.set_format_version(kFormatVersionTree);
  batch.Put(Space::kMeta, kMetaInfoKey, info.SerializeAsString());
  TBFS_RETURN_IF_ERROR(flush(true));
  tree_.store(true, std::memory_order_release);
  MaybeCrash("store.convert.after_switch");
  // 6. The old keys go (a crash before the end leaves some, which the
  //    tree never reads; the next writer's open removes them).
  TBFS_RETURN_IF_ERROR(DropPathKeys());
  spdlog::warn("store {}: converted to format 4 ({} namespace entries, {} folders)", dir_, count,
               ids.size() - 1);
  return Status::OK();
}

Status ColdStore::DropPathKeys() {
  WriteBatch batch;
  Status inner;
  TBFS_RETURN_IF_ERROR(
      backend_->Scan(Space::kNamespace, "", [&](std::string_view key, std::string_view) {
        if (key.starts_with(kTreeKeyPrefix)) return true;
        batch.Delete(Space::kNamespace, key);
        if (batch.bytes() > (16u << 20)) {
          inner = backend_->Commit(batch, false);
          batch.Clear();
        }
        return inner.ok();
      }));
  TBFS_RETURN_IF_ERROR(inner);
  return batch.empty() ? Status::OK() : backend_->Commit(batch, true);
}

}  // namespace tbfs::store
