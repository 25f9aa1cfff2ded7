#include "events/crc32c.h"

#include <isa-l/crc.h>

#if defined(__x86_64__)
#include <nmmintrin.h>
#define TBFS_CRC_SSE42 1
#endif

#include <climits>
#include <cstring>

namespace tbfs::events {

namespace {

// Below this size the call into isa-l costs more than the work; TFRecord
// headers (8 bytes) and small scalar records land here.
constexpr size_t kSmallBytes = 256;

#ifdef TBFS_CRC_SSE42
const bool kHaveSse42 = __builtin_cpu_supports("sse4.2");

__attribute__((target("sse4.2"))) uint32_t SmallSse42(const unsigned char* p, size_t n,
                                                      uint32_t crc) {
  uint64_t c = crc;
  while (n >= 8) {
    uint64_t word;
    std::memcpy(&word, p, 8);
    c = _mm_crc32_u64(c, word);
    p += 8;
    n -= 8;
  }
  uint32_t c32 = static_cast<uint32_t>(c);
  while (n > 0) {
    c32 = _mm_crc32_u8(c32, *p++);
    --n;
  }
  return c32;
}
#endif  // TBFS_CRC_SSE42

}  // namespace

uint32_t Crc32c(const void* data, size_t n, uint32_t init) {
  // Both kernels work on the raw register: pre- and post-inversion are ours.
  uint32_t crc = ~init;
  auto* p = static_cast<unsigned char*>(const_cast<void*>(data));
#ifdef TBFS_CRC_SSE42
  if (n <= kSmallBytes && kHaveSse42) return ~SmallSse42(p, n, crc);
#endif
  // Elsewhere (arm64) isa-l alone, which has its own kernels for the CPU.
  while (n > 0) {
    int step = n > static_cast<size_t>(INT_MAX) ? INT_MAX : static_cast<int>(n);
    crc = crc32_iscsi(p, step, crc);
    p += step;
    n -= static_cast<size_t>(step);
  }
  return ~crc;
}

}  // namespace tbfs::events
