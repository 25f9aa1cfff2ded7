// A file's chunks into the store, the three stages of a copy overlapped:
// while the pool's workers compress one wave of chunks, one of them puts
// the wave before into the store and reads the wave after (as `zstd -T`
// reads while it compresses). Not for use outside store/.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "base/status.h"
#include "store/chunk.h"
#include "store/cold_store.h"
#include "store/dictionary.h"
#include "store/file_io.h"

namespace tbfs::store {

// The file's next chunk: fills *raw and sets *index to its number; false
// at the end of the file. Called on one thread at a time, in order, but
// not always on the same one.
using NextChunk = std::function<Result<bool>(std::string* raw, uint64_t* index)>;

class ChunkWriter {
 public:
  // `chunks`: how many the file has (holes included); `head`: its
  // Manifest.head_chunk_bytes.
  ChunkWriter(ColdStore& store, const std::string& path, uint64_t file_id, uint64_t chunks,
              uint32_t head, const Dictionary* dict, const IngestOptions& options);

  // Compresses every chunk `next` gives and puts it in batch(), committed
  // (not synced) whenever the batch grows big; the caller commits the
  // rest with the manifest. Ends at the first error of `next` or of the
  // store, or when the copy is asked to stop (options.should_stop).
  Status WriteAll(const NextChunk& next);

  WriteBatch* batch() { return &batch_; }
  // Compressed bytes put in the batch so far. Read by `next` too: it runs
  // after the wave before it was put.
  uint64_t stored() const { return stored_; }
  // Whether a chunk put so far has its numbers as differences (format 8).
  bool numbers() const { return numbers_; }

 private:
  struct Wave {
    std::vector<std::string> raw, value;
    std::vector<uint64_t> index;
    size_t n = 0;
  };
  // Reads up to a wave of chunks into w.
  Status Fill(const NextChunk& next, Wave* w);
  // Puts w's compressed chunks into the batch; empties w.
  Status Put(Wave* w);

  ColdStore& store_;
  const std::string& path_;
  const uint64_t file_id_;
  const uint64_t chunks_;
  const uint32_t head_;
  const Dictionary* const dict_;
  const IngestOptions& options_;
  std::vector<std::unique_ptr<ChunkCodec>> codecs_;
  const size_t wave_;
  Wave waves_[2];
  bool first_wave_ = true;
  bool ended_ = false;  // `next` said the file ends
  WriteBatch batch_;
  uint64_t stored_ = 0;
  bool numbers_ = false;
};

}  // namespace tbfs::store
