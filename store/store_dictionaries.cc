// The store's zstd dictionaries (store/cold_store.h, format 5; layout in
// store/format.h DictKey and docs/format.md "Dictionaries").
#include "base/failpoint.h"
#include "base/time_util.h"
#include "fmt/format.h"
#include "spdlog/spdlog.h"
#include "store/cold_store.h"
#include "store/format.h"
#include "store/number_deltas.h"

namespace tbfs::store {

namespace {

// A dictionary just trained, loaded to be judged: an error when the
// training failed or taught too little to keep (kMinDictionaryBytes).
Result<std::shared_ptr<const Dictionary>> LoadTrained(Result<std::string> content, uint32_t id) {
  if (!content.ok()) return content.status();
  if (content->size() < kMinDictionaryBytes) return Status::InvalidArgument("too small");
  storepb::Dictionary record;
  record.set_id(id);
  record.set_content(std::move(content).value());
  return Dictionary::Load(std::move(record));
}

}  // namespace

Result<std::shared_ptr<const Dictionary>> ColdStore::ReadDictionary(uint64_t key_id, Space space) {
  std::string value;
  TBFS_RETURN_IF_ERROR(backend_->Get(
      space, space == Space::kMeta ? DictKey(key_id) : ChunkKey(key_id, kManifestCopyIndex),
      &value));
  return DictionaryFromCopy(key_id, value);
}

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
      auto second = ReadDictionary(key_id, Space::kChunks);
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
  for (Space space : {Space::kChunks, Space::kMeta}) {
    auto d = ReadDictionary(id - kDictIdBase, space);
    if (!d.ok()) continue;
    dicts_.Put(*d);
    return *d;
  }
  return nullptr;
}

Result<std::shared_ptr<const Dictionary>> ColdStore::DictionaryForFile(
    std::string_view rel_path, std::string_view file_class, const std::vector<ChunkRun>& data,
    uint64_t data_bytes, int level, int threads, const ChunkReader& read) {
  const std::string family = DictionaryFamily(rel_path, file_class);
  if (family.empty()) return std::shared_ptr<const Dictionary>();
  const std::shared_ptr<const Dictionary> current = DictionaryOf(family);
  const bool can_train = data_bytes >= kMinTrainingBytes;
  if (current ? !RetrainDue(family, *current, data_bytes, can_train)
              : !can_train || Untrainable(family)) {
    return current;
  }
  // Up to kMaxTrainingBytes of whole chunks, taken evenly across the data;
  // every fourth (the last, when fewer than four are taken) is held out to
  // judge the dictionary.
  std::vector<uint64_t> chunks;
  for (const ChunkRun& r : data) {
    for (uint64_t i = r.first; i < r.end; ++i) chunks.push_back(i);
  }
  const uint64_t chunk_bytes = std::max<uint64_t>(1, data_bytes / chunks.size());
  const size_t want =
      std::min<size_t>(chunks.size(), std::max<uint64_t>(1, kMaxTrainingBytes / chunk_bytes));
  TrainingSamples samples;
  samples.threads = threads;
  // Reserved whole: grown by doubling, the samples would be copied into a
  // block of up to twice their size with the old one still held (the
  // mount's heap peaks at a training: README, "jemalloc"). chunk_bytes is
  // the mean: two more cover a short first (head) and last chunk.
  const size_t trained = want - (want < 4 ? 1 : want / 4);
  samples.bytes.reserve((trained + 2) * chunk_bytes);
  std::string raw, rewritten;
  for (size_t k = 0; k < want; ++k) {
    TBFS_RETURN_IF_ERROR(read(chunks[k * chunks.size() / want], &raw));
    if (k % 4 == 3 || (want < 4 && k == want - 1)) {
      samples.held_out.push_back(std::move(raw));
      raw.clear();
    } else {
      // As the chunks will be compressed: numbers as differences.
      samples.Add(EncodeNumberDeltas(raw, &rewritten) ? rewritten : raw);
    }
  }
  auto d = AddDictionary(family, level, samples, current);
  if (d.ok()) return d;
  if (current != nullptr && d.status().code() != Code::kInvalidArgument) {
    // Training again is an extra: the file still has the family's.
    spdlog::warn("store {}: training {}'s dictionary again on {}: {}", dir_, family, rel_path,
                 d.status().message());
    return current;
  }
  if (d.status().code() != Code::kInvalidArgument) return d;
  spdlog::info("no {}dictionary for {} from {}: {}", current ? "new " : "", family, rel_path,
               d.status().message());
  return current;
}

bool ColdStore::RetrainDue(std::string_view family, const Dictionary& current, uint64_t data_bytes,
                           bool can_train) {
  MutexLock lock(dict_mu_);
  auto it = growth_.find(family);
  if (it == growth_.end()) it = growth_.emplace(std::string(family), FamilyGrowth{}).first;
  FamilyGrowth& g = it->second;
  g.bytes += data_bytes;
  const int64_t now = NowNs();
  const int64_t since = std::max(current.record().trained_ns(), g.tried_ns);
  if (!can_train || records_unreadable_ ||
      (g.bytes < retrain_.after_bytes && now - since < retrain_.after_ns)) {
    return false;
  }
  g = FamilyGrowth{0, now};
  return true;
}

Result<std::shared_ptr<const Dictionary>> ColdStore::AddDictionary(
    std::string_view family, int level, const TrainingSamples& samples,
    const std::shared_ptr<const Dictionary>& replacing) {
  MutexLock lock(dict_mu_);
  if (auto d = dicts_.NewestOf(family); d && d != replacing) return d;
  if (samples.held_out.empty()) {
    return Status::InvalidArgument("no chunk was held out to judge a dictionary by");
  }
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
  // What the held-out chunks take with the family's current dictionary
  // (none when null), and with a candidate.
  ChunkCodec codec;
  std::string out;
  auto held_out_bytes = [&](const Dictionary* d) {
    uint64_t n = 0;
    for (const std::string& chunk : samples.held_out) {
      codec.Encode(chunk, level, {}, &out, d);
      n += out.size();
    }
    return n;
  };
  const uint64_t before = held_out_bytes(replacing.get());
  // (The caller counts the failure: the analysis cannot see dict_mu_ held
  // in a lambda.)
  auto does_not_help = [&](const std::string& what, uint64_t with) {
    return Status::InvalidArgument(
        fmt::format("a {} does not help {}: {} chunks held out take {} bytes with it, {} with {}",
                    what, family, samples.held_out.size(), with, before,
                    replacing ? fmt::format("dictionary {}", replacing->id()) : "none"));
  };
  const std::string what = replacing ? "new dictionary" : "dictionary";
  // The probe (kProbeTrainingBytes): a training error or a dictionary too
  // small to keep leaves the judgement to the whole training.
  if (samples.bytes.size() > kProbeTrainingBytes) {
    const TrainingSamples few = samples.Subset(kProbeTrainingBytes);
    trainings_.probes++;
    auto probe = LoadTrained(TrainDictionary(few, id, level), id);
    if (probe.ok()) {
      const uint64_t with = held_out_bytes(probe->get());
      if (static_cast<double>(with) > kProbeMustSave * static_cast<double>(before)) {
        if (!replacing) untrainable_[std::string(family)]++;
        return does_not_help(fmt::format("{} trained on {} bytes", what, few.bytes.size()), with);
      }
    }
  }
  trainings_.whole++;
  auto content = TrainDictionary(samples, id, level);
  if (!content.ok()) {
    if (!replacing) untrainable_[std::string(family)]++;
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
  // Judged against the family's current dictionary, or against none.
  const uint64_t with = held_out_bytes(d->get());
  if (static_cast<double>(with) > kDictionaryMustSave * static_cast<double>(before)) {
    if (!replacing) untrainable_[std::string(family)]++;
    return does_not_help(what, with);
  }

  WriteBatch batch;
  batch.Put(Space::kMeta, DictKey(key_id), value);
  batch.Put(Space::kChunks, ChunkKey(key_id, kManifestCopyIndex), value);
  batch.Put(Space::kMeta, kMetaNextFileIdKey, EncodeId(next_file_id_.load()));
  if (!dict_format_) PutFormat(&batch, kFormatVersionDict);
  TBFS_RETURN_IF_ERROR(CheckRoom(batch.bytes()));
  TBFS_RETURN_IF_ERROR(Commit(batch, true));
  dict_format_ = true;
  dicts_.Put(*d);
  spdlog::info("store {}: dictionary {} for {} ({} bytes, trained on {} bytes{})", dir_, id, family,
               (*d)->content().size(), samples.bytes.size(),
               replacing ? fmt::format(", after dictionary {}", replacing->id()) : "");
  return *d;
}

DictionaryTrainings ColdStore::Trainings() {
  MutexLock lock(dict_mu_);
  return trainings_;
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
