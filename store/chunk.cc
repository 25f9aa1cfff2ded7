#include "store/chunk.h"

#include <xxhash.h>

#include <cstring>

#include "store/format.h"

namespace tbfs::store {

ChunkCodec::ChunkCodec() : cctx_(ZSTD_createCCtx()), dctx_(ZSTD_createDCtx()) {}

ChunkCodec::~ChunkCodec() {
  ZSTD_freeCCtx(cctx_);
  ZSTD_freeDCtx(dctx_);
}

void ChunkCodec::Encode(std::string_view raw, int level, std::string* value) {
  size_t bound = ZSTD_compressBound(raw.size());
  value->resize(kChunkHeaderBytes + bound);
  char* out = value->data();
  uint32_t len = static_cast<uint32_t>(raw.size());
  uint64_t hash = XXH3_64bits(raw.data(), raw.size());
  std::memcpy(out + 1, &len, 4);
  std::memcpy(out + 5, &hash, 8);
  size_t z = ZSTD_compressCCtx(cctx_, out + kChunkHeaderBytes, bound, raw.data(), raw.size(),
                               level);
  if (!ZSTD_isError(z) && z < raw.size() - raw.size() / 64) {
    out[0] = static_cast<char>(kChunkZstd);
    value->resize(kChunkHeaderBytes + z);
  } else {
    out[0] = static_cast<char>(kChunkRaw);
    std::memcpy(out + kChunkHeaderBytes, raw.data(), raw.size());
    value->resize(kChunkHeaderBytes + raw.size());
  }
}

Status ChunkCodec::DecodeInto(std::string_view value, char* out, size_t expected) {
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
  std::string_view payload = value.substr(kChunkHeaderBytes);
  if (codec == kChunkRaw) {
    if (payload.size() != len) return Status::Corruption("raw chunk has the wrong length");
    std::memcpy(out, payload.data(), len);
  } else if (codec == kChunkZstd) {
    size_t n = ZSTD_decompressDCtx(dctx_, out, len, payload.data(), payload.size());
    if (ZSTD_isError(n)) {
      return Status::Corruption(std::string("chunk does not decompress: ") + ZSTD_getErrorName(n));
    }
    if (n != len) return Status::Corruption("chunk decompresses to the wrong length");
  } else {
    return Status::Corruption("chunk has unknown codec " + std::to_string(codec));
  }
  if (XXH3_64bits(out, len) != hash) return Status::Corruption("chunk checksum mismatch");
  return Status::OK();
}

Status ChunkCodec::Decode(std::string_view value, size_t expected, std::string* raw) {
  raw->resize(expected);
  return DecodeInto(value, raw->data(), expected);
}

}  // namespace tbfs::store
