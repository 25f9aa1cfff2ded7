#include "store/blob_scan.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zstd.h>

#include <cstring>

#include "base/fs_util.h"
#include "events/crc32c.h"
#include "fmt/format.h"
#include "store/format.h"

namespace tbfs::store {

namespace {

// RocksDB's blob log format (db/blob/blob_log_format.h), version 1.
constexpr size_t kFileHeaderBytes = 30, kFileFooterBytes = 32;
constexpr uint32_t kBlobMagic = 2395959, kBlobVersion = 1;
constexpr size_t kRecordHeaderBytes = 32;
constexpr size_t kKeyBytes = 16;
constexpr uint64_t kMaxValueBytes = uint64_t{1} << 31;

uint64_t Le64(const unsigned char* p) {
  uint64_t v;
  std::memcpy(&v, p, 8);
  return v;
}
uint32_t Le32(const unsigned char* p) {
  uint32_t v;
  std::memcpy(&v, p, 4);
  return v;
}

// The length of the value at `v` (at most `avail` bytes) as its own header
// tells it: 0 when it is not a chunk value or manifest copy.
uint64_t LengthFromValue(const unsigned char* v, uint64_t avail) {
  if (avail < kChunkHeaderBytes) return 0;
  const uint8_t codec = v[0];
  const uint32_t raw_len = Le32(v + 1);
  if (codec == kChunkRaw || codec == kChunkRawV1 || codec == kManifestCopy || codec == kDirCopy ||
      codec == kDictCopy) {
    return kChunkHeaderBytes + raw_len <= avail ? kChunkHeaderBytes + raw_len : 0;
  }
  if (codec == kChunkZstd || codec == kChunkZstdV1 || codec == kChunkZstdDict ||
      codec == kChunkZstdNumbers || codec == kChunkZstdDictNumbers) {
    size_t n = ZSTD_findFrameCompressedSize(v + kChunkHeaderBytes, avail - kChunkHeaderBytes);
    return ZSTD_isError(n) ? 0 : kChunkHeaderBytes + n;
  }
  return 0;
}

// The file at `path` opened for reading, never blocking (a FIFO in its
// place would hang the open) nor through a symbolic link; IOError when it
// is no regular file.
Status OpenRegular(const std::string& path, UniqueFd* fd, struct stat* st) {
  auto opened = OpenFile(path, O_RDONLY | O_NOFOLLOW | O_NONBLOCK);
  if (!opened.ok()) return opened.status();
  if (::fstat(opened->get(), st) != 0) return Status::FromErrno(errno, "stat", path);
  if (!S_ISREG(st->st_mode)) return Status::FromErrno(EIO, "open", path + ": not a regular file");
  *fd = std::move(opened).value();
  return Status::OK();
}

// A blob file mapped read-only for the life of the object.
class MappedFile {
 public:
  Status Open(const std::string& path) {
    UniqueFd fd;
    struct stat st;
    TBFS_RETURN_IF_ERROR(OpenRegular(path, &fd, &st));
    size_ = static_cast<uint64_t>(st.st_size);
    if (size_ == 0) return Status::OK();
    void* map = ::mmap(nullptr, size_, PROT_READ, MAP_PRIVATE, fd.get(), 0);
    if (map == MAP_FAILED) return Status::FromErrno(errno, "mmap", path);
    data_ = static_cast<const unsigned char*>(map);
    ::madvise(map, size_, MADV_SEQUENTIAL);
    return Status::OK();
  }
  ~MappedFile() {
    if (data_ != nullptr) ::munmap(const_cast<unsigned char*>(data_), size_);
  }
  const unsigned char* data() const { return data_; }
  uint64_t size() const { return size_; }

 private:
  const unsigned char* data_ = nullptr;
  uint64_t size_ = 0;
};

}  // namespace

Status CheckBlobFile(const std::string& path, uint32_t space_id) {
  UniqueFd fd;
  struct stat st;
  TBFS_RETURN_IF_ERROR(OpenRegular(path, &fd, &st));
  const uint64_t size = static_cast<uint64_t>(st.st_size);
  auto damaged = [&](uint64_t at, const std::string& what) {
    return Status::Corruption(fmt::format("check blob file {}: {} at byte {}", path, what, at));
  };
  std::string buf;
  auto read = [&](uint64_t at, uint64_t n) -> Status {
    buf.resize(n);
    uint64_t got = 0;
    while (got < n) {
      ssize_t r = ::pread(fd.get(), buf.data() + got, n - got, static_cast<off_t>(at + got));
      if (r < 0 && errno == EINTR) continue;
      if (r < 0) return Status::FromErrno(errno, "read", path);
      if (r == 0) return damaged(at + got, "an end of file");
      got += static_cast<uint64_t>(r);
    }
    return Status::OK();
  };
  auto bytes = [&] { return reinterpret_cast<const unsigned char*>(buf.data()); };
  if (size < kFileHeaderBytes + kFileFooterBytes) return damaged(0, "too short a file");
  TBFS_RETURN_IF_ERROR(read(0, kFileHeaderBytes));
  const unsigned char* h = bytes();
  if (Le32(h) != kBlobMagic || Le32(h + 4) != kBlobVersion) return damaged(0, "a damaged header");
  if (Le32(h + 8) != space_id) return damaged(8, "another column family");
  if (h[12] != 0 || h[13] != 0 || Le64(h + 14) != 0 || Le64(h + 22) != 0) {
    return damaged(12, "a damaged header (compression, expiration)");
  }
  const uint64_t end = size - kFileFooterBytes;
  TBFS_RETURN_IF_ERROR(read(end, kFileFooterBytes));
  const unsigned char* f = bytes();
  if (Le32(f) != kBlobMagic || events::MaskCrc(events::Crc32c(f, 28)) != Le32(f + 28) ||
      Le64(f + 12) != 0 || Le64(f + 20) != 0) {
    return damaged(end, "a damaged footer");
  }
  const uint64_t count = Le64(f + 4);
  uint64_t records = 0;
  for (uint64_t pos = kFileHeaderBytes; pos < end; ++records) {
    if (end - pos < kRecordHeaderBytes) return damaged(pos, "a cut record header");
    TBFS_RETURN_IF_ERROR(read(pos, kRecordHeaderBytes));
    const unsigned char* r = bytes();
    if (events::MaskCrc(events::Crc32c(r, 24)) != Le32(r + 24)) {
      return damaged(pos, "a damaged record header");
    }
    const uint64_t key_len = Le64(r), value_len = Le64(r + 8), crc = Le32(r + 28);
    const uint64_t body = end - pos - kRecordHeaderBytes;
    if (key_len > body || value_len > body - key_len) return damaged(pos, "a record past the end");
    TBFS_RETURN_IF_ERROR(read(pos + kRecordHeaderBytes, key_len + value_len));
    if (events::MaskCrc(events::Crc32c(buf.data(), buf.size())) != crc) {
      return damaged(pos, "a damaged record");
    }
    pos += kRecordHeaderBytes + key_len + value_len;
  }
  if (records != count)
    return damaged(end, fmt::format("{} records, its footer says {}", records, count));
  return Status::OK();
}

Status ScanBlobFile(const std::string& path, const std::function<void(const BlobCandidate&)>& fn) {
  MappedFile file;
  TBFS_RETURN_IF_ERROR(file.Open(path));
  const uint64_t size = file.size();
  if (size < kRecordHeaderBytes + kKeyBytes) return Status::OK();
  const unsigned char* data = file.data();
  static constexpr unsigned char kKeyLength[8] = {kKeyBytes, 0, 0, 0, 0, 0, 0, 0};
  uint64_t pos = 0;
  while (pos + kRecordHeaderBytes + kKeyBytes <= size) {
    const void* hit = ::memmem(data + pos, size - pos, kKeyLength, sizeof(kKeyLength));
    if (hit == nullptr) break;
    const uint64_t rec = static_cast<uint64_t>(static_cast<const unsigned char*>(hit) - data);
    const uint64_t value_at = rec + kRecordHeaderBytes + kKeyBytes;
    if (value_at > size) break;
    const unsigned char* h = data + rec;
    uint64_t len = Le64(h + 8);
    const bool header_ok = events::MaskCrc(events::Crc32c(h, 24)) == Le32(h + 24) &&
                           len <= kMaxValueBytes && value_at + len <= size;
    if (!header_ok) len = LengthFromValue(data + value_at, size - value_at);
    BlobCandidate c;
    if (len == 0 ||
        !DecodeChunkKey(
            std::string_view(reinterpret_cast<const char*>(h + kRecordHeaderBytes), kKeyBytes),
            &c.file_id, &c.index)) {
      pos = rec + 1;
      continue;
    }
    c.offset = value_at;
    c.value = std::string_view(reinterpret_cast<const char*>(data + value_at), len);
    c.checked =
        header_ok && Le64(h) == kKeyBytes &&
        events::MaskCrc(events::Crc32c(h + kRecordHeaderBytes, kKeyBytes + len)) == Le32(h + 28);
    fn(c);
    // A record whose header holds is skipped whole; otherwise the next
    // record is searched for from the next byte (the value may hold the
    // pattern, which then fails its own checks).
    pos = header_ok ? value_at + len : rec + 1;
  }
  return Status::OK();
}

std::string FirstBlobKey(const std::string& path, uint64_t max_value) {
  UniqueFd fd;
  struct stat st;
  if (!OpenRegular(path, &fd, &st).ok()) return "";
  unsigned char b[kFileHeaderBytes + kRecordHeaderBytes + kKeyBytes];
  if (::pread(fd.get(), b, sizeof(b), 0) != static_cast<ssize_t>(sizeof(b))) return "";
  const unsigned char* r = b + kFileHeaderBytes;
  if (Le32(b) != kBlobMagic || Le32(b + 4) != kBlobVersion ||
      events::MaskCrc(events::Crc32c(r, 24)) != Le32(r + 24) || Le64(r) != kKeyBytes ||
      Le64(r + 8) > max_value) {
    return "";
  }
  return std::string(reinterpret_cast<const char*>(r + kRecordHeaderBytes), kKeyBytes);
}

}  // namespace tbfs::store
