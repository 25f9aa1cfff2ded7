#include "tools/gen/sink.h"

#include <fcntl.h>

#include <cstring>

namespace tbfs::gen {

Status FileSink::Open(const std::string& path) {
  auto fd = OpenFile(path, O_WRONLY | O_CREAT | O_EXCL, 0644);
  if (!fd.ok()) return fd.status();
  fd_ = std::move(fd).value();
  path_ = path;
  written_ = 0;
  buf_.clear();
  status_ = Status::OK();
  return Status::OK();
}

void FileSink::Write(std::string_view bytes) {
  buf_.append(bytes);
  Pump();
}

void FileSink::Flush() {
  if (buf_.empty() || !fd_.valid()) return;
  if (status_.ok()) status_ = WriteAll(fd_.get(), buf_.data(), buf_.size(), path_);
  written_ += buf_.size();
  if (progress_ != nullptr) progress_->fetch_add(buf_.size(), std::memory_order_relaxed);
  buf_.clear();
}

Status FileSink::Close() {
  if (!fd_.valid()) return status_;
  Flush();
  fd_.reset();
  return status_;
}

GzipWriter::GzipWriter(FileSink* out, int level) : out_(out) {
  // windowBits 15 + 16: gzip header and trailer, as gzip(1) writes.
  deflateInit2(&z_, level, Z_DEFLATED, 15 + 16, 8, Z_DEFAULT_STRATEGY);
}

GzipWriter::~GzipWriter() {
  Finish();
  deflateEnd(&z_);
}

void GzipWriter::Deflate(int flush) {
  char chunk[1 << 16];
  do {
    z_.next_out = reinterpret_cast<Bytef*>(chunk);
    z_.avail_out = sizeof(chunk);
    deflate(&z_, flush);
    out_->Write(std::string_view(chunk, sizeof(chunk) - z_.avail_out));
  } while (z_.avail_out == 0);
}

void GzipWriter::Write(std::string_view bytes) {
  z_.next_in = reinterpret_cast<Bytef*>(const_cast<char*>(bytes.data()));
  z_.avail_in = static_cast<uInt>(bytes.size());
  Deflate(Z_NO_FLUSH);
}

void GzipWriter::Finish() {
  if (finished_) return;
  finished_ = true;
  z_.avail_in = 0;
  Deflate(Z_FINISH);
}

namespace {

void PutBE32(uint32_t v, std::string* out) {
  for (int s = 24; s >= 0; s -= 8) out->push_back(static_cast<char>(v >> s));
}

void PngChunk(const char type[4], const std::string& data, std::string* out) {
  PutBE32(static_cast<uint32_t>(data.size()), out);
  std::string body(type, 4);
  body += data;
  out->append(body);
  PutBE32(static_cast<uint32_t>(crc32(0, reinterpret_cast<const Bytef*>(body.data()),
                                      static_cast<uInt>(body.size()))),
          out);
}

}  // namespace

std::string EncodePng(int width, int height, const std::string& rgb) {
  std::string raw;
  for (int y = 0; y < height; ++y) {
    raw.push_back(0);  // filter: none
    raw.append(rgb, static_cast<size_t>(y) * width * 3, static_cast<size_t>(width) * 3);
  }
  uLongf zlen = compressBound(raw.size());
  std::string z(zlen, '\0');
  compress2(reinterpret_cast<Bytef*>(z.data()), &zlen, reinterpret_cast<const Bytef*>(raw.data()),
            raw.size(), 6);
  z.resize(zlen);

  std::string png("\x89PNG\r\n\x1a\n", 8);
  std::string ihdr;
  PutBE32(static_cast<uint32_t>(width), &ihdr);
  PutBE32(static_cast<uint32_t>(height), &ihdr);
  ihdr += std::string("\x08\x02\x00\x00\x00", 5);  // 8-bit RGB, deflate, no interlace
  PngChunk("IHDR", ihdr, &png);
  PngChunk("IDAT", z, &png);
  PngChunk("IEND", "", &png);
  return png;
}

}  // namespace tbfs::gen
