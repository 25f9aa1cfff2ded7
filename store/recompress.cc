#include "store/recompress.h"

#include <algorithm>
#include <cstdint>
#include <memory>
#include <mutex>
#include <shared_mutex>

#include "base/failpoint.h"
#include "fmt/format.h"
#include "spdlog/spdlog.h"
#include "store/dictionary.h"
#include "store/file_io.h"
#include "store/format.h"
#include "store/gzip_pieces.h"
#include "store/maintenance.h"

namespace tbfs::store {

namespace {

// Uncommitted chunk bytes are committed without sync past this; the file's
// last, synced commit makes them all durable.
constexpr size_t kBatchBytes = 16 << 20;

bool Stopped(const RecompressOptions& o) {
  return (o.stop != nullptr && o.stop->load()) || (o.read_only != nullptr && o.read_only->load());
}

// Compresses m's chunks again and commits them; *stored: their new size,
// *numbers: whether one has its numbers as differences (the store's format
// goes to 8 in the batch of the first such chunk).
Status RecompressChunks(ColdStore& store, const storepb::Manifest& m,
                        const std::shared_ptr<const Dictionary>& dict, const RecompressOptions& o,
                        std::vector<std::unique_ptr<ChunkCodec>>& codecs, uint64_t* stored,
                        bool* numbers) {
  WorkPool& pool = *o.pool;
  const size_t wave = static_cast<size_t>(pool.size()) * 2;
  std::vector<std::string> raw(wave), value(wave), check(wave);
  std::vector<Status> status(wave);
  WriteBatch batch;
  *stored = 0;
  *numbers = false;
  for (const ChunkRun& run : DataRuns(m)) {
    for (uint64_t first = run.first; first < run.end; first += wave) {
      // An unmount does not wait for a large file's end (what was written
      // reads as before; the file stays at its old level).
      if (Stopped(o)) return Status::Aborted("stopped");
      const size_t n = static_cast<size_t>(std::min<uint64_t>(wave, run.end - first));
      pool.ParallelFor(n, [&](size_t i, int worker) {
        ChunkCodec* codec = codecs[worker].get();
        const ChunkPos pos = ChunkPosOf(m, first + i);
        status[i] = store.ReadChunk(m, first + i, codec, &raw[i]);
        if (!status[i].ok()) return;
        codec->Encode(raw[i], o.level, pos, &value[i], dict.get());
        // The new value must give back the same bytes before it replaces
        // the old one.
        status[i] =
            codec->Decode(value[i], raw[i].size(), pos, &check[i], false, [&dict](uint32_t id) {
              return dict != nullptr && dict->id() == id ? dict
                                                         : std::shared_ptr<const Dictionary>();
            });
        if (status[i].ok() && check[i] != raw[i]) {
          status[i] = Status::Corruption(fmt::format(
              "{}: chunk {} compressed again does not give back its bytes", m.path(), first + i));
        }
      });
      for (size_t i = 0; i < n; ++i) {
        TBFS_RETURN_IF_ERROR(status[i]);
        if (!*numbers && RewroteNumbers(value[i])) {
          store.PutFormat(&batch, kFormatVersionNumbers);
          *numbers = true;
        }
        batch.Put(Space::kChunks, ChunkKey(m.file_id(), first + i), value[i]);
        *stored += value[i].size();
        if (o.progress) o.progress->fetch_add(raw[i].size(), std::memory_order_relaxed);
      }
      if (batch.bytes() >= kBatchBytes) {
        TBFS_RETURN_IF_ERROR(store.CheckRoom(batch.bytes()));
        TBFS_RETURN_IF_ERROR(store.Commit(batch, false));
        batch.Clear();
      }
    }
  }
  TBFS_RETURN_IF_ERROR(store.CheckRoom(batch.bytes()));
  return store.Commit(batch, true);
}

// The best for a file of its own dictionary, its family's newest and none:
// the one that makes its middle chunk smallest at `level` (a family taught
// again by another model's trace may do worse on older files, and at some
// levels any dictionary does worse: at 13 the real Kineto trace stored 29%
// larger with one). Ties keep what the file has. None where `newest` is
// (no dictionaries asked for, or none for the family).
Result<std::shared_ptr<const Dictionary>> BetterForFile(ColdStore& store,
                                                        const storepb::Manifest& m,
                                                        std::shared_ptr<const Dictionary> newest,
                                                        int level, ChunkCodec* codec) {
  if (newest == nullptr) return newest;
  const std::optional<uint64_t> middle = MiddleDataChunk(DataRuns(m));
  if (!middle) return newest;
  std::vector<std::shared_ptr<const Dictionary>> options = {newest, nullptr};
  if (m.dictionary() != 0 && m.dictionary() != newest->id()) {
    if (auto own = store.FindDictionary(m.dictionary()); own != nullptr) options.push_back(own);
  }
  std::string raw, value;
  const uint64_t index = *middle;
  TBFS_RETURN_IF_ERROR(store.ReadChunk(m, index, codec, &raw));
  const ChunkPos pos = ChunkPosOf(m, index);
  std::shared_ptr<const Dictionary> best;
  size_t best_size = SIZE_MAX;
  for (const auto& d : options) {
    codec->Encode(raw, level, pos, &value, d.get());
    const bool has = (d ? d->id() : 0) == m.dictionary();
    if (value.size() < best_size || (value.size() == best_size && has)) {
      best = d;
      best_size = value.size();
    }
  }
  return best;
}

// A held lock, or none.
std::unique_lock<Mutex> MaybeLock(Mutex* mu) {
  return mu == nullptr ? std::unique_lock<Mutex>() : std::unique_lock<Mutex>(*mu);
}
std::unique_lock<SharedMutex> MaybeLockExclusive(SharedMutex* mu) {
  return mu == nullptr ? std::unique_lock<SharedMutex>() : std::unique_lock<SharedMutex>(*mu);
}

bool SameContent(const storepb::Manifest& a, const storepb::Manifest& b) {
  return a.file_id() == b.file_id() && a.size() == b.size() && a.hash_low() == b.hash_low() &&
         a.hash_high() == b.hash_high() && a.chunk_bytes() == b.chunk_bytes() &&
         a.head_chunk_bytes() == b.head_chunk_bytes() && a.chunks() == b.chunks();
}

// A file's last step: its manifest read again. Where it still names the
// content compressed, the new level, dictionary and stored size go into it
// as it is now (attributes changed meanwhile stay). Where the file is gone
// (unlinked or made hot while its chunks were compressed: *gone), the
// chunks written for it go too, unless its retired mark holds them for the
// handles still reading it (they are its content: DropRetired takes them).
Status Record(ColdStore& store, const storepb::Manifest& m, const std::vector<ChunkRun>& written,
              int level, uint32_t dict_id, uint32_t codec, uint64_t stored, bool* gone) {
  auto now = store.GetManifest(m.file_id());
  if (!now.ok() && !now.status().IsNotFound()) return now.status();
  *gone = !now.ok();
  WriteBatch batch;
  if (*gone) {
    if (store.IsRetired(m.file_id())) return Status::OK();
    store.RemoveChunks(&batch, m.file_id(), written);
  } else if (!SameContent(*now, m)) {
    // A file id names one content for good; a manifest that says otherwise
    // is not this run's to touch.
    return Status::Corruption(
        fmt::format("{}: its manifest changed its content while it was compressed", m.path()));
  } else if (now->level() == level && now->dictionary() == dict_id && now->codec() == codec &&
             now->stored_bytes() == stored) {
    return Status::OK();
  } else {
    now->set_level(level);
    now->set_dictionary(dict_id);
    now->set_codec(codec);
    now->set_stored_bytes(stored);
    store.UpdateManifest(&batch, *now);
  }
  return store.Commit(batch, true);
}

// Compresses one file again (m as the store holds it now).
Status RecompressFile(ColdStore& store, const storepb::Manifest& m, const RecompressOptions& o,
                      std::vector<std::unique_ptr<ChunkCodec>>& codecs, RecompressReport* report) {
  // The chunks in the store: for a gzip file stored by its content, the
  // content's (the file is made again from them, as before).
  const storepb::Manifest content = ContentManifest(m);
  auto dict = o.dictionaries
                  ? store.DictionaryForFile(
                        IsGzipContent(m) ? ContentPath(m.path()) : m.path(), m.file_class(),
                        DataRuns(content), DataBytes(content), o.level, o.pool->size(),
                        [&](uint64_t index, std::string* raw) {
                          return store.ReadChunk(content, index, codecs[0].get(), raw);
                        })
                  : std::shared_ptr<const Dictionary>();
  if (dict.ok()) dict = BetterForFile(store, content, *dict, o.level, codecs[0].get());
  if (!dict.ok()) {
    report->failed.emplace_back(m.path(), dict.status().message());
    return Status::OK();
  }
  const uint32_t dict_id = *dict ? (*dict)->id() : 0;
  // Files written before format 8 are done again for their numbers.
  if (m.level() == o.level && m.dictionary() == dict_id && m.codec() != kCodecZstd) {
    report->unchanged++;
    return Status::OK();
  }
  uint64_t stored = 0;
  bool numbers = false;
  Status st = RecompressChunks(store, content, *dict, o, codecs, &stored, &numbers);
  // Tests: a crash with the new chunks durable and the manifest old.
  if (st.ok()) MaybeCrash("recompress.chunks_synced");
  if (st.ok()) st = VerifyStoredFile(store, m, o.pool);
  // What was written stays only with its file (a failure part way wrote
  // some chunks: whole and checked, each reads as the one it replaced).
  // Tests: a file changed through a mount while its chunks were compressed.
  MaybePause("recompress.before_record");
  FailpointHook("recompress.before_record", m.path());
  bool gone = false;
  {
    auto ns = MaybeLockExclusive(o.namespace_lock);
    TBFS_RETURN_IF_ERROR(
        Record(store, m, DataRuns(content), st.ok() ? o.level : m.level(),
               st.ok() ? dict_id : m.dictionary(),
               numbers ? kCodecZstdNumbers : (st.ok() ? kCodecZstdNoNumbers : m.codec()),
               st.ok() ? stored : m.stored_bytes(), &gone));
  }
  if (gone) {
    report->gone++;
  } else if (st.code() == Code::kAborted && Stopped(o)) {
    report->stopped = true;
  } else if (!st.ok()) {
    report->failed.emplace_back(m.path(), st.message());
  } else {
    report->files++;
    report->bytes += m.size();
    report->stored_before += m.stored_bytes();
    report->stored_after += stored;
  }
  return Status::OK();
}

}  // namespace

Result<RecompressReport> Recompress(ColdStore& store, const RecompressOptions& o) {
  RecompressReport report;
  report.disk_before = store.DiskBytes();
  report.problems = store.CheckDictionaries();
  std::vector<uint64_t> ids;
  TBFS_RETURN_IF_ERROR(store.ForEachManifest([&](const storepb::Manifest& m) {
    ids.push_back(m.file_id());
    return true;
  }));
  std::vector<std::unique_ptr<ChunkCodec>> codecs;
  for (int i = 0; i < o.pool->size(); ++i) codecs.push_back(std::make_unique<ChunkCodec>());
  for (uint64_t id : ids) {
    if (Stopped(o)) {
      report.stopped = true;
      break;
    }
    auto held = MaybeLock(o.file_lock);
    if (Stopped(o)) {  // while it waited for a pass to end
      report.stopped = true;
      break;
    }
    // As it is now: a mount may have changed, moved or removed it since.
    auto m = store.GetManifest(id);
    if (m.status().IsNotFound()) {
      report.gone++;
      continue;
    }
    TBFS_RETURN_IF_ERROR(m.status());
    TBFS_RETURN_IF_ERROR(RecompressFile(store, *m, o, codecs, &report));
    if (o.after_file) o.after_file();
  }
  // The replaced chunks stay in the engine's files, beside the new ones,
  // until a compaction collects them (this run's, or those of a run that
  // ended before its compaction did). A damaged chunk found on the way
  // is no reason not to: the compaction leaves out what it cannot read
  // (docs/format.md, "Compaction").
  auto held = MaybeLock(o.file_lock);
  if (!report.stopped && HoldsGarbage(store)) {
    Status compacted = store.Compact();
    if (!compacted.ok()) report.compact_error = compacted.message();
  }
  report.disk_after = store.DiskBytes();
  return report;
}

}  // namespace tbfs::store
