// A gzip file made again, bit for bit, from the content it holds.
//
// PyTorch (`use_gzip=True`) and TensorFlow's profiler write traces through
// zlib, and gzip hides the repetition that makes trace JSON compress 50x:
// stored as they are, such files gain nothing. When zlib, given the right
// settings, deflates a file's content back into exactly its deflate stream,
// the content can be stored in place of the file and the file made again
// on every read. GzipRecipeFinder looks for those settings while reading
// the file once; GzipRemaker makes the file again from its content.
//
// What a recipe holds: the gzip member's header bytes as they are (name,
// time, OS, extra fields), the deflate level and memLevel, and the content
// offsets where the writer flushed (Z_SYNC_FLUSH leaves an empty stored
// block in the stream: Python's gzip module flushes once on close). The
// trailer (CRC-32, length) follows from the content.
//
// What has no recipe, and is stored as it is: streams from another
// deflater (GNU gzip, pigz, 7-Zip, zopfli), several gzip members, bytes
// after the member, a damaged stream, reserved header flags, full or
// partial flushes, window sizes other than 32 KiB.
//
// A recipe holds only for the zlib that found it: another zlib (another
// version, zlib-ng) may deflate the same content differently. Whoever
// stores content in place of a file must check what a remaker makes
// against what the file was (a hash per piece) and never serve bytes
// that differ. Not thread-safe; one object per thread.
//
// The finder feeds its deflaters the content in the very pieces a remaker
// given `feed_bytes` of content per Add is fed (cut at each multiple of
// feed_bytes and at each flush), so a recipe found is the proof that such
// a remaker, given content with the finder's content_hash(), makes the
// file: no deflate of the whole content is needed again to know it. (zlib
// makes the same stream however its input is cut, at levels 1-9; the
// tests check that too, and this way nothing rests on it.)
#pragma once

#include <zlib.h>

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "base/status.h"
#include "store/manifest.h"

namespace tbfs::store {

struct GzipRecipe {
  std::string header;                  // the member's header, verbatim
  int level = 0;                       // zlib deflate level, 1-9
  int mem_level = 0;                   // zlib memLevel, 1-9
  std::vector<uint64_t> sync_flushes;  // content offsets, ascending
  uint64_t content_bytes = 0;
  uint64_t gzip_bytes = 0;
  bool operator==(const GzipRecipe&) const = default;
};

// The length of the gzip member header at the start of `bytes`: 0 when more
// bytes are needed to know, -1 when it is not a header this code can keep
// (not gzip, not deflate, reserved flags, longer than kMaxGzipHeader).
inline constexpr size_t kMaxGzipHeader = 64 << 10;
int64_t GzipHeaderLength(std::string_view bytes);

// Reads a gzip file once, in pieces of any size, and says whether zlib
// makes it again from its content.
class GzipRecipeFinder {
 public:
  // `feed_bytes`: the content a remaker of the file will be given per Add
  // (GzipPieces: a content chunk).
  explicit GzipRecipeFinder(size_t feed_bytes);
  ~GzipRecipeFinder();
  GzipRecipeFinder(const GzipRecipeFinder&) = delete;
  GzipRecipeFinder& operator=(const GzipRecipeFinder&) = delete;

  // The file's next bytes. Once the answer is known to be no (the stream
  // is damaged, or no settings remain), the rest is skipped.
  void Add(std::string_view gz);
  // After the last byte: the recipe, or NotFound saying why there is none.
  Result<GzipRecipe> Finish();
  // Whether the answer is known to be no (Finish says why).
  bool rejected() const { return !why_not_.empty(); }
  // Content inflated so far, and its hash (Manifest.gzip's content hash).
  uint64_t content_bytes() const { return content_bytes_; }
  Hash128 content_hash() const { return content_hash_.Digest(); }

 private:
  struct Candidate;
  void Reject(std::string why);
  void Inflate(std::string_view in);
  void Feed(std::string_view content);
  void FeedCandidates(size_t n);
  void Deflate(Candidate& c, std::string_view in, int flush);
  void Check(Candidate& c, std::string_view out);
  void Trim();

  std::string why_not_;  // set once there is no recipe
  std::string header_;   // collected until its length is known
  bool in_header_ = true;
  bool stream_end_ = false;
  std::string trailer_;  // the 8 bytes after the deflate stream
  z_stream inflate_{};
  bool inflate_ready_ = false;
  uint64_t content_bytes_ = 0;
  uint64_t gzip_bytes_ = 0;
  uint32_t crc_ = 0;
  Xxh128 content_hash_;
  // Content inflated, not yet given to the candidates, from fed_ on: given
  // at each multiple of feed_bytes_ and at each flush.
  const size_t feed_bytes_;
  std::string feed_;
  uint64_t fed_ = 0;
  uint64_t block_start_out_ = 0;  // content offset where the current block began
  std::vector<uint64_t> flushes_;
  // The deflate stream as read, from raw_base_ on: what every candidate
  // still has to match.
  std::string raw_;
  uint64_t raw_base_ = 0;
  std::vector<std::unique_ptr<Candidate>> candidates_;
};

// Makes a gzip file again from its content and recipe, in order: pieces of
// content in, the file's bytes out.
class GzipRemaker {
 public:
  explicit GzipRemaker(GzipRecipe recipe);
  ~GzipRemaker();
  GzipRemaker(const GzipRemaker&) = delete;
  GzipRemaker& operator=(const GzipRemaker&) = delete;

  // Appends the bytes the next `content` makes to *out (the header first).
  Status Add(std::string_view content, std::string* out);
  // Appends the rest: the deflate stream's end and the trailer. Corruption
  // when the content was not recipe.content_bytes long.
  Status Finish(std::string* out);

 private:
  Status Deflate(std::string_view in, int flush, std::string* out);

  GzipRecipe recipe_;
  z_stream deflate_{};
  bool ready_ = false;
  bool header_written_ = false;
  size_t next_flush_ = 0;
  uint64_t fed_ = 0;
  uint32_t crc_ = 0;
};

}  // namespace tbfs::store
