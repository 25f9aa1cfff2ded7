// ZSTD_getCParams: the level's own search tables, to cap them below.
#define ZSTD_STATIC_LINKING_ONLY
#include "store/chunk.h"

#include <xxhash.h>
#include <zstd.h>

#include <algorithm>
#include <bit>
#include <cstring>

#include "fmt/format.h"
#include "store/format.h"
#include "store/number_deltas.h"

namespace tbfs::store {

bool RewroteNumbers(std::string_view value) {
  return !value.empty() && (static_cast<uint8_t>(value[0]) == kChunkZstdNumbers ||
                            static_cast<uint8_t>(value[0]) == kChunkZstdDictNumbers);
}

ChunkCodec::ChunkCodec() : dctx_(ZSTD_createDCtx()) {}

ChunkCodec::~ChunkCodec() {
  ZSTD_freeCCtx(cctx_);
  ZSTD_freeDCtx(dctx_);
}

// Whether raw's numbers go as differences: only when they come back
// exactly. Without a '~' in the text they do by construction: every '~'
// the decoder meets is one the rewrite wrote, after the bytes it wrote it
// after (NumberDeltas.TextWithoutATildeAlwaysComesBack). With one, which
// may read as a difference, the rewrite is decoded again and compared.
bool ChunkCodec::RewriteNumbers(std::string_view raw) {
  if (!EncodeNumberDeltas(raw, &deltas_)) return false;
  if (std::memchr(raw.data(), '~', raw.size()) == nullptr) return true;
  if (check_.size() < raw.size()) check_.resize(raw.size());
  return DecodeNumberDeltas(deltas_, check_.data(), raw.size()).ok() &&
         std::memcmp(check_.data(), raw.data(), raw.size()) == 0;
}

void ChunkCodec::Encode(std::string_view raw, int level, ChunkPos pos, std::string* value,
                        const Dictionary* dict) {
  if (cctx_ == nullptr) cctx_ = ZSTD_createCCtx();
  const bool numbers = number_deltas_ && RewriteNumbers(raw);
  const std::string_view src = numbers ? std::string_view(deltas_) : raw;
  const size_t bound = ZSTD_compressBound(src.size());
  if (frame_.size() < bound) frame_.resize(bound);
  const uint32_t len = static_cast<uint32_t>(raw.size());
  const uint64_t hash = XXH3_64bits_withSeed(raw.data(), raw.size(),
                                             ChunkSeed(pos.file_id, pos.index, len, pos.head));
  // The level's match-finder tables are sized for inputs of any length: at
  // level 9 a 1 MiB chunk gets 2^21 hash and 2^20 chain entries (a 12.5 MiB
  // context). A quarter of an entry per input byte finds the same matches:
  // measured on the real Kineto trace and generated traces at 1 MiB chunks,
  // tables of 2^18 store 0.0-0.3% smaller and compress 1.3-1.6x faster in a
  // 2 MiB context (tbfs-bench migrate; docs/format.md).
  ZSTD_CCtx_reset(cctx_, ZSTD_reset_session_and_parameters);
  ZSTD_CCtx_setParameter(cctx_, ZSTD_c_compressionLevel, level);
  const ZSTD_compressionParameters cp = ZSTD_getCParams(level, src.size(), 0);
  const int cap = std::max(12, static_cast<int>(std::bit_width(src.size() | 1) - 1) - 2);
  if (static_cast<int>(cp.hashLog) > cap) ZSTD_CCtx_setParameter(cctx_, ZSTD_c_hashLog, cap);
  if (static_cast<int>(cp.chainLog) > cap) ZSTD_CCtx_setParameter(cctx_, ZSTD_c_chainLog, cap);
  // By reference: the caller keeps dict alive for the call, and the
  // session reset of the next Encode drops it.
  if (dict != nullptr) {
    ZSTD_CCtx_loadDictionary_byReference(cctx_, dict->content().data(), dict->content().size());
  }
  const size_t z = ZSTD_compress2(cctx_, frame_.data(), bound, src.data(), src.size());
  const bool compressed = !ZSTD_isError(z) && z < raw.size() - raw.size() / 64;
  const std::string_view payload = compressed ? std::string_view(frame_.data(), z) : raw;
  value->resize(kChunkHeaderBytes + payload.size());
  char* out = value->data();
  out[0] =
      static_cast<char>(!compressed ? kChunkRaw
                        : numbers   ? (dict != nullptr ? kChunkZstdDictNumbers : kChunkZstdNumbers)
                                    : (dict != nullptr ? kChunkZstdDict : kChunkZstd));
  std::memcpy(out + 1, &len, 4);
  std::memcpy(out + 5, &hash, 8);
  std::memcpy(out + kChunkHeaderBytes, payload.data(), payload.size());
}

Status ChunkCodec::Decompress(std::string_view payload, bool with_dict, char* out, size_t len,
                              const DictionaryFinder& dicts) {
  size_t n;
  if (!with_dict) {
    n = ZSTD_decompressDCtx(dctx_, out, len, payload.data(), payload.size());
    if (ZSTD_isError(n)) {
      return Status::Corruption(std::string("chunk does not decompress: ") + ZSTD_getErrorName(n));
    }
  } else {
    const unsigned id = ZSTD_getDictID_fromFrame(payload.data(), payload.size());
    if (id == 0) return Status::Corruption("chunk names no dictionary");
    std::shared_ptr<const Dictionary> dict = dicts ? dicts(id) : nullptr;
    if (dict == nullptr) {
      return Status::Corruption(fmt::format(
          "chunk needs zstd dictionary {}, which the store does not hold (lost or damaged)", id));
    }
    n = ZSTD_decompress_usingDDict(dctx_, out, len, payload.data(), payload.size(), dict->ddict());
    if (ZSTD_isError(n)) {
      return Status::Corruption(fmt::format("chunk does not decompress with dictionary {}: {}", id,
                                            ZSTD_getErrorName(n)));
    }
  }
  if (n != len) return Status::Corruption("chunk decompresses to the wrong length");
  return Status::OK();
}

Status ChunkCodec::DecodeInto(std::string_view value, char* out, size_t expected, ChunkPos pos,
                              bool format1, const DictionaryFinder& dicts) {
  if (value.size() < kChunkHeaderBytes) return Status::Corruption("chunk shorter than its header");
  uint8_t codec = static_cast<uint8_t>(value[0]);
  uint32_t len;
  uint64_t hash;
  std::memcpy(&len, value.data() + 1, 4);
  std::memcpy(&hash, value.data() + 5, 8);
  if (len != expected) {
    return Status::Corruption("chunk holds " + std::to_string(len) + " bytes, manifest says " +
                              std::to_string(expected));
  }
  const bool v1 = codec == kChunkRawV1 || codec == kChunkZstdV1;
  if (v1 && !format1) return Status::Corruption("chunk of format 1 in a format 2 store");
  std::string_view payload = value.substr(kChunkHeaderBytes);
  if (codec == kChunkRaw || codec == kChunkRawV1) {
    if (payload.size() != len) return Status::Corruption("raw chunk has the wrong length");
    std::memcpy(out, payload.data(), len);
  } else if (codec == kChunkZstd || codec == kChunkZstdV1 || codec == kChunkZstdDict) {
    TBFS_RETURN_IF_ERROR(Decompress(payload, codec == kChunkZstdDict, out, len, dicts));
  } else if (codec == kChunkZstdNumbers || codec == kChunkZstdDictNumbers) {
    // Differences may be longer than the numbers they stand for, but not
    // twice as long: a larger size is a damaged frame header.
    const unsigned long long n = ZSTD_getFrameContentSize(payload.data(), payload.size());
    if (n > 2ull * len + 4096) return Status::Corruption("chunk's frame has no plausible size");
    if (deltas_.size() < n) deltas_.resize(n);
    TBFS_RETURN_IF_ERROR(
        Decompress(payload, codec == kChunkZstdDictNumbers, deltas_.data(), n, dicts));
    TBFS_RETURN_IF_ERROR(DecodeNumberDeltas(std::string_view(deltas_.data(), n), out, len));
  } else {
    return Status::Corruption("chunk has unknown codec " + std::to_string(codec));
  }
  uint64_t want =
      v1 ? XXH3_64bits(out, len)
         : XXH3_64bits_withSeed(out, len, ChunkSeed(pos.file_id, pos.index, len, pos.head));
  if (want != hash) {
    return Status::Corruption(
        v1 ? "chunk checksum mismatch"
           : "chunk checksum mismatch (damaged, or not this file's chunk at this index)");
  }
  return Status::OK();
}

void ChunkCodec::Warm() {
  std::string raw(64u << 10, '\0');
  for (size_t i = 0; i < raw.size(); ++i) raw[i] = static_cast<char>("tbfs"[i % 4] + i / 4096);
  std::string frame(ZSTD_compressBound(raw.size()), '\0');
  size_t z = ZSTD_compress(frame.data(), frame.size(), raw.data(), raw.size(), 1);
  if (ZSTD_isError(z)) return;
  (void)ZSTD_decompressDCtx(dctx_, raw.data(), raw.size(), frame.data(), z);
}

Status ChunkCodec::Decode(std::string_view value, size_t expected, ChunkPos pos, std::string* raw,
                          bool format1, const DictionaryFinder& dicts) {
  raw->resize(expected);
  return DecodeInto(value, raw->data(), expected, pos, format1, dicts);
}

Status ChunkCodec::Rebind(std::string_view value, size_t expected, ChunkPos pos, std::string* out) {
  std::string raw;
  TBFS_RETURN_IF_ERROR(Decode(value, expected, pos, &raw, /*format1=*/true));
  out->assign(value);
  uint8_t codec = static_cast<uint8_t>(value[0]);
  if (codec != kChunkRawV1 && codec != kChunkZstdV1) return Status::OK();
  (*out)[0] = static_cast<char>(codec == kChunkRawV1 ? kChunkRaw : kChunkZstd);
  uint32_t len = static_cast<uint32_t>(expected);
  uint64_t hash = XXH3_64bits_withSeed(raw.data(), raw.size(),
                                       ChunkSeed(pos.file_id, pos.index, len, pos.head));
  std::memcpy(out->data() + 5, &hash, 8);
  return Status::OK();
}

}  // namespace tbfs::store
