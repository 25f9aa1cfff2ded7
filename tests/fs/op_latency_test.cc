#include "fs/op_latency.h"

#include <gtest/gtest.h>

#include <thread>
#include <vector>

namespace tbfs::fs {
namespace {

TEST(OpLatency, EachSampleLandsInTheFirstBucketWhoseBoundHoldsIt) {
  OpLatency l;
  l.Record(FuseOp::kRead, 0);            // 0 s: the first bucket
  l.Record(FuseOp::kRead, 25000);        // exactly 25 us: still the first ("<= bound")
  l.Record(FuseOp::kRead, 25001);        // just above: the second
  l.Record(FuseOp::kRead, 3000000);      // 3 ms: the "<= 5 ms" bucket
  l.Record(FuseOp::kRead, 60000000000);  // a minute: +Inf
  OpLatency::Snapshot s = l.Read(FuseOp::kRead);
  EXPECT_EQ(s.count, 5u);
  EXPECT_EQ(s.buckets[0], 2u);
  EXPECT_EQ(s.buckets[1], 1u);
  size_t five_ms = 0;
  while (OpLatency::kBounds[five_ms] != 5e-3) ++five_ms;
  EXPECT_EQ(s.buckets[five_ms], 1u);
  EXPECT_EQ(s.buckets.back(), 1u);
  EXPECT_NEAR(s.sum_seconds, 60.003050001, 1e-9);
  // Operations are counted apart.
  EXPECT_EQ(l.Read(FuseOp::kWrite).count, 0u);
  EXPECT_EQ(l.Read(FuseOp::kLookup).sum_seconds, 0);
}

TEST(OpLatency, BoundsRiseSoEveryDurationHasOneBucket) {
  for (size_t i = 1; i < OpLatency::kBounds.size(); ++i) {
    EXPECT_LT(OpLatency::kBounds[i - 1], OpLatency::kBounds[i]);
  }
}

TEST(OpLatency, ConcurrentRecordsAreAllCounted) {
  OpLatency l;
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&l, t] {
      for (int i = 0; i < 100000; ++i)
        l.Record(FuseOp::kGetAttr, static_cast<uint64_t>(i % 7) * 1000 * t);
    });
  }
  for (auto& t : threads) t.join();
  EXPECT_EQ(l.Read(FuseOp::kGetAttr).count, 400000u);
}

TEST(OpLatency, TheTimerRecordsOnceWhenItGoesOutOfScope) {
  OpLatency l;
  {
    OpLatency::Timer t(l, FuseOp::kLookup);
    EXPECT_EQ(l.Read(FuseOp::kLookup).count, 0u);
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
  }
  OpLatency::Snapshot s = l.Read(FuseOp::kLookup);
  EXPECT_EQ(s.count, 1u);
  EXPECT_GE(s.sum_seconds, 2e-3);
  EXPECT_EQ(s.buckets[0], 0u);
}

}  // namespace
}  // namespace tbfs::fs
