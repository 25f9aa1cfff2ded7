// ColdStore: the cold namespace. Format 4 keeps it as a tree of folder ids
// (store/format.h TreeKey): a lookup walks a path one folder at a time, and
// a rename rewrites the moved entry (and a folder's link, or a file's
// manifest) whatever lies beneath it. A store of an older format is read
// by path keys until its first writer converts it (ConvertToTree).
#include <set>
#include <unordered_set>

#include "base/fs_util.h"
#include "base/text.h"
#include "base/time_util.h"
#include "fmt/format.h"
#include "spdlog/spdlog.h"
#include "store/cold_store.h"
#include "store/format.h"
#include "store/namespace_internal.h"

namespace tbfs::store {

namespace {

Status ParseEntry(std::string_view bytes, storepb::Entry* e, std::string_view path) {
  if (!e->ParseFromArray(bytes.data(), static_cast<int>(bytes.size())))
    return Status::Corruption("store entry does not parse: " + std::string(path));
  return Status::OK();
}

// Past this many folders up, DirPath keeps the ids it passed, to tell a
// deep path (a logdir may nest beyond PATH_MAX) from a loop of links,
// which only damage makes.
constexpr int kDepthWatched = 256;

// ColdStore::dir_cache_'s bound: about 1 MB of paths.
constexpr size_t kDirCacheEntries = 8192;

}  // namespace

storepb::Entry FolderEntry(const FolderAttrs& attrs, const std::string& folder, int64_t mtime_ns) {
  storepb::Entry dir;
  dir.set_kind(storepb::Entry::DIR);
  struct stat sb;
  if (attrs && attrs(folder, &sb) && S_ISDIR(sb.st_mode)) {
    dir.set_mode(sb.st_mode);
    dir.set_uid(sb.st_uid);
    dir.set_gid(sb.st_gid);
    dir.set_mtime_ns(ToNs(sb.st_mtim));
  } else {
    dir.set_mode(S_IFDIR | 0755);
    dir.set_mtime_ns(mtime_ns);
  }
  return dir;
}

// --- reading

void ColdStore::SyncDirCache(uint64_t commits) {
  if (dir_cache_commits_ == commits) return;
  dir_ids_.clear();
  dir_paths_.clear();
  dir_cache_commits_ = commits;
}

Result<uint64_t> ColdStore::ResolveDir(std::string_view folder) {
  if (folder.empty()) return kTopDirId;
  // A shared store's other writers commit unseen: no cache there.
  const bool cache = !shared();
  const uint64_t commits = commits_.load(std::memory_order_acquire);
  if (cache) {
    MutexLock lock(dir_cache_mu_);
    SyncDirCache(commits);
    if (auto it = dir_ids_.find(std::string(folder)); it != dir_ids_.end()) return it->second;
  }
  auto found = WalkToDir(folder);
  if (cache && found.ok()) {
    MutexLock lock(dir_cache_mu_);
    // Kept only when no commit landed while the walk read (it may have
    // read some of the folders before that commit, some after).
    if (dir_cache_commits_ == commits && commits_.load(std::memory_order_acquire) == commits) {
      if (dir_ids_.size() >= kDirCacheEntries) dir_ids_.clear();
      dir_ids_.emplace(folder, *found);
    }
  }
  return found;
}

Result<uint64_t> ColdStore::WalkToDir(std::string_view folder) {
  uint64_t dir = kTopDirId;
  std::string bytes;
  for (size_t start = 0; start < folder.size();) {
    const size_t slash = std::min(folder.find('/', start), folder.size());
    const std::string_view name = folder.substr(start, slash - start);
    Status st = backend_->Get(Space::kNamespace, TreeKey(dir, name), &bytes);
    if (st.IsNotFound()) return Status::NotFound("not in the cold store: " + std::string(folder));
    TBFS_RETURN_IF_ERROR(st);
    storepb::Entry e;
    TBFS_RETURN_IF_ERROR(ParseEntry(bytes, &e, folder.substr(0, slash)));
    if (e.kind() != storepb::Entry::DIR) {
      return Status::NotFound(
          fmt::format("not in the cold store: {} ({} is a file)", folder, folder.substr(0, slash)));
    }
    dir = e.dir_id();
    start = slash + 1;
  }
  return dir;
}

Result<std::string> ColdStore::DirPath(uint64_t dir, std::map<uint64_t, std::string>* memo) {
  if (dir == kTopDirId) return std::string();
  // As ResolveDir: a walk's result is kept only when no commit landed
  // while it read.
  const bool cache = memo == nullptr && !shared();
  const uint64_t commits = commits_.load(std::memory_order_acquire);
  if (cache) {
    MutexLock lock(dir_cache_mu_);
    SyncDirCache(commits);
    if (auto it = dir_paths_.find(dir); it != dir_paths_.end()) return it->second;
  }
  auto path = WalkUpFrom(dir, memo);
  if (cache && path.ok()) {
    MutexLock lock(dir_cache_mu_);
    if (dir_cache_commits_ == commits && commits_.load(std::memory_order_acquire) == commits) {
      if (dir_paths_.size() >= kDirCacheEntries) dir_paths_.clear();
      dir_paths_.emplace(dir, *path);
    }
  }
  return path;
}

Result<std::string> ColdStore::WalkUpFrom(uint64_t dir, std::map<uint64_t, std::string>* memo) {
  std::vector<std::string> names;
  std::string bytes, top;
  uint64_t d = dir;
  std::unordered_set<uint64_t> passed;
  for (int depth = 0; d != kTopDirId; ++depth) {
    if (memo != nullptr) {
      if (auto it = memo->find(d); it != memo->end()) {
        top = it->second;
        break;
      }
    }
    if (depth > kDepthWatched && !passed.insert(d).second)
      return Status::Corruption(fmt::format("the store's folder {} is in a loop of folders", dir));
    Status st = backend_->Get(Space::kNamespace, TreeLinkKey(d), &bytes);
    if (st.IsNotFound()) {
      return Status::Corruption(
          fmt::format("the store's folder {} (on the way up from folder {}) has no place", d, dir));
    }
    TBFS_RETURN_IF_ERROR(st);
    storepb::DirLink link;
    if (!link.ParseFromString(bytes) || link.name().empty() ||
        link.name().find('/') != std::string::npos) {
      return Status::Corruption(fmt::format("the store's record of folder {} does not parse", d));
    }
    names.push_back(link.name());
    d = link.parent();
  }
  std::string path = top;
  for (auto it = names.rbegin(); it != names.rend(); ++it) path = JoinPath(path, *it);
  if (memo != nullptr) (*memo)[dir] = path;
  return path;
}

Status ColdStore::DerivePath(storepb::Manifest* m, std::map<uint64_t, std::string>* memo) {
  if (!tree_.load(std::memory_order_acquire)) return Status::OK();
  auto folder = DirPath(m->parent_dir(), memo);
  if (!folder.ok()) {
    return Status::Corruption(
        fmt::format("manifest {}: {}", m->file_id(), folder.status().message()));
  }
  m->set_path(JoinPath(*folder, BaseName(m->path())));
  return Status::OK();
}

Result<storepb::Entry> ColdStore::GetEntry(std::string_view rel_path) {
  std::string bytes;
  std::string key;
  if (rel_path.empty()) return Status::NotFound("not in the cold store: the top");
  if (tree_.load(std::memory_order_acquire)) {
    auto dir = ResolveDir(ParentPath(rel_path));
    if (!dir.ok()) {
      if (dir.status().IsNotFound())
        return Status::NotFound("not in the cold store: " + std::string(rel_path));
      return dir.status();
    }
    key = TreeKey(*dir, BaseName(rel_path));
  } else {
    key = EntryKey(rel_path);
  }
  Status st = backend_->Get(Space::kNamespace, key, &bytes);
  if (st.IsNotFound() && !tree_.load(std::memory_order_acquire) && TreeSinceOpen())
    return GetEntry(rel_path);
  if (st.IsNotFound()) return Status::NotFound("not in the cold store: " + std::string(rel_path));
  TBFS_RETURN_IF_ERROR(st);
  storepb::Entry e;
  TBFS_RETURN_IF_ERROR(ParseEntry(bytes, &e, rel_path));
  return e;
}

Result<storepb::Manifest> ColdStore::Lookup(std::string_view rel_path) {
  auto entry = GetEntry(rel_path);
  if (!entry.ok()) return entry.status();
  if (entry->kind() != storepb::Entry::FILE) {
    return Status::InvalidArgument(std::string(rel_path) + " is a folder in the cold store");
  }
  return GetManifest(entry->file_id());
}

Status ColdStore::ScanChildren(std::string_view folder,
                               const std::function<bool(std::string_view, std::string_view)>& fn) {
  std::string prefix;
  if (tree_.load(std::memory_order_acquire)) {
    auto dir = ResolveDir(folder);
    if (dir.status().IsNotFound()) return Status::OK();  // no such folder: no children
    if (!dir.ok()) return dir.status();
    prefix = TreeLinkKey(*dir);
  } else {
    prefix = ChildPrefix(folder);
    if (TreeSinceOpen()) return ScanChildren(folder, fn);
  }
  return backend_->Scan(Space::kNamespace, prefix,
                        [&](std::string_view key, std::string_view value) {
                          if (key.size() == prefix.size()) return true;  // the folder's own link
                          return fn(key.substr(prefix.size()), value);
                        });
}

Status ColdStore::ListChildren(std::string_view folder, std::vector<ChildEntry>* out) {
  out->clear();
  Status parse_error;
  TBFS_RETURN_IF_ERROR(ScanChildren(folder, [&](std::string_view name, std::string_view value) {
    ChildEntry c;
    c.name.assign(name);
    if (!c.entry.ParseFromArray(value.data(), static_cast<int>(value.size()))) {
      parse_error = Status::Corruption("store entry does not parse: " + c.name);
      return false;
    }
    out->push_back(std::move(c));
    return true;
  }));
  return parse_error;
}

Result<bool> ColdStore::HasChildren(std::string_view folder) {
  bool any = false;
  TBFS_RETURN_IF_ERROR(ScanChildren(folder, [&](std::string_view, std::string_view) {
    any = true;
    return false;
  }));
  return any;
}

Status ColdStore::ForEachEntry(
    const std::function<bool(const std::string&, const storepb::Entry&)>& fn) {
  Status inner;
  if (!tree_.load(std::memory_order_acquire)) {
    TBFS_RETURN_IF_ERROR(
        backend_->Scan(Space::kNamespace, "", [&](std::string_view key, std::string_view value) {
          if (key.starts_with(kTreeKeyPrefix)) return true;  // a conversion cut short
          storepb::Entry e;
          if (!e.ParseFromArray(value.data(), static_cast<int>(value.size()))) {
            inner = Status::Corruption("namespace entry does not parse: " + PathOfEntryKey(key));
            return false;
          }
          return fn(PathOfEntryKey(key), e);
        }));
    return inner;
  }
  // Depth first from the top, each folder's children in name order.
  std::vector<std::pair<uint64_t, std::string>> todo = {{kTopDirId, ""}};
  std::set<uint64_t> seen = {kTopDirId};
  bool go_on = true;
  while (!todo.empty() && go_on && inner.ok()) {
    const uint64_t dir = todo.back().first;
    const std::string path = std::move(todo.back().second);
    todo.pop_back();
    const std::string prefix = TreeLinkKey(dir);
    std::vector<std::pair<uint64_t, std::string>> folders;
    TBFS_RETURN_IF_ERROR(backend_->Scan(
        Space::kNamespace, prefix, [&](std::string_view key, std::string_view value) {
          if (key.size() == prefix.size()) return true;
          const std::string child = JoinPath(path, key.substr(prefix.size()));
          storepb::Entry e;
          if (!e.ParseFromArray(value.data(), static_cast<int>(value.size()))) {
            inner = Status::Corruption("namespace entry does not parse: " + child);
            return false;
          }
          if (e.kind() == storepb::Entry::DIR) {
            if (!seen.insert(e.dir_id()).second) {
              inner = Status::Corruption(fmt::format(
                  "namespace entry {} names folder {} a second time", child, e.dir_id()));
              return false;
            }
            folders.emplace_back(e.dir_id(), child);
          }
          go_on = fn(child, e);
          return go_on;
        }));
    for (auto it = folders.rbegin(); it != folders.rend(); ++it) todo.push_back(std::move(*it));
  }
  return inner;
}

bool ColdStore::TreeSinceOpen() {
  if (!shared()) return false;  // a local store changes format only under its one writer
  std::string bytes;
  storepb::StoreInfo info;
  if (!backend_->Get(Space::kMeta, kMetaInfoKey, &bytes).ok() || !info.ParseFromString(bytes) ||
      info.format_version() < kFormatVersionTree) {
    return false;
  }
  tree_.store(true, std::memory_order_release);
  return true;
}

// --- writing

void ColdStore::PutDirLink(WriteBatch* batch, uint64_t dir, uint64_t parent,
                           std::string_view name) {
  storepb::DirLink link;
  link.set_parent(parent);
  link.set_name(std::string(name));
  const std::string bytes = link.SerializeAsString();
  batch->Put(Space::kNamespace, TreeLinkKey(dir), bytes);
  batch->Put(Space::kChunks, ChunkKey(dir, kManifestCopyIndex), DirCopyValue(dir, bytes));
}

Status ColdStore::DropReplaced(WriteBatch* batch, uint64_t file_id, bool retire) {
  auto manifest = GetManifest(file_id);
  if (manifest.ok()) return Drop(batch, *manifest, retire);
  // No manifest: its entry alone, which the caller's write replaces.
  return manifest.status().IsNotFound() ? Status::OK() : manifest.status();
}

Status ColdStore::MakeFolders(WriteBatch* batch, const std::string& folder,
                              const FolderAttrs& folders, int64_t mtime_ns, bool retire_replaced,
                              uint64_t* dir) {
  *dir = kTopDirId;
  bool made = false;  // a folder made here: everything below it is new too
  std::string path, bytes;
  for (size_t start = 0; start < folder.size();) {
    const size_t slash = std::min(folder.find('/', start), folder.size());
    const std::string name = folder.substr(start, slash - start);
    path = folder.substr(0, slash);
    start = slash + 1;
    if (auto it = batch->new_folders.find(path); it != batch->new_folders.end()) {
      *dir = it->second;
      continue;
    }
    if (!made) {
      Status st = backend_->Get(Space::kNamespace, TreeKey(*dir, name), &bytes);
      if (st.ok()) {
        storepb::Entry e;
        TBFS_RETURN_IF_ERROR(ParseEntry(bytes, &e, path));
        if (e.kind() == storepb::Entry::DIR) {
          *dir = e.dir_id();
          continue;
        }
        // A cold file where the folder now is: an older version, which
        // leaves the store with this batch.
        TBFS_RETURN_IF_ERROR(DropReplaced(batch, e.file_id(), retire_replaced));
      } else if (!st.IsNotFound()) {
        return st;
      }
    }
    const uint64_t id = NewFileId();
    storepb::Entry e = FolderEntry(folders, path, mtime_ns);
    e.set_dir_id(id);
    batch->Put(Space::kNamespace, TreeKey(*dir, name), e.SerializeAsString());
    PutDirLink(batch, id, *dir, name);
    batch->new_folders[path] = id;
    *dir = id;
    made = true;
  }
  if (made) {
    batch->Put(Space::kMeta, kMetaNextFileIdKey, EncodeId(next_file_id_.load()));
  }
  return Status::OK();
}

Status ColdStore::AddFile(WriteBatch* batch, storepb::Manifest* added, const FolderAttrs& folders,
                          bool retire_replaced) {
  const storepb::Manifest& m = *added;
  if (!tree_.load(std::memory_order_acquire))
    return Status::NotSupported(dir_ + ": a store of format 3 or older is read only");
  MutexLock lock(journal_mu_);  // to the commit: a second adder sees the folders made
  uint64_t parent = kTopDirId;
  TBFS_RETURN_IF_ERROR(
      MakeFolders(batch, ParentPath(m.path()), folders, m.mtime_ns(), retire_replaced, &parent));
  // Whatever is at the path now: nothing, a folder, or a file to replace.
  const std::string key = TreeKey(parent, BaseName(m.path()));
  std::string bytes;
  Status st = backend_->Get(Space::kNamespace, key, &bytes);
  if (st.ok()) {
    storepb::Entry old;
    TBFS_RETURN_IF_ERROR(ParseEntry(bytes, &old, m.path()));
    if (old.kind() == storepb::Entry::DIR)
      return Status::Aborted(m.path() + " is a folder in the cold store");
    if (old.file_id() != m.file_id())
      TBFS_RETURN_IF_ERROR(DropReplaced(batch, old.file_id(), retire_replaced));
  } else if (!st.IsNotFound()) {
    return st;
  }
  added->set_parent_dir(parent);
  PutManifest(batch, m);
  // What a tbfs that reads format 5 (6, 7) would misread: format.h.
  if (IsGzipContent(m)) PutFormat(batch, kFormatVersionGzip);
  if (m.head_chunk_bytes() != 0) PutFormat(batch, kFormatVersionHead);
  if (m.codec() == kCodecZstdNumbers) PutFormat(batch, kFormatVersionNumbers);
  // Under journal_mu_ and the mount's namespace lock (renames make folders
  // too): these records land in the order the ids were handed out.
  batch->Put(Space::kMeta, kMetaNextFileIdKey,
             EncodeId(std::max(next_file_id_.load(), m.file_id() + 1)));
  storepb::Entry file;
  file.set_kind(storepb::Entry::FILE);
  file.set_file_id(m.file_id());
  batch->Put(Space::kNamespace, key, file.SerializeAsString());
  return Commit(*batch, true);
}

Status ColdStore::RemoveEntry(WriteBatch* batch, std::string_view rel_path) {
  if (!tree_.load(std::memory_order_acquire)) {
    batch->Delete(Space::kNamespace, EntryKey(rel_path));
    return Status::OK();
  }
  auto dir = ResolveDir(ParentPath(rel_path));
  if (dir.status().IsNotFound()) return Status::OK();
  if (!dir.ok()) return dir.status();
  const std::string key = TreeKey(*dir, BaseName(rel_path));
  std::string bytes;
  Status st = backend_->Get(Space::kNamespace, key, &bytes);
  if (st.IsNotFound()) return Status::OK();
  TBFS_RETURN_IF_ERROR(st);
  storepb::Entry e;
  TBFS_RETURN_IF_ERROR(ParseEntry(bytes, &e, rel_path));
  batch->Delete(Space::kNamespace, key);
  if (e.kind() == storepb::Entry::DIR) {
    batch->Delete(Space::kNamespace, TreeLinkKey(e.dir_id()));
    batch->Delete(Space::kChunks, ChunkKey(e.dir_id(), kManifestCopyIndex));
  }
  return Status::OK();
}

Status ColdStore::RemoveEntryOf(WriteBatch* batch, const storepb::Manifest& m) {
  auto entry = GetEntry(m.path());
  if (entry.status().IsNotFound()) return Status::OK();
  if (!entry.ok()) return entry.status();
  if (entry->kind() == storepb::Entry::FILE && entry->file_id() == m.file_id()) {
    return RemoveEntry(batch, m.path());
  }
  return Status::OK();
}

Status ColdStore::Rename(WriteBatch* batch, const std::string& from, const std::string& to,
                         const FolderAttrs& folders) {
  if (!tree_.load(std::memory_order_acquire))
    return Status::NotSupported(dir_ + ": a store of format 3 or older is read only");
  auto from_dir = ResolveDir(ParentPath(from));
  if (from_dir.status().IsNotFound()) return Status::NotFound("not in the cold store: " + from);
  if (!from_dir.ok()) return from_dir.status();
  const std::string from_key = TreeKey(*from_dir, BaseName(from));
  std::string bytes;
  Status st = backend_->Get(Space::kNamespace, from_key, &bytes);
  if (st.IsNotFound()) return Status::NotFound("not in the cold store: " + from);
  TBFS_RETURN_IF_ERROR(st);
  storepb::Entry e;
  if (!e.ParseFromString(bytes)) {
    // Moving it blind could leave its manifest at the old path.
    return Status::Corruption("rename " + from + ": its entry in the store is damaged (tbfs fsck)");
  }
  const std::string to_parent = ParentPath(to);
  if (e.kind() == storepb::Entry::DIR && (to_parent == from || to_parent.starts_with(from + "/")))
    return Status::InvalidArgument("rename " + from + " into itself: " + to);
  // A cold file where a folder of `to` is (the mount refuses that before)
  // is retired: open handles may still read it.
  uint64_t to_dir = kTopDirId;
  TBFS_RETURN_IF_ERROR(
      MakeFolders(batch, to_parent, folders, 0, /*retire_replaced=*/true, &to_dir));
  batch->Delete(Space::kNamespace, from_key);
  batch->Put(Space::kNamespace, TreeKey(to_dir, BaseName(to)), bytes);
  if (e.kind() == storepb::Entry::DIR) {
    PutDirLink(batch, e.dir_id(), to_dir, BaseName(to));
    // The bytes beneath it now count for another top folder.
    if (from.find('/') == std::string::npos || to.find('/') == std::string::npos ||
        from.substr(0, from.find('/')) != to.substr(0, to.find('/'))) {
      batch->totals_in_doubt = true;
    }
    return Status::OK();
  }
  auto manifest = GetManifest(e.file_id());
  if (!manifest.ok()) return manifest.status();
  manifest->set_path(to);
  manifest->set_parent_dir(to_dir);
  // A file renamed has a new ctime, as on ext4 (not the files beneath a
  // renamed folder).
  manifest->set_ctime_ns(NowNs());
  PutManifest(batch, *manifest);
  return Status::OK();
}

}  // namespace tbfs::store
