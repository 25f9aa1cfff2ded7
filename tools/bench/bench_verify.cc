// tbfs-bench verify: throughput of the verifier on a generated logdir with
// about --events-mb of tfevents, against plain reads of the same files, in
// one run (warm page cache for both).
#include <fcntl.h>
#include <unistd.h>

#include <filesystem>
#include <tuple>

#include "base/fs_util.h"
#include "events/logdir_digest.h"
#include "events/verifier.h"
#include "fmt/format.h"
#include "tools/bench/bench.h"
#include "tools/cli/progress.h"
#include "tools/gen/gen.h"

namespace tbfs::bench {

namespace {
namespace verify_bench {

struct Args {
  std::string dir = "/tmp/tbfs-bench-verify";
  double events_mb = 1024;
  int runs = 8;
};

// Reads every file once with 1 MiB reads; returns bytes read.
uint64_t ReadAll(const std::string& logdir, const std::vector<std::string>& files) {
  std::vector<char> buf(1 << 20);
  uint64_t total = 0;
  for (const std::string& rel : files) {
    auto fd = OpenFile(JoinPath(logdir, rel), O_RDONLY);
    if (!fd.ok()) continue;
    ssize_t r;
    while ((r = ::read(fd->get(), buf.data(), buf.size())) > 0) total += static_cast<uint64_t>(r);
  }
  return total;
}

int Run(const Args& args) {
  namespace fs = std::filesystem;
  if (!fs::exists(args.dir)) {
    // Calibrate the generator's tfevents bytes per step, then write the logdir.
    std::string probe = args.dir + ".probe";
    fs::remove_all(probe);
    gen::GenOptions small;
    small.runs = 2;
    small.steps = 2000;
    small.trace_mb = 0;
    gen::GenReport rep;
    Status st = gen::GenerateLogdir(probe, small, &rep);
    fs::remove_all(probe);
    if (!st.ok()) {
      fmt::print(stderr, "bench verify: {}\n", st.message());
      return 2;
    }
    double per_step_run = static_cast<double>(rep.event_bytes) / (2.0 * small.steps);
    gen::GenOptions options;
    options.runs = args.runs;
    options.trace_mb = 0;
    options.steps = static_cast<int>(args.events_mb * 1024 * 1024 / per_step_run / args.runs);
    fmt::print("generating {} runs x {} steps into {} ...\n", options.runs, options.steps,
               args.dir);
    {
      cli::Progress progress("gen", 0);
      st = gen::GenerateLogdir(args.dir, options, &rep, progress.counter());
    }
    if (!st.ok()) {
      fmt::print(stderr, "bench verify: {}\n", st.message());
      return 2;
    }
  }
  std::vector<std::string> files;
  uint64_t total = 0;
  Status st = events::ListEventFiles(args.dir, {}, &files, &total);
  if (!st.ok() || files.empty()) {
    fmt::print(stderr, "bench verify: no tfevents files in {}\n", args.dir);
    return 2;
  }
  ReadAll(args.dir, files);  // warm the page cache

  double t0 = cli::NowSeconds();
  uint64_t read_bytes = ReadAll(args.dir, files);
  double read_s = cli::NowSeconds() - t0;

  auto verify = [&](int threads, events::VerifyReport* out) {
    events::VerifyOptions options;
    options.threads = threads;
    double start = cli::NowSeconds();
    auto report = events::VerifyLogdir(args.dir, options);
    double secs = cli::NowSeconds() - start;
    *out = std::move(report).value();
    return secs;
  };
  events::VerifyReport one, all;
  double one_s = verify(1, &one);
  double all_s = verify(0, &all);
  if (!all.intact()) {
    fmt::print(stderr, "bench verify: the logdir does not verify intact\n");
    return 1;
  }
  double mb = static_cast<double>(all.bytes) / 1e6;
  double read_mbps = static_cast<double>(read_bytes) / 1e6 / read_s;
  fmt::print("tfevents: {} files, {:.0f} MB, {} records ({:.0f} bytes/record)\n", files.size(), mb,
             all.records, static_cast<double>(all.bytes) / static_cast<double>(all.records));
  fmt::print("plain read, warm cache: {:8.0f} MB/s\n", read_mbps);
  for (auto [label, secs, report] : {std::tuple{"verify, 1 thread:     ", one_s, &one},
                                     std::tuple{"verify, all cores:    ", all_s, &all}}) {
    fmt::print("{} {:8.0f} MB/s  {:5.2f} M records/s  ({:.3f}x plain read)\n", label, mb / secs,
               static_cast<double>(report->records) / secs / 1e6, mb / secs / read_mbps);
  }
  return 0;
}

}  // namespace verify_bench
}  // namespace

void RegisterVerifyBench(CLI::App& app, int* exit_code) {
  using namespace verify_bench;  // its Args and Run
  auto args = std::make_shared<Args>();
  CLI::App* cmd = app.add_subcommand("verify", "verifier throughput vs plain reads");
  cmd->add_option("--dir", args->dir, "logdir to use; generated there when missing")
      ->capture_default_str();
  cmd->add_option("--events-mb", args->events_mb, "MiB of tfevents to generate")
      ->capture_default_str();
  cmd->add_option("--runs", args->runs, "runs to generate")->capture_default_str();
  cmd->callback([args, exit_code] { *exit_code = Run(*args); });
}

}  // namespace tbfs::bench
