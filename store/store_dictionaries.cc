// The store's zstd dictionaries (store/cold_store.h, format 5; layout in
// store/format.h DictKey and docs/format.md "Dictionaries").
#include "base/time_util.h"
#include "fmt/format.h"
#include "spdlog/spdlog.h"
#include "store/cold_store.h"
#include "store/format.h"

namespace tbfs::store {

Status ColdStore::LoadDictionaries() {
  std::vector<std::pair<uint64_t, std::string>> records;
  int bad_keys = 0;
  const std::string prefix = kDictPrefix;
  TBFS_RETURN_IF_ERROR(
      backend_->Scan(Space::kMeta, prefix, [&](std::string_view key, std::string_view value) {
        if (!key.starts_with(prefix)) return false;
        uint64_t key_id = 0;
        if (key.size() == prefix.size() + 8 && DecodeId(key.substr(prefix.size()), &key_id)) {
          records.emplace_back(key_id, std::string(value));
        } else {
          ++bad_keys;
        }
        return true;
      }));
  dict_damage_.clear();
  dicts_.Clear();
  if (bad_keys > 0) {
    dict_damage_.push_back(fmt::format("{} dictionary records have damaged keys", bad_keys));
  }
  for (const auto& [key_id, value] : records) {
    auto d = DictionaryFromCopy(key_id, value);
    if (!d.ok()) {
      // The same bytes are kept with the chunks.
      std::string copy;
      Status got = backend_->Get(Space::kChunks, ChunkKey(key_id, kManifestCopyIndex), &copy);
      auto second = got.ok() ? DictionaryFromCopy(key_id, copy)
                             : Result<std::shared_ptr<const Dictionary>>(got);
      if (!second.ok()) {
        dict_damage_.push_back(
            fmt::format("dictionary {} is damaged: its record {}, its copy with the chunks {}",
                        kDictIdBase + key_id, d.status().message(), second.status().message()));
        continue;
      }
      spdlog::warn("store {}: dictionary {}: its record {}; using its copy with the chunks", dir_,
                   kDictIdBase + key_id, d.status().message());
      d = std::move(second);
    }
    dicts_.Put(*d);
  }
  return Status::OK();
}

std::shared_ptr<const Dictionary> ColdStore::FindDictionary(uint32_t id) {
  if (auto d = dicts_.Find(id)) return d;
  if (!shared()) return nullptr;  // this object made or read every one
  // A shared store's writer on another host may have added it since.
  MutexLock lock(dict_mu_);
  if (Status st = LoadDictionaries(); !st.ok()) {
    spdlog::warn("store {}: reading the dictionaries: {}", dir_, st.message());
  }
  return dicts_.Find(id);
}

Result<std::shared_ptr<const Dictionary>> ColdStore::AddDictionary(std::string_view family,
                                                                   int level,
                                                                   const TrainingSamples& samples) {
  MutexLock lock(dict_mu_);
  if (auto d = dicts_.NewestOf(family)) return d;
  const uint64_t key_id = NewFileId();
  if (key_id > kMaxDictKeyId) {
    return Status::NotSupported("the store's ids have outgrown dictionary ids");
  }
  const uint32_t id = static_cast<uint32_t>(kDictIdBase + key_id);
  auto content = TrainDictionary(samples, id, level);
  if (!content.ok()) {
    untrainable_.emplace(family);
    return content.status();
  }
  // Samples that are mostly zeros (a sparse file's data) or one phrase
  // repeated teach a few hundred bytes: not worth the family's dictionary.
  if (content->size() < kMinDictionaryBytes) {
    return Status::InvalidArgument(
        fmt::format("{} bytes of samples teach a dictionary of {} bytes only", samples.bytes.size(),
                    content->size()));
  }
  storepb::Dictionary record;
  record.set_id(id);
  record.set_family(std::string(family));
  record.set_level(level);
  record.set_trained_bytes(samples.bytes.size());
  record.set_trained_ns(NowNs());
  record.set_content(std::move(content).value());
  const std::string value = DictCopyValue(key_id, record.SerializeAsString());
  auto d = Dictionary::Load(std::move(record));
  if (!d.ok()) return d.status();
  uint64_t with = 0, without = 0;
  ChunkCodec codec;
  std::string out;
  for (const std::string& chunk : samples.held_out) {
    codec.Encode(chunk, level, {}, &out, d->get());
    with += out.size();
    codec.Encode(chunk, level, {}, &out);
    without += out.size();
  }
  if (static_cast<double>(with) > kDictionaryMustSave * static_cast<double>(without)) {
    untrainable_.emplace(family);
    return Status::InvalidArgument(fmt::format(
        "a dictionary does not help {}: {} chunks held out take {} bytes with it, {} without",
        family, samples.held_out.size(), with, without));
  }

  WriteBatch batch;
  batch.Put(Space::kMeta, DictKey(key_id), value);
  batch.Put(Space::kChunks, ChunkKey(key_id, kManifestCopyIndex), value);
  batch.Put(Space::kMeta, kMetaNextFileIdKey, EncodeId(next_file_id_.load()));
  if (!dict_format_) {
    storepb::StoreInfo info = info_;
    info.set_format_version(kFormatVersionDict);
    batch.Put(Space::kMeta, kMetaInfoKey, info.SerializeAsString());
  }
  TBFS_RETURN_IF_ERROR(CheckRoom(batch.bytes()));
  TBFS_RETURN_IF_ERROR(Commit(batch, true));
  dict_format_ = true;
  dicts_.Put(*d);
  spdlog::info("store {}: dictionary {} for {} ({} bytes, trained on {} bytes)", dir_, id, family,
               (*d)->content().size(), samples.bytes.size());
  return *d;
}

bool ColdStore::Untrainable(std::string_view family) {
  MutexLock lock(dict_mu_);
  return untrainable_.find(family) != untrainable_.end();
}

std::vector<std::string> ColdStore::CheckDictionaries() {
  MutexLock lock(dict_mu_);
  std::vector<std::string> out = dict_damage_;
  for (const auto& d : dicts_.All()) {
    const uint64_t key_id = d->id() - kDictIdBase;
    for (Space space : {Space::kMeta, Space::kChunks}) {
      std::string value;
      Status st = backend_->Get(
          space, space == Space::kMeta ? DictKey(key_id) : ChunkKey(key_id, kManifestCopyIndex),
          &value);
      auto copy = st.ok() ? DictionaryFromCopy(key_id, value)
                          : Result<std::shared_ptr<const Dictionary>>(st);
      if (!copy.ok() || (*copy)->content() != d->content()) {
        out.push_back(fmt::format("dictionary {} ({}): its {} {}", d->id(), d->record().family(),
                                  space == Space::kMeta ? "record" : "copy with the chunks",
                                  copy.ok() ? "differs from the other" : copy.status().message()));
      }
    }
  }
  return out;
}

}  // namespace tbfs::store
