// The footprint of a logdir by class: what `tbfs scan` reports.
//
// Every regular file is classified by the policy (store/classify.h);
// tfevents files are further split by the bytes of their records into
// scalars / histograms / images / other (file_version, graphs, text, hparams,
// partial tails), using the digests of events/. Read-only; thread-safe.
#pragma once

#include <array>
#include <atomic>
#include <cstdint>
#include <string>
#include <vector>

#include "base/fs_util.h"
#include "base/status.h"
#include "store/classify.h"

namespace tbfs::store {

inline constexpr int kNumClasses = 5;  // FileClass values

struct ClassTotal {
  uint64_t files = 0;
  uint64_t bytes = 0;
};

struct EventsSplit {
  uint64_t scalars = 0;
  uint64_t histograms = 0;
  uint64_t images = 0;
  uint64_t other = 0;
};

struct FileEntry {
  std::string path;  // relative
  uint64_t bytes = 0;
  FileClass cls = FileClass::kOther;
};

struct Footprint {
  std::array<ClassTotal, kNumClasses> classes{};  // indexed by FileClass
  EventsSplit events;
  std::vector<FileEntry> largest;  // the largest files, biggest first
  uint64_t total_files = 0;
  uint64_t total_bytes = 0;
  uint64_t trace_files = 0;  // files of a trace class, not protected
  uint64_t trace_bytes = 0;
  std::vector<std::string> warnings;  // unreadable or corrupt tfevents files

  const ClassTotal& of(FileClass c) const { return classes[static_cast<int>(c)]; }
};

struct ScanOptions {
  WalkOptions walk;
  size_t largest = 20;
  std::atomic<uint64_t>* bytes_done = nullptr;
};

// Fails only when the logdir cannot be walked.
Result<Footprint> ScanLogdir(const std::string& logdir, const Policy& policy,
                             const ScanOptions& options);

}  // namespace tbfs::store
