// Finding what a damaged store still holds: its blob files' records,
// manifests and their folders, dictionaries, chunks (store/salvager.h).

#include <dirent.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <map>
#include <memory>
#include <set>

#include "fmt/format.h"
#include "nlohmann/json.hpp"
#include "spdlog/spdlog.h"
#include "store/backend.h"
#include "store/blob_scan.h"
#include "store/chunk.h"
#include "store/file_io.h"
#include "store/format.h"
#include "store/gzip_pieces.h"
#include "store/salvager.h"
#include "store/store_dir.h"

namespace tbfs::store {

Status Salvager::ScanBlobs() {
  // Those a writer's open set aside first (older), then the store's own,
  // in number order: a later copy of a manifest is a newer version.
  std::vector<std::string> names, set_aside;
  const std::string lost = o_.store_dir + "/" + kLostFoundName;
  if (ListFiles(lost, &set_aside).ok()) {
    for (const auto& n : set_aside) names.push_back(std::string(kLostFoundName) + "/" + n);
  }
  std::vector<std::string> own;
  TBFS_RETURN_IF_ERROR(ListFiles(o_.store_dir, &own));
  names.insert(names.end(), own.begin(), own.end());
  for (const auto& n : names) {
    if (!n.ends_with(".blob")) continue;
    const int file = static_cast<int>(blob_paths_.size());
    blob_paths_.push_back(o_.store_dir + "/" + n);
    Status st = ScanBlobFile(blob_paths_.back(), [&](const BlobCandidate& c) {
      r_->blob_values++;
      if (c.index == kManifestCopyIndex) {
        std::string bytes;
        if (ParseManifestCopy(c.file_id, c.value, &bytes)) {
          blob_copies_[c.file_id] = bytes;
        } else if (ParseDirCopy(c.file_id, c.value, &bytes)) {
          blob_links_[c.file_id] = bytes;  // a later file holds a later place
        } else if (static_cast<uint8_t>(c.value[0]) == kDictCopy) {
          blob_dicts_[c.file_id] = std::string(c.value);
        }
        return;
      }
      blob_chunks_[{c.file_id, c.index}].push_back({file, c.offset, c.value.size()});
    });
    if (!st.ok()) r_->problems.push_back("blob file " + n + ": " + st.message());
  }
  r_->blob_files = blob_paths_.size();
  return Status::OK();
}

void Salvager::AddManifest(const std::string& bytes, uint64_t id, bool from_copy) {
  storepb::Manifest m;
  if (!m.ParseFromString(bytes) || m.file_id() != id || !WellFormed(m)) {
    r_->problems.push_back(fmt::format("manifest of file id {} does not parse", id));
    return;
  }
  if (manifests_.count(id)) return;
  if (from_copy) r_->manifests_from_copies++;
  manifests_.emplace(id, std::move(m));
}

// Format 4: a manifest names its folder by id, and the folders' links
// (the namespace's, else their copies with the chunks) give its path. A
// file whose folder cannot be placed keeps the path it had when its
// manifest was written.
void Salvager::PlaceManifests() {
  std::map<uint64_t, storepb::DirLink> links;
  auto add = [&](uint64_t id, std::string_view bytes) {
    storepb::DirLink link;
    if (link.ParseFromArray(bytes.data(), static_cast<int>(bytes.size())) && !link.name().empty() &&
        link.name().find('/') == std::string::npos) {
      links.emplace(id, std::move(link));
    }
  };
  if (engine_) {
    Status st = engine_->Scan(Space::kNamespace, kTreeKeyPrefix,
                              [&](std::string_view k, std::string_view v) {
                                uint64_t id = 0;
                                if (k.size() == 9 && DecodeId(k.substr(1), &id)) add(id, v);
                                return true;
                              });
    if (!st.ok()) r_->problems.push_back("folders: " + st.message());
  }
  for (const auto& [id, bytes] : blob_links_) add(id, bytes);  // where the engine has none
  for (auto& [id, m] : manifests_) {
    if (m.parent_dir() == kTopDirId) continue;  // at the top, or from before format 4
    std::vector<std::string> names;
    std::set<uint64_t> passed;  // a loop of links (damage) ends the walk
    uint64_t d = m.parent_dir();
    while (d != kTopDirId && passed.insert(d).second) {
      auto it = links.find(d);
      if (it == links.end()) break;
      names.push_back(it->second.name());
      d = it->second.parent();
    }
    if (d != kTopDirId) {
      r_->problems.push_back(fmt::format(
          "{}: its folder's place is unknown; written where it was when it was stored", m.path()));
      continue;
    }
    std::string path;
    for (auto it = names.rbegin(); it != names.rend(); ++it) path = JoinPath(path, *it);
    const size_t slash = m.path().find_last_of('/');
    m.set_path(JoinPath(path, slash == std::string::npos ? m.path() : m.path().substr(slash + 1)));
  }
}

void Salvager::CollectManifests() {
  bool complete = false;
  if (engine_) {
    Status st = engine_->Scan(Space::kManifests, "", [&](std::string_view k, std::string_view v) {
      uint64_t id = 0;
      if (DecodeId(k, &id)) AddManifest(std::string(v), id, false);
      return true;
    });
    complete = st.ok();
    if (!st.ok()) r_->problems.push_back("manifests: " + st.message() + "; using their copies");
  }
  if (engine_ && !complete) {
    // The copies the engine can still find (some may be only in its log).
    Status st = engine_->Scan(Space::kChunks, "", [&](std::string_view k, std::string_view v) {
      uint64_t id = 0, index = 0;
      std::string bytes;
      if (DecodeChunkKey(k, &id, &index) && index == kManifestCopyIndex &&
          ParseManifestCopy(id, v, &bytes)) {
        AddManifest(bytes, id, true);
      }
      return true;
    });
    if (!st.ok()) r_->problems.push_back("chunks: " + st.message());
  }
  // Copies in the blob files of files the engine does not list. When its
  // view is sound (format record, every manifest read) they are files
  // deleted since the last compaction, or lost from a damaged MANIFEST
  // that still opens: written apart, under kUnlisted. When it is not,
  // they are the store's files, written in place.
  const bool trusted = engine_ && format_ok_ && complete;
  if (!trusted && engine_) {
    r_->problems.push_back(
        "the engine's view of the store is incomplete: every manifest copy in the "
        "blob files counts");
  }
  for (const auto& [id, bytes] : blob_copies_) {
    if (manifests_.count(id)) continue;
    if (trusted) {
      std::string ignored;
      Status st = engine_->Get(Space::kChunks, ChunkKey(id, kManifestCopyIndex), &ignored);
      if (st.ok()) {
        AddManifest(bytes, id, true);  // listed after all (only in the chunks space)
        continue;
      }
      unlisted_.insert(id);
    }
    AddManifest(bytes, id, true);
  }
}

// The dictionaries (format 5) the chunks may need: each from the engine's
// record, or else from its copy with the chunks (the engine's, or one in
// the blob files). One that no copy holds intact is a problem; the files
// whose chunks need it are not written (their chunks fail to decode).
void Salvager::LoadDictionaries() {
  std::map<uint64_t, std::string> why;  // key id -> what failed
  auto take = [&](uint64_t key_id, std::string_view value, const char* where) {
    if (dicts_.count(static_cast<uint32_t>(kDictIdBase + key_id))) return;
    auto d = DictionaryFromCopy(key_id, value);
    if (d.ok()) {
      dicts_[(*d)->id()] = *d;
      why.erase(key_id);
    } else {
      why[key_id] +=
          fmt::format("{}{} {}", why[key_id].empty() ? "" : ", ", where, d.status().message());
    }
  };
  if (engine_) {
    const std::string prefix = kDictPrefix;
    Status st = engine_->Scan(Space::kMeta, prefix, [&](std::string_view k, std::string_view v) {
      if (!k.starts_with(prefix)) return false;
      uint64_t key_id = 0;
      if (DecodeId(k.substr(prefix.size()), &key_id)) take(key_id, v, "its record");
      return true;
    });
    if (!st.ok()) r_->problems.push_back("dictionary records: " + st.message());
    for (const auto& [key_id, ignored] : std::map<uint64_t, std::string>(why)) {
      std::string copy;
      if (engine_->Get(Space::kChunks, ChunkKey(key_id, kManifestCopyIndex), &copy).ok()) {
        take(key_id, copy, "its copy");
      }
    }
  }
  for (const auto& [key_id, value] : blob_dicts_) take(key_id, value, "its copy in a blob file");
  for (const auto& [key_id, what] : why) {
    r_->problems.push_back(fmt::format("dictionary {} is damaged: {}", kDictIdBase + key_id, what));
  }
}

// Chunk `index` of m from the engine, or else from any blob record that
// verifies at its key.
Status Salvager::ReadChunk(const storepb::Manifest& m, uint64_t index, ChunkCodec* codec,
                           std::string* raw) {
  const ChunkPos pos = ChunkPosOf(m, index);
  const uint32_t len = ChunkLength(m, index);
  if (IsHoleChunk(m, index)) {
    raw->assign(len, '\0');
    return Status::OK();
  }
  Status first = Status::Corruption("no copy of it anywhere");
  if (engine_) {
    std::string value;
    Status st = engine_->Get(Space::kChunks, ChunkKey(m.file_id(), index), &value);
    if (st.ok()) st = codec->Decode(value, len, pos, raw, format1_, find_dict_);
    if (st.ok()) return st;
    first = st;
  }
  auto it = blob_chunks_.find({m.file_id(), index});
  if (it == blob_chunks_.end())
    return Status::Corruption(fmt::format("chunk {}: {}", index, first.message()));
  for (const BlobLoc& loc : it->second) {
    auto fd = OpenFile(blob_paths_[loc.file], O_RDONLY | O_NOFOLLOW);
    if (!fd.ok()) continue;
    std::string value(loc.length, '\0');
    size_t got = 0;
    if (!PreadFull(fd->get(), value.data(), value.size(), loc.offset, &got, blob_paths_[loc.file])
             .ok() ||
        got != value.size()) {
      continue;
    }
    if (codec->Decode(value, len, pos, raw, format1_, find_dict_).ok()) return Status::OK();
  }
  return Status::Corruption(
      fmt::format("chunk {}: {}; no intact copy in the blob files", index, first.message()));
}

}  // namespace tbfs::store
