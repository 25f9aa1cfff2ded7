// tbfs-bench scale: a big logdir through a mount, against the same logdir
// read natively, in one run:
//   - offline `tbfs migrate --apply` of the cold half: time and peak RSS
//     per file;
//   - a walk (nftw + lstat of every entry, as `find -printf '%s %m'`) with
//     the kernel's caches dropped, native and through the mount, twice;
//   - the daemon's RSS after the walks, and per inode the kernel holds;
//   - `tbfs status` time;
//   - the mount's start (store open to a mount that answers);
//   - an idle pass (`tbfs migrate --now`, nothing to move) against a `find`
//     of the same tree, both warm;
//   - a rename of the folder that holds every cold file through the mount,
//     while another thread looks up fresh names beside it: the rename's
//     time and the longest lookup;
//   - the time from an unmount to the daemon's exit while a pass runs.
// The logdir: run folders of --per-folder small traces (migrated, so cold)
// and as many small hot files in folders of the same size.
#include <ftw.h>
#include <signal.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <thread>

#include "fmt/format.h"
#include "tools/bench/bench.h"
#include "tools/cli/progress.h"

namespace tbfs::bench {

namespace {
namespace scale_bench {

namespace fs = std::filesystem;

struct Args {
  std::string dir = "/tmp/tbfs-bench-scale";
  uint64_t files = 100000;  // half cold, half hot
  int per_folder = 1000;
  std::string cache = "32M";
  std::string tbfs = "tbfs";
};

bool Sh(const std::string& cmd) { return std::system(cmd.c_str()) == 0; }

uint64_t g_entries = 0;
int CountEntry(const char*, const struct stat*, int, struct FTW*) {
  g_entries++;
  return 0;
}

// nftw without FTW_PHYS's extra stat: one lstat per entry, as find does.
double Walk(const std::string& root, uint64_t* entries) {
  g_entries = 0;
  double t0 = cli::NowSeconds();
  ::nftw(root.c_str(), CountEntry, 64, FTW_PHYS);
  *entries = g_entries;
  return cli::NowSeconds() - t0;
}

// Runs a command and returns its exit status, wall seconds and peak RSS.
struct Ran {
  int code = -1;
  double seconds = 0;
  uint64_t max_rss_kb = 0;
};
Ran RunMeasured(const std::string& cmd) {
  Ran r;
  double t0 = cli::NowSeconds();
  pid_t pid = ::fork();
  if (pid == 0) {
    ::execl("/bin/sh", "sh", "-c", cmd.c_str(), static_cast<char*>(nullptr));
    ::_exit(127);
  }
  int status = 0;
  struct rusage ru {};
  ::wait4(pid, &status, 0, &ru);
  r.seconds = cli::NowSeconds() - t0;
  r.code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  r.max_rss_kb = static_cast<uint64_t>(ru.ru_maxrss);
  return r;
}

void MakeFiles(const std::string& root, uint64_t count, int per_folder, const char* pattern) {
  for (uint64_t i = 0; i < count; ++i) {
    std::string d = fmt::format("{}/d{:05}", root, i / per_folder);
    if (i % per_folder == 0) fs::create_directories(d);
    std::ofstream(fmt::format(fmt::runtime(pattern), d, i % per_folder))
        << R"({"traceEvents": [{"ph": "X", "name": "op", "ts": )" << i << "}]}";
  }
}

int MountPid(const Args& a, const std::string& mnt) {
  auto st = nlohmann::json::parse(MountStatus(a.tbfs, mnt), nullptr, false);
  return st.is_discarded() ? -1 : st["pid"].get<int>();
}

void WaitGone(int pid, double limit_s) {
  double t0 = cli::NowSeconds();
  while (::kill(pid, 0) == 0 && cli::NowSeconds() - t0 < limit_s) ::usleep(5000);
}

// A rename of every cold file's folder (runs/), with a lookup loop beside
// it: how long it takes and the longest lookup it holds up.
void MeasureRename(const std::string& mnt, uint64_t cold) {
  std::atomic<bool> stop{false};
  double longest = 0;
  uint64_t lookups = 0;
  std::thread looker([&] {
    struct stat sb;
    while (!stop.load()) {
      // A fresh name each time: the kernel has no entry for it cached.
      std::string p = fmt::format("{}/hot/absent-{}", mnt, lookups++);
      double s0 = cli::NowSeconds();
      ::lstat(p.c_str(), &sb);
      longest = std::max(longest, cli::NowSeconds() - s0);
    }
  });
  ::usleep(200000);
  double r0 = cli::NowSeconds();
  const bool renamed = ::rename((mnt + "/runs").c_str(), (mnt + "/runs-renamed").c_str()) == 0;
  const double rename_s = cli::NowSeconds() - r0;
  ::usleep(200000);
  stop = true;
  looker.join();
  uint64_t moved = 0;
  Walk(mnt + "/runs-renamed", &moved);
  fmt::print(
      "rename of the folder of {} cold files: {:.2f} s{}; {} entries beneath it after; "
      "longest lookup beside it {:.0f} ms (of {})\n",
      cold, rename_s, renamed ? "" : " (FAILED)", moved, 1e3 * longest, lookups);
}

// The daemon's own account of its memory (tbfs status --json), in MB.
void PrintMemory(const char* when, const std::string& status) {
  auto j = nlohmann::json::parse(status, nullptr, false);
  if (j.is_discarded() || !j.contains("memory")) return;
  const nlohmann::json& m = j["memory"];
  auto mb = [](const nlohmann::json& v) { return static_cast<double>(v.get<uint64_t>()) / 1e6; };
  fmt::print(
      "{}: RSS {:.1f} MB; heap {:.1f} MB in use, {:.1f} MB free; engine: table files {:.1f} MB, "
      "block cache {:.1f} MB, memtables {:.1f} MB\n",
      when, mb(m["rss_bytes"]), mb(m["heap"]["in_use_bytes"]), mb(m["heap"]["free_bytes"]),
      mb(m["engine"]["table_readers_bytes"]), mb(m["engine"]["block_cache_bytes"]),
      mb(m["engine"]["memtables_bytes"]));
}

int Run(const Args& a) {
  const std::string logdir = a.dir + "/logdir", mnt = a.dir + "/mnt";
  Sh("fusermount3 -u " + mnt + " 2>/dev/null");
  fs::remove_all(a.dir);
  fs::create_directories(mnt);
  const uint64_t cold = a.files / 2, hot = a.files - cold;
  fmt::print("generating {} files: {} traces to migrate, {} hot, {} to a folder ...\n", a.files,
             cold, hot, a.per_folder);
  if (!Sh(fmt::format("{} gen {} --runs 2 --steps 200 --trace-mb 1 >/dev/null", a.tbfs, logdir)))
    return 2;  // the runs' curves, which every batch verifies
  MakeFiles(logdir + "/runs", cold, a.per_folder, "{}/t{:05}.pt.trace.json");
  MakeFiles(logdir + "/hot", hot, a.per_folder, "{}/f{:05}.txt");

  // The reference: the same tree, every file in place, on the same disk.
  const std::string native_copy = a.dir + "/native";
  if (!Sh(fmt::format("cp -a {} {}", logdir, native_copy))) return 2;
  Ran mig =
      RunMeasured(fmt::format("{} migrate {} --apply --older-than 0s >/dev/null", a.tbfs, logdir));
  if (mig.code != 0) return 2;
  fmt::print("offline migrate --apply of {} files: {:.1f} s, peak RSS {:.0f} MB ({:.0f} B/file)\n",
             cold, mig.seconds, static_cast<double>(mig.max_rss_kb) / 1024,
             1024.0 * static_cast<double>(mig.max_rss_kb) / static_cast<double>(cold));

  double t_mount = cli::NowSeconds();
  if (!Sh(fmt::format("{} mount {} {} --no-migrate --cache {}", a.tbfs, logdir, mnt, a.cache)))
    return 2;
  t_mount = cli::NowSeconds() - t_mount;
  fmt::print("mount start ({} cold files in the store): {:.2f} s\n", cold, t_mount);
  const int pid = MountPid(a, mnt);
  const uint64_t rss_before = ProcStatusKb(pid, "VmRSS");
  PrintMemory("daemon memory at start", MountStatus(a.tbfs, mnt));
  uint64_t native_entries = 0, mount_entries = 0;
  DropCaches();
  const double native = Walk(native_copy, &native_entries);
  DropCaches();
  const double first = Walk(mnt, &mount_entries);
  const double second = Walk(mnt, &mount_entries);  // kernel caches warm
  DropCaches();
  const double third = Walk(mnt, &mount_entries);  // the daemon's state warm
  auto st = nlohmann::json::parse(MountStatus(a.tbfs, mnt), nullptr, false);
  const uint64_t inodes = st.is_discarded() ? 0 : st["inodes"].get<uint64_t>();
  const uint64_t rss_after = ProcStatusKb(pid, "VmRSS");
  PrintMemory("daemon memory after the walks", MountStatus(a.tbfs, mnt));
  fmt::print(
      "walk of {} entries (mount: {}), kernel caches dropped: native {:.2f} s, mount {:.2f} s "
      "({:.2f}x native); again with the caches warm {:.2f} s; dropped again {:.2f} s "
      "({:.2f}x)\n",
      native_entries, mount_entries, native, first, first / native, second, third, third / native);
  fmt::print(
      "daemon RSS: {:.0f} MB before the walks, {:.0f} MB after (--cache {}); {} inodes "
      "held: {:.0f} B each\n",
      static_cast<double>(rss_before) / 1024, static_cast<double>(rss_after) / 1024, a.cache,
      inodes,
      inodes == 0 ? 0.0
                  : 1024.0 * static_cast<double>(rss_after - std::min(rss_after, rss_before)) /
                        static_cast<double>(inodes));

  std::vector<double> status_s;
  for (int i = 0; i < 5; ++i) {
    double t0 = cli::NowSeconds();
    MountStatus(a.tbfs, mnt);
    status_s.push_back(cli::NowSeconds() - t0);
  }
  std::sort(status_s.begin(), status_s.end());
  fmt::print("tbfs status: median {:.0f} ms\n", 1e3 * status_s[2]);

  // An idle pass walks the backing logdir; the reference is find over the
  // native copy, both with the caches warm (each run once before).
  Sh(fmt::format("find {} -printf '%s %m\\n' >/dev/null", native_copy));
  double t1 = cli::NowSeconds();
  Sh(fmt::format("find {} -printf '%s %m\\n' >/dev/null", native_copy));
  const double find_s = cli::NowSeconds() - t1;
  const std::string idle = fmt::format("{} migrate --now {} >/dev/null 2>&1", a.tbfs, mnt);
  Sh(idle);
  t1 = cli::NowSeconds();
  const bool idle_ok = Sh(idle);
  const double idle_s = cli::NowSeconds() - t1;
  fmt::print(
      "idle pass (nothing to move): {:.2f} s{}; find of the native copy {:.2f} s "
      "({:.2f}x find)\n",
      idle_s, idle_ok ? "" : " (FAILED)", find_s, idle_s / find_s);

  MeasureRename(mnt, cold);

  // Shutdown during a pass: the hot half's folders get traces to migrate.
  MakeFiles(logdir + "/late", std::min<uint64_t>(hot, 20000), a.per_folder,
            "{}/t{:05}.pt.trace.json");
  const std::string pass = fmt::format("{} migrate --now {} >/dev/null 2>&1", a.tbfs, mnt);
  pid_t runner = ::fork();
  if (runner == 0) {
    ::execl("/bin/sh", "sh", "-c", pass.c_str(), static_cast<char*>(nullptr));
    ::_exit(127);
  }
  ::sleep(2);
  double t0 = cli::NowSeconds();
  Sh("fusermount3 -u " + mnt);
  WaitGone(pid, 120);
  const double shutdown = cli::NowSeconds() - t0;
  ::waitpid(runner, nullptr, 0);
  fmt::print("unmount during a pass: the daemon exited {:.2f} s after fusermount3 -u\n", shutdown);
  return 0;
}

}  // namespace scale_bench
}  // namespace

void RegisterScaleBench(CLI::App& app, int* exit_code) {
  using namespace scale_bench;  // its Args and Run
  auto a = std::make_shared<Args>();
  CLI::App* cmd = app.add_subcommand("scale", "a big logdir: walks, memory, status, shutdown");
  cmd->add_option("--dir", a->dir, "scratch folder (wiped)")->capture_default_str();
  cmd->add_option("--files", a->files, "files in the logdir (half migrated)")
      ->capture_default_str();
  cmd->add_option("--per-folder", a->per_folder, "files per folder")->capture_default_str();
  cmd->add_option("--cache", a->cache, "the mount's --cache")->capture_default_str();
  cmd->add_option("--tbfs", a->tbfs, "the tbfs command")->capture_default_str();
  cmd->callback([a, exit_code] { *exit_code = Run(*a); });
}

}  // namespace tbfs::bench
