// The engine opens a blob file (its header and footer read and checked)
// at the first read of a value in it, and keeps it open. After a start,
// every cold file whose blob file nothing has read yet paid for that open
// in its first byte (`tbfs-bench cold --against`: 1.40 ms median before,
// 1.18 ms after; README, "A first byte without opening a blob file").
// RocksDB has no call that opens them
// (its TODO: "proactively open/cache blob files"), but a read of a value in
// one does: the key of each file's first record, read from the file.
#include <sys/resource.h>

#include <algorithm>

#include "store/blob_scan.h"
#include "store/rocks_env.h"

namespace tbfs::store {

namespace {

// Readers opened at most (the newest blob files first: the newest traces
// are the likeliest to be read); each holds a file descriptor, as it would
// once read anyway. 256 MiB blob files: a 256 GiB store. And a quarter of
// the process's descriptor limit at most: the rest stays for the logdir's
// files, its readers and `tbfs status` (red team: a store of 321 blob
// files under a limit of 340 left a mount that could open nothing).
constexpr size_t kMaxBlobReadersOpened = 1024;

size_t ReadersToOpen() {
  struct rlimit rl;
  if (::getrlimit(RLIMIT_NOFILE, &rl) != 0 || rl.rlim_cur == RLIM_INFINITY) {
    return kMaxBlobReadersOpened;
  }
  return std::min<size_t>(kMaxBlobReadersOpened, rl.rlim_cur / 4);
}
// A first record whose value is bigger is not read for this (a chunk is 1
// MiB and a header; a bigger length is damage).
constexpr uint64_t kMaxValueRead = (1u << 20) + 4096;

}  // namespace

void OpenBlobReaders(rocksdb::DB* db, rocksdb::ColumnFamilyHandle* chunks,
                     const std::function<bool()>& stop) {
  rocksdb::ColumnFamilyMetaData meta;
  db->GetColumnFamilyMetaData(chunks, &meta);
  std::vector<rocksdb::BlobMetaData>& blobs = meta.blob_files;
  std::sort(blobs.begin(), blobs.end(),
            [](const auto& a, const auto& b) { return a.blob_file_number > b.blob_file_number; });
  blobs.resize(std::min(blobs.size(), ReadersToOpen()));
  rocksdb::ReadOptions ro;  // checksums checked, as every read of the store
  ro.fill_cache = false;
  rocksdb::PinnableSlice value;
  for (const auto& b : blobs) {
    if (stop()) return;
    const std::string& name = b.blob_file_name;  // "/000012.blob"
    const std::string key =
        FirstBlobKey(b.blob_file_path + (name.starts_with('/') ? "" : "/") + name, kMaxValueRead);
    if (key.empty()) continue;  // damage: the reads of its chunks say so
    // Whatever it finds (a value, NotFound for a chunk deleted since, a
    // damaged block) changes nothing; the file is open if it could be.
    value.Reset();
    (void)db->Get(ro, chunks, key, &value);
  }
}

}  // namespace tbfs::store
