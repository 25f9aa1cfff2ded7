// tbfs-bench recompress: what `tbfs recompress MOUNTPOINT` costs the mount
// that does it while it serves, against the offline command on a copy of
// the same logdir, in one run:
//   - the time of each, and the store's size before and after;
//   - a reader beside the mount's run: every cold file read through the
//     mount, page cache dropped after each pass, its pass times before,
//     during and after (each pass's bytes counted, and every file compared
//     with its original at the end);
//   - the daemon's peak resident set before and after.
// The logdir: `tbfs gen` traces plus copies of the real Kineto trace,
// migrated offline (level 9) before either run.
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <thread>

#include "fmt/format.h"
#include "tools/bench/bench.h"
#include "tools/cli/progress.h"

namespace tbfs::bench {

namespace {
namespace recompress_bench {

namespace fs = std::filesystem;

struct Args {
  std::string dir = "/tmp/tbfs-bench-recompress";
  double trace_mb = 256;
  int kineto_copies = 4;
  std::string kineto = "../shared/data/kineto-resnet50/worker0.1623143089861.pt.trace.json.gz";
  int level = 15;
  std::string cache = "256M";
  std::string tbfs = "tbfs";
};

bool Sh(const std::string& cmd) { return std::system(cmd.c_str()) == 0; }

struct Passes {
  std::vector<double> seconds;
  bool short_read = false;
  double Median() const {
    std::vector<double> s = seconds;
    std::sort(s.begin(), s.end());
    return s.empty() ? 0 : s[s.size() / 2];
  }
  double Max() const {
    return seconds.empty() ? 0 : *std::max_element(seconds.begin(), seconds.end());
  }
};

// One pass of the reader: every file read whole, then the page cache
// dropped (the next pass reads cold files again).
void ReadPass(const std::vector<std::string>& paths, uint64_t want, Passes* p) {
  uint64_t bytes = 0;
  p->seconds.push_back(ReadFiles(paths, &bytes));
  p->short_read |= bytes != want;
  DropCaches();
}

struct Run {
  nlohmann::json report;  // recompress --json
  double seconds = 0;     // as the client saw it
};

Result<Run> Recompress(const Args& a, const std::string& target) {
  const double t0 = cli::NowSeconds();
  std::string out =
      CommandOutput(fmt::format("{} recompress {} --level {} --json", a.tbfs, target, a.level));
  Run r;
  r.seconds = cli::NowSeconds() - t0;
  r.report = nlohmann::json::parse(out, nullptr, false);
  if (r.report.is_discarded() || !r.report.contains("files")) {
    return Status::FromErrno(EIO, "recompress " + target, "no report: " + out);
  }
  return r;
}

int Main(const Args& a) {
  const std::string gen = a.dir + "/gen", logdir = a.dir + "/logdir", copy = a.dir + "/offline",
                    mnt = a.dir + "/mnt";
  Sh("fusermount3 -u " + mnt + " 2>/dev/null");
  fs::remove_all(a.dir);
  fs::create_directories(mnt);
  fmt::print("generating {} MiB of traces and {} copies of the real Kineto trace ...\n", a.trace_mb,
             a.kineto_copies);
  if (!Sh(fmt::format("{} gen {} --runs 4 --steps 2000 --trace-mb {} --seed 3 >/dev/null", a.tbfs,
                      gen, a.trace_mb))) {
    return 2;
  }
  if (a.kineto_copies > 0 && fs::exists(a.kineto)) {
    fs::create_directories(gen + "/kineto");
    for (int i = 0; i < a.kineto_copies; ++i) {
      Sh(fmt::format("zcat {} > {}/kineto/worker{}.pt.trace.json", a.kineto, gen, i));
    }
  }
  if (!Sh(fmt::format("cp -a {} {} && {} migrate {} --apply --older-than 0s --min-size 0 "
                      "--allow-no-events >/dev/null 2>&1 && cp -a {} {}",
                      gen, logdir, a.tbfs, logdir, logdir, copy))) {
    fmt::print(stderr, "tbfs-bench recompress: could not migrate {}\n", logdir);
    return 2;
  }
  // The cold files: what the logdir holds that the generated one does not
  // hold as a regular file any more is in the store; read them all.
  auto cold = nlohmann::json::parse(CommandOutput(fmt::format("{} ls {} --json", a.tbfs, logdir)),
                                    nullptr, false);
  std::vector<std::string> rel, paths;
  uint64_t cold_bytes = 0;
  for (const auto& f : cold.is_array() ? cold : nlohmann::json::array()) {
    rel.push_back(f["path"].get<std::string>());
    paths.push_back(mnt + "/" + rel.back());
    cold_bytes += fs::file_size(gen + "/" + rel.back());
  }
  if (rel.empty()) {
    fmt::print(stderr, "tbfs-bench recompress: nothing went cold in {}\n", logdir);
    return 2;
  }
  fmt::print("{} cold files, {:.0f} MiB\n", rel.size(),
             static_cast<double>(cold_bytes) / (1 << 20));

  if (!Sh(fmt::format("{} mount {} {} --no-migrate --cache {}", a.tbfs, logdir, mnt, a.cache))) {
    return 2;
  }
  auto status = nlohmann::json::parse(MountStatus(a.tbfs, mnt), nullptr, false);
  const int pid = status.is_discarded() ? 0 : status.value("pid", 0);
  Passes before, during, after;
  for (int i = 0; i < 5; ++i) ReadPass(paths, cold_bytes, &before);
  const uint64_t hwm_before = PeakRssKb(pid);
  std::atomic<bool> stop{false};
  std::thread reader([&] {
    while (!stop.load()) ReadPass(paths, cold_bytes, &during);
  });
  fmt::print("recompressing through the mount at level {}, a reader beside it ...\n", a.level);
  Result<Run> mounted = Recompress(a, mnt);
  stop = true;
  reader.join();
  for (int i = 0; i < 3; ++i) ReadPass(paths, cold_bytes, &after);
  const uint64_t hwm_after = PeakRssKb(pid);
  int differ = 0;
  for (const auto& r : rel) {
    differ += !Sh(fmt::format("cmp -s '{}/{}' '{}/{}'", gen, r, mnt, r));
  }
  Sh("fusermount3 -u " + mnt);
  fmt::print("recompressing the copy offline ...\n");
  Result<Run> offline = Recompress(a, copy);
  for (const auto& [name, r] : {std::pair{"mount", &mounted}, {"offline", &offline}}) {
    if (!r->ok()) {
      fmt::print(stderr, "tbfs-bench recompress: {}: {}\n", name, r->status().message());
      return 2;
    }
  }
  auto mib = [](const nlohmann::json& j, const char* key) {
    return static_cast<double>(j.value(key, uint64_t{0})) / (1 << 20);
  };
  const nlohmann::json &m = mounted->report, &o = offline->report;
  fmt::print("\n{} cold files, {:.0f} MiB; level {}\n", rel.size(),
             static_cast<double>(cold_bytes) / (1 << 20), a.level);
  fmt::print("{:<34} {:>28} {:>22}\n", "", "through the mount", "offline");
  fmt::print("{:<34} {:>26.1f} s {:>20.1f} s\n", "time", mounted->seconds, offline->seconds);
  fmt::print("{:<34} {:>14.1f} -> {:>5.1f} MiB {:>8.1f} -> {:>5.1f} MiB\n", "stored",
             mib(m, "stored_before"), mib(m, "stored_after"), mib(o, "stored_before"),
             mib(o, "stored_after"));
  fmt::print("{:<34} {:>14.1f} -> {:>5.1f} MiB {:>8.1f} -> {:>5.1f} MiB\n", "the store on disk",
             mib(m, "disk_before"), mib(m, "disk_after"), mib(o, "disk_before"),
             mib(o, "disk_after"));
  fmt::print("{:<34} {:>28} {:>22}\n", "files recompressed / failed",
             fmt::format("{} / {}", m.value("files", 0), m["failed"].size()),
             fmt::format("{} / {}", o.value("files", 0), o["failed"].size()));
  fmt::print(
      "reader pass ({:.0f} MiB): before median {:.2f} s; during median {:.2f} s, max {:.2f} s "
      "({} passes); after median {:.2f} s\n",
      static_cast<double>(cold_bytes) / (1 << 20), before.Median(), during.Median(), during.Max(),
      during.seconds.size(), after.Median());
  fmt::print("daemon VmHWM: {:.1f} MB before, {:.1f} MB after (--cache {})\n",
             static_cast<double>(hwm_before) * 1024 / 1e6,
             static_cast<double>(hwm_after) * 1024 / 1e6, a.cache);
  fmt::print("mount / offline time: {:.2f}x\n", mounted->seconds / offline->seconds);
  const bool wrong = before.short_read || during.short_read || after.short_read || differ > 0 ||
                     !m["failed"].empty() || !o["failed"].empty();
  if (wrong) {
    fmt::print(stderr, "tbfs-bench recompress: WRONG: short reads {}, files that differ {}\n",
               before.short_read || during.short_read || after.short_read, differ);
    return 1;
  }
  return 0;
}

}  // namespace recompress_bench
}  // namespace

void RegisterRecompressBench(CLI::App& app, int* exit_code) {
  using namespace recompress_bench;  // its Args and Main
  auto a = std::make_shared<Args>();
  CLI::App* cmd = app.add_subcommand(
      "recompress", "tbfs recompress through a mount with a reader beside it, and offline");
  cmd->add_option("--dir", a->dir, "scratch folder (wiped)")->capture_default_str();
  cmd->add_option("--trace-mb", a->trace_mb, "MiB of generated traces")->capture_default_str();
  cmd->add_option("--kineto-copies", a->kineto_copies, "copies of the real Kineto trace")
      ->capture_default_str();
  cmd->add_option("--kineto", a->kineto, "the real Kineto trace (.gz)")->capture_default_str();
  cmd->add_option("--level", a->level, "recompress's --level")
      ->capture_default_str()
      ->check(CLI::Range(1, 22));
  cmd->add_option("--cache", a->cache, "the daemon's --cache")->capture_default_str();
  cmd->add_option("--tbfs", a->tbfs, "the tbfs command")->capture_default_str();
  cmd->callback([a, exit_code] { *exit_code = Main(*a); });
}

}  // namespace tbfs::bench
