#include "store/growth.h"

#include <fcntl.h>
#include <sys/statvfs.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <nlohmann/json.hpp>
#include <sstream>

#include "base/text.h"
#include "store/cold_store.h"
#include "store/store_dir.h"

namespace tbfs::store {

namespace {

using nlohmann::json;

json ToJson(const GrowthSample& s) {
  return {{"t", s.unix_s},
          {"tfevents", s.tfevents_bytes},
          {"traces", s.trace_bytes},
          {"other", s.other_bytes},
          {"cold", s.cold_bytes},
          {"cold_stored", s.cold_stored_bytes},
          {"fs_size", s.fs_size},
          {"fs_free", s.fs_free},
          {"hot_files", s.hot_files},
          {"runs", s.runs}};
}

bool FromJson(const json& j, GrowthSample* s) {
  try {
    s->unix_s = j.at("t").get<double>();
    s->tfevents_bytes = j.at("tfevents").get<uint64_t>();
    s->trace_bytes = j.at("traces").get<uint64_t>();
    s->other_bytes = j.at("other").get<uint64_t>();
    s->cold_bytes = j.at("cold").get<uint64_t>();
    s->cold_stored_bytes = j.at("cold_stored").get<uint64_t>();
    s->fs_size = j.at("fs_size").get<uint64_t>();
    s->fs_free = j.at("fs_free").get<uint64_t>();
    s->hot_files = j.value("hot_files", uint64_t{0});  // not in the first samples kept
    s->runs = j.at("runs").get<std::map<std::string, uint64_t>>();
    return true;
  } catch (const json::exception&) {
    return false;
  }
}

double NowUnixSeconds() {
  return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
}

// Runs are named in UTF-8 (JSON keeps them so): a sample taken now and one
// read back from the series must name a run the same way.
std::string RunOf(const std::string& rel) {
  size_t slash = rel.find('/');
  return slash == std::string::npos ? "." : ValidUtf8(rel.substr(0, slash));
}

}  // namespace

Result<GrowthSample> TakeGrowthSample(const std::string& logdir, const std::string& store_dir,
                                      const Policy& policy, const WalkOptions& walk) {
  OpenOptions ro;
  ro.read_only = true;
  auto store = ColdStore::Open(store_dir, ro);
  if (!store.ok() && !store.status().IsNotFound()) return store.status();
  return TakeGrowthSample(logdir, store.ok() ? store->get() : nullptr, policy, walk);
}

void CountHotEntry(const WalkEntry& e, const Policy& policy, GrowthSample* s) {
  if (!S_ISREG(e.st.st_mode)) return;
  // What the file takes on disk: a sparse file's holes are not growth.
  const uint64_t bytes =
      std::min(static_cast<uint64_t>(e.st.st_size), static_cast<uint64_t>(e.st.st_blocks) * 512);
  s->hot_files++;
  const FileClass c = policy.Classify(e.rel);
  if (c == FileClass::kEvents) {
    s->tfevents_bytes += bytes;
  } else if (IsTraceClass(c)) {
    s->trace_bytes += bytes;
  } else {
    s->other_bytes += bytes;
  }
  s->runs[RunOf(e.rel)] += bytes;
}

Status FinishGrowthSample(const std::string& logdir, ColdStore* store, GrowthSample* s) {
  s->unix_s = NowUnixSeconds();
  if (store != nullptr) {
    auto totals = store->GetTotals();
    if (!totals.ok()) return totals.status();
    s->cold_bytes = totals->logical_bytes;
    s->cold_stored_bytes = totals->stored_bytes;
    for (const auto& [top, bytes] : totals->top_folder_bytes) s->runs[ValidUtf8(top)] += bytes;
  }
  struct statvfs vfs;
  if (::statvfs(logdir.c_str(), &vfs) != 0) return Status::FromErrno(errno, "statvfs", logdir);
  s->fs_size = static_cast<uint64_t>(vfs.f_blocks) * vfs.f_frsize;
  s->fs_free = static_cast<uint64_t>(vfs.f_bavail) * vfs.f_frsize;
  return Status::OK();
}

Result<GrowthSample> TakeGrowthSample(const std::string& logdir, ColdStore* store,
                                      const Policy& policy, const WalkOptions& walk) {
  GrowthSample s;
  TBFS_RETURN_IF_ERROR(
      WalkTree(logdir, walk, [&](const WalkEntry& e) { CountHotEntry(e, policy, &s); }));
  TBFS_RETURN_IF_ERROR(FinishGrowthSample(logdir, store, &s));
  return s;
}

std::vector<GrowthSample> LoadGrowthSeries(const std::string& store_dir) {
  std::vector<GrowthSample> out;
  std::string text;
  if (!ReadFileToString(JoinPath(store_dir, kGrowthFileName), &text, O_NOFOLLOW).ok()) return out;
  // A sample from the future (a clock set back, a hand-edited line) would
  // stay "the last" and freeze every rate: dropped.
  const double horizon = NowUnixSeconds() + 60;
  std::istringstream lines(text);
  for (std::string line; std::getline(lines, line);) {
    GrowthSample s;
    json j = json::parse(line, nullptr, false);
    if (!j.is_discarded() && FromJson(j, &s) && std::isfinite(s.unix_s) && s.unix_s <= horizon) {
      out.push_back(std::move(s));
    }
  }
  std::sort(out.begin(), out.end(),
            [](const auto& a, const auto& b) { return a.unix_s < b.unix_s; });
  return out;
}

Status SaveGrowthSample(const std::string& store_dir, const GrowthSample& s,
                        std::vector<GrowthSample>* series) {
  series->push_back(s);
  std::sort(series->begin(), series->end(),
            [](const auto& a, const auto& b) { return a.unix_s < b.unix_s; });
  const double cutoff = s.unix_s - kGrowthHistorySeconds;
  series->erase(series->begin(), std::find_if(series->begin(), series->end(),
                                              [&](const auto& x) { return x.unix_s >= cutoff; }));
  if (series->size() > kMaxGrowthSamples)
    series->erase(series->begin(), series->end() - kMaxGrowthSamples);
  std::string text;
  for (const auto& x : *series)
    text += ToJson(x).dump(-1, ' ', false, json::error_handler_t::replace) + "\n";
  TBFS_RETURN_IF_ERROR(MakeDirs(store_dir, 0700));
  // The store folder's rules: ours (not another user's), private, never
  // reached through a symlink.
  TBFS_RETURN_IF_ERROR(MakeStorePrivate(store_dir));
  return WriteFileAtomic(JoinPath(store_dir, kGrowthFileName), text, 0600);
}

std::optional<double> FitSlope(const std::vector<std::pair<double, double>>& points,
                               double min_span) {
  if (points.size() < 2) return std::nullopt;
  const double t0 = points.front().first;
  double n = 0, st = 0, sv = 0, stt = 0, stv = 0, last = t0;
  for (const auto& [at, v] : points) {
    const double t = at - t0;
    last = std::max(last, at);
    n++;
    st += t;
    sv += v;
    stt += t * t;
    stv += t * v;
  }
  const double den = n * stt - st * st;
  if (last - t0 < min_span || den == 0) return std::nullopt;
  return (n * stv - st * sv) / den;
}

std::optional<double> GrowthRate(const std::vector<GrowthSample>& series, double since_unix_s,
                                 const std::function<double(const GrowthSample&)>& value) {
  std::vector<std::pair<double, double>> points;
  for (const auto& s : series) {
    if (s.unix_s >= since_unix_s) points.push_back({s.unix_s, value(s)});
  }
  return FitSlope(points, 1);
}

std::optional<GrowthSummary> SummarizeGrowth(const std::vector<GrowthSample>& series,
                                             double window_s, size_t top_runs) {
  if (series.empty()) return std::nullopt;
  GrowthSummary g;
  g.last = series.back();
  const double since = g.last.unix_s - window_s;
  double first_t = g.last.unix_s;
  for (const auto& s : series) {
    if (s.unix_s >= since) {
      g.samples++;
      first_t = std::min(first_t, s.unix_s);
    }
  }
  g.span_s = g.last.unix_s - first_t;
  g.logdir_rate = GrowthRate(series, since,
                             [](const auto& s) { return static_cast<double>(s.logdir_bytes()); });
  g.filesystem_rate = GrowthRate(series, since, [](const auto& s) {
    return static_cast<double>(s.fs_size - std::min(s.fs_size, s.fs_free));
  });
  if (series.size() >= 2) {
    const GrowthSample& before = series[series.size() - 2];
    g.recent_span_s = g.last.unix_s - before.unix_s;
    if (g.recent_span_s >= 1) {
      auto used = [](const GrowthSample& s) {
        return static_cast<double>(s.fs_size - std::min(s.fs_size, s.fs_free));
      };
      g.recent_logdir_rate = (static_cast<double>(g.last.logdir_bytes()) -
                              static_cast<double>(before.logdir_bytes())) /
                             g.recent_span_s;
      g.recent_filesystem_rate = (used(g.last) - used(before)) / g.recent_span_s;
    }
  }
  const bool filling_now =
      !g.recent_filesystem_rate || *g.recent_filesystem_rate > 0 || *g.recent_logdir_rate > 0;
  if (g.filesystem_rate && *g.filesystem_rate > 0 && filling_now) {
    g.full_in_s = static_cast<double>(g.last.fs_free) / *g.filesystem_rate;
  }
  for (const auto& entry : g.last.runs) {
    const std::string& run = entry.first;
    if (top_runs == 0) break;
    auto r = GrowthRate(series, since, [&run](const auto& s) {
      auto it = s.runs.find(run);
      return it == s.runs.end() ? 0.0 : static_cast<double>(it->second);
    });
    if (r) g.top_runs.push_back({run, *r});
  }
  std::sort(g.top_runs.begin(), g.top_runs.end(),
            [](const auto& a, const auto& b) { return a.second > b.second; });
  if (g.top_runs.size() > top_runs) g.top_runs.resize(top_runs);
  return g;
}

}  // namespace tbfs::store
