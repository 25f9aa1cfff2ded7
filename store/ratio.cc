// How small the candidates would get, from a sample of their chunks
// (store/migrate.h: EstimateRatio).
#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <set>

#include "base/fs_util.h"
#include "base/time_util.h"
#include "fmt/format.h"
#include "spdlog/spdlog.h"
#include "store/chunk.h"
#include "store/file_io.h"
#include "store/format.h"
#include "store/migrate.h"
#include "store/migrate_internal.h"

namespace tbfs::store {

Result<double> EstimateRatio(const std::string& logdir, const std::vector<Candidate>& candidates,
                             uint32_t chunk_bytes, int level, uint64_t* sample_bytes) {
  *sample_bytes = 0;
  ChunkCodec codec;
  // Each sampled file stands for the candidates around it, by bytes.
  const size_t files = std::min<size_t>(32, candidates.size());
  double logical = 0, stored = 0;
  std::string raw(chunk_bytes, '\0'), value;
  for (size_t k = 0; k < files; ++k) {
    size_t lo = k * candidates.size() / files, hi = (k + 1) * candidates.size() / files;
    const Candidate& c = candidates[lo];
    uint64_t represented = 0;
    for (size_t i = lo; i < hi; ++i) represented += candidates[i].size;
    std::string path = JoinPath(logdir, c.path);
    auto fd = OpenRegularUnder(logdir, c.path);
    if (!fd.ok()) continue;
    uint64_t raw_bytes = 0, stored_bytes = 0;
    for (uint64_t offset : {uint64_t{0}, c.size / 2 / chunk_bytes * chunk_bytes}) {
      if (offset > 0 && offset < chunk_bytes) break;  // the file has one chunk
      size_t got = 0;
      TBFS_RETURN_IF_ERROR(PreadFull(fd->get(), raw.data(), raw.size(), offset, &got, path));
      if (got == 0) continue;
      codec.Encode(std::string_view(raw.data(), got), level, {0, 0}, &value);
      raw_bytes += got;
      stored_bytes += value.size();
    }
    if (raw_bytes == 0) continue;
    *sample_bytes += raw_bytes;
    logical += static_cast<double>(represented);
    stored += static_cast<double>(represented) * static_cast<double>(stored_bytes) /
              static_cast<double>(raw_bytes);
  }
  return stored > 0 ? logical / stored : 1.0;
}

}  // namespace tbfs::store
