#include "fs/op_latency.h"

namespace tbfs::fs {

const char* FuseOpName(FuseOp op) {
  switch (op) {
    case FuseOp::kLookup:
      return "lookup";
    case FuseOp::kGetAttr:
      return "getattr";
    case FuseOp::kRead:
      return "read";
    case FuseOp::kWrite:
      return "write";
    case FuseOp::kReadDir:
      return "readdir";
  }
  return "?";
}

void OpLatency::Record(FuseOp op, uint64_t nanos) {
  const double seconds = static_cast<double>(nanos) * 1e-9;
  size_t b = 0;
  while (b < kBounds.size() && seconds > kBounds[b]) ++b;  // Prometheus buckets are "<= bound"
  Op& o = ops_[static_cast<size_t>(op)];
  o.buckets[b].fetch_add(1, std::memory_order_relaxed);
  o.sum_nanos.fetch_add(nanos, std::memory_order_relaxed);
}

OpLatency::Snapshot OpLatency::Read(FuseOp op) const {
  const Op& o = ops_[static_cast<size_t>(op)];
  Snapshot s;
  for (size_t b = 0; b < s.buckets.size(); ++b) {
    s.buckets[b] = o.buckets[b].load(std::memory_order_relaxed);
    s.count += s.buckets[b];
  }
  s.sum_seconds = static_cast<double>(o.sum_nanos.load(std::memory_order_relaxed)) * 1e-9;
  return s;
}

}  // namespace tbfs::fs
