// Chunk values: one independent zstd frame (or the raw bytes when zstd
// does not help) behind a header with the uncompressed length and its
// XXH3-64. Decoding checks both on every read (invariant I5): a mismatch is
// Corruption, and no wrong byte is ever returned.
//
// A ChunkCodec holds zstd contexts: not thread-safe, one per thread.
#pragma once

#include <zstd.h>

#include <string>
#include <string_view>

#include "base/status.h"

namespace tbfs::store {

class ChunkCodec {
 public:
  ChunkCodec();
  ~ChunkCodec();
  ChunkCodec(const ChunkCodec&) = delete;
  ChunkCodec& operator=(const ChunkCodec&) = delete;

  // Encodes raw bytes at zstd `level` into *value (replacing it). Stores the
  // bytes raw when compression saves less than 1/64 of them.
  void Encode(std::string_view raw, int level, std::string* value);
  // Decodes a chunk value into *raw (replacing it). `expected_raw_bytes` is
  // what the manifest says the chunk holds. Corruption on any mismatch.
  Status Decode(std::string_view value, size_t expected_raw_bytes, std::string* raw);
  // Same, into a caller buffer of exactly expected_raw_bytes.
  Status DecodeInto(std::string_view value, char* out, size_t expected_raw_bytes);

 private:
  ZSTD_CCtx* cctx_;
  ZSTD_DCtx* dctx_;
};

}  // namespace tbfs::store
