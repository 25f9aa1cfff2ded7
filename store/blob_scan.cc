#include "store/blob_scan.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zstd.h>

#include <cstring>

#include "base/fs_util.h"
#include "events/crc32c.h"
#include "store/format.h"

namespace tbfs::store {

namespace {

constexpr size_t kFileHeaderBytes = 30, kFileFooterBytes = 32;
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
  if (codec == kChunkZstd || codec == kChunkZstdV1 || codec == kChunkZstdDict) {
    size_t n = ZSTD_findFrameCompressedSize(v + kChunkHeaderBytes, avail - kChunkHeaderBytes);
    return ZSTD_isError(n) ? 0 : kChunkHeaderBytes + n;
  }
  return 0;
}

// A blob file mapped read-only for the life of the object.
class MappedFile {
 public:
  Status Open(const std::string& path) {
    auto fd = OpenFile(path, O_RDONLY | O_NOFOLLOW);
    if (!fd.ok()) return fd.status();
    struct stat st;
    if (::fstat(fd->get(), &st) != 0) return Status::FromErrno(errno, "stat", path);
    size_ = static_cast<uint64_t>(st.st_size);
    if (size_ == 0) return Status::OK();
    void* map = ::mmap(nullptr, size_, PROT_READ, MAP_PRIVATE, fd->get(), 0);
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

Status CheckBlobRecords(const std::string& path) {
  MappedFile file;
  TBFS_RETURN_IF_ERROR(file.Open(path));
  const unsigned char* data = file.data();
  const uint64_t size = file.size();
  auto damaged = [&](uint64_t at, const char* what) {
    return Status::Corruption("check blob file " + path + ": " + what + " at byte " +
                              std::to_string(at));
  };
  if (size < kFileHeaderBytes + kFileFooterBytes) return damaged(0, "too short");
  const uint64_t end = size - kFileFooterBytes;
  uint64_t pos = kFileHeaderBytes;
  while (pos < end) {
    if (end - pos < kRecordHeaderBytes) return damaged(pos, "a cut record header");
    const unsigned char* h = data + pos;
    if (events::MaskCrc(events::Crc32c(h, 24)) != Le32(h + 24)) {
      return damaged(pos, "a damaged record header");
    }
    const uint64_t key_len = Le64(h), value_len = Le64(h + 8);
    const uint64_t body = end - pos - kRecordHeaderBytes;
    if (key_len > body || value_len > body - key_len) return damaged(pos, "a record past the end");
    if (events::MaskCrc(events::Crc32c(h + kRecordHeaderBytes, key_len + value_len)) !=
        Le32(h + 28)) {
      return damaged(pos, "a damaged record");
    }
    pos += kRecordHeaderBytes + key_len + value_len;
  }
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
    fn(c);
    // A record whose header holds is skipped whole; otherwise the next
    // record is searched for from the next byte (the value may hold the
    // pattern, which then fails its own checks).
    pos = header_ok ? value_at + len : rec + 1;
  }
  return Status::OK();
}

}  // namespace tbfs::store
