// How fast a logdir grows, and when its filesystem will be full: what
// `tbfs watch` samples, keeps and reports (the reason tbfs exists: logdirs
// outgrow their disks).
//
// A sample walks the logdir (never the store folder, never through a
// symlink) and sums file sizes by class and by run (the top-level folder a
// file is in), adds the cold files' logical bytes from the store (opened
// read-only: it works while a mount holds the store), and the logdir
// filesystem's size and free space. Samples are kept, one JSON object a
// line, in STORE/growth.jsonl (0600), the last kMaxGrowthSamples within
// kGrowthHistorySeconds.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "base/fs_util.h"
#include "base/status.h"
#include "store/classify.h"

namespace tbfs::store {

inline constexpr size_t kMaxGrowthSamples = 2000;
inline constexpr int64_t kGrowthHistorySeconds = 14 * 24 * 3600;

struct GrowthSample {
  double unix_s = 0;
  uint64_t tfevents_bytes = 0;  // hot, by class
  uint64_t trace_bytes = 0;
  uint64_t other_bytes = 0;
  uint64_t cold_bytes = 0;  // logical bytes of the cold files
  uint64_t cold_stored_bytes = 0;
  uint64_t fs_size = 0;                  // the logdir's filesystem
  uint64_t fs_free = 0;                  // available to unprivileged users (statvfs f_bavail)
  uint64_t hot_files = 0;                // regular files in the logdir
  std::map<std::string, uint64_t> runs;  // top-level folder ("." for the top) -> logical bytes

  uint64_t hot_bytes() const { return tfevents_bytes + trace_bytes + other_bytes; }
  uint64_t logdir_bytes() const { return hot_bytes() + cold_bytes; }
  double fs_used_fraction() const {
    return fs_size ? 1.0 - static_cast<double>(fs_free) / static_cast<double>(fs_size) : 0;
  }
};

// A sample taken in two parts, for a caller that walks the logdir anyway
// (the migrator's pass): every entry of the walk counted into the hot part,
// then the cold part (the store's running totals, no manifest read) and
// the filesystem's size and room. TakeGrowthSample is the two together.
void CountHotEntry(const WalkEntry& e, const Policy& policy, GrowthSample* s);
class ColdStore;
Status FinishGrowthSample(const std::string& logdir, ColdStore* store, GrowthSample* s);

// `store_dir` may not hold a store yet (cold bytes are then 0).
Result<GrowthSample> TakeGrowthSample(const std::string& logdir, const std::string& store_dir,
                                      const Policy& policy, const WalkOptions& walk);
// The same with the store already open (a mount's); null for none.
Result<GrowthSample> TakeGrowthSample(const std::string& logdir, ColdStore* store,
                                      const Policy& policy, const WalkOptions& walk);

// The series kept in store_dir (empty when there is none; lines that do not
// parse, and samples dated more than a minute ahead of the clock, are
// skipped). Only a regular file is read, never through a symlink.
std::vector<GrowthSample> LoadGrowthSeries(const std::string& store_dir);
// Appends s, trims the series, writes it back atomically (0600; the folder
// is made 0700 when missing).
Status SaveGrowthSample(const std::string& store_dir, const GrowthSample& s,
                        std::vector<GrowthSample>* series);

// Least-squares slope of (t, value) points (value units per second of t);
// none with fewer than two points at least min_span apart.
std::optional<double> FitSlope(const std::vector<std::pair<double, double>>& points,
                               double min_span);

// Change per second of value(sample) over the samples since `since_unix_s`
// (least squares); none with fewer than two samples a second apart.
std::optional<double> GrowthRate(const std::vector<GrowthSample>& series, double since_unix_s,
                                 const std::function<double(const GrowthSample&)>& value);

// What `tbfs watch`, `tbfs status` and a mount's metrics report of a series,
// over the samples of its last window_s seconds.
struct GrowthSummary {
  GrowthSample last;
  size_t samples = 0;                     // in the window
  double span_s = 0;                      // from the first of them to the last
  std::optional<double> logdir_rate;      // bytes per second, hot and cold
  std::optional<double> filesystem_rate;  // bytes in use on the logdir's filesystem, per second
  // Over the last interval alone (the last two samples): what happens now.
  std::optional<double> recent_logdir_rate;
  std::optional<double> recent_filesystem_rate;
  double recent_span_s = 0;
  // At filesystem_rate, when it is positive and the disk is still filling
  // now: the logdir or the filesystem grew over the last interval. A
  // writer that stopped clears it one interval later, while the fit over
  // the window still remembers its rate.
  std::optional<double> full_in_s;
  std::vector<std::pair<std::string, double>> top_runs;  // fastest first, bytes per second
};
// None for an empty series.
std::optional<GrowthSummary> SummarizeGrowth(const std::vector<GrowthSample>& series,
                                             double window_s, size_t top_runs);

}  // namespace tbfs::store
