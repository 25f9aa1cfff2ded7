#include "store/growth.h"

#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <future>

#include "store/store_dir.h"
#include "tests/test_util.h"

namespace tbfs::store {
namespace {

double Now() {
  return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
}

GrowthSample At(double t, uint64_t bytes, uint64_t free_bytes) {
  GrowthSample s;
  s.unix_s = t;
  s.tfevents_bytes = bytes;
  s.fs_size = 1000000;
  s.fs_free = free_bytes;
  s.runs["a"] = bytes;
  s.runs["b"] = 7;
  return s;
}

TEST(GrowthSeries, KeptSamplesComeBackInOrderAndPrivate) {
  testing::TempDir dir;
  std::vector<GrowthSample> series;
  const double t = Now();
  ASSERT_TRUE(SaveGrowthSample(dir.path(), At(t - 10, 100, 5000), &series).ok());
  ASSERT_TRUE(SaveGrowthSample(dir.path(), At(t - 20, 50, 6000), &series).ok());
  auto back = LoadGrowthSeries(dir.path());
  ASSERT_EQ(back.size(), 2u);
  EXPECT_EQ(back[0].tfevents_bytes, 50u);
  EXPECT_EQ(back[1].tfevents_bytes, 100u);
  struct stat st;
  ASSERT_EQ(::stat((dir.path() + "/" + kGrowthFileName).c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0600u);
}

TEST(GrowthSeries, ASampleFromTheFutureIsDroppedNotKeptAsTheLast) {
  testing::TempDir dir;
  std::vector<GrowthSample> series;
  const double t = Now();
  ASSERT_TRUE(
      SaveGrowthSample(dir.path(), At(t + 86400 * 365, 1, 1), &series).ok());  // a clock gone wrong
  ASSERT_TRUE(SaveGrowthSample(dir.path(), At(t - 5, 100, 5000), &series).ok());
  auto back = LoadGrowthSeries(dir.path());
  ASSERT_EQ(back.size(), 1u);
  EXPECT_EQ(back.back().tfevents_bytes, 100u);
}

TEST(GrowthSeries, AFifoOrASymlinkAtItsNameIsNotRead) {
  testing::TempDir dir;
  const std::string path = dir.path() + "/" + kGrowthFileName;
  ASSERT_EQ(::mkfifo(path.c_str(), 0600), 0);
  auto loaded = std::async(std::launch::async, [&] { return LoadGrowthSeries(dir.path()).size(); });
  ASSERT_EQ(loaded.wait_for(std::chrono::seconds(10)), std::future_status::ready)
      << "a FIFO blocked the read";
  EXPECT_EQ(loaded.get(), 0u);
  ::unlink(path.c_str());
  std::vector<GrowthSample> series;
  ASSERT_TRUE(SaveGrowthSample(dir.path() + "/elsewhere", At(Now(), 42, 1), &series).ok());
  ASSERT_EQ(::symlink((dir.path() + "/elsewhere/" + kGrowthFileName).c_str(), path.c_str()), 0);
  EXPECT_TRUE(LoadGrowthSeries(dir.path()).empty()) << "read through a symlink";
}

// A run named with bytes that are not UTF-8 keeps one name from a fresh
// sample to the kept series (JSON holds UTF-8), or its whole size would
// read as growth.
TEST(GrowthSeries, ARunWhoseNameIsNotUtf8IsTheSameRunWhenReadBack) {
  testing::TempDir dir;
  const std::string logdir = dir.path() + "/logdir";
  ::mkdir(logdir.c_str(), 0755);
  ::mkdir((logdir + "/bad\xff\xfe").c_str(), 0755);
  testing::WriteBytes(logdir + "/bad\xff\xfe/x.pt.trace.json", std::string(1000, '{'));
  auto s = TakeGrowthSample(logdir, dir.path() + "/store", Policy(), WalkOptions());
  ASSERT_TRUE(s.ok()) << s.status().ToString();
  std::vector<GrowthSample> series;
  ASSERT_TRUE(SaveGrowthSample(dir.path() + "/store", *s, &series).ok());
  auto back = LoadGrowthSeries(dir.path() + "/store");
  ASSERT_EQ(back.size(), 1u);
  EXPECT_EQ(back[0].runs, s->runs);
  EXPECT_EQ(s->runs.count("bad\xEF\xBF\xBD\xEF\xBF\xBD"), 1u);
}

TEST(GrowthSummary, RatesTimeToFullAndTheFastestRuns) {
  std::vector<GrowthSample> series;
  // 10 bytes a second for 100 s; the filesystem loses 20 bytes a second.
  for (int i = 0; i <= 100; i += 10) series.push_back(At(1000 + i, 10 * i, 100000 - 20 * i));
  series.push_back(At(0, 0, 0));  // far outside the window
  std::sort(series.begin(), series.end(), [](auto& a, auto& b) { return a.unix_s < b.unix_s; });
  auto g = SummarizeGrowth(series, 200, 1);
  ASSERT_TRUE(g);
  EXPECT_EQ(g->samples, 11u);
  EXPECT_DOUBLE_EQ(g->span_s, 100);
  EXPECT_NEAR(*g->logdir_rate, 10, 1e-9);
  EXPECT_NEAR(*g->filesystem_rate, 20, 1e-9);
  EXPECT_NEAR(*g->full_in_s, (100000 - 2000) / 20.0, 1e-6);
  ASSERT_EQ(g->top_runs.size(), 1u);
  EXPECT_EQ(g->top_runs[0].first, "a");
  EXPECT_FALSE(SummarizeGrowth({}, 200, 1));
  auto one = SummarizeGrowth({At(5, 1, 1)}, 200, 5);
  ASSERT_TRUE(one);
  EXPECT_FALSE(one->logdir_rate) << "one sample has no rate";
  EXPECT_FALSE(one->full_in_s);
}

TEST(GrowthSummary, AWriterThatStoppedClearsTheTimeToFullOneIntervalLater) {
  std::vector<GrowthSample> series;
  auto at = [](double t, uint64_t bytes, uint64_t free_bytes) {
    GrowthSample s = At(t, bytes, free_bytes);
    s.fs_size = 20000000000ull;
    return s;
  };
  // 1 MB a second for an hour, sampled every 30 s, then it stops.
  for (int i = 0; i <= 3600; i += 30)
    series.push_back(at(1000 + i, 1000000ull * i, 10000000000ull - 1000000ull * i));
  auto g = SummarizeGrowth(series, 24 * 3600, 1);
  ASSERT_TRUE(g && g->full_in_s);
  EXPECT_NEAR(*g->recent_logdir_rate, 1e6, 1e-3);
  EXPECT_NEAR(*g->recent_filesystem_rate, 1e6, 1e-3);
  EXPECT_DOUBLE_EQ(g->recent_span_s, 30);
  // The next sample, 30 s later, saw nothing written: not filling now,
  // though the hour's fit still says 1 MB/s.
  const GrowthSample last = series.back();
  series.push_back(at(last.unix_s + 30, last.tfevents_bytes, last.fs_free));
  g = SummarizeGrowth(series, 24 * 3600, 1);
  ASSERT_TRUE(g);
  EXPECT_GT(*g->filesystem_rate, 9e5);
  EXPECT_EQ(*g->recent_logdir_rate, 0);
  EXPECT_EQ(*g->recent_filesystem_rate, 0);
  EXPECT_FALSE(g->full_in_s) << "a stopped writer still shows a time to full";
  // Something else filling the disk (not the logdir) is filling now.
  series.push_back(at(last.unix_s + 60, last.tfevents_bytes, last.fs_free - 5000000));
  g = SummarizeGrowth(series, 24 * 3600, 1);
  ASSERT_TRUE(g);
  EXPECT_TRUE(g->full_in_s);
  // The migrator freeing space while the logdir still grows: filling now.
  series.push_back(at(last.unix_s + 90, last.tfevents_bytes + 10, last.fs_free + 5000000));
  g = SummarizeGrowth(series, 24 * 3600, 1);
  ASSERT_TRUE(g);
  EXPECT_LT(*g->recent_filesystem_rate, 0);
  EXPECT_TRUE(g->full_in_s);
}

}  // namespace
}  // namespace tbfs::store
