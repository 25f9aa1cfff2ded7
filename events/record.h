// TFRecord framing, the container of every *.tfevents.* file.
//
// On disk, each record is:
//   uint64 length (little endian)
//   uint32 masked_crc32c(length bytes)
//   length bytes of data
//   uint32 masked_crc32c(data)
// See docs/format.md. A writer that is still running leaves a partial last
// record; RecordReader stops there quietly and reports where it stopped, so
// a later read can resume from that offset. Anything else that does not
// match the framing is Corruption with the file and byte offset.
//
// RecordReader never allocates from an untrusted length: a length must pass
// its CRC and be at most kMaxRecordBytes, and bytes are only buffered once
// they have been read from the file.
//
// Neither class is thread-safe; use one per thread.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>

#include "base/fs_util.h"
#include "base/status.h"

namespace tbfs::events {

inline constexpr size_t kRecordHeaderBytes = 12;  // length + its CRC
inline constexpr size_t kRecordFooterBytes = 4;   // CRC of the data
inline constexpr uint64_t kMaxRecordBytes = uint64_t{1} << 30;
inline constexpr uint64_t kNoLimit = UINT64_MAX;

// Appends the framed record for `data` to *out.
void AppendFramedRecord(std::string_view data, std::string* out);

// Buffers framed records and writes them to a file descriptor.
class RecordWriter {
 public:
  // Does not take ownership of fd; `path` is used in error messages.
  RecordWriter(int fd, std::string path) : fd_(fd), path_(std::move(path)) {}
  ~RecordWriter() = default;

  Status Append(std::string_view data);
  // Writes out what is buffered.
  Status Flush();

 private:
  int fd_;
  std::string path_;
  std::string buf_;
};

struct RecordView {
  std::string_view data;    // valid until the next call to Next()
  std::string_view framed;  // header + data + footer, as on disk
  uint64_t offset = 0;      // file offset of the record's header
};

class RecordReader {
 public:
  ~RecordReader();
  // Opens `path`. Reading starts at start_offset (a record boundary) and
  // treats limit_offset as the end of the file.
  static Result<std::unique_ptr<RecordReader>> Open(const std::string& path,
                                                    uint64_t start_offset = 0,
                                                    uint64_t limit_offset = kNoLimit);
  // The same over a file open already (read-only); `path` names it in errors.
  static std::unique_ptr<RecordReader> Open(UniqueFd fd, const std::string& path,
                                            uint64_t start_offset = 0,
                                            uint64_t limit_offset = kNoLimit);

  // Reads the next complete record. Returns false at the end; then status()
  // is OK for a clean end or a partial tail (see partial_tail()), and
  // Corruption / IOError otherwise.
  bool Next(RecordView* record);

  const Status& status() const { return status_; }
  // Offset just past the last complete record returned.
  uint64_t end_offset() const { return end_offset_; }
  // True when bytes of an incomplete record follow end_offset() (a live
  // writer's tail, or a limit that cut a record).
  bool partial_tail() const { return partial_tail_; }
  const std::string& path() const { return path_; }

  // XXH3-64 of the bytes of every complete record returned so far (from the
  // start offset to end_offset()). Hashing is done in large spans of the
  // read buffer, not record by record.
  uint64_t ContentHash();

 private:
  RecordReader(UniqueFd fd, std::string path, uint64_t start, uint64_t limit);
  // Makes at least `n` bytes from the current position available in the
  // buffer, reading more from the file. Returns false (with status_ set on
  // an I/O error) when the file ends first.
  bool Fill(size_t n);
  bool Fail(Status st);
  // Hashes the consumed bytes not hashed yet.
  void HashConsumed();

  UniqueFd fd_;
  std::string path_;
  uint64_t limit_;
  std::unique_ptr<char[]> buf_;
  size_t buf_cap_ = 0;
  size_t buf_pos_ = 0;  // next unread byte in buf_
  size_t buf_len_ = 0;  // valid bytes in buf_
  uint64_t file_pos_;   // file offset of buf_[buf_len_]
  uint64_t end_offset_;
  bool partial_tail_ = false;
  bool eof_ = false;
  Status status_;
  struct HashState;
  std::unique_ptr<HashState> hash_;
  size_t hash_from_ = 0;  // buf_[hash_from_, buf_pos_) is consumed, not hashed
};

}  // namespace tbfs::events
