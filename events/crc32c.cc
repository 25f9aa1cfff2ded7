#include "events/crc32c.h"

#include <isa-l/crc.h>

#include <climits>

namespace tbfs::events {

uint32_t Crc32c(const void* data, size_t n, uint32_t init) {
  // isa-l works on the raw register: pre- and post-inversion are ours.
  uint32_t crc = ~init;
  auto* p = static_cast<unsigned char*>(const_cast<void*>(data));
  while (n > 0) {
    int step = n > static_cast<size_t>(INT_MAX) ? INT_MAX : static_cast<int>(n);
    crc = crc32_iscsi(p, step, crc);
    p += step;
    n -= static_cast<size_t>(step);
  }
  return ~crc;
}

}  // namespace tbfs::events
