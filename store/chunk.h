// Chunk values: one independent zstd frame (or the raw bytes when zstd
// does not help) behind a header with the uncompressed length and a
// checksum of the raw bytes bound to where the chunk belongs (its file id
// and index: store/format.h). Decoding checks both on every read (invariant
// I5): a mismatch, or a chunk read at another file's or index's key, is
// Corruption, and no wrong byte is ever returned.
//
// A chunk whose numbers went as differences (format 8,
// store/number_deltas.h) is decoded, then rewritten back.
//
// A chunk compressed with a dictionary (format 5) names it in its frame;
// decoding asks a DictionaryFinder for it, and a chunk whose dictionary the
// store does not hold (lost, damaged) is Corruption too.
//
// A ChunkCodec holds zstd contexts (the compression one made at the first
// Encode) and a buffer for stored values: not thread-safe, one per thread.
#pragma once

#include <zstd.h>

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <string_view>

#include "base/status.h"
#include "store/dictionary.h"

namespace tbfs::store {

// Where a chunk belongs: its key, and the head chunk's length of its file
// (Manifest.head_chunk_bytes, 0 for none), bound into its checksum.
struct ChunkPos {
  uint64_t file_id = 0;
  uint64_t index = 0;
  uint32_t head = 0;
};

// The dictionary with a zstd id, or null when there is none. Thread-safe.
using DictionaryFinder = std::function<std::shared_ptr<const Dictionary>(uint32_t id)>;

// Whether a chunk value has its numbers as differences (format 8).
bool RewroteNumbers(std::string_view value);

class ChunkCodec {
 public:
  ChunkCodec();
  ~ChunkCodec();
  ChunkCodec(const ChunkCodec&) = delete;
  ChunkCodec& operator=(const ChunkCodec&) = delete;

  // Encodes raw bytes at zstd `level` into *value (replacing it), bound to
  // `pos`, with `dict` when given. Stores the bytes raw when compression
  // saves less than 1/64.
  void Encode(std::string_view raw, int level, ChunkPos pos, std::string* value,
              const Dictionary* dict = nullptr);
  // Decodes a chunk value into *raw (replacing it). `expected_raw_bytes` is
  // what the manifest says the chunk holds, `pos` where it was read from.
  // Corruption on any mismatch. `format1` accepts format-1 chunks (not
  // bound to a position) besides; `dicts` finds the dictionaries of
  // format-5 chunks (without it they are Corruption).
  Status Decode(std::string_view value, size_t expected_raw_bytes, ChunkPos pos, std::string* raw,
                bool format1 = false, const DictionaryFinder& dicts = nullptr);
  // Same, into a caller buffer of exactly expected_raw_bytes.
  Status DecodeInto(std::string_view value, char* out, size_t expected_raw_bytes, ChunkPos pos,
                    bool format1 = false, const DictionaryFinder& dicts = nullptr);
  // A format-1 value rewritten as a format-2 one bound to pos (the payload
  // is kept; the checksum is checked first). Corruption when it does not
  // verify; an already bound value is returned as it is.
  Status Rebind(std::string_view value, size_t expected_raw_bytes, ChunkPos pos, std::string* out);
  // Decodes one small frame: the decoder's tables are allocated and
  // touched, and its code paged in, now rather than under a first read.
  void Warm();
  // Off: Encode stores chunks without the number rewrite (the frames of
  // format 7), to compare with (tbfs-bench decode). On by default.
  void set_number_deltas(bool on) { number_deltas_ = on; }
  // Where a read puts the stored value before decoding it
  // (ColdStore::ReadChunkInto): kept, so reading chunk after chunk faults
  // its pages in once.
  std::string& value_buffer() { return value_; }

 private:
  bool RewriteNumbers(std::string_view raw);
  // One zstd frame into exactly len bytes at out.
  Status Decompress(std::string_view payload, bool with_dict, char* out, size_t len,
                    const DictionaryFinder& dicts);

  ZSTD_CCtx* cctx_ = nullptr;
  ZSTD_DCtx* dctx_;
  std::string value_;
  std::string deltas_;  // a chunk with its numbers as differences
  std::string check_;   // the same decoded again, to compare
  std::string frame_;   // a frame being made (grow-only: no zeroing per chunk)
  bool number_deltas_ = true;
};

}  // namespace tbfs::store
