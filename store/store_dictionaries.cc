// The store's zstd dictionaries (store/cold_store.h, format 5; layout in
// store/format.h DictKey and docs/format.md "Dictionaries").
#include "base/failpoint.h"
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
  // What could be read is taken even when the scan stops at a damaged
  // block; the rest are found by id through their copies (FindDictionary).
  // Tests: a damaged table under the records.
  const Status scanned =
      ShouldFail("store.dict_records")
          ? Status::Corruption("block checksum mismatch (failpoint store.dict_records)")
          : backend_->Scan(Space::kMeta, prefix, [&](std::string_view key, std::string_view value) {
              if (!key.starts_with(prefix)) return false;
              uint64_t key_id = 0;
              if (key.size() == prefix.size() + 8 && DecodeId(key.substr(prefix.size()), &key_id)) {
                records.emplace_back(key_id, std::string(value));
              } else {
                ++bad_keys;
              }
              return true;
            });
  dict_damage_.clear();
  dicts_.Clear();
  records_unreadable_ = !scanned.ok();
  if (!scanned.ok()) {
    dict_damage_.push_back("the dictionary records could not all be read (" + scanned.message() +
                           "): those not read are taken from their copies with the chunks, and "
                           "no new dictionary is made until they read");
  }
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
  return scanned;
}

std::shared_ptr<const Dictionary> ColdStore::FindDictionary(uint32_t id) {
  if (auto d = dicts_.Find(id)) return d;
  if (id < kDictIdBase || id - kDictIdBase > kMaxDictKeyId) return nullptr;
  // Not loaded: its record did not read at open (a damaged table), or a
  // shared store's writer on another host added it since. The chunk names
  // it, and its copy with the chunks is one read away.
  const uint64_t key_id = id - kDictIdBase;
  std::string value;
  for (Space space : {Space::kChunks, Space::kMeta}) {
    const std::string key =
        space == Space::kMeta ? DictKey(key_id) : ChunkKey(key_id, kManifestCopyIndex);
    if (!backend_->Get(space, key, &value).ok()) continue;
    auto d = DictionaryFromCopy(key_id, value);
    if (!d.ok()) continue;
    dicts_.Put(*d);
    return *d;
  }
  return nullptr;
}

Result<std::shared_ptr<const Dictionary>> ColdStore::AddDictionary(std::string_view family,
                                                                   int level,
                                                                   const TrainingSamples& samples) {
  MutexLock lock(dict_mu_);
  if (auto d = dicts_.NewestOf(family)) return d;
  if (records_unreadable_) {
    // The family may have one that did not read: a second would be made
    // where readers may not find it either.
    return Status::InvalidArgument("the store's dictionary records do not all read (tbfs fsck)");
  }
  const uint64_t key_id = NewFileId();
  if (key_id > kMaxDictKeyId) {
    return Status::NotSupported("the store's ids have outgrown dictionary ids");
  }
  const uint32_t id = static_cast<uint32_t>(kDictIdBase + key_id);
  auto content = TrainDictionary(samples, id, level);
  if (!content.ok()) {
    untrainable_[std::string(family)]++;
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
    untrainable_[std::string(family)]++;
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
  auto it = untrainable_.find(family);
  return records_unreadable_ || (it != untrainable_.end() && it->second >= kTrainingAttempts);
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
