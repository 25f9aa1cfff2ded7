#include "tools/cli/migrate_report.h"

#include <algorithm>
#include <nlohmann/json.hpp>

#include "base/text.h"
#include "base/units.h"
#include "fmt/format.h"
#include "tools/cli/commands.h"
#include "tools/cli/progress.h"

namespace tbfs::cli {

namespace {

using nlohmann::json;

const char* OutcomeName(store::Outcome o) {
  switch (o) {
    case store::Outcome::kMoved:
      return "moved";
    case store::Outcome::kChanged:
      return "left in place";  // the reason says why
    case store::Outcome::kDeleted:
      return "deleted";
    case store::Outcome::kFailed:
      return "failed";
    case store::Outcome::kRolledBack:
      return "rolled back";
  }
  return "?";
}

}  // namespace

void PrintPlan(const std::vector<store::Candidate>& candidates,
               const std::vector<store::Skipped>& skipped, double ratio, uint64_t sample,
               bool as_json, const std::string& logdir) {
  uint64_t total = 0;
  for (const auto& c : candidates) total += c.size;
  auto stored = static_cast<uint64_t>(static_cast<double>(total) / std::max(ratio, 1.0));
  if (as_json) {
    json j = {{"logdir", logdir},
              {"dry_run", true},
              {"files", candidates.size()},
              {"bytes", total},
              {"estimated_ratio", ratio},
              {"estimated_stored_bytes", stored},
              {"estimated_freed_bytes", total - stored},
              {"sample_bytes", sample}};
    for (const auto& c : candidates) {
      j["candidates"].push_back(
          {{"path", c.path}, {"class", std::string(store::ClassName(c.cls))}, {"bytes", c.size}});
    }
    for (const auto& s : skipped) j["skipped"].push_back({{"path", s.path}, {"reason", s.reason}});
    PrintJson(j);
    return;
  }
  for (const auto& c : candidates) {
    fmt::print("  {:>10}  {:<14} {}\n", HumanBytes(c.size), store::ClassName(c.cls),
               Printable(c.path));
  }
  for (const auto& s : skipped)
    fmt::print("  skipped: {} ({})\n", Printable(s.path), Printable(s.reason));
  fmt::print(
      "would migrate {} files, {}; estimated store size {} ({:.1f}x, from a {} sample): "
      "frees about {}\n",
      candidates.size(), HumanBytes(total), HumanBytes(stored), ratio, HumanBytes(sample),
      HumanBytes(total - stored));
  fmt::print("dry run: nothing changed. Run again with --apply to migrate.\n");
}

void BatchReport::Open(const std::string& logdir, const std::string& store_dir) {
  if (!json_) return;
  std::string head = json{{"logdir", logdir}, {"store", store_dir}, {"dry_run", false}}.dump(
      -1, ' ', false, json::error_handler_t::replace);
  head.pop_back();  // the closing brace: the batches and the summary follow
  NoteJsonPrinted();
  fmt::print("{},\n\"batches\": [", head);
}

void BatchReport::Batch(const store::BatchResult& b) {
  if (json_) {
    json jb = {
        {"batch", b.batch_id}, {"rolled_back", b.rolled_back}, {"runs_verified", b.runs_verified}};
    if (!b.unsynced.empty()) jb["unsynced"] = b.unsynced;
    if (!b.uncommitted.empty()) jb["uncommitted"] = b.uncommitted;
    if (!b.not_run.empty()) jb["not_run"] = b.not_run;
    for (const auto& f : b.failures) jb["verifier_failures"].push_back(f.ToString());
    for (const auto& f : b.files) {
      jb["files"].push_back({{"path", f.path},
                             {"outcome", OutcomeName(f.outcome)},
                             {"reason", f.reason},
                             {"bytes", f.bytes},
                             {"stored_bytes", f.stored_bytes}});
    }
    fmt::print("{}\n{}", first_ ? "" : ",",
               jb.dump(-1, ' ', false, json::error_handler_t::replace));
  } else {
    for (const auto& f : b.files) {
      if (f.outcome != store::Outcome::kMoved) {
        fmt::print("  {}: {} ({})\n", Printable(f.path), OutcomeName(f.outcome),
                   Printable(f.reason));
      }
    }
    for (const auto& f : b.failures) fmt::print("  VERIFIER FAILURE: {}\n", f.ToString());
    if (!b.unsynced.empty()) {
      fmt::print(
          "  batch {}: NOT SYNCED: {} (its journal record stays: the next writer's "
          "recovery undoes it)\n",
          b.batch_id, Printable(b.unsynced));
    }
    if (!b.uncommitted.empty()) {
      fmt::print(
          "  batch {}: NOT COMMITTED: {} (its journal record stays: the next writer's recovery "
          "puts its files back in place; no batch followed)\n",
          b.batch_id, Printable(b.uncommitted));
    }
    if (!b.not_run.empty()) {
      fmt::print("  batch {}: NOT RUN, its files stay in place: {}\n", b.batch_id,
                 Printable(b.not_run));
    }
    for (const auto& r : b.runs_verified) {
      fmt::print("  run {}: scalars {}\n", Printable(r),
                 b.failures.empty() ? "intact" : "CHECK FAILED, rolled back");
    }
  }
  first_ = false;
}

int BatchReport::Close(const Result<store::MigrateResult>& result, double secs,
                       const std::string& archive) {
  if (json_) {
    json tail = result.ok() ? json{{"files_moved", result->files_moved},
                                   {"bytes_moved", result->bytes_moved},
                                   {"stored_bytes", result->stored_bytes},
                                   {"ratio", Ratio(result->bytes_moved, result->stored_bytes)},
                                   {"seconds", secs},
                                   {"flushes", result->flushes},
                                   {"flush_seconds", result->flush_seconds},
                                   {"backup", archive},
                                   {"ok", result->ok()},
                                   {"store_full", result->store_full}}
                            : json{{"error", result.status().message()}, {"ok", false}};
    if (result.ok() && result->store_full) tail["store_full_reason"] = result->store_full_reason;
    if (result.ok()) {
      tail["blocked_runs"] = json::array();
      for (const store::BlockedRun& b : result->blocked_runs) {
        tail["blocked_runs"].push_back({{"run", b.run.empty() ? "." : b.run},
                                        {"file", b.file},
                                        {"reason", b.reason},
                                        {"traces", b.traces}});
      }
    }
    fmt::print("\n],\n{}\n", tail.dump(-1, ' ', false, json::error_handler_t::replace).substr(1));
  }
  if (!result.ok()) {
    PrintError("migrate", result.status().message());
    return kExitError;
  }
  if (!json_) {
    if (!archive.empty()) fmt::print("backup: {}\n", archive);
    fmt::print("moved {} files: {} -> {} in the store ({:.1f}x) in {:.1f}s ({:.0f} MB/s)\n",
               result->files_moved, HumanBytes(result->bytes_moved),
               HumanBytes(result->stored_bytes), Ratio(result->bytes_moved, result->stored_bytes),
               secs, static_cast<double>(result->bytes_moved) / 1e6 / std::max(secs, 1e-9));
    if (result->flushes > 0) {
      fmt::print("engine flushes before the unlinks: {}, {:.2f}s in all ({:.1f}% of the time)\n",
                 result->flushes, result->flush_seconds,
                 100 * result->flush_seconds / std::max(secs, 1e-9));
    }
    for (const store::BlockedRun& b : result->blocked_runs) {
      fmt::print("HELD: run {}: {} trace(s) stay hot: {}\n", Printable(b.run.empty() ? "." : b.run),
                 b.traces, Printable(b.reason));
    }
  }
  if (result->store_full) {
    PrintError(
        "migrate",
        "stopped: " + result->store_full_reason +
            "; what moved is cold, the rest stays in place (free space, or --store elsewhere)");
    return kExitError;
  }
  // A run held hot (its tfevents file cannot be read) is a finding too.
  return result->ok() && result->blocked_runs.empty() ? kExitOk : kExitFinding;
}

}  // namespace tbfs::cli
