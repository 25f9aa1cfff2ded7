// Zstd dictionaries shared by the chunks of one family of files (format 5).
//
// Chunks are independent zstd frames so that any byte range reads only the
// chunks it touches; the price is that every frame starts with no context,
// and trace JSON repeats the same keys and names in every chunk. A
// dictionary gives each frame that context back: it is trained (libzstd's
// ZDICT, fastCover) on samples of the first file of its family that holds
// enough data to teach one, kept in the store (store/format.h DictKey, and
// a copy with the chunks), and named by id in the header of every frame
// made with it. Old chunks are never rewritten for a new dictionary.
//
// A family is a trace class and the name's last extension (the JSON of a
// PyTorch trace and the protobuf of an XSpace share nothing worth a
// dictionary). Compressed files (.gz and the like) have none: their chunks
// are stored raw.
//
// Sizes and the measurements behind them: docs/format.md "Dictionaries".
// Dictionary and DictionarySet are thread-safe.
#pragma once

#include <zstd.h>

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "base/status.h"
#include "base/thread_annotations.h"
#include "store/proto/store.pb.h"

namespace tbfs::store {

// A dictionary's size at most, the data a file needs to teach one, and the
// samples taken from it (spread evenly over its chunks).
inline constexpr size_t kDictionaryBytes = 64 << 10;
inline constexpr size_t kMinDictionaryBytes = 4 << 10;  // smaller: not kept
inline constexpr uint64_t kMinTrainingBytes = 4 << 20;
inline constexpr uint64_t kMaxTrainingBytes = 8 << 20;
inline constexpr size_t kSampleBytes = 64 << 10;

// A dictionary's zstd id is this plus its key id (store/format.h DictKey),
// which comes from the file ids' counter: no two dictionaries of a store
// ever share an id, not even with one whose record was lost. zstd leaves
// ids below 32768 to dictionaries registered with its maintainers.
inline constexpr uint32_t kDictIdBase = 32768;
inline constexpr uint64_t kMaxDictKeyId = (uint64_t{1} << 31) - kDictIdBase;

// The family of a file of trace class `file_class` at `rel_path`, or ""
// when its chunks get no dictionary.
std::string DictionaryFamily(std::string_view rel_path, std::string_view file_class);

// One loaded dictionary: its record and the decoder's digested form.
class Dictionary {
 public:
  // InvalidArgument when the content is not a zstd dictionary with the
  // record's id.
  static Result<std::shared_ptr<const Dictionary>> Load(storepb::Dictionary record);
  ~Dictionary();
  Dictionary(const Dictionary&) = delete;
  Dictionary& operator=(const Dictionary&) = delete;

  uint32_t id() const { return record_.id(); }
  const storepb::Dictionary& record() const { return record_; }
  const std::string& content() const { return record_.content(); }
  const ZSTD_DDict* ddict() const { return ddict_; }

  // Whether it serves at zstd `level`. It was judged at the level it was
  // trained at (yes there); at another it can do worse than none (at 13,
  // libzstd 1.5 stores the real Kineto trace's chunks 29% larger with
  // its family's dictionary trained at 9). `judge` says, the first time a
  // level is asked for (callers wait for it); its answer is kept. No answer
  // (the chunk it reads does not read): it serves this time, and the next
  // caller judges again.
  bool ServesAt(int level, const std::function<std::optional<bool>()>& judge) const;

 private:
  Dictionary(storepb::Dictionary record, ZSTD_DDict* ddict)
      : record_(std::move(record)), ddict_(ddict) {}
  storepb::Dictionary record_;
  ZSTD_DDict* ddict_;
  mutable Mutex mu_;
  mutable std::map<int, bool> serves_at_ TBFS_GUARDED_BY(mu_);
};

// The dictionary in one copy of the record kept under key id `key_id`
// (store/format.h DictKey): Corruption when it is damaged or not that
// dictionary's.
Result<std::shared_ptr<const Dictionary>> DictionaryFromCopy(uint64_t key_id,
                                                             std::string_view value);

// Pieces of content to train a dictionary on, and whole chunks held out
// of the training to judge it by.
struct TrainingSamples {
  std::string bytes;
  std::vector<size_t> sizes;
  std::vector<std::string> held_out;
  // Threads the training judges its candidates on (fastCover's k values).
  int threads = 1;
  // Adds `content` as pieces of kSampleBytes.
  void Add(std::string_view content);
  // About `bytes` of the pieces, taken evenly; none held out.
  TrainingSamples Subset(size_t bytes) const;
};

// A dictionary is kept only when the held-out chunks compressed with it
// take at most this share of what they take without (XSpace protobuf, for
// one, compresses worse with a dictionary: docs/format.md).
inline constexpr double kDictionaryMustSave = 0.99;
// Before the whole training, a probe: a dictionary trained on about
// kProbeTrainingBytes of the samples (taken evenly), judged on the same
// held-out chunks. When it saves less than 1 - kProbeMustSave the file
// teaches none, and the training is not done (a family a dictionary does
// not help, XSpace protobuf, was trained in full, 0.3-0.6 s, for each of
// kTrainingAttempts files of every run of `tbfs migrate`). Measured with
// the zstd command line on 1 MiB chunks, level 9 (docs/format.md): the
// probe's saving was within 0.3% of the whole training's on generated and
// real Kineto traces and XSpace, in a sixth of its time.
inline constexpr size_t kProbeTrainingBytes = 1 << 20;
inline constexpr double kProbeMustSave = 0.995;
// Files of a family that may fail to teach one before the family is given
// up on for as long as the store is open.
inline constexpr int kTrainingAttempts = 3;

// A family's dictionary is trained again, on the next file of the family
// that can teach one, once kRetrainAfterBytes of the family's data have
// been compressed since it was trained (or last tried again) by this
// process, or once it is kRetrainAfterNs old and this process has not
// tried for as long: traces change as models and code change. The new one
// is kept only when the file's held-out chunks take at most
// kDictionaryMustSave of what they take with the current one; chunks
// already stored keep the dictionary they were made with (tbfs recompress
// moves them to the newest).
struct RetrainPolicy {
  uint64_t after_bytes = uint64_t{1} << 30;
  int64_t after_ns = int64_t{24} * 3600 * 1'000'000'000;
};

// What a store has compressed of a family since its dictionary was
// trained, or last tried again (RetrainPolicy).
struct FamilyGrowth {
  uint64_t bytes = 0;
  int64_t tried_ns = 0;
};

// The trainings a store's process has run: probes and whole ones.
struct DictionaryTrainings {
  uint64_t probes = 0;
  uint64_t whole = 0;
};

// A dictionary of at most kDictionaryBytes with id `id`, for zstd `level`.
// InvalidArgument when the samples cannot teach one (too few, too alike).
Result<std::string> TrainDictionary(const TrainingSamples& samples, uint32_t id, int level);

// The dictionaries of a store, by id.
class DictionarySet {
 public:
  void Put(std::shared_ptr<const Dictionary> d);
  void Clear();
  // Null when there is none with that id.
  std::shared_ptr<const Dictionary> Find(uint32_t id) const;
  // The newest dictionary of a family, or null.
  std::shared_ptr<const Dictionary> NewestOf(std::string_view family) const;
  std::vector<std::shared_ptr<const Dictionary>> All() const;

 private:
  mutable Mutex mu_;
  std::map<uint32_t, std::shared_ptr<const Dictionary>> by_id_ TBFS_GUARDED_BY(mu_);
};

}  // namespace tbfs::store
