#include "store/chunk_writer.h"

#include <utility>

#include "base/failpoint.h"
#include "store/file_io_internal.h"
#include "store/format.h"

namespace tbfs::store {

namespace {

// Uncommitted chunk bytes are written without sync once a batch is this big;
// the final synced batch makes them all durable (the WAL is sequential).
// Small enough that most of a file's writes are made beside the compression
// (a trace of 128 MiB stores in about 8 MiB: at 16 MiB, its one commit came
// after its last chunk, the workers idle meanwhile).
constexpr size_t kBatchBytes = 4 << 20;

}  // namespace

ChunkWriter::ChunkWriter(ColdStore& store, const std::string& path, uint64_t file_id,
                         uint64_t chunks, uint32_t head, const Dictionary* dict,
                         const IngestOptions& options)
    : store_(store),
      path_(path),
      file_id_(file_id),
      chunks_(chunks),
      head_(head),
      dict_(dict),
      options_(options),
      codecs_(Codecs(*options.pool)),
      wave_(WaveChunks(*options.pool)) {
  for (Wave& w : waves_) {
    w.raw.resize(wave_);
    w.value.resize(wave_);
    w.index.resize(wave_);
  }
}

Status ChunkWriter::WriteAll(const NextChunk& next) {
  Wave* now = &waves_[0];    // read, to compress in this round
  Wave* other = &waves_[1];  // compressed in the round before, to put
  TBFS_RETURN_IF_ERROR(Fill(next, now));
  while (now->n > 0) {
    // Item 0 puts the wave compressed before and reads the next one into
    // its buffers; the other items compress this round's wave.
    Status side;
    options_.pool->ParallelFor(now->n + 1, [&](size_t i, int worker) {
      if (i == 0) {
        side = Put(other);
        if (side.ok()) side = Fill(next, other);
        return;
      }
      codecs_[worker]->Encode(now->raw[i - 1], options_.level, {file_id_, now->index[i - 1], head_},
                              &now->value[i - 1], dict_);
    });
    TBFS_RETURN_IF_ERROR(side);
    std::swap(now, other);
  }
  return Put(other);
}

Status ChunkWriter::Fill(const NextChunk& next, Wave* w) {
  w->n = 0;
  if (ended_) return Status::OK();
  FailpointHook("ingest.wave", path_);  // tests: time passes in the middle of a copy
  if (options_.should_stop && options_.should_stop()) {
    return Status::Aborted(path_ + " was opened for writing while it was copied");
  }
  while (w->n < wave_) {
    auto more = next(&w->raw[w->n], &w->index[w->n]);
    if (!more.ok()) return more.status();
    if (!*more) {
      ended_ = true;
      break;
    }
    w->n++;
  }
  return Status::OK();
}

Status ChunkWriter::Put(Wave* w) {
  if (w->n == 0) return Status::OK();
  for (size_t i = 0; i < w->n; ++i) {
    batch_.Put(Space::kChunks, ChunkKey(file_id_, w->index[i]), w->value[i]);
    stored_ += w->value[i].size();
    numbers_ = numbers_ || RewroteNumbers(w->value[i]);
  }
  w->n = 0;
  // The first wave of a multi-wave file is committed on its own too, so a
  // crash test can stop the copy halfway with chunks already written.
  if (batch_.bytes() >= kBatchBytes || (first_wave_ && chunks_ > wave_)) {
    TBFS_RETURN_IF_ERROR(store_.CheckRoom(batch_.bytes()));
    TBFS_RETURN_IF_ERROR(store_.Commit(batch_, false));
    batch_.Clear();
    MaybeCrash("migrate.copying");
  }
  first_wave_ = false;
  return Status::OK();
}

}  // namespace tbfs::store
