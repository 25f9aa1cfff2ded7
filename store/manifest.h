// A manifest's geometry: its chunks, which of them are holes, the runs of
// those with values, whether its shape can be trusted; and its content
// hash. (The Manifest record: store/proto/store.proto.)
#pragma once

#include <xxhash.h>

#include <algorithm>
#include <cstdint>
#include <optional>
#include <string_view>
#include <vector>

#include "store/chunk.h"
#include "store/proto/store.pb.h"

namespace tbfs::store {

// Number of chunks of a file of `size` bytes, every one chunk_bytes long
// but the last.
inline uint64_t ChunkCount(uint64_t size, uint32_t chunk_bytes) {
  return (size + chunk_bytes - 1) / chunk_bytes;
}

// Where a file's chunks lie. Each holds chunk_bytes but the last; from
// format 7, chunk 0 of a file larger than `head` holds only head bytes
// (Manifest.head_chunk_bytes), so that a reader's first request decodes a
// short chunk, not a whole one. head 0: chunk 0 is like the others.
struct ChunkGeometry {
  uint64_t size = 0;
  uint32_t chunk_bytes = 0;  // not 0
  uint32_t head = 0;         // 0, or less than chunk_bytes and than size

  uint64_t Count() const { return size == 0 ? 0 : IndexAt(size - 1) + 1; }
  // The offset of chunk `index`'s first byte.
  uint64_t Start(uint64_t index) const {
    if (head == 0 || index == 0) return index * chunk_bytes;
    return head + (index - 1) * chunk_bytes;
  }
  // The chunk that holds byte `offset`.
  uint64_t IndexAt(uint64_t offset) const {
    if (head == 0) return offset / chunk_bytes;
    return offset < head ? 0 : 1 + (offset - head) / chunk_bytes;
  }
  // How many chunks start before `offset`: the chunks [0, offset) touches.
  uint64_t ChunksBefore(uint64_t offset) const { return offset == 0 ? 0 : IndexAt(offset - 1) + 1; }
  // Uncompressed bytes of chunk `index` (0 past the end).
  uint32_t Length(uint64_t index) const {
    const uint64_t start = Start(index);
    if (start >= size) return 0;
    return static_cast<uint32_t>(std::min<uint64_t>(Start(index + 1), size) - start);
  }
};
// The geometry of a new file of `size` bytes: a head chunk of `head` bytes
// when it is shorter than a chunk and the file is longer than it.
inline ChunkGeometry NewGeometry(uint64_t size, uint32_t chunk_bytes, uint32_t head) {
  const bool short_head = head > 0 && head < chunk_bytes && size > head;
  return {size, chunk_bytes, short_head ? head : 0};
}
// m's geometry; m must have a chunk size (WellFormed).
inline ChunkGeometry GeometryOf(const storepb::Manifest& m) {
  return {m.size(), m.chunk_bytes(), m.head_chunk_bytes()};
}
// Uncompressed bytes of chunk `index` of m.
uint32_t ChunkLength(const storepb::Manifest& m, uint64_t index);
// Where chunk `index` of m belongs, as its checksum binds it.
inline ChunkPos ChunkPosOf(const storepb::Manifest& m, uint64_t index) {
  return {m.file_id(), index, m.head_chunk_bytes()};
}

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
// The middle one of those chunks (what a choice of level or dictionary is
// judged on); none when there are none.
std::optional<uint64_t> MiddleDataChunk(const std::vector<ChunkRun>& runs);
// The uncompressed bytes of those chunks: what the file takes without its
// holes (its size, for a dense file).
uint64_t DataBytes(const storepb::Manifest& m);
// Whether m's shape can be trusted: a safe path, chunks that match its size
// and geometry (a head chunk only where NewGeometry gives one, never on a
// gzip file's pieces), and hole runs that are pairs, ascending, disjoint and
// within the file. A manifest that is not is damaged.
bool WellFormed(const storepb::Manifest& m);

// XXH3-128 of a file's content, as the manifest keeps it.
struct Hash128 {
  uint64_t low = 0;
  uint64_t high = 0;
  bool operator==(const Hash128&) const = default;
};
inline Hash128 ManifestHash(const storepb::Manifest& m) { return {m.hash_low(), m.hash_high()}; }

// That hash, of bytes as they stream by.
struct Xxh128 {
  Xxh128() : state(XXH3_createState()) { XXH3_128bits_reset(state); }
  ~Xxh128() { XXH3_freeState(state); }
  Xxh128(const Xxh128&) = delete;
  Xxh128& operator=(const Xxh128&) = delete;
  void Update(std::string_view b) { XXH3_128bits_update(state, b.data(), b.size()); }
  Hash128 Digest() const {
    XXH128_hash_t h = XXH3_128bits_digest(state);
    return {h.low64, h.high64};
  }
  XXH3_state_t* state;
};

}  // namespace tbfs::store
