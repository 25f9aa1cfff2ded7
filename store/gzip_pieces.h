// A gzip file stored by its content (format 6, Manifest.gzip): the store
// holds the inflated content in chunks, and the file's bytes are made again
// from them by zlib (store/gzip_recipe.h), piece by piece.
//
// Such a manifest describes two things. Its size, hash, chunk_bytes and
// chunks are the file's own bytes, cut into pieces of chunk_bytes: what
// readers, verification and restore see, exactly as for any other file.
// The chunks in the store are those of the content (ContentManifest): what
// ColdStore::ReadChunk reads, fsck and recompress work on, and dictionaries
// compress.
//
// A deflate stream cannot be entered in the middle: piece i is made by
// deflating the content from its start. GzipPieces keeps a remaker's place
// so that reading pieces in order costs one deflate of the file, keeps the
// last few pieces made for readers a little out of order (parallel waves,
// readahead), and starts again from the top for a piece further back. Every
// piece made is checked against its hash in the manifest before anyone
// sees it: a zlib that deflates differently from the one that stored the
// file gives Corruption, never other bytes.
#pragma once

#include <atomic>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <string>

#include "base/status.h"
#include "base/thread_annotations.h"
#include "store/chunk.h"
#include "store/gzip_recipe.h"
#include "store/proto/store.pb.h"

namespace tbfs::store {

inline bool IsGzipContent(const storepb::Manifest& m) { return m.has_gzip(); }

// The pieces of such a file: small, because a piece is made by deflating
// everything before it, and a reader's first byte waits for its whole
// piece (a 1 MiB piece of a trace gzip'd at level 6 holds about 30 MiB of
// JSON). The content's chunks keep the store's chunk size.
inline constexpr uint32_t kGzipPieceBytes = 64 << 10;
// Pieces a remaker keeps behind the newest it made, in bytes: the kernel's
// readahead asks for several at once, in any order.
inline constexpr size_t kGzipWindowBytes = 2 << 20;

// The manifest of the content as the store holds it: size, hash and chunks
// of the content, no holes, the same file id, path and dictionary. m itself
// when it is not stored by content.
storepb::Manifest ContentManifest(const storepb::Manifest& m);

// The recipe that makes m's file from its content.
GzipRecipe RecipeOf(const storepb::Manifest& m);

// Whether m.gzip() agrees with the rest of m: pieces hashed for every
// piece, content chunks that match the content's size, no holes.
bool GzipContentWellFormed(const storepb::Manifest& m);

// Whether a file at rel_path is looked at for storing by its content: its
// name ends in ".gz".
bool MayBeGzip(std::string_view rel_path);
// The path the content of a gzip file at rel_path would have: without
// ".gz" (what names its dictionary family).
std::string_view ContentPath(std::string_view rel_path);

// XXH3-64 of a piece, as Manifest.gzip.piece_hashes keeps it.
uint64_t PieceHash(std::string_view piece);

// Content chunk `index` decoded and checked into *raw.
using ContentReader = std::function<Status(uint64_t index, ChunkCodec* codec, std::string* raw)>;

class GzipPieces {
 public:
  // `window`: pieces kept behind the newest made (at least 1). `made`, when
  // given, counts every piece made too.
  GzipPieces(storepb::Manifest m, ContentReader read, size_t window,
             std::atomic<uint64_t>* made = nullptr);
  ~GzipPieces();
  GzipPieces(const GzipPieces&) = delete;
  GzipPieces& operator=(const GzipPieces&) = delete;

  const storepb::Manifest& manifest() const { return m_; }

  // Piece `index` of the file (ChunkLength(manifest(), index) bytes) into
  // *out. Corruption, naming the file, when the content cannot be read or
  // makes other bytes. Thread-safe; callers wait for each other.
  Status Read(uint64_t index, std::string* out);
  Status ReadInto(uint64_t index, char* out);

  // Pieces made since construction (tests and benchmarks: the cost).
  uint64_t made() const;
  // Pieces Read(index) would make now: 0 when it keeps it, index + 1 when
  // it would start again from the top.
  uint64_t CostOf(uint64_t index) const;

 private:
  // Makes pieces until `index` is the newest made.
  Status MakeUpTo(uint64_t index) TBFS_REQUIRES(mu_);
  void Restart() TBFS_REQUIRES(mu_);
  // Cuts the pieces that pending_ completes, up to piece `up_to`; `last`:
  // the remaker finished.
  Status Cut(bool last, uint64_t up_to) TBFS_REQUIRES(mu_);
  const std::string* Kept(uint64_t index) const TBFS_REQUIRES(mu_);

  const storepb::Manifest m_;
  const storepb::Manifest content_;
  const ContentReader read_;
  const size_t window_;
  std::atomic<uint64_t>* const also_made_;
  mutable Mutex mu_;
  ChunkCodec codec_ TBFS_GUARDED_BY(mu_);
  std::unique_ptr<GzipRemaker> remaker_ TBFS_GUARDED_BY(mu_);
  uint64_t next_chunk_ TBFS_GUARDED_BY(mu_) = 0;  // content chunk to feed next
  uint64_t next_piece_ TBFS_GUARDED_BY(mu_) = 0;  // piece to cut next
  bool finished_ TBFS_GUARDED_BY(mu_) = false;    // the remaker has ended the file
  std::string pending_ TBFS_GUARDED_BY(mu_);      // made, not yet cut
  std::string raw_ TBFS_GUARDED_BY(mu_);
  std::deque<std::string> kept_ TBFS_GUARDED_BY(mu_);  // pieces next_piece_ - size .. - 1
  Status broken_ TBFS_GUARDED_BY(mu_);                 // not OK: start again
  uint64_t made_ TBFS_GUARDED_BY(mu_) = 0;
};

}  // namespace tbfs::store
