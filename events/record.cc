#include "events/record.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>
#include <xxhash.h>

#include <bit>
#include <cstring>

#include "events/crc32c.h"

namespace tbfs::events {

namespace {

constexpr size_t kInitialBuffer = 1 << 20;

void PutFixed32(uint32_t v, char* p) { std::memcpy(p, &v, 4); }  // little-endian host
void PutFixed64(uint64_t v, char* p) { std::memcpy(p, &v, 8); }
uint32_t GetFixed32(const char* p) {
  uint32_t v;
  std::memcpy(&v, p, 4);
  return v;
}
uint64_t GetFixed64(const char* p) {
  uint64_t v;
  std::memcpy(&v, p, 8);
  return v;
}
static_assert(std::endian::native == std::endian::little, "tbfs assumes a little-endian host");

}  // namespace

void AppendFramedRecord(std::string_view data, std::string* out) {
  char header[kRecordHeaderBytes];
  PutFixed64(data.size(), header);
  PutFixed32(MaskedCrc32c(header, 8), header + 8);
  char footer[kRecordFooterBytes];
  PutFixed32(MaskedCrc32c(data.data(), data.size()), footer);
  out->append(header, sizeof(header));
  out->append(data);
  out->append(footer, sizeof(footer));
}

Status RecordWriter::Append(std::string_view data) {
  AppendFramedRecord(data, &buf_);
  if (buf_.size() >= kInitialBuffer) return Flush();
  return Status::OK();
}

Status RecordWriter::Flush() {
  if (buf_.empty()) return Status::OK();
  TBFS_RETURN_IF_ERROR(WriteAll(fd_, buf_.data(), buf_.size(), path_));
  buf_.clear();
  return Status::OK();
}

Result<std::unique_ptr<RecordReader>> RecordReader::Open(const std::string& path,
                                                         uint64_t start_offset,
                                                         uint64_t limit_offset) {
  auto fd = OpenFile(path, O_RDONLY | O_NONBLOCK | kOwnRead);
  if (!fd.ok()) return fd.status();
  TBFS_RETURN_IF_ERROR(CheckRegular(fd->get(), path));
  return Open(std::move(fd).value(), path, start_offset, limit_offset);
}

std::unique_ptr<RecordReader> RecordReader::Open(UniqueFd fd, const std::string& path,
                                                 uint64_t start_offset, uint64_t limit_offset) {
  ::posix_fadvise(fd.get(), 0, 0, POSIX_FADV_SEQUENTIAL);
  return std::unique_ptr<RecordReader>(
      new RecordReader(std::move(fd), path, start_offset, limit_offset));
}

struct RecordReader::HashState {
  HashState() : state(XXH3_createState()) { XXH3_64bits_reset(state); }
  ~HashState() { XXH3_freeState(state); }
  XXH3_state_t* state;
};

RecordReader::~RecordReader() = default;

void RecordReader::HashConsumed() {
  if (buf_pos_ > hash_from_) {
    XXH3_64bits_update(hash_->state, buf_.get() + hash_from_, buf_pos_ - hash_from_);
  }
  hash_from_ = buf_pos_;
}

uint64_t RecordReader::ContentHash() {
  HashConsumed();
  return XXH3_64bits_digest(hash_->state);
}

RecordReader::RecordReader(UniqueFd fd, std::string path, uint64_t start, uint64_t limit)
    : fd_(std::move(fd)),
      path_(std::move(path)),
      limit_(limit),
      buf_(new char[kInitialBuffer]),
      buf_cap_(kInitialBuffer),
      file_pos_(start),
      end_offset_(start),
      hash_(std::make_unique<HashState>()) {}

bool RecordReader::Fail(Status st) {
  status_ = std::move(st);
  return false;
}

bool RecordReader::Fill(size_t n) {
  while (buf_len_ - buf_pos_ < n) {
    if (eof_) return false;
    // Slide unread bytes to the front, grow only for a record that needs it.
    size_t unread = buf_len_ - buf_pos_;
    HashConsumed();
    if (buf_pos_ > 0) {
      std::memmove(buf_.get(), buf_.get() + buf_pos_, unread);
      buf_pos_ = 0;
      buf_len_ = unread;
      hash_from_ = 0;
    }
    if (n > buf_cap_) {
      std::unique_ptr<char[]> bigger(new char[n]);
      std::memcpy(bigger.get(), buf_.get(), unread);
      buf_ = std::move(bigger);
      buf_cap_ = n;
    }
    size_t want = buf_cap_ - buf_len_;
    if (limit_ != kNoLimit) want = std::min<uint64_t>(want, limit_ - file_pos_);
    if (want == 0) {
      eof_ = true;
      return false;
    }
    ssize_t r;
    do {
      r = ::pread(fd_.get(), buf_.get() + buf_len_, want, static_cast<off_t>(file_pos_));
    } while (r < 0 && errno == EINTR);
    if (r < 0) {
      status_ = Status::FromErrno(errno, "read", path_);
      eof_ = true;
      return false;
    }
    if (r == 0) {
      eof_ = true;
      return false;
    }
    buf_len_ += static_cast<size_t>(r);
    file_pos_ += static_cast<uint64_t>(r);
  }
  return true;
}

bool RecordReader::Next(RecordView* record) {
  if (!status_.ok() || partial_tail_) return false;
  if (!Fill(kRecordHeaderBytes)) {
    partial_tail_ = status_.ok() && buf_len_ > buf_pos_;
    return false;
  }
  const char* header = buf_.get() + buf_pos_;
  uint64_t length = GetFixed64(header);
  if (MaskedCrc32c(header, 8) != GetFixed32(header + 8)) {
    return Fail(Status::Corruption(path_ + ": record length CRC mismatch at offset " +
                                   std::to_string(end_offset_)));
  }
  if (length > kMaxRecordBytes) {
    return Fail(Status::Corruption(path_ + ": record at offset " + std::to_string(end_offset_) +
                                   " claims " + std::to_string(length) +
                                   " bytes, over the limit of " + std::to_string(kMaxRecordBytes)));
  }
  size_t framed = kRecordHeaderBytes + length + kRecordFooterBytes;
  if (framed > buf_cap_) {
    // Grow the buffer only for bytes the file really holds.
    struct stat st;
    if (::fstat(fd_.get(), &st) != 0) return Fail(Status::FromErrno(errno, "fstat", path_));
    uint64_t end = std::min<uint64_t>(static_cast<uint64_t>(st.st_size), limit_);
    if (end < end_offset_ + framed) {
      partial_tail_ = true;
      return false;
    }
  }
  if (!Fill(framed)) {
    partial_tail_ = status_.ok();
    return false;
  }
  const char* data = buf_.get() + buf_pos_ + kRecordHeaderBytes;
  if (MaskedCrc32c(data, length) != GetFixed32(data + length)) {
    return Fail(Status::Corruption(path_ + ": record data CRC mismatch at offset " +
                                   std::to_string(end_offset_)));
  }
  record->data = std::string_view(data, length);
  record->framed = std::string_view(buf_.get() + buf_pos_, framed);
  record->offset = end_offset_;
  buf_pos_ += framed;
  end_offset_ += framed;
  return true;
}

}  // namespace tbfs::events
