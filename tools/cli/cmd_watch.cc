// tbfs watch: how fast a logdir grows and when its filesystem will be full
// (store/growth.h), for people and for cron or monitoring checks.
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <optional>
#include <thread>

#include "base/fs_util.h"
#include "base/text.h"
#include "base/units.h"
#include "fmt/format.h"
#include "fs/mount_table.h"
#include "store/growth.h"
#include "store/store_dir.h"
#include "tools/cli/commands.h"
#include "tools/cli/growth_plot.h"
#include "tools/cli/progress.h"
#include "tools/cli/store_cli.h"

namespace tbfs::cli {

namespace {

using nlohmann::json;

struct WatchArgs {
  std::string logdir;
  std::string store;
  std::string interval = "30s";
  std::string window = "24h";
  double warn_at = 90;
  std::string warn_within = "24h";
  size_t top = 5;
  bool json = false;
  bool quiet = false;
  std::string plot;  // SVG file to write, or ""
};

// Why this run may not keep its sample in `dir` ("" when it may): only in
// a folder that exists already (a read-only command makes no store folder
// in a logdir), is this user's (a store refuses another owner's) and
// writable. Otherwise the run keeps nothing and measures its rate from two
// samples of its own.
std::string WhyNotKept(const std::string& dir, bool store_folder) {
  struct stat st;
  if (::lstat(dir.c_str(), &st) != 0) return "does not exist, and watch makes no store folder";
  if (!S_ISDIR(st.st_mode)) return "is not a folder";
  if (st.st_uid != ::geteuid()) return fmt::format("belongs to uid {}", st.st_uid);
  if (::access(dir.c_str(), W_OK | X_OK) != 0) return "is not writable by this user";
  // The series is kept as a store keeps its files (the folder made
  // private): never in a folder of other files, nor in a damaged store.
  if (store_folder) {
    Status checked = store::CheckStoreFolder(dir);
    if (checked.code() == Code::kCorruption) return "holds a damaged store (tbfs fsck)";
    if (!checked.ok()) return "holds other files than a store's";
  }
  return "";
}

// The samples a rate is measured from: the kept series (when this user may
// keep it) and one taken now; and a second, --interval later, when none is
// at least that old.
struct Watched {
  std::vector<store::GrowthSample> series;
  std::string not_kept;  // why the series is not kept, "" when it is
  std::string cold_why;  // why the cold bytes are not counted, "" when they are
  // Folders and entries the last sample could not read (another user's
  // private run): left out of it, as scan and verify leave them.
  std::vector<std::string> not_counted;
  bool keep() const { return not_kept.empty(); }
};
bool TakeSamples(const WatchArgs& args, const StoreLocation& loc, int64_t interval, Watched* w) {
  store::Policy policy;
  w->not_kept = WhyNotKept(loc.own_dir, loc.own_dir == loc.dir);
  if (w->keep()) w->series = store::LoadGrowthSeries(loc.own_dir);
  // A store this user cannot open (root's, 0700; damaged) leaves the cold
  // bytes out of both samples: the hot ones still show the growth, and
  // watching is what this command is for. Opened once for both samples.
  std::unique_ptr<store::ColdStore> cold;
  if (auto opened = OpenStoreForRead(loc); opened.ok()) {
    cold = std::move(opened).value();
  } else {
    w->cold_why = opened.status().message();
    // Kept beside the others, its samples would read as every cold file
    // gone, then back (a store out of reach for want of threads).
    if (w->keep()) {
      w->not_kept = "holds a store this run cannot read";
      w->series.clear();
    }
  }
  WalkOptions walk = loc.walk;
  walk.warnings = &w->not_counted;
  auto sample = [&]() -> bool {
    w->not_counted.clear();
    auto s = store::TakeGrowthSample(loc.logdir, cold.get(), policy, walk);
    if (!s.ok()) {
      PrintError("watch", s.status().message());
      return false;
    }
    if (!w->keep()) {
      w->series.push_back(*s);
      return true;
    }
    Status saved = store::SaveGrowthSample(loc.own_dir, *s, &w->series);
    if (!saved.ok()) {
      PrintError("watch", "keeping the sample: " + saved.message());
      return false;
    }
    return true;
  };
  if (!sample()) return false;
  const auto& now = w->series.back();
  const bool earlier = std::any_of(w->series.begin(), w->series.end(), [&](const auto& s) {
    return now.unix_s - s.unix_s >= static_cast<double>(interval);
  });
  if (earlier || interval <= 0) return true;
  if (::isatty(STDERR_FILENO) && !args.quiet) {
    fmt::print(stderr, "first sample {}; the next in {} for a rate...\n",
               w->keep() ? "kept" : "taken", HumanDuration(interval));
  }
  std::this_thread::sleep_for(std::chrono::seconds(interval));
  return sample();
}

json WatchJson(const StoreLocation& loc, const Watched& w, const store::GrowthSummary& g,
               bool warn) {
  const store::GrowthSample& last = g.last;
  auto per_hour = [](const std::optional<double>& rate) {
    return rate ? json(*rate * 3600) : json(nullptr);
  };
  json j = {{"logdir", loc.logdir},
            {"bytes",
             {{"total", last.logdir_bytes()},
              {"tfevents", last.tfevents_bytes},
              {"traces_hot", last.trace_bytes},
              {"other", last.other_bytes},
              {"cold", last.cold_bytes},
              {"cold_stored", last.cold_stored_bytes}}},
            {"filesystem",
             {{"size", last.fs_size},
              {"free", last.fs_free},
              {"used_percent", 100 * last.fs_used_fraction()}}},
            {"samples", g.samples},
            {"span_seconds", g.span_s},
            {"growth_bytes_per_hour", per_hour(g.logdir_rate)},
            {"filesystem_growth_bytes_per_hour", per_hour(g.filesystem_rate)},
            {"recent",
             {{"span_seconds", g.recent_span_s},
              {"growth_bytes_per_hour", per_hour(g.recent_logdir_rate)},
              {"filesystem_growth_bytes_per_hour", per_hour(g.recent_filesystem_rate)}}},
            {"full_in_seconds", g.full_in_s ? json(*g.full_in_s) : json(nullptr)},
            {"series_kept", w.keep()},
            {"cold_bytes_known", w.cold_why.empty()},
            {"warn", warn},
            {"not_counted", w.not_counted},
            {"top_runs", json::array()}};
  for (const auto& [run, r] : g.top_runs) {
    j["top_runs"].push_back({{"run", run}, {"bytes_per_hour", r * 3600}});
  }
  return j;
}

void PrintWatchText(const WatchArgs& args, const StoreLocation& loc, const Watched& w,
                    const store::GrowthSummary& g, bool over, bool soon) {
  const store::GrowthSample& last = g.last;
  const double used_pct = 100 * last.fs_used_fraction();
  const auto& logdir_rate = g.logdir_rate;
  const auto& disk_rate = g.filesystem_rate;
  const std::string full_in_text =
      g.full_in_s ? HumanDuration(*g.full_in_s) + " at this rate"
      : disk_rate && *disk_rate > 0
          ? "not filling now (nothing grew over the last " + HumanDuration(g.recent_span_s) + ")"
          : std::string("never at this rate");
  fmt::print("logdir {}: {} (tfevents {}, traces {} hot and {} cold, stored as {}; other {})\n",
             loc.logdir, HumanBytes(last.logdir_bytes()), HumanBytes(last.tfevents_bytes),
             HumanBytes(last.trace_bytes), HumanBytes(last.cold_bytes),
             HumanBytes(last.cold_stored_bytes), HumanBytes(last.other_bytes));
  fmt::print("filesystem: {:.1f}% used, {} free of {}\n", used_pct, HumanBytes(last.fs_free),
             HumanBytes(last.fs_size));
  fmt::print("growth over {} ({} samples): logdir {}, filesystem {}\n", HumanDuration(g.span_s),
             g.samples, logdir_rate ? HumanRate(*logdir_rate) : "unknown",
             disk_rate ? HumanRate(*disk_rate) : "unknown");
  for (const auto& [run, r] : g.top_runs)
    fmt::print("  {:>12}  {}\n", HumanRate(r), Printable(run));
  if (g.recent_logdir_rate) {
    fmt::print("growth over the last {}: logdir {}, filesystem {}\n",
               HumanDuration(g.recent_span_s), HumanRate(*g.recent_logdir_rate),
               HumanRate(*g.recent_filesystem_rate));
  }
  fmt::print("full in: {}\n", full_in_text);
  if (!w.cold_why.empty()) {
    fmt::print("cold files: not counted (the store cannot be read: {})\n", Printable(w.cold_why));
  }
  if (!w.keep()) {
    fmt::print("series: not kept ({} {}); the rates are from this run's samples\n", loc.own_dir,
               w.not_kept);
  }
  if (over) {
    fmt::print("WARNING: the filesystem is {:.1f}% used (--warn-at {})\n", used_pct, args.warn_at);
  }
  if (soon) {
    fmt::print("WARNING: full in {} (--warn-within {})\n", HumanDuration(*g.full_in_s),
               args.warn_within);
  }
}

int RunWatch(const WatchArgs& args) {
  auto interval = ParseDurationSeconds(args.interval);
  auto window = ParseDurationSeconds(args.window);
  auto within = ParseDurationSeconds(args.warn_within);
  for (const auto& [name, r] :
       {std::pair{"--interval", &interval}, {"--window", &window}, {"--warn-within", &within}}) {
    if (!r->ok()) {
      PrintError("watch", std::string(name) + ": " + r->status().message());
      return kExitError;
    }
  }
  if (args.warn_at <= 0 || args.warn_at > 100) {
    PrintError("watch", "--warn-at: a percentage above 0 and at most 100");
    return kExitError;
  }
  // Through a mount, cold files look hot (and sparse ones small): the
  // logdir behind it is what grows.
  if (IsTbfsMount(args.logdir)) {
    std::string at = std::filesystem::absolute(args.logdir).lexically_normal().string();
    while (at.size() > 1 && at.back() == '/') at.pop_back();
    auto entry = fs::FindMount(at);
    const std::string source = entry ? entry->source : "";
    PrintError("watch", args.logdir + " is a tbfs mount point: watch the logdir it serves" +
                            (source.starts_with("tbfs:") ? " (" + source.substr(5) + ")" : ""));
    return kExitError;
  }
  auto loc = LocateStore(args.logdir, args.store);
  if (!loc.ok()) {
    PrintError("watch", loc.status().message());
    return kExitError;
  }
  Watched w;
  if (!TakeSamples(args, *loc, *interval, &w)) return kExitError;
  if (!args.quiet) {
    for (const std::string& n : w.not_counted) PrintError("watch", "warning: not counted: " + n);
  }
  const store::GrowthSummary g =
      *store::SummarizeGrowth(w.series, static_cast<double>(*window), args.top);
  const store::GrowthSample& last = g.last;
  const double used_pct = 100 * last.fs_used_fraction();
  const bool over = used_pct >= args.warn_at;
  const bool soon = g.full_in_s && *g.full_in_s < static_cast<double>(*within);
  if (!args.plot.empty()) {
    std::vector<store::GrowthSample> shown;
    for (const auto& s : w.series) {
      if (s.unix_s >= last.unix_s - static_cast<double>(*window)) shown.push_back(s);
    }
    Status st = WriteFileAtomic(args.plot, GrowthSvg(shown, loc->logdir, args.warn_at), 0644);
    if (!st.ok()) {
      PrintError("watch", "--plot: " + st.message());
      return kExitError;
    }
  }
  if (args.json) {
    PrintJson(WatchJson(*loc, w, g, over || soon));
  } else if (args.quiet) {
    // For cron: nothing when all is well; each warning one line naming the logdir.
    if (over) {
      fmt::print("tbfs watch {}: the filesystem is {:.1f}% used (--warn-at {})\n",
                 Printable(loc->logdir), used_pct, args.warn_at);
    }
    if (soon) {
      fmt::print("tbfs watch {}: full in {} (--warn-within {})\n", Printable(loc->logdir),
                 HumanDuration(*g.full_in_s), args.warn_within);
    }
  } else {
    PrintWatchText(args, *loc, w, g, over, soon);
  }
  return over || soon ? kExitFinding : kExitOk;
}

}  // namespace

void RegisterWatch(CLI::App& app, int* exit_code) {
  auto args = std::make_shared<WatchArgs>();
  CLI::App* cmd = app.add_subcommand(
      "watch",
      "How fast a logdir grows, by class and by run, and when its filesystem will be "
      "full; keeps a series of samples in the store folder; exit 1 above --warn-at or "
      "when full within --warn-within");
  cmd->add_option("LOGDIR", args->logdir, "the logdir")->required();
  cmd->add_option("--store", args->store, kStoreOptionHelp);
  cmd->add_option("--interval", args->interval,
                  "without a sample this old, wait this long for a second one")
      ->capture_default_str();
  cmd->add_option("--window", args->window, "rates over the samples this recent")
      ->capture_default_str();
  cmd->add_option("--warn-at", args->warn_at, "exit 1 when the filesystem is this % used")
      ->capture_default_str();
  cmd->add_option("--warn-within", args->warn_within,
                  "exit 1 when the filesystem will be full within this long")
      ->capture_default_str();
  cmd->add_option("--top", args->top, "fastest-growing runs to list")
      ->capture_default_str()
      ->check(CLI::Range(0, 1000000));
  cmd->add_option("--plot", args->plot,
                  "also draw the series of the window as an SVG picture into FILE");
  cmd->add_flag("--json", args->json, "print the figures as JSON");
  cmd->add_flag("--quiet", args->quiet,
                "print nothing unless a warning (one line each; for cron: the exit status says "
                "which)")
      ->excludes("--json");
  cmd->callback([args, exit_code] { *exit_code = RunWatch(*args); });
}

}  // namespace tbfs::cli
