#include "base/alarm.h"

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <thread>

#include "tests/test_util.h"

namespace tbfs {
namespace {

using std::chrono::milliseconds;
using tbfs::testing::WaitUntil;

TEST(Alarm, RunsItsTaskOnItsOwnThreadNotBeforeItsTime) {
  Alarm alarm("test alarm");
  std::atomic<bool> ran{false};
  std::thread::id where;
  const auto at = Alarm::Clock::now() + milliseconds(50);
  Alarm::Clock::time_point when;
  ASSERT_TRUE(alarm.Arm(at, [&] {
    when = Alarm::Clock::now();
    where = std::this_thread::get_id();
    ran = true;
  }));
  ASSERT_TRUE(WaitUntil([&] { return ran.load(); }, milliseconds(10000)));
  EXPECT_TRUE(alarm.Disarm());
  EXPECT_GE(when, at);
  EXPECT_NE(where, std::this_thread::get_id());
}

TEST(Alarm, ATaskCalledOffBeforeItsTimeNeverRuns) {
  Alarm alarm("test alarm");
  std::atomic<int> runs{0};
  ASSERT_TRUE(alarm.Arm(Alarm::Clock::now() + milliseconds(100), [&] { ++runs; }));
  EXPECT_FALSE(alarm.Disarm());
  std::this_thread::sleep_for(milliseconds(200));  // past its time: still nothing
  EXPECT_EQ(runs, 0);
  EXPECT_FALSE(alarm.Disarm());  // nothing armed
}

TEST(Alarm, DisarmWaitsForATaskThatHasBegun) {
  Alarm alarm("test alarm");
  std::atomic<bool> began{false}, ended{false};
  ASSERT_TRUE(alarm.Arm(Alarm::Clock::now(), [&] {
    began = true;
    std::this_thread::sleep_for(milliseconds(100));
    ended = true;
  }));
  ASSERT_TRUE(WaitUntil([&] { return began.load(); }, milliseconds(10000)));
  EXPECT_TRUE(alarm.Disarm());
  EXPECT_TRUE(ended);
}

TEST(Alarm, ArmsAgainAfterEachDisarm) {
  Alarm alarm("test alarm");
  std::atomic<int> runs{0};
  for (int i = 0; i < 50; ++i) {
    ASSERT_TRUE(
        alarm.Arm(Alarm::Clock::now() + milliseconds(i % 2 == 0 ? 0 : 10000), [&] { ++runs; }));
    if (i % 2 == 0) {
      ASSERT_TRUE(WaitUntil([&] { return runs == i / 2 + 1; }, milliseconds(10000)));
    }
    EXPECT_EQ(alarm.Disarm(), i % 2 == 0) << i;
  }
  EXPECT_EQ(runs, 25);
}

// Armed again for later right after a Disarm: the earlier time, which the
// alarm's thread may still be waiting for, runs nothing. (The first task
// may run if this thread slept past its time on a loaded machine; the
// second must never.)
TEST(Alarm, ATaskArmedAgainForLaterDoesNotRunAtTheEarlierTime) {
  Alarm alarm("test alarm");
  std::atomic<int> later_runs{0};
  for (int i = 0; i < 20; ++i) {
    const auto at = Alarm::Clock::now() + milliseconds(30);
    ASSERT_TRUE(alarm.Arm(at, [] {}));
    std::this_thread::sleep_for(milliseconds(5));  // its thread waits for that time
    const bool ran = alarm.Disarm();
    EXPECT_TRUE(!ran || Alarm::Clock::now() >= at) << i;
    ASSERT_TRUE(alarm.Arm(Alarm::Clock::now() + std::chrono::hours(1), [&] { ++later_runs; }));
    std::this_thread::sleep_for(milliseconds(60));
    EXPECT_FALSE(alarm.Disarm()) << i;
  }
  EXPECT_EQ(later_runs, 0);
}

TEST(Alarm, GoesAwayWithATaskArmedForLater) {
  std::atomic<bool> ran{false};
  const auto start = Alarm::Clock::now();
  {
    Alarm alarm("test alarm");
    ASSERT_TRUE(alarm.Arm(start + std::chrono::hours(1), [&] { ran = true; }));
  }
  EXPECT_FALSE(ran);
  EXPECT_LT(Alarm::Clock::now() - start, std::chrono::minutes(1));  // it did not wait the hour
}

}  // namespace
}  // namespace tbfs
