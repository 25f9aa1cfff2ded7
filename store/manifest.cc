#include "store/manifest.h"

#include <algorithm>

#include "base/fs_util.h"
#include "store/gzip_pieces.h"

namespace tbfs::store {

uint32_t ChunkLength(const storepb::Manifest& m, uint64_t index) {
  return GeometryOf(m).Length(index);
}

bool IsHoleChunk(const storepb::Manifest& m, uint64_t index) {
  const auto& runs = m.hole_runs();
  // The last run that starts at or before index (runs are ascending).
  size_t lo = 0, hi = static_cast<size_t>(runs.size()) / 2;
  while (lo < hi) {
    const size_t mid = (lo + hi) / 2;
    if (runs[static_cast<int>(2 * mid)] <= index) {
      lo = mid + 1;
    } else {
      hi = mid;
    }
  }
  return lo > 0 && index < runs[static_cast<int>(2 * (lo - 1) + 1)];
}

std::optional<uint64_t> MiddleDataChunk(const std::vector<ChunkRun>& runs) {
  uint64_t count = 0;
  for (const ChunkRun& r : runs) count += r.end - r.first;
  if (count == 0) return std::nullopt;
  uint64_t k = count / 2;
  for (const ChunkRun& r : runs) {
    if (k < r.end - r.first) return r.first + k;
    k -= r.end - r.first;
  }
  return std::nullopt;  // not reached
}

std::vector<ChunkRun> DataRuns(const storepb::Manifest& m) {
  std::vector<ChunkRun> runs;
  uint64_t next = 0;
  for (int i = 0; i + 1 < m.hole_runs_size(); i += 2) {
    if (m.hole_runs(i) > next) runs.push_back({next, m.hole_runs(i)});
    next = m.hole_runs(i + 1);
  }
  if (next < m.chunks()) runs.push_back({next, m.chunks()});
  return runs;
}

uint64_t DataBytes(const storepb::Manifest& m) {
  if (!HasHoles(m)) return m.size();
  uint64_t bytes = 0;
  const ChunkGeometry g = GeometryOf(m);
  for (const ChunkRun& r : DataRuns(m)) {
    bytes += std::min(g.Start(r.end), m.size()) - g.Start(r.first);
  }
  return bytes;
}

bool WellFormed(const storepb::Manifest& m) {
  if (!IsSafeRelativePath(m.path())) return false;
  const uint32_t head = m.head_chunk_bytes();
  if (head != 0 && (NewGeometry(m.size(), m.chunk_bytes(), head).head != head || m.has_gzip())) {
    return false;
  }
  const uint64_t chunks =
      m.chunk_bytes() == 0 ? (m.size() == 0 ? 0 : ~uint64_t{0}) : GeometryOf(m).Count();
  if (m.chunks() != chunks || !GzipContentWellFormed(m)) return false;
  const auto& runs = m.hole_runs();
  if (runs.size() % 2 != 0) return false;
  uint64_t after = 0;  // where the previous run ended
  for (int i = 0; i < runs.size(); i += 2) {
    if (runs[i] >= runs[i + 1] || runs[i + 1] > m.chunks() || (i > 0 && runs[i] < after)) {
      return false;
    }
    after = runs[i + 1];
  }
  return true;
}

}  // namespace tbfs::store
