// Wall-clock time as int64 nanoseconds since the epoch, the unit every
// record of the store uses. Thread-safe.
#pragma once

#include <time.h>

#include <chrono>
#include <cstdint>

namespace tbfs {

inline int64_t NowNs() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}

inline int64_t ToNs(const struct timespec& ts) {
  return static_cast<int64_t>(ts.tv_sec) * 1'000'000'000 + ts.tv_nsec;
}

inline struct timespec FromNs(int64_t ns) {
  return {static_cast<time_t>(ns / 1'000'000'000), static_cast<long>(ns % 1'000'000'000)};
}

}  // namespace tbfs
