// The logdir generator: a deterministic, realistic TensorBoard logdir.
//
// Runs are written the PyTorch way (simple_value scalars, HistogramProto,
// images, text, an hparams sub-run, *.pt.trace.json profiler traces) and the
// Keras / TF2 way (0-d tensor scalars whose metadata comes with the first
// value only, tensor histograms and images, and TensorFlow profiler output
// under plugins/profile/ with its profile-empty tfevents marker). Traces
// repeat one training step's op sequence with jittered timings, as real
// profiles do, so they compress like real ones. The same options and seed
// give byte-identical output. Layout: docs/generator.md.
#pragma once

#include <atomic>
#include <cstdint>
#include <string>

#include "base/status.h"

namespace tbfs::gen {

struct GenOptions {
  int runs = 4;          // number of training runs (PyTorch and Keras alternate)
  int steps = 2000;      // training steps per run
  double trace_mb = 64;  // total size of all profiler traces, MiB (approximate)
  uint64_t seed = 1;
  bool live_tail = false;    // leave a partial record at the end of one tfevents file
  bool gzip_pytorch = true;  // also write one *.pt.trace.json.gz per PyTorch run
};

struct GenReport {
  uint64_t files = 0;
  uint64_t event_files = 0;
  uint64_t event_bytes = 0;
  uint64_t trace_files = 0;
  uint64_t trace_bytes = 0;
};

// Writes a logdir into outdir, which must be missing or empty.
// `bytes_done`, when given, counts bytes written (for progress).
Status GenerateLogdir(const std::string& outdir, const GenOptions& options, GenReport* report,
                      std::atomic<uint64_t>* bytes_done = nullptr);

}  // namespace tbfs::gen
