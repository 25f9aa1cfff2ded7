// What `tbfs migrate` prints: the dry run's plan, and the report of a
// migration, batch by batch, then its summary (text or JSON).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "store/migrate.h"

namespace tbfs::cli {

// A dry run's plan: the candidates, the skipped entries, the estimated
// ratio (from a sample of `sample` bytes) and what it would free.
void PrintPlan(const std::vector<store::Candidate>& candidates,
               const std::vector<store::Skipped>& skipped, double ratio, uint64_t sample,
               bool as_json, const std::string& logdir);

// The report, a batch at a time: JSON as one document whose "batches" are
// written as they end (Open, Batch..., Close), text as the lines of what
// did not move.
class BatchReport {
 public:
  explicit BatchReport(bool as_json) : json_(as_json) {}
  void Open(const std::string& logdir, const std::string& store_dir);
  void Batch(const store::BatchResult& b);
  // The summary (in JSON, the document's end) and the exit code.
  int Close(const Result<store::MigrateResult>& result, double secs, const std::string& archive);

 private:
  const bool json_;
  bool first_ = true;
};

}  // namespace tbfs::cli
