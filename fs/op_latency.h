// How long the FUSE operations a reader or writer waits on take, from the
// request reaching the daemon to its reply: one histogram per operation in
// fixed buckets, counted with relaxed atomics (two monotonic clock reads and
// two increments per request, no lock), read by the metrics at a scrape.
#pragma once

#include <array>
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <ctime>

namespace tbfs::fs {

enum class FuseOp { kLookup, kGetAttr, kRead, kWrite, kReadDir };
inline constexpr size_t kFuseOps = 5;
const char* FuseOpName(FuseOp op);  // "lookup", "getattr", ...

class OpLatency {
 public:
  // Upper bounds of the buckets, in seconds; one more bucket (+Inf) follows.
  static constexpr std::array<double, 14> kBounds = {25e-6,  50e-6,  100e-6, 250e-6, 500e-6,
                                                     1e-3,   2.5e-3, 5e-3,   10e-3,  25e-3,
                                                     100e-3, 250e-3, 1.0,    5.0};

  struct Snapshot {
    std::array<uint64_t, kBounds.size() + 1> buckets{};  // per bucket, not cumulative
    uint64_t count = 0;                                  // the sum of buckets
    double sum_seconds = 0;
  };

  void Record(FuseOp op, uint64_t nanos);
  Snapshot Read(FuseOp op) const;

  // Records the time from its construction to its destruction.
  class Timer {
   public:
    Timer(OpLatency& latency, FuseOp op) : latency_(latency), op_(op), start_(Now()) {}
    ~Timer() { latency_.Record(op_, Now() - start_); }
    Timer(const Timer&) = delete;
    Timer& operator=(const Timer&) = delete;

   private:
    static uint64_t Now() {
      struct timespec ts;
      ::clock_gettime(CLOCK_MONOTONIC, &ts);
      return static_cast<uint64_t>(ts.tv_sec) * 1000000000u + static_cast<uint64_t>(ts.tv_nsec);
    }
    OpLatency& latency_;
    FuseOp op_;
    uint64_t start_;
  };

 private:
  struct Op {
    std::array<std::atomic<uint64_t>, kBounds.size() + 1> buckets{};
    std::atomic<uint64_t> sum_nanos{0};
  };
  std::array<Op, kFuseOps> ops_;
};

}  // namespace tbfs::fs
