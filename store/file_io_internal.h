// What the two halves of store/file_io.h (file_io.cc: into the store;
// materialize.cc: back out of it) share; not for use outside store/.
#pragma once

#include <xxhash.h>

#include <memory>
#include <string_view>
#include <vector>

#include "base/work_pool.h"
#include "store/chunk.h"
#include "store/file_io.h"

namespace tbfs::store {

// A file's content hash as it streams by (XXH3, 128 bits).
struct Xxh128 {
  Xxh128() : state(XXH3_createState()) { XXH3_128bits_reset(state); }
  ~Xxh128() { XXH3_freeState(state); }
  void Update(std::string_view b) { XXH3_128bits_update(state, b.data(), b.size()); }
  Hash128 Digest() const {
    XXH128_hash_t h = XXH3_128bits_digest(state);
    return {h.low64, h.high64};
  }
  XXH3_state_t* state;
};

// Per-worker zstd contexts of a pool.
inline std::vector<std::unique_ptr<ChunkCodec>> Codecs(const WorkPool& pool) {
  std::vector<std::unique_ptr<ChunkCodec>> codecs;
  for (int i = 0; i < pool.size(); ++i) codecs.push_back(std::make_unique<ChunkCodec>());
  return codecs;
}

// The chunks a pool works on at once.
inline size_t WaveChunks(const WorkPool& pool) { return static_cast<size_t>(pool.size()) * 2; }

}  // namespace tbfs::store
