#define ZDICT_STATIC_LINKING_ONLY
#include "store/dictionary.h"

#include <zdict.h>

#include <algorithm>
#include <array>

#include "fmt/format.h"
#include "store/format.h"

namespace tbfs::store {

std::string DictionaryFamily(std::string_view rel_path, std::string_view file_class) {
  if (file_class.empty()) return "";
  std::string_view name = rel_path.substr(rel_path.rfind('/') + 1);
  const size_t dot = name.rfind('.');
  std::string ext =
      dot == std::string_view::npos || dot == 0 ? "" : std::string(name.substr(dot + 1));
  std::transform(ext.begin(), ext.end(), ext.begin(),
                 [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
  // Already compressed: zstd finds nothing in it, with or without context.
  static constexpr std::array<std::string_view, 9> kCompressed = {
      "gz", "bz2", "xz", "zst", "zip", "lz4", "snappy", "zlib", "br"};
  if (std::find(kCompressed.begin(), kCompressed.end(), ext) != kCompressed.end()) return "";
  const bool plain =
      !ext.empty() && ext.size() <= 16 && std::all_of(ext.begin(), ext.end(), [](char c) {
        return (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9');
      });
  return fmt::format("{}.{}", file_class, plain ? ext : "other");
}

Result<std::shared_ptr<const Dictionary>> Dictionary::Load(storepb::Dictionary record) {
  const std::string& content = record.content();
  const unsigned id = ZDICT_getDictID(content.data(), content.size());
  if (id == 0 || id != record.id()) {
    return Status::InvalidArgument(fmt::format(
        "dictionary {} is not a zstd dictionary with its id (it names {})", record.id(), id));
  }
  ZSTD_DDict* ddict = ZSTD_createDDict(content.data(), content.size());
  if (ddict == nullptr) {
    return Status::InvalidArgument(fmt::format("dictionary {} does not load", record.id()));
  }
  return std::shared_ptr<const Dictionary>(new Dictionary(std::move(record), ddict));
}

Dictionary::~Dictionary() { ZSTD_freeDDict(ddict_); }

bool Dictionary::ServesAt(int level, const std::function<std::optional<bool>()>& judge) const {
  if (level == record_.level()) return true;
  MutexLock lock(mu_);
  if (auto it = serves_at_.find(level); it != serves_at_.end()) return it->second;
  const std::optional<bool> serves = judge();
  if (!serves) return true;
  serves_at_.emplace(level, *serves);
  return *serves;
}

Result<std::shared_ptr<const Dictionary>> DictionaryFromCopy(uint64_t key_id,
                                                             std::string_view value) {
  std::string bytes;
  storepb::Dictionary record;
  if (!ParseDictCopy(key_id, value, &bytes)) return Status::Corruption("fails its checksum");
  if (!record.ParseFromString(bytes)) return Status::Corruption("does not parse");
  if (key_id > kMaxDictKeyId || record.id() != kDictIdBase + key_id) {
    return Status::Corruption(fmt::format("names id {}", record.id()));
  }
  auto d = Dictionary::Load(std::move(record));
  if (!d.ok()) return Status::Corruption(d.status().message());
  return d;
}

TrainingSamples TrainingSamples::Subset(size_t want) const {
  TrainingSamples out;
  out.threads = threads;
  std::vector<size_t> starts;
  size_t at = 0;
  for (size_t n : sizes) {
    starts.push_back(at);
    at += n;
  }
  const size_t pieces = std::min(sizes.size(), std::max<size_t>(1, want / kSampleBytes));
  for (size_t k = 0; k < pieces; ++k) {
    const size_t i = k * sizes.size() / pieces;
    out.bytes.append(bytes, starts[i], sizes[i]);
    out.sizes.push_back(sizes[i]);
  }
  return out;
}

void TrainingSamples::Add(std::string_view content) {
  for (size_t at = 0; at < content.size(); at += kSampleBytes) {
    const size_t n = std::min(kSampleBytes, content.size() - at);
    bytes.append(content.substr(at, n));
    sizes.push_back(n);
  }
}

Result<std::string> TrainDictionary(const TrainingSamples& samples, uint32_t id, int level) {
  std::string dict(kDictionaryBytes, '\0');
  // fastCover with its k searched (d 8, 4 steps): 0.3-0.6 s on 8-16 MiB of
  // trace JSON (docs/format.md).
  ZDICT_fastCover_params_t params = {};
  params.d = 8;
  params.steps = 4;
  // Its tables: the d-mer counts, 2^f entries of 4 bytes, and for each
  // candidate judged at once a copy of them and 2^f entries of 2 bytes.
  // At 2^20 (libzstd's default) and two candidates that is 16 MiB, twice
  // the samples; at 2^18, 4 MiB, and the same dictionaries within 0.1%
  // (docs/format.md, "Dictionaries": "The training's tables").
  params.f = 18;
  // The candidates at once: the same dictionary but for a tie between two,
  // in half the time on two cores (the training is a serial part of a
  // migration).
  params.nbThreads = static_cast<unsigned>(std::max(1, samples.threads));
  // fastCover judges its candidates by compressing at this level: 3 picks
  // the same dictionary as 9 in half the time (the real Kineto trace).
  params.zParams.compressionLevel = std::min(level, 3);
  params.zParams.dictID = id;
  const size_t n = ZDICT_optimizeTrainFromBuffer_fastCover(
      dict.data(), dict.size(), samples.bytes.data(), samples.sizes.data(),
      static_cast<unsigned>(samples.sizes.size()), &params);
  if (ZDICT_isError(n)) {
    return Status::InvalidArgument(fmt::format("no dictionary from {} bytes of samples: {}",
                                               samples.bytes.size(), ZDICT_getErrorName(n)));
  }
  dict.resize(n);
  return dict;
}

void DictionarySet::Put(std::shared_ptr<const Dictionary> d) {
  MutexLock lock(mu_);
  by_id_[d->id()] = std::move(d);
}

void DictionarySet::Clear() {
  MutexLock lock(mu_);
  by_id_.clear();
}

std::shared_ptr<const Dictionary> DictionarySet::Find(uint32_t id) const {
  MutexLock lock(mu_);
  auto it = by_id_.find(id);
  return it == by_id_.end() ? nullptr : it->second;
}

std::shared_ptr<const Dictionary> DictionarySet::NewestOf(std::string_view family) const {
  MutexLock lock(mu_);
  for (auto it = by_id_.rbegin(); it != by_id_.rend(); ++it) {
    if (it->second->record().family() == family) return it->second;
  }
  return nullptr;
}

std::vector<std::shared_ptr<const Dictionary>> DictionarySet::All() const {
  MutexLock lock(mu_);
  std::vector<std::shared_ptr<const Dictionary>> out;
  for (const auto& [id, d] : by_id_) out.push_back(d);
  return out;
}

}  // namespace tbfs::store
