// CRC32C (Castagnoli, the iSCSI polynomial) and the TFRecord mask.
//
// Computed by isa-l's crc32_iscsi, which picks the fastest kernel the CPU
// offers (SSE4.2 crc32 / PCLMUL folding) at run time; inputs of a few
// hundred bytes (record headers, scalar records) use the SSE4.2 instruction
// inline, where the call into isa-l would cost more than the work.
// Thread-safe.
#pragma once

#include <cstddef>
#include <cstdint>

namespace tbfs::events {

// The standard CRC32C of n bytes: Crc32c("123456789") == 0xe3069283.
// `init` continues a previous result: Crc32c(b, Crc32c(a)) == Crc32c(a + b).
uint32_t Crc32c(const void* data, size_t n, uint32_t init = 0);

// TFRecord's mask, so that CRCs of data that embeds CRCs stay well spread.
inline uint32_t MaskCrc(uint32_t crc) { return ((crc >> 15) | (crc << 17)) + 0xa282ead8u; }
inline uint32_t UnmaskCrc(uint32_t masked) {
  uint32_t rot = masked - 0xa282ead8u;
  return (rot >> 17) | (rot << 15);
}
inline uint32_t MaskedCrc32c(const void* data, size_t n) { return MaskCrc(Crc32c(data, n)); }

}  // namespace tbfs::events
