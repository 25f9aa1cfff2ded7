// tbfs watch: how fast a logdir grows and when its filesystem will be full
// (store/growth.h), for people and for cron or monitoring checks.
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <thread>

#include "base/fs_util.h"
#include "base/text.h"
#include "base/units.h"
#include "fmt/format.h"
#include "fs/mount_table.h"
#include "store/growth.h"
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
std::string WhyNotKept(const std::string& dir) {
  struct stat st;
  if (::lstat(dir.c_str(), &st) != 0) return "does not exist, and watch makes no store folder";
  if (!S_ISDIR(st.st_mode)) return "is not a folder";
  if (st.st_uid != ::geteuid()) return fmt::format("belongs to uid {}", st.st_uid);
  if (::access(dir.c_str(), W_OK | X_OK) != 0) return "is not writable by this user";
  return "";
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
  store::Policy policy;
  const std::string not_kept = WhyNotKept(loc->own_dir);
  const bool keep = not_kept.empty();
  std::vector<store::GrowthSample> series;
  if (keep) series = store::LoadGrowthSeries(loc->own_dir);
  // A store this user cannot open (root's, 0700; damaged) leaves the cold
  // bytes out of both samples: the hot ones still show the growth, and
  // watching is what this command is for. Opened once for both samples.
  std::unique_ptr<store::ColdStore> cold;
  std::string cold_why;
  if (auto opened = OpenStoreForRead(*loc); opened.ok()) {
    cold = std::move(opened).value();
  } else {
    cold_why = opened.status().message();
  }
  const bool cold_unreadable = !cold_why.empty();
  auto sample = [&]() -> bool {
    auto s = store::TakeGrowthSample(loc->logdir, cold.get(), policy, loc->walk);
    if (!s.ok()) {
      PrintError("watch", s.status().message());
      return false;
    }
    if (!keep) {
      series.push_back(*s);
      return true;
    }
    Status saved = store::SaveGrowthSample(loc->own_dir, *s, &series);
    if (!saved.ok()) {
      PrintError("watch", "keeping the sample: " + saved.message());
      return false;
    }
    return true;
  };
  if (!sample()) return kExitError;
  // A rate needs an earlier sample: without one at least --interval old,
  // take a second one --interval after the first.
  const auto& now = series.back();
  const bool earlier = std::any_of(series.begin(), series.end(), [&](const auto& s) {
    return now.unix_s - s.unix_s >= static_cast<double>(*interval);
  });
  if (!earlier && *interval > 0) {
    if (::isatty(STDERR_FILENO) && !args.quiet) {
      fmt::print(stderr, "first sample {}; the next in {} for a rate...\n",
               keep ? "kept" : "taken", HumanDuration(*interval));
    }
    std::this_thread::sleep_for(std::chrono::seconds(*interval));
    if (!sample()) return kExitError;
  }
  const store::GrowthSummary g =
      *store::SummarizeGrowth(series, static_cast<double>(*window), args.top);
  const store::GrowthSample& last = g.last;
  const double used_pct = 100 * last.fs_used_fraction();
  const bool over = used_pct >= args.warn_at;
  const bool soon = g.full_in_s && *g.full_in_s < static_cast<double>(*within);
  const auto& logdir_rate = g.logdir_rate;
  const auto& disk_rate = g.filesystem_rate;
  const auto& full_in = g.full_in_s;
  const auto& runs = g.top_runs;
  const std::string full_in_text =
      full_in ? HumanDuration(*full_in) + " at this rate"
      : disk_rate && *disk_rate > 0
          ? "not filling now (nothing grew over the last " + HumanDuration(g.recent_span_s) + ")"
          : std::string("never at this rate");

  if (!args.plot.empty()) {
    std::vector<store::GrowthSample> shown;
    for (const auto& s : series) {
      if (s.unix_s >= last.unix_s - static_cast<double>(*window)) shown.push_back(s);
    }
    Status st = WriteFileAtomic(args.plot, GrowthSvg(shown, loc->logdir, args.warn_at), 0644);
    if (!st.ok()) {
      PrintError("watch", "--plot: " + st.message());
      return kExitError;
    }
  }
  if (args.json) {
    json j = {
        {"logdir", loc->logdir},
        {"bytes",
         {{"total", last.logdir_bytes()},
          {"tfevents", last.tfevents_bytes},
          {"traces_hot", last.trace_bytes},
          {"other", last.other_bytes},
          {"cold", last.cold_bytes},
          {"cold_stored", last.cold_stored_bytes}}},
        {"filesystem",
         {{"size", last.fs_size}, {"free", last.fs_free}, {"used_percent", used_pct}}},
        {"samples", g.samples},
        {"span_seconds", g.span_s},
        {"growth_bytes_per_hour", logdir_rate ? json(*logdir_rate * 3600) : json(nullptr)},
        {"filesystem_growth_bytes_per_hour", disk_rate ? json(*disk_rate * 3600) : json(nullptr)},
        {"recent",
         {{"span_seconds", g.recent_span_s},
          {"growth_bytes_per_hour",
           g.recent_logdir_rate ? json(*g.recent_logdir_rate * 3600) : json(nullptr)},
          {"filesystem_growth_bytes_per_hour",
           g.recent_filesystem_rate ? json(*g.recent_filesystem_rate * 3600) : json(nullptr)}}},
        {"full_in_seconds", full_in ? json(*full_in) : json(nullptr)},
        {"series_kept", keep},
        {"cold_bytes_known", !cold_unreadable},
        {"warn", over || soon},
        {"top_runs", json::array()}};
    for (const auto& [run, r] : runs)
      j["top_runs"].push_back({{"run", run}, {"bytes_per_hour", r * 3600}});
    PrintJson(j);
  } else if (args.quiet) {
    // For cron: nothing when all is well; each warning one line naming the logdir.
    if (over) {
      fmt::print("tbfs watch {}: the filesystem is {:.1f}% used (--warn-at {})\n",
                 Printable(loc->logdir), used_pct, args.warn_at);
    }
    if (soon) {
      fmt::print("tbfs watch {}: full in {} (--warn-within {})\n", Printable(loc->logdir),
                 HumanDuration(*full_in), args.warn_within);
    }
  } else {
    fmt::print("logdir {}: {} (tfevents {}, traces {} hot and {} cold, stored as {}; other {})\n",
               loc->logdir, HumanBytes(last.logdir_bytes()), HumanBytes(last.tfevents_bytes),
               HumanBytes(last.trace_bytes), HumanBytes(last.cold_bytes),
               HumanBytes(last.cold_stored_bytes), HumanBytes(last.other_bytes));
    fmt::print("filesystem: {:.1f}% used, {} free of {}\n", used_pct, HumanBytes(last.fs_free),
               HumanBytes(last.fs_size));
    fmt::print("growth over {} ({} samples): logdir {}, filesystem {}\n", HumanDuration(g.span_s),
               g.samples, logdir_rate ? HumanRate(*logdir_rate) : "unknown",
               disk_rate ? HumanRate(*disk_rate) : "unknown");
    for (const auto& [run, r] : runs) fmt::print("  {:>12}  {}\n", HumanRate(r), Printable(run));
    if (g.recent_logdir_rate) {
      fmt::print("growth over the last {}: logdir {}, filesystem {}\n",
                 HumanDuration(g.recent_span_s), HumanRate(*g.recent_logdir_rate),
                 HumanRate(*g.recent_filesystem_rate));
    }
    fmt::print("full in: {}\n", full_in_text);
    if (cold_unreadable) {
      fmt::print("cold files: not counted (the store cannot be read: {})\n", Printable(cold_why));
    }
    if (!keep) {
      fmt::print("series: not kept ({} {}); the rates are from this run's samples\n",
                 loc->own_dir, not_kept);
    }
    if (over)
      fmt::print("WARNING: the filesystem is {:.1f}% used (--warn-at {})\n", used_pct,
                 args.warn_at);
    if (soon)
      fmt::print("WARNING: full in {} (--warn-within {})\n", HumanDuration(*full_in),
                 args.warn_within);
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
  cmd->add_option("--top", args->top, "fastest-growing runs to list")->capture_default_str();
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
