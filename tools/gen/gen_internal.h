// Internals shared by the generator's parts (events_gen.cc, traces_gen.cc,
// gen.cc). Not a public interface.
#pragma once

#include <atomic>
#include <string>

#include "tools/gen/gen.h"
#include "tools/gen/rng.h"
#include "tools/gen/sink.h"

namespace tbfs::gen {

struct Ctx {
  std::string logdir;
  GenOptions options;
  GenReport* report = nullptr;
  std::atomic<uint64_t>* progress = nullptr;
  double base_time = 0;  // wall time of the first event, seconds
  std::string host;
  int pid = 0;

  // Records a finished file in the report.
  void CountEvents(uint64_t bytes) {
    report->files++;
    report->event_files++;
    report->event_bytes += bytes;
  }
  void CountTrace(uint64_t bytes) {
    report->files++;
    report->trace_files++;
    report->trace_bytes += bytes;
  }
};

// A PyTorch SummaryWriter run: RUN/events.out.tfevents.*, an hparams
// sub-run, and PyTorch profiler traces worth about trace_bytes.
Status WritePytorchRun(Ctx& ctx, const std::string& run, Rng& rng, uint64_t trace_bytes,
                       bool live_tail);
// A Keras run: RUN/train and RUN/validation (.v2 files), with TensorFlow
// profiler output worth about trace_bytes under RUN/train/plugins/profile/.
Status WriteKerasRun(Ctx& ctx, const std::string& run, Rng& rng, uint64_t trace_bytes);

// Trace writers (traces_gen.cc). Each writes about target_bytes to path.
Status WriteKinetoTrace(Ctx& ctx, const std::string& path, Rng& rng, uint64_t target_bytes,
                        double start_s, bool gzip);
Status WriteTfProfile(Ctx& ctx, const std::string& dir, Rng& rng, uint64_t target_bytes,
                      double start_s);

}  // namespace tbfs::gen
