// A manifest's geometry: its chunks, which of them are holes, the runs of
// those with values, whether its shape can be trusted; and its content
// hash. (The Manifest record: store/proto/store.proto.)
#pragma once

#include <cstdint>
#include <vector>

#include "store/proto/store.pb.h"

namespace tbfs::store {

// Number of chunks of a file of `size` bytes.
inline uint64_t ChunkCount(uint64_t size, uint32_t chunk_bytes) {
  return (size + chunk_bytes - 1) / chunk_bytes;
}
// Uncompressed bytes of chunk `index`.
uint32_t ChunkLength(const storepb::Manifest& m, uint64_t index);

// Chunk indices [first, end).
struct ChunkRun {
  uint64_t first = 0;
  uint64_t end = 0;
  bool operator==(const ChunkRun&) const = default;
};
// Whether m was stored with holes (Manifest.hole_runs).
inline bool HasHoles(const storepb::Manifest& m) { return m.hole_runs_size() > 0; }
// Whether chunk `index` of m is a hole: zeros, no value in the store.
bool IsHoleChunk(const storepb::Manifest& m, uint64_t index);
// The chunks of m that have values, as runs in order: [0, chunks) for a
// dense file, none for a file that is all hole.
std::vector<ChunkRun> DataRuns(const storepb::Manifest& m);
// The uncompressed bytes of those chunks: what the file takes without its
// holes (its size, for a dense file).
uint64_t DataBytes(const storepb::Manifest& m);
// Whether m's shape can be trusted: a safe path, chunks that match its size
// and chunk size, and hole runs that are pairs, ascending, disjoint and
// within the file. A manifest that is not is damaged.
bool WellFormed(const storepb::Manifest& m);

// XXH3-128 of a file's content, as the manifest keeps it.
struct Hash128 {
  uint64_t low = 0;
  uint64_t high = 0;
  bool operator==(const Hash128&) const = default;
};
inline Hash128 ManifestHash(const storepb::Manifest& m) { return {m.hash_low(), m.hash_high()}; }

}  // namespace tbfs::store
