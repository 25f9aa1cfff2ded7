// The verifier: digests every tfevents file of a logdir and proves, against
// an optional baseline, that every record the baseline saw is still there.
//
// This is the check behind `tbfs verify` and behind every migration batch
// (invariant I3). A report is intact when no file is unreadable or corrupt,
// every baseline file still holds its records, and every must-have tag is
// present in some run.
#pragma once

#include <atomic>
#include <string>
#include <vector>

#include "events/baseline.h"
#include "events/logdir_digest.h"

namespace tbfs::events {

struct VerifyOptions {
  WalkOptions walk;                    // folders to skip (the store)
  std::vector<std::string> must_have;  // tags some run must hold
  const std::vector<FileDigest>* baseline = nullptr;
  int threads = 0;  // 0: one per core
  std::atomic<uint64_t>* bytes_done = nullptr;
  // The tfevents files (relative paths) when the caller's own walk found
  // them (ListEventFiles' rule): VerifyLogdir then walks nothing.
  const std::vector<std::string>* files = nullptr;
};

struct VerifyReport {
  LogdirDigest digest;
  std::vector<Failure> failures;
  uint64_t bytes = 0;  // bytes digested
  uint64_t records = 0;

  bool intact() const { return failures.empty(); }
};

// Re-digests the files of `before` (relative to logdir) and proves each
// still holds every record `before` saw. *now receives the fresh digests of
// the whole files (for must-have checks), in the order of `before`; a file
// that is gone or unreadable has an empty digest there.
std::vector<Failure> VerifyFiles(const std::string& logdir, const std::vector<FileDigest>& before,
                                 int threads, std::vector<FileDigest>* now);

// Fails only when the logdir cannot be walked; everything found inside is
// in the report.
Result<VerifyReport> VerifyLogdir(const std::string& logdir, const VerifyOptions& options);

}  // namespace tbfs::events
