#include "store/set_aside.h"

#include <fcntl.h>

#include <set>

#include "fmt/format.h"
#include "store/blob_scan.h"
#include "store/dictionary.h"
#include "store/file_io.h"
#include "store/format.h"

namespace tbfs::store {

SetAside::SetAside(ColdStore& store)
    : store_(store), v1_(store.info().format_version() == kFormatVersionV1) {
  find_ = [this](uint32_t id) {
    if (auto d = store_.FindDictionary(id)) return d;
    auto it = dicts_.find(id);
    return it == dicts_.end() ? nullptr : it->second;
  };
}

Status SetAside::Read(const std::string& path) {
  const int file = static_cast<int>(paths_.size());
  paths_.push_back(path);
  return ScanBlobFile(path, [&](const BlobCandidate& c) {
    std::string bytes;
    if (c.index != kManifestCopyIndex) {
      chunks_[{c.file_id, c.index}].push_back({file, c.offset, c.value.size()});
      if (c.checked) chunk_ids_.insert(c.file_id);
    } else if (ParseManifestCopy(c.file_id, c.value, &bytes)) {
      manifests_[c.file_id] = std::move(bytes);
    } else if (static_cast<uint8_t>(c.value[0]) == kDictCopy) {
      if (auto d = DictionaryFromCopy(c.file_id, c.value); d.ok()) dicts_[(*d)->id()] = *d;
    } else {
      unparsed_copies_.insert(c.file_id);  // a manifest copy, damaged, or a folder's
    }
  });
}

Result<std::vector<storepb::Manifest>> SetAside::LostByTheStore(std::vector<uint64_t>* nameless) {
  std::vector<ColdStore::LostFile> recorded;
  TBFS_RETURN_IF_ERROR(store_.ListLost(&recorded));
  std::set<uint64_t> lost;
  for (const ColdStore::LostFile& f : recorded) lost.insert(f.file_id);
  auto counts = [&](uint64_t id) -> Result<bool> {
    if (id < store_.next_file_id() && !lost.count(id)) return false;
    auto known = store_.GetManifest(id);
    if (known.ok()) return false;
    if (!known.status().IsNotFound()) return known.status();
    return true;
  };
  std::map<std::string, storepb::Manifest> newest;  // by path
  std::set<uint64_t> named;
  for (const auto& [id, bytes] : manifests_) {
    storepb::Manifest m;
    if (!m.ParseFromString(bytes) || m.file_id() != id || !WellFormed(m) ||
        !IsSafeRelativePath(m.path())) {
      continue;  // not one to write back: its chunks are nameless below
    }
    named.insert(id);
    auto yes = counts(id);
    if (!yes.ok()) return yes.status();
    if (!*yes) continue;
    storepb::Manifest& at = newest[m.path()];
    if (m.file_id() > at.file_id()) at = std::move(m);
  }
  for (uint64_t id : chunk_ids_) {
    // Chunks with no copy at all are a copy given up before its manifest
    // (chunks written, then removed): no file was lost there.
    if (named.count(id) || !unparsed_copies_.count(id) || nameless == nullptr) continue;
    auto yes = counts(id);
    if (!yes.ok()) return yes.status();
    if (*yes) nameless->push_back(id);
  }
  std::vector<storepb::Manifest> out;
  for (auto& [path, m] : newest) out.push_back(std::move(m));
  return out;
}

Status SetAside::ReadChunk(const storepb::Manifest& c, uint64_t index, ChunkCodec* codec,
                           std::string* raw) const {
  const uint32_t len = ChunkLength(c, index);
  if (IsHoleChunk(c, index)) {
    raw->assign(len, '\0');
    return Status::OK();
  }
  auto it = chunks_.find({c.file_id(), index});
  Status unread;  // a file that could not be read is not a damaged chunk
  for (const BlobLoc& loc : it == chunks_.end() ? std::vector<BlobLoc>{} : it->second) {
    auto fd = OpenFile(paths_[loc.file], O_RDONLY | O_NOFOLLOW);
    std::string value(loc.length, '\0');
    size_t got = 0;
    Status st = fd.ok() ? PreadFull(fd->get(), value.data(), value.size(), loc.offset, &got,
                                    paths_[loc.file])
                        : fd.status();
    if (!st.ok()) {
      unread = st;
    } else if (got == value.size() &&
               codec->Decode(value, len, ChunkPosOf(c, index), raw, v1_, find_).ok()) {
      return Status::OK();
    }
  }
  if (!unread.ok()) return unread;
  return Status::Corruption(fmt::format("chunk {} is in no unlisted blob file intact", index));
}

}  // namespace tbfs::store
