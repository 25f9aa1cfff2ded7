// tbfs-bench cold: the performance table of issue 23, every row with its
// reference measured in the same run.
//   - migration of the traces (copy, compress, sync, read back, verify)
//     against `zstd -9 -T2` of the same files, time and size;
//   - first byte of a cold file, and a 4 KiB pread at a random offset, each
//     with a freshly started daemon (--rounds of them) and the page cache
//     dropped before every sample, against the uncompressed file on disk;
//   - every cold file read once, page cache dropped, against `zstd -d` of
//     the -9 files one after another;
//   - the daemon's peak RSS (VmHWM) after all of that, with --cache;
//   - `find -printf '%s %m %u'` over --tree-files small files and warm
//     tfevents reads, mount against native.
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <random>

#include "fmt/format.h"
#include "tools/bench/bench.h"
#include "tools/cli/progress.h"

namespace tbfs::bench {

namespace {
namespace cold_bench {

namespace fs = std::filesystem;

struct Args {
  std::string dir = "/tmp/tbfs-bench-cold";
  double trace_mb = 1024;
  int kineto_copies = 4;
  int tree_files = 50000;
  std::string cache = "256M";
  int rounds = 3;
  std::string tbfs = "tbfs";
  int migrations = 1;   // rounds of the migration's timing
  std::string against;  // another tbfs whose migration each round times too
};

double Seconds(const std::string& cmd) {
  double t0 = cli::NowSeconds();
  if (std::system(cmd.c_str()) != 0) fmt::print(stderr, "failed: {}\n", cmd);
  return cli::NowSeconds() - t0;
}

uint64_t TreeBytes(const std::string& dir) {
  uint64_t total = 0;
  for (auto& e : fs::recursive_directory_iterator(dir)) {
    struct stat st;
    if (::lstat(e.path().c_str(), &st) == 0 && S_ISREG(st.st_mode))
      total += static_cast<uint64_t>(st.st_blocks) * 512;
  }
  return total;
}

double Median(std::vector<double> v) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}
double Max(const std::vector<double>& v) {
  return v.empty() ? 0 : *std::max_element(v.begin(), v.end());
}

// Open + read of one byte. Seconds, or -1.
double FirstByte(const std::string& path) {
  double t0 = cli::NowSeconds();
  int fd = ::open(path.c_str(), O_RDONLY);
  if (fd < 0) return -1;
  char c;
  ssize_t n = ::read(fd, &c, 1);
  double s = cli::NowSeconds() - t0;
  ::close(fd);
  return n == 1 ? s : -1;
}

// A 4 KiB pread at `off` of an open file. Seconds, or -1.
double Pread4k(const std::string& path, off_t off) {
  int fd = ::open(path.c_str(), O_RDONLY);
  if (fd < 0) return -1;
  char buf[4096];
  double t0 = cli::NowSeconds();
  ssize_t n = ::pread(fd, buf, sizeof(buf), off);
  double s = cli::NowSeconds() - t0;
  ::close(fd);
  return n > 0 ? s : -1;
}

bool Mount(const Args& a, const std::string& logdir, const std::string& mnt) {
  return std::system(
             fmt::format("{} mount {} {} --no-migrate --cache {}", a.tbfs, logdir, mnt, a.cache)
                 .c_str()) == 0;
}

void Unmount(const std::string& mnt, int pid) {
  std::system(("fusermount3 -u " + mnt).c_str());
  for (int i = 0; i < 500 && fs::exists("/proc/" + std::to_string(pid)); ++i) ::usleep(10000);
}

int DaemonPid(const Args& a, const std::string& mnt) {
  auto st = nlohmann::json::parse(MountStatus(a.tbfs, mnt), nullptr, false);
  return st.is_object() && st.contains("pid") ? st["pid"].get<int>() : 0;
}

// Best of `n` runs of a shell command, seconds.
double BestOf(int n, const std::string& cmd) {
  double best = 1e9;
  for (int i = 0; i < n; ++i) best = std::min(best, Seconds(cmd));
  return best;
}

// The bench's folders, and what the generated logdir holds.
struct Bench {
  std::string logdir, mnt, native, zdir;
  std::vector<std::string> events, traces;  // relative paths, traces sorted
  uint64_t trace_bytes = 0;
  // What the migration moves besides the traces (its dry run's list: the
  // profiler's .gz and small .pb files), and their bytes.
  std::vector<std::string> others;
  uint64_t other_bytes = 0;
};

// Generates the logdir: traces, copies of the real Kineto trace, a tree of
// small files.
int Generate(const Args& a, Bench& b) {
  const std::string real = a.kineto_copies > 0 ? RealKinetoTrace() : "";
  if (a.kineto_copies > 0 && real.empty()) return 2;
  fmt::print("generating {} MiB of traces, {} copies of the real Kineto trace, {} small files\n",
             a.trace_mb, a.kineto_copies, a.tree_files);
  if (std::system(fmt::format("{} gen {} --runs 8 --steps 60000 --trace-mb {} --no-gzip >/dev/null",
                              a.tbfs, b.logdir, a.trace_mb)
                      .c_str()) != 0) {
    return 2;
  }
  if (a.kineto_copies > 0) {
    fs::create_directories(b.logdir + "/kineto/plugins/profile");
    for (int i = 0; i < a.kineto_copies; ++i) {
      std::system(
          fmt::format("zcat {} > {}/kineto/worker{}.pt.trace.json", real, b.logdir, i).c_str());
    }
  }
  for (int i = 0; i < a.tree_files; ++i) {
    std::string d = fmt::format("{}/tree/d{:03}", b.logdir, i / 100);
    if (i % 100 == 0) fs::create_directories(d);
    std::ofstream(fmt::format("{}/f{:03}.txt", d, i % 100)) << i;
  }
  for (auto& e : fs::recursive_directory_iterator(b.logdir)) {
    if (!e.is_regular_file()) continue;
    std::string rel = fs::relative(e.path(), b.logdir);
    if (rel.find("tfevents") != std::string::npos) b.events.push_back(rel);
    if (rel.ends_with(".pt.trace.json") || rel.ends_with(".xplane.pb") ||
        rel.ends_with(".trace.json")) {
      b.traces.push_back(rel);
      b.trace_bytes += e.file_size();
    }
  }
  std::sort(b.traces.begin(), b.traces.end());
  auto dry = nlohmann::json::parse(
      CommandOutput(fmt::format("{} migrate {} --older-than 0s --json", a.tbfs, b.logdir)), nullptr,
      false);
  if (!dry.is_object() || !dry.contains("candidates")) {
    fmt::print(stderr, "tbfs migrate --json (dry run) printed no candidates\n");
    return 2;
  }
  for (const auto& c : dry["candidates"]) {
    const std::string rel = c.value("path", "");
    if (std::find(b.traces.begin(), b.traces.end(), rel) != b.traces.end()) continue;
    b.others.push_back(rel);
    b.other_bytes += c.value("bytes", uint64_t{0});
  }
  return 0;
}

// tbfs migrate against zstd -9 -T2, one file after another, and against
// --against when given: --migrations rounds, the three one after the other
// in each (a shared machine's speed changes from minute to minute), each
// migration on a fresh copy of the logdir but the last, of the logdir.
void MeasureMigration(const Args& a, const Bench& b) {
  // A native copy of every trace (the reference for reads), and the zstd
  // -9 reference for migration, compressed one file after another.
  // The zstd reference compresses every file the migration moves.
  std::string copy, z9;
  for (size_t i = 0; i < b.traces.size(); ++i) {
    copy += fmt::format("cp '{}/{}' {}/{}; ", b.logdir, b.traces[i], b.native, i);
    z9 +=
        fmt::format("zstd -q -9 -T2 -f -c '{}/{}' > {}/{}.zst; ", b.logdir, b.traces[i], b.zdir, i);
  }
  for (size_t i = 0; i < b.others.size(); ++i) {
    z9 += fmt::format("zstd -q -9 -T2 -f -c '{}/{}' > {}/other{}.zst; ", b.logdir, b.others[i],
                      b.zdir, i);
  }
  std::system(copy.c_str());
  const std::string spare = a.dir + "/spare";
  auto migrate = [&](const std::string& tbfs, bool last) {
    const std::string logdir = last ? b.logdir : spare;
    if (!last) std::system(fmt::format("rm -rf {0} && cp -a {1} {0}", spare, b.logdir).c_str());
    DropCaches();
    return Seconds(fmt::format("{} migrate {} --apply --older-than 0s --json > {}/migrate.json",
                               tbfs, logdir, a.dir));
  };
  std::vector<double> zstd9, ours, theirs;
  uint64_t zstd9_bytes = 0, store_bytes = 0, their_bytes = 0;
  for (int r = 0; r < a.migrations; ++r) {
    DropCaches();
    zstd9.push_back(Seconds(z9));
    std::system("sync");
    zstd9_bytes = TreeBytes(b.zdir);
    if (!a.against.empty()) {
      theirs.push_back(migrate(a.against, false));
      their_bytes = TreeBytes(spare + "/.tbfs");
    }
    const bool last = r + 1 == a.migrations;
    ours.push_back(migrate(a.tbfs, last));
    store_bytes = TreeBytes((last ? b.logdir : spare) + "/.tbfs");
    if (a.migrations > 1 || !a.against.empty()) {
      fmt::print("migration round {}: zstd -9 -T2 {:.1f} s, tbfs {:.1f} s ({:.2f}x)", r + 1,
                 zstd9.back(), ours.back(), ours.back() / zstd9.back());
      if (!theirs.empty()) {
        fmt::print(", --against {:.1f} s ({:.2f}x)", theirs.back(), theirs.back() / zstd9.back());
      }
      fmt::print("\n");
    }
  }
  std::system(fmt::format("rm -rf {}", spare).c_str());
  auto ratios = [&](const std::vector<double>& t) {
    std::vector<double> r;
    for (size_t i = 0; i < t.size(); ++i) r.push_back(t[i] / zstd9[i]);
    return Median(r);
  };
  double tmb = static_cast<double>(b.trace_bytes) / 1e6;
  fmt::print(
      "\ntraces: {} files, {:.0f} MB; the migration moves {} more ({:.0f} MB: the profiler's .gz "
      "and small .pb), which zstd -9 -T2 compresses too\n",
      b.traces.size(), tmb, b.others.size(), static_cast<double>(b.other_bytes) / 1e6);
  fmt::print(
      "migration{}: tbfs migrate --apply {:.1f} s, {:.1f} MB stored; zstd -9 -T2 {:.1f} s, {:.1f} "
      "MB: {:.2f}x its time, {:.2f}x its size\n",
      a.migrations > 1 ? fmt::format(" (median of {})", a.migrations) : "", Median(ours),
      static_cast<double>(store_bytes) / 1e6, Median(zstd9), static_cast<double>(zstd9_bytes) / 1e6,
      ratios(ours), static_cast<double>(store_bytes) / static_cast<double>(zstd9_bytes));
  if (!theirs.empty()) {
    fmt::print(
        "migration by --against {}: {:.1f} s, {:.1f} MB stored: {:.2f}x zstd -9 -T2's time, "
        "{:.2f}x its size\n",
        a.against, Median(theirs), static_cast<double>(their_bytes) / 1e6, ratios(theirs),
        static_cast<double>(their_bytes) / static_cast<double>(zstd9_bytes));
  }
}

int MeasureLatency(const Args& a, const Bench& b) {
  // First byte and random preads: a fresh daemon for every round, page
  // cache dropped before every sample.
  std::vector<double> fb_mount, fb_native, pr_mount, pr_native;
  std::mt19937_64 rng(7);
  for (int round = 0; round < a.rounds; ++round) {
    if (!Mount(a, b.logdir, b.mnt)) return 2;
    for (size_t i = 0; i < b.traces.size(); ++i) {
      DropCaches();
      fb_native.push_back(FirstByte(fmt::format("{}/{}", b.native, i)));
      DropCaches();
      fb_mount.push_back(FirstByte(b.mnt + "/" + b.traces[i]));
      uint64_t size = fs::file_size(fmt::format("{}/{}", b.native, i));
      off_t off = static_cast<off_t>(rng() % (size - 4096)) & ~off_t{4095};
      DropCaches();
      pr_native.push_back(Pread4k(fmt::format("{}/{}", b.native, i), off));
      DropCaches();
      pr_mount.push_back(Pread4k(b.mnt + "/" + b.traces[i], off));
    }
    Unmount(b.mnt, DaemonPid(a, b.mnt));
  }
  fmt::print(
      "first byte of a cold file (open + read, page cache dropped, {} samples): mount median "
      "{:.2f} ms, max {:.2f} ms; native median {:.2f} ms, max {:.2f} ms\n",
      fb_mount.size(), 1e3 * Median(fb_mount), 1e3 * Max(fb_mount), 1e3 * Median(fb_native),
      1e3 * Max(fb_native));
  fmt::print(
      "4 KiB pread at a random offset (page cache dropped, {} samples): mount median {:.2f} ms, "
      "max {:.2f} ms; native median {:.2f} ms, max {:.2f} ms\n",
      pr_mount.size(), 1e3 * Median(pr_mount), 1e3 * Max(pr_mount), 1e3 * Median(pr_native),
      1e3 * Max(pr_native));

  return 0;
}

// Every cold file once, by a fresh daemon, page cache dropped; then
// metadata and hot reads, warm.
int MeasureReads(const Args& a, const Bench& b) {
  // Every cold file once, by a fresh daemon, page cache dropped.
  if (!Mount(a, b.logdir, b.mnt)) return 2;
  int pid = DaemonPid(a, b.mnt);
  std::vector<std::string> cold_paths, native_paths;
  for (size_t i = 0; i < b.traces.size(); ++i) {
    cold_paths.push_back(b.mnt + "/" + b.traces[i]);
    native_paths.push_back(fmt::format("{}/{}", b.native, i));
  }
  uint64_t bytes = 0;
  DropCaches();
  double mount_read = ReadFiles(cold_paths, &bytes);
  DropCaches();
  std::string unpack;  // the traces' frames, one after another
  for (size_t i = 0; i < b.traces.size(); ++i)
    unpack += fmt::format("zstd -q -d -c {}/{}.zst > /dev/null; ", b.zdir, i);
  double zstd_d = Seconds(unpack + "true");
  DropCaches();
  uint64_t native_bytes = 0;
  double native_read = ReadFiles(native_paths, &native_bytes);
  double mb = static_cast<double>(bytes) / 1e6;
  fmt::print(
      "every cold file read once (page cache dropped, {:.0f} MB): mount {:.2f} s ({:.0f} MB/s); "
      "zstd -d of the -9 files, one after another, {:.2f} s: mount {:.2f}x faster; the "
      "uncompressed files on disk {:.2f} s\n",
      mb, mount_read, mb / mount_read, zstd_d, zstd_d / mount_read, native_read);
  if (bytes != b.trace_bytes) {
    fmt::print(stderr, "read {} bytes through the mount, expected {}\n", bytes, b.trace_bytes);
  }
  fmt::print("daemon VmHWM after reading everything: {:.1f} MB (--cache {})\n",
             static_cast<double>(PeakRssKb(pid)) / 1024, a.cache);

  // Metadata and hot reads, warm.
  auto find = [&](const std::string& root) {
    return BestOf(3, fmt::format("find {}/tree -printf '%s %m %u\\n' > /dev/null", root));
  };
  find(b.logdir);
  find(b.mnt);
  double find_native = find(b.logdir), find_mount = find(b.mnt);
  fmt::print(
      "find -printf '%s %m %u' over {} files, warm: native {:.3f} s, mount {:.3f} s: {:.2f}x\n",
      a.tree_files, find_native, find_mount, find_mount / find_native);
  std::vector<std::string> ev_native, ev_mount;
  for (const auto& e : b.events) {
    ev_native.push_back(b.logdir + "/" + e);
    ev_mount.push_back(b.mnt + "/" + e);
  }
  double ev_n = 1e9, ev_m = 1e9;
  for (int pass = 0; pass < 5; ++pass) {
    ev_n = std::min(ev_n, ReadFiles(ev_native, &bytes));
    ev_m = std::min(ev_m, ReadFiles(ev_mount, &bytes));
  }
  fmt::print("tfevents read, warm ({:.0f} MB, best of 5): mount {:.2f}x native throughput\n",
             static_cast<double>(bytes) / 1e6, ev_n / ev_m);
  Unmount(b.mnt, pid);
  return 0;
}

int Run(const Args& a) {
  Bench b;
  b.logdir = a.dir + "/logdir";
  b.mnt = a.dir + "/mnt";
  b.native = a.dir + "/native";
  b.zdir = a.dir + "/zstd9";
  std::system(("fusermount3 -u " + b.mnt + " 2>/dev/null").c_str());
  fs::remove_all(a.dir);
  for (const auto& d : {b.mnt, b.native, b.zdir}) fs::create_directories(d);
  if (int r = Generate(a, b); r != 0) return r;
  MeasureMigration(a, b);
  if (int r = MeasureLatency(a, b); r != 0) return r;
  return MeasureReads(a, b);
}

}  // namespace cold_bench
}  // namespace

void RegisterColdBench(CLI::App& app, int* exit_code) {
  using namespace cold_bench;  // its Args and Run
  auto a = std::make_shared<Args>();
  CLI::App* cmd = app.add_subcommand("cold", "cold reads, memory and migration against references");
  cmd->add_option("--dir", a->dir, "scratch folder (wiped)")->capture_default_str();
  cmd->add_option("--trace-mb", a->trace_mb, "MiB of generated traces")->capture_default_str();
  cmd->add_option("--kineto-copies", a->kineto_copies, "copies of the real Kineto trace")
      ->capture_default_str();
  cmd->add_option("--tree-files", a->tree_files, "small files for find")->capture_default_str();
  cmd->add_option("--rounds", a->rounds, "fresh daemons for the first-byte samples")
      ->capture_default_str();
  cmd->add_option("--cache", a->cache, "the daemon's --cache")->capture_default_str();
  cmd->add_option("--tbfs", a->tbfs, "the tbfs command")->capture_default_str();
  cmd->add_option("--migrations", a->migrations, "rounds of the migration's timing (median)")
      ->capture_default_str()
      ->check(CLI::PositiveNumber);
  cmd->add_option("--against", a->against,
                  "another tbfs command whose migration each round times too");
  cmd->callback([a, exit_code] { *exit_code = Run(*a); });
}

}  // namespace tbfs::bench
