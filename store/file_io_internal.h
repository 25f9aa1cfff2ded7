// What the two halves of store/file_io.h (file_io.cc: into the store;
// materialize.cc: back out of it) share; not for use outside store/.
#pragma once

#include <memory>
#include <string_view>
#include <vector>

#include "base/work_pool.h"
#include "store/chunk.h"
#include "store/file_io.h"

namespace tbfs::store {

// Per-worker zstd contexts of a pool.
inline std::vector<std::unique_ptr<ChunkCodec>> Codecs(const WorkPool& pool) {
  std::vector<std::unique_ptr<ChunkCodec>> codecs;
  for (int i = 0; i < pool.size(); ++i) codecs.push_back(std::make_unique<ChunkCodec>());
  return codecs;
}

// The chunks a pool works on at once.
inline size_t WaveChunks(const WorkPool& pool) { return static_cast<size_t>(pool.size()) * 2; }

}  // namespace tbfs::store
