// tbfs-bench mount: the mount against the backing folder, in one run.
//   - sequential reads of every tfevents file, cold and warm page cache;
//   - a find + stat walk over a tree of --tree-files small files;
//   - cold traces: time to the first byte, and sequential throughput
//     against `zstd -d` of the same data (zstd -3) to /dev/null;
//   - the daemon's peak RSS (VmHWM) with the default cache.
#include <fcntl.h>
#include <ftw.h>
#include <sys/stat.h>
#include <sys/xattr.h>
#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "base/fs_util.h"
#include "fmt/format.h"
#include "tools/bench/bench.h"
#include "tools/cli/progress.h"

namespace tbfs::bench {

namespace {
namespace mount_bench {

namespace fs = std::filesystem;

struct Args {
  std::string dir = "/tmp/tbfs-bench-mount";
  double trace_mb = 3072;
  int tree_files = 50000;
  std::string tbfs = "tbfs";
};

uint64_t g_walked = 0;
int CountStat(const char* path, const struct stat*, int type, struct FTW*) {
  struct stat st;
  if (type == FTW_F && ::stat(path, &st) == 0) g_walked++;
  return 0;
}

// find DIR -type f -exec stat: nftw plus a stat per file. Returns seconds.
double Walk(const std::string& root) {
  g_walked = 0;
  double t0 = cli::NowSeconds();
  ::nftw(root.c_str(), CountStat, 64, FTW_PHYS);
  return cli::NowSeconds() - t0;
}

std::vector<std::string> Paths(const std::string& root, const std::vector<std::string>& rels) {
  std::vector<std::string> out;
  for (const auto& r : rels) out.push_back(root + "/" + r);
  return out;
}

// tfevents files read through the mount and natively, cold then warm
// page cache.
void MeasureEvents(const std::string& logdir, const std::string& mnt,
                   const std::vector<std::string>& events) {
  uint64_t bytes = 0;
  DropCaches();
  double native_cold = ReadFiles(Paths(logdir, events), &bytes);
  DropCaches();
  double mount_cold = ReadFiles(Paths(mnt, events), &bytes);
  // Warm: the best of five passes each, alternating (the passes are short).
  double native_warm = 1e9, mount_warm = 1e9;
  for (int pass = 0; pass < 5; ++pass) {
    native_warm = std::min(native_warm, ReadFiles(Paths(logdir, events), &bytes));
    mount_warm = std::min(mount_warm, ReadFiles(Paths(mnt, events), &bytes));
  }
  double mb = static_cast<double>(bytes) / 1e6;
  fmt::print("\ntfevents sequential read, {} files, {:.0f} MB\n", events.size(), mb);
  fmt::print("  cold cache: native {:7.0f} MB/s, mount {:7.0f} MB/s: {:.2f}x native\n",
             mb / native_cold, mb / mount_cold, native_cold / mount_cold);
  fmt::print("  warm cache (best of 5): native {:7.0f} MB/s, mount {:7.0f} MB/s: {:.2f}x native\n",
             mb / native_warm, mb / mount_warm, native_warm / mount_warm);
}

int Run(const Args& a) {
  std::string logdir = a.dir + "/logdir", mnt = a.dir + "/mnt";
  std::system(("fusermount3 -u " + mnt + " 2>/dev/null").c_str());
  fs::remove_all(a.dir);
  fs::create_directories(mnt);
  fmt::print("generating a logdir with {} MiB of traces and {} small files ...\n", a.trace_mb,
             a.tree_files);
  if (std::system(fmt::format("{} gen {} --runs 8 --steps 60000 --trace-mb {} >/dev/null", a.tbfs,
                              logdir, a.trace_mb)
                      .c_str()) != 0) {
    return 2;
  }
  for (int i = 0; i < a.tree_files; ++i) {
    std::string d = fmt::format("{}/tree/d{:03}", logdir, i / 100);
    if (i % 100 == 0) fs::create_directories(d);
    std::ofstream(fmt::format("{}/f{:03}.txt", d, i % 100)) << i;
  }
  std::vector<std::string> events, traces;
  for (auto& e : fs::recursive_directory_iterator(logdir)) {
    if (!e.is_regular_file()) continue;
    std::string rel = fs::relative(e.path(), logdir);
    if (rel.find("tfevents") != std::string::npos) events.push_back(rel);
    if (rel.ends_with(".pt.trace.json") || rel.ends_with(".xplane.pb")) traces.push_back(rel);
  }
  // zstd -3 copies of the traces, for the reference decompression.
  std::string zdir = a.dir + "/zstd";
  fs::create_directories(zdir);
  std::string script;
  for (size_t i = 0; i < traces.size(); ++i) {
    script += fmt::format("zstd -q -3 -T2 -c '{}/{}' > {}/{}.zst; ", logdir, traces[i], zdir, i);
  }
  std::system(script.c_str());

  if (std::system(
          fmt::format("{} mount {} {} --no-migrate --cold-after 0", a.tbfs, logdir, mnt).c_str()) !=
      0) {
    return 2;
  }
  int pid = nlohmann::json::parse(MountStatus(a.tbfs, mnt))["pid"].get<int>();

  // 1. tfevents, cold then warm page cache.
  MeasureEvents(logdir, mnt, events);

  // 2. find + stat.
  Walk(logdir);
  Walk(mnt);
  double native_walk = Walk(logdir);
  uint64_t native_files = g_walked;
  double mount_walk = Walk(mnt);
  fmt::print("find + stat of {} files: native {:.2f}s, mount {:.2f}s: {:.2f}x native time\n",
             native_files, native_walk, mount_walk, mount_walk / native_walk);

  // 3. cold traces, read by a fresh daemon (as they are, long after they moved).
  std::system(fmt::format("{} migrate --now {} >/dev/null", a.tbfs, mnt).c_str());
  uint64_t rss_migrating_kb = PeakRssKb(pid);
  std::system(("fusermount3 -u " + mnt).c_str());
  for (int i = 0; i < 200 && fs::exists("/proc/" + std::to_string(pid)); ++i) ::usleep(10000);
  if (std::system(fmt::format("{} mount {} {} --no-migrate", a.tbfs, logdir, mnt).c_str()) != 0) {
    return 2;
  }
  pid = nlohmann::json::parse(MountStatus(a.tbfs, mnt))["pid"].get<int>();
  std::vector<double> first_byte;
  for (const auto& t : traces) {
    double t0 = cli::NowSeconds();
    int fd = ::open((mnt + "/" + t).c_str(), O_RDONLY);
    char c;
    if (fd >= 0 && ::read(fd, &c, 1) == 1) first_byte.push_back(cli::NowSeconds() - t0);
    if (fd >= 0) ::close(fd);
  }
  std::sort(first_byte.begin(), first_byte.end());
  DropCaches();
  uint64_t cold_bytes = 0;
  double cold_read = ReadFiles(Paths(mnt, traces), &cold_bytes);
  double zstd_s;
  {
    DropCaches();
    double t0 = cli::NowSeconds();
    std::system(fmt::format("cat {}/*.zst | zstd -q -d -c > /dev/null", zdir).c_str());
    zstd_s = cli::NowSeconds() - t0;
  }
  double cmb = static_cast<double>(cold_bytes) / 1e6;
  fmt::print("cold traces: {} files, {:.0f} MB\n", traces.size(), cmb);
  if (!first_byte.empty()) {
    fmt::print("  time to first byte: median {:.2f} ms, max {:.2f} ms\n",
               1e3 * first_byte[first_byte.size() / 2], 1e3 * first_byte.back());
  }
  fmt::print(
      "  sequential read: mount {:.0f} MB/s, zstd -d (of zstd -3) {:.0f} MB/s: {:.2f}x zstd -d\n",
      cmb / cold_read, cmb / zstd_s, zstd_s / cold_read);

  // 4. peak RSS, default cache.
  auto st = nlohmann::json::parse(MountStatus(a.tbfs, mnt));
  fmt::print(
      "daemon peak RSS: {:.1f} MB while migrating the logdir, {:.1f} MB while reading it "
      "back (cache capacity {:.0f} MB; {:.1f} GB cold)\n",
      static_cast<double>(rss_migrating_kb) / 1024, static_cast<double>(PeakRssKb(pid)) / 1024,
      st["cache"]["capacity_bytes"].get<double>() / 1048576,
      st["cold"]["bytes"].get<double>() / 1e9);
  std::system(("fusermount3 -u " + mnt).c_str());
  return 0;
}

}  // namespace mount_bench
}  // namespace

void RegisterMountBench(CLI::App& app, int* exit_code) {
  using namespace mount_bench;  // its Args and Run
  auto a = std::make_shared<Args>();
  CLI::App* cmd = app.add_subcommand("mount", "the mount vs the backing folder");
  cmd->add_option("--dir", a->dir, "scratch folder (wiped)")->capture_default_str();
  cmd->add_option("--trace-mb", a->trace_mb, "MiB of traces")->capture_default_str();
  cmd->add_option("--tree-files", a->tree_files, "small files for the walk")->capture_default_str();
  cmd->add_option("--tbfs", a->tbfs, "the tbfs command")->capture_default_str();
  cmd->callback([a, exit_code] { *exit_code = Run(*a); });
}

}  // namespace tbfs::bench
