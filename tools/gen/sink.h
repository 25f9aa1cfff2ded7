// Output plumbing of the generator: a buffered file writer and a gzip
// stream (zlib, the same format `gzip` writes), both counting bytes for
// progress. Not thread-safe.
#pragma once

#include <zlib.h>

#include <atomic>
#include <cstdint>
#include <functional>
#include <string>
#include <string_view>

#include "base/fs_util.h"
#include "base/status.h"

namespace tbfs::gen {

class FileSink {
 public:
  explicit FileSink(std::atomic<uint64_t>* progress) : progress_(progress) {}
  ~FileSink() { (void)Close(); }

  Status Open(const std::string& path);
  // Appends bytes; the first error is kept and returned by Close().
  void Write(std::string_view bytes);
  // Appending straight into the buffer avoids a copy; call Pump() after.
  std::string& buffer() { return buf_; }
  void Pump() {
    if (buf_.size() >= kFlushBytes) Flush();
  }
  uint64_t size() const { return written_ + buf_.size(); }
  Status Close();

 private:
  static constexpr size_t kFlushBytes = 4 << 20;
  void Flush();

  std::atomic<uint64_t>* progress_;
  UniqueFd fd_;
  std::string path_;
  std::string buf_;
  uint64_t written_ = 0;
  Status status_;
};

// Compresses what is written into it with gzip framing, into a FileSink.
class GzipWriter {
 public:
  GzipWriter(FileSink* out, int level);
  ~GzipWriter();
  void Write(std::string_view bytes);
  // Compressed bytes produced so far (approximate until Finish).
  uint64_t compressed_bytes() const { return out_->size(); }
  void Finish();

 private:
  void Deflate(int flush);
  FileSink* out_;
  z_stream z_{};
  bool finished_ = false;
};

// PNG encoding of an 8-bit RGB image (width*height*3 bytes, row-major).
std::string EncodePng(int width, int height, const std::string& rgb);

}  // namespace tbfs::gen
