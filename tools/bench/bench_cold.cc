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
// With --against, another tbfs (an earlier build) migrates a copy of the
// logdir in every round, and its store's first bytes, preads and whole read
// are measured beside this one's: its daemon mounted at the same time,
// samples alternating.
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
  std::string against;  // another tbfs measured beside this one
  int read_rounds = 1;  // whole reads of every cold file, fresh daemons each
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

bool Mount(const Args& a, const std::string& tbfs, const std::string& logdir,
           const std::string& mnt) {
  return std::system(
             fmt::format("{} mount {} {} --no-migrate --cache {}", tbfs, logdir, mnt, a.cache)
                 .c_str()) == 0;
}

void Unmount(const std::string& mnt, int pid) {
  std::system(("fusermount3 -u " + mnt).c_str());
  for (int i = 0; i < 500 && fs::exists("/proc/" + std::to_string(pid)); ++i) ::usleep(10000);
}

int DaemonPid(const std::string& tbfs, const std::string& mnt) {
  auto st = nlohmann::json::parse(MountStatus(tbfs, mnt), nullptr, false);
  return st.is_object() && st.contains("pid") ? st["pid"].get<int>() : 0;
}

// Best of `n` runs of a shell command, seconds.
double BestOf(int n, const std::string& cmd) {
  double best = 1e9;
  for (int i = 0; i < n; ++i) best = std::min(best, Seconds(cmd));
  return best;
}

// A tbfs whose store is read: this build's, and --against's.
struct Subject {
  std::string tbfs, logdir, mnt;
  int pid = 0;  // its daemon's, while mounted
};

// The bench's folders, and what the generated logdir holds.
struct Bench {
  std::string logdir, mnt, native, zdir;
  std::string their_logdir, their_mnt;      // --against's migrated copy
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
    // And a link to it at the trace's own depth (a path walk as long).
    const std::string at = fmt::format("{}/at/{}", b.native, b.traces[i]);
    copy += fmt::format("cp '{}/{}' {}/{}; mkdir -p '{}'; ln {}/{} '{}'; ", b.logdir, b.traces[i],
                        b.native, i, fs::path(at).parent_path().string(), b.native, i, at);
    z9 +=
        fmt::format("zstd -q -9 -T2 -f -c '{}/{}' > {}/{}.zst; ", b.logdir, b.traces[i], b.zdir, i);
  }
  for (size_t i = 0; i < b.others.size(); ++i) {
    z9 += fmt::format("zstd -q -9 -T2 -f -c '{}/{}' > {}/other{}.zst; ", b.logdir, b.others[i],
                      b.zdir, i);
  }
  std::system(copy.c_str());
  // --against's last migration is kept: its store is read beside ours.
  const std::string spare = a.against.empty() ? a.dir + "/spare" : b.their_logdir;
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
  if (a.against.empty()) std::system(fmt::format("rm -rf {}", spare).c_str());
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

// This build's store, and --against's when given.
std::vector<Subject> Subjects(const Args& a, const Bench& b) {
  std::vector<Subject> s = {{a.tbfs, b.logdir, b.mnt}};
  if (!a.against.empty()) s.push_back({a.against, b.their_logdir, b.their_mnt});
  return s;
}

bool MountAll(const Args& a, std::vector<Subject>* subjects) {
  for (auto& s : *subjects) {
    if (!Mount(a, s.tbfs, s.logdir, s.mnt)) return false;
    s.pid = DaemonPid(s.tbfs, s.mnt);
  }
  return true;
}

void UnmountAll(std::vector<Subject>* subjects) {
  for (auto& s : *subjects) Unmount(s.mnt, s.pid);
}

// "median M ms, max X ms" of samples in seconds.
std::string Spread(const std::vector<double>& v) {
  return fmt::format("median {:.2f} ms, max {:.2f} ms", 1e3 * Median(v), 1e3 * Max(v));
}

int MeasureLatency(const Args& a, const Bench& b) {
  // First byte and random preads: fresh daemons for every round, page
  // cache dropped before every sample; with --against, which store goes
  // first alternates from file to file.
  std::vector<Subject> subjects = Subjects(a, b);
  std::vector<std::vector<double>> fb(subjects.size()), pr(subjects.size());
  std::vector<double> fb_native, pr_native, fb_at, walk_at, walk;
  std::mt19937_64 rng(7);
  for (int round = 0; round < a.rounds; ++round) {
    if (!MountAll(a, &subjects)) return 2;
    for (size_t i = 0; i < b.traces.size(); ++i) {
      const std::string native = fmt::format("{}/{}", b.native, i);
      uint64_t size = fs::file_size(native);
      off_t off = static_cast<off_t>(rng() % (size - 4096)) & ~off_t{4095};
      DropCaches();
      fb_native.push_back(FirstByte(native));
      DropCaches();
      pr_native.push_back(Pread4k(native, off));
      const std::string at = fmt::format("{}/at/{}", b.native, b.traces[i]);
      DropCaches();
      fb_at.push_back(FirstByte(at));
      DropCaches();
      walk_at.push_back(StatSeconds(at));
      DropCaches();
      walk.push_back(StatSeconds(subjects[0].mnt + "/" + b.traces[i]));
      for (size_t k = 0; k < subjects.size(); ++k) {
        const size_t s = (k + i) % subjects.size();
        const std::string path = subjects[s].mnt + "/" + b.traces[i];
        DropCaches();
        fb[s].push_back(FirstByte(path));
        DropCaches();
        pr[s].push_back(Pread4k(path, off));
      }
    }
    UnmountAll(&subjects);
  }
  fmt::print(
      "first byte of a cold file (open + read, page cache dropped, {} samples): mount {}; native "
      "{}\n",
      fb[0].size(), Spread(fb[0]), Spread(fb_native));
  fmt::print(
      "4 KiB pread at a random offset (page cache dropped, {} samples): mount {}; native {}\n",
      pr[0].size(), Spread(pr[0]), Spread(pr_native));
  // The native file above sits one folder down; a trace is deeper, and a
  // fresh path walk reads each folder's entries.
  fmt::print(
      "the native file at the trace's own path (a link in a copy of its folders): first byte {}; "
      "the path walk alone (stat, page cache dropped): mount {}, native at that path {}\n",
      Spread(fb_at), Spread(walk), Spread(walk_at));
  if (subjects.size() > 1) {
    fmt::print("--against's store, the same samples: first byte {}; 4 KiB pread {}\n",
               Spread(fb[1]), Spread(pr[1]));
  }
  return 0;
}

// Every cold file read once by each store's fresh daemon, and `zstd -d` of
// the -9 files, page cache dropped before each; --read-rounds rounds, the
// order reversed every other round. Then the daemon's VmHWM.
int MeasureWholeReads(const Args& a, const Bench& b) {
  std::vector<Subject> subjects = Subjects(a, b);
  std::string unpack;  // the traces' frames, one after another
  for (size_t i = 0; i < b.traces.size(); ++i)
    unpack += fmt::format("zstd -q -d -c {}/{}.zst > /dev/null; ", b.zdir, i);
  std::vector<std::string> native_paths;
  for (size_t i = 0; i < b.traces.size(); ++i)
    native_paths.push_back(fmt::format("{}/{}", b.native, i));
  std::vector<std::vector<double>> reads(subjects.size());
  std::vector<double> zstd_d, native;
  std::vector<uint64_t> hwm_kb(subjects.size(), 0);
  uint64_t bytes = 0;
  nlohmann::json found;  // how this build's reads found their chunks, the last round
  for (int round = 0; round < a.read_rounds; ++round) {
    if (!MountAll(a, &subjects)) return 2;
    // 0..n-1 the stores, n zstd -d, n+1 the files on disk.
    std::vector<size_t> order(subjects.size() + 2);
    for (size_t k = 0; k < order.size(); ++k) order[k] = k;
    if (round % 2 == 1) std::reverse(order.begin(), order.end());
    for (size_t k : order) {
      DropCaches();
      if (k == subjects.size()) {
        zstd_d.push_back(Seconds(unpack + "true"));
      } else if (k == subjects.size() + 1) {
        uint64_t native_bytes = 0;
        native.push_back(ReadFiles(native_paths, &native_bytes));
      } else {
        std::vector<std::string> paths;
        for (const auto& t : b.traces) paths.push_back(subjects[k].mnt + "/" + t);
        reads[k].push_back(ReadFiles(paths, &bytes));
        if (bytes != b.trace_bytes) {
          fmt::print(stderr, "read {} bytes through {}, expected {}\n", bytes, subjects[k].mnt,
                     b.trace_bytes);
        }
        hwm_kb[k] = std::max(hwm_kb[k], PeakRssKb(subjects[k].pid));
        if (k == 0) {
          auto st =
              nlohmann::json::parse(MountStatus(subjects[0].tbfs, subjects[0].mnt), nullptr, false);
          if (st.is_object() && st["cache"].contains("reads")) found = st["cache"]["reads"];
        }
      }
    }
    UnmountAll(&subjects);
  }
  auto faster = [&](const std::vector<double>& t) {  // median of zstd -d / t, round by round
    std::vector<double> r;
    for (size_t i = 0; i < t.size(); ++i) r.push_back(zstd_d[i] / t[i]);
    return Median(r);
  };
  const double mb = static_cast<double>(b.trace_bytes) / 1e6;
  const std::string of = a.read_rounds > 1 ? fmt::format(", median of {}", a.read_rounds) : "";
  fmt::print(
      "every cold file read once (page cache dropped, {:.0f} MB{}): mount {:.2f} s ({:.0f} MB/s); "
      "zstd -d of the -9 files, one after another, {:.2f} s: mount {:.2f}x faster; the "
      "uncompressed files on disk {:.2f} s\n",
      mb, of, Median(reads[0]), mb / Median(reads[0]), Median(zstd_d), faster(reads[0]),
      Median(native));
  fmt::print("daemon VmHWM after reading everything: {:.1f} MB (--cache {})\n",
             static_cast<double>(hwm_kb[0]) / 1024, a.cache);
  if (found.is_object()) {
    fmt::print(
        "the reads' chunk lookups (last round): {} ready, {} waited for a load, {} loaded by the "
        "read; {:.2f} s spent on the last two\n",
        found.value("ready", uint64_t{0}), found.value("waited", uint64_t{0}),
        found.value("loaded", uint64_t{0}), found.value("waiting_seconds", 0.0));
  }
  if (subjects.size() > 1) {
    fmt::print(
        "--against's store read the same way: {:.2f} s, {:.2f}x faster than zstd -d; VmHWM {:.1f} "
        "MB; this build / --against: {:.2f}x the speed\n",
        Median(reads[1]), faster(reads[1]), static_cast<double>(hwm_kb[1]) / 1024,
        faster(reads[0]) / faster(reads[1]));
  }
  return 0;
}

// Metadata and hot reads, warm: `find` over the small files and tfevents
// reads, mount against native.
int MeasureWarm(const Args& a, const Bench& b) {
  if (!Mount(a, a.tbfs, b.logdir, b.mnt)) return 2;
  int pid = DaemonPid(a.tbfs, b.mnt);
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
  uint64_t bytes = 0;
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
  b.their_logdir = a.dir + "/against";
  b.their_mnt = a.dir + "/against-mnt";
  for (const auto& m : {b.mnt, b.their_mnt})
    std::system(("fusermount3 -u " + m + " 2>/dev/null").c_str());
  fs::remove_all(a.dir);
  for (const auto& d : {b.mnt, b.their_mnt, b.native, b.zdir}) fs::create_directories(d);
  if (int r = Generate(a, b); r != 0) return r;
  MeasureMigration(a, b);
  if (int r = MeasureLatency(a, b); r != 0) return r;
  if (int r = MeasureWholeReads(a, b); r != 0) return r;
  return MeasureWarm(a, b);
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
                  "another tbfs command (an earlier build): its migration each round, and reads "
                  "of the store it made, beside this one's");
  cmd->add_option("--read-rounds", a->read_rounds,
                  "whole reads of every cold file by each store (median)")
      ->capture_default_str()
      ->check(CLI::PositiveNumber);
  cmd->callback([a, exit_code] { *exit_code = Run(*a); });
}

}  // namespace tbfs::bench
