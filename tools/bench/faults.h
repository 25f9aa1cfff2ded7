// tbfs-bench faults (bench_faults.cc): what its two halves share. The
// crash trials are in bench_faults_crash.cc.
#pragma once

#include <array>
#include <cstdint>
#include <map>
#include <string>

#include "base/status.h"

namespace tbfs::bench::faults {

struct Args {
  std::string dir = "/tmp/tbfs-bench-faults";
  std::string tbfs = "tbfs";
  int trials = 200;
  int crash_trials = 20;
  int small_traces = 600;
  double trace_mb = 8;
  uint64_t seed = 1;
  bool json = false;
};

struct CrashTotals {
  uint64_t trials = 0;
  uint64_t finished = 0;    // the run ended before the kill
  uint64_t not_opened = 0;  // no writer could open the store after the damage
  std::string open_error;   // the first such open's error
  uint64_t recorded_lost = 0;
  // By kind of file (its class): files, lost, wrong bytes.
  std::map<std::string, std::array<uint64_t, 3>> by_class;
};

// --crash-trials trials of `tbfs migrate --apply` killed at a random
// instant, then a zeroed block of the engine's log, then a writer's open:
// every trace must be in the logdir or in the store, byte for byte.
Status CrashTrials(const Args& a, CrashTotals* t);

// The generator's logdir of the bench (3 runs, --trace-mb of traces).
Status GenerateLogdir(const Args& a, const std::string& logdir);
std::string Slurp(const std::string& path);

}  // namespace tbfs::bench::faults
