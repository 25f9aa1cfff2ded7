// tbfs-bench stores: the embedded RocksDB store and a RADOS store through a
// real mount, in one run, on the same generated logdir:
//   - migration: `tbfs migrate --now` of every trace, MB/s of logical bytes;
//   - cold first byte: open + 1-byte read of each trace by a fresh daemon
//     (nothing cached), median;
//   - cold sequential read of every trace (page cache dropped).
// The RADOS side runs against whatever cluster --conf names; on the test
// cluster (one in-memory OSD on this machine) it measures the client path,
// not a network.
#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <nlohmann/json.hpp>

#include "base/status.h"
#include "fmt/format.h"
#include "tools/bench/bench.h"
#include "tools/cli/progress.h"

namespace tbfs::bench {

namespace {
namespace stores_bench {

namespace fs = std::filesystem;

struct Args {
  std::string conf;
  std::string pool = "tbfs";
  std::string dir = "/tmp/tbfs-bench-stores";
  double trace_mb = 512;
  std::string tbfs = "tbfs";
};

struct Figures {
  double migrate_mbps = 0;
  double first_byte_ms = 0;  // median
  double read_mbps = 0;
};

bool Sh(const std::string& cmd) { return std::system(cmd.c_str()) == 0; }

// One store: a fresh copy of the logdir, mounted, migrated, remounted, read.
Result<Figures> Measure(const Args& a, const std::string& name, const std::string& store_option,
                        const std::vector<std::string>& traces, uint64_t trace_bytes) {
  const std::string logdir = a.dir + "/" + name, mnt = a.dir + "/mnt-" + name;
  fs::create_directories(mnt);
  if (!Sh(fmt::format("cp -a {}/gen {}", a.dir, logdir)))
    return Status::FromErrno(EIO, "bench", "copy the logdir");
  const std::string mount = fmt::format("{} mount {} {} --no-migrate --cold-after 0 {}", a.tbfs,
                                        logdir, mnt, store_option);
  if (!Sh(mount)) return Status::FromErrno(EIO, "bench", "mount " + name);
  Figures f;
  DropCaches();
  double t0 = cli::NowSeconds();
  const bool migrated = Sh(fmt::format("{} migrate --now {} >/dev/null", a.tbfs, mnt));
  const double migrate_s = cli::NowSeconds() - t0;
  auto status = nlohmann::json::parse(MountStatus(a.tbfs, mnt), nullptr, false);
  const uint64_t moved =
      status.is_discarded() ? 0 : status["migrations"]["bytes_moved"].get<uint64_t>();
  Sh("fusermount3 -u " + mnt);
  if (!migrated || moved != trace_bytes) {
    return Status::FromErrno(EIO, "bench",
                             fmt::format("{}: migrated {} of {} bytes", name, moved, trace_bytes));
  }
  f.migrate_mbps = static_cast<double>(moved) / 1e6 / migrate_s;
  ::usleep(500000);  // the daemon lets go of the store
  if (!Sh(mount)) return Status::FromErrno(EIO, "bench", "remount " + name);
  std::vector<double> first;
  for (const auto& t : traces) {
    t0 = cli::NowSeconds();
    int fd = ::open((mnt + "/" + t).c_str(), O_RDONLY);
    char c;
    if (fd >= 0 && ::read(fd, &c, 1) == 1) first.push_back(cli::NowSeconds() - t0);
    if (fd >= 0) ::close(fd);
  }
  std::sort(first.begin(), first.end());
  if (!first.empty()) f.first_byte_ms = 1e3 * first[first.size() / 2];
  Sh("fusermount3 -u " + mnt);
  ::usleep(500000);
  if (!Sh(mount)) return Status::FromErrno(EIO, "bench", "remount " + name);
  DropCaches();
  std::vector<std::string> paths;
  for (const auto& t : traces) paths.push_back(mnt + "/" + t);
  uint64_t bytes = 0;
  const double read_s = ReadFiles(paths, &bytes);
  Sh("fusermount3 -u " + mnt);
  if (bytes != trace_bytes)
    return Status::FromErrno(EIO, "bench",
                             fmt::format("{}: read {} of {} bytes", name, bytes, trace_bytes));
  f.read_mbps = static_cast<double>(bytes) / 1e6 / read_s;
  return f;
}

int Run(const Args& a) {
  Sh(fmt::format(
      "fusermount3 -u {0}/mnt-rocksdb 2>/dev/null; fusermount3 -u {0}/mnt-rados 2>/dev/null",
      a.dir));
  fs::remove_all(a.dir);
  fs::create_directories(a.dir);
  fmt::print("generating a logdir with {} MiB of traces ...\n", a.trace_mb);
  if (!Sh(fmt::format("{} gen {}/gen --runs 4 --steps 2000 --trace-mb {} >/dev/null", a.tbfs, a.dir,
                      a.trace_mb))) {
    return 2;
  }
  std::vector<std::string> traces;
  uint64_t trace_bytes = 0;
  for (auto& e : fs::recursive_directory_iterator(a.dir + "/gen")) {
    std::string rel = fs::relative(e.path(), a.dir + "/gen");
    if (!e.is_regular_file() || rel.find("tfevents") != std::string::npos) continue;
    traces.push_back(rel);
    trace_bytes += e.file_size();
  }
  const std::string prefix = fmt::format("bench-{}", ::getpid());
  const std::string url = fmt::format("rados://{}/{}?conf={}", a.pool, prefix, a.conf);
  auto rocks = Measure(a, "rocksdb", "", traces, trace_bytes);
  auto rados = Measure(a, "rados", fmt::format("-o 'store={},state={}/state'", url, a.dir), traces,
                       trace_bytes);
  // Leave the pool as it was.
  Sh(fmt::format("rados -c {} -p {} ls | grep '^{}/' | xargs -r -n 256 rados -c {} -p {} rm",
                 a.conf, a.pool, prefix, a.conf, a.pool));
  for (const auto& [name, r] : {std::pair{"rocksdb", &rocks}, {"rados", &rados}}) {
    if (!r->ok()) {
      fmt::print(stderr, "tbfs-bench stores: {}: {}\n", name, r->status().message());
      return 2;
    }
  }
  fmt::print("{} traces, {:.0f} MB, through a mount\n", traces.size(),
             static_cast<double>(trace_bytes) / 1e6);
  fmt::print("{:<8} {:>14} {:>20} {:>16}\n", "store", "migrate MB/s", "cold first byte ms",
             "cold read MB/s");
  for (const auto& [name, f] : {std::pair{"rocksdb", *rocks}, {"rados", *rados}}) {
    fmt::print("{:<8} {:>14.0f} {:>20.2f} {:>16.0f}\n", name, f.migrate_mbps, f.first_byte_ms,
               f.read_mbps);
  }
  fmt::print("rados/rocksdb: migrate {:.2f}x, first byte {:.1f}x the time, cold read {:.2f}x\n",
             rados->migrate_mbps / rocks->migrate_mbps, rados->first_byte_ms / rocks->first_byte_ms,
             rados->read_mbps / rocks->read_mbps);
  return 0;
}

}  // namespace stores_bench
}  // namespace

void RegisterStoresBench(CLI::App& app, int* exit_code) {
  using namespace stores_bench;  // its Args and Run
  auto args = std::make_shared<Args>();
  CLI::App* cmd = app.add_subcommand(
      "stores",
      "The RocksDB and the RADOS store through a mount: migration, cold first byte, cold reads");
  cmd->add_option("--conf", args->conf,
                  "ceph.conf of the cluster to use (scripts/ceph-cluster.sh start DIR prints one)")
      ->required();
  cmd->add_option("--pool", args->pool, "its pool")->capture_default_str();
  cmd->add_option("--dir", args->dir, "scratch folder (wiped)")->capture_default_str();
  cmd->add_option("--trace-mb", args->trace_mb, "MiB of traces")
      ->capture_default_str()
      ->check(CLI::Range(16.0, 65536.0));
  cmd->add_option("--tbfs", args->tbfs, "the tbfs command")->capture_default_str();
  cmd->callback([args, exit_code] { *exit_code = Run(*args); });
}

}  // namespace tbfs::bench
