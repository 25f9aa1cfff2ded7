#include "base/time_util.h"
#include "fs/migrator.h"

#include <fcntl.h>

#include <chrono>

#include "spdlog/spdlog.h"

namespace tbfs::fs {

Migrator::Migrator(Filesystem& fs, MigratorConfig config) : fs_(fs), config_(std::move(config)) {}

Migrator::~Migrator() { Stop(); }

void Migrator::Start() {
  if (config_.background) thread_ = std::thread([this] { Loop(); });
}

void Migrator::Stop() {
  {
    MutexLock lock(mu_);
    stopping_ = true;
  }
  stop_flag_ = true;
  cv_.notify_all();
  if (thread_.joinable()) thread_.join();
}

void Migrator::Loop() {
  for (;;) {
    {
      MutexLock lock(mu_);
      if (cv_.wait_for(lock, std::chrono::seconds(config_.interval_s),
                       [&]() TBFS_NO_THREAD_SAFETY_ANALYSIS { return stopping_; })) {
        return;
      }
    }
    Status st = Pass();
    if (!st.ok()) spdlog::error("migrator: {}", st.message());
  }
}

int Migrator::RunNow() {
  Status st = Pass();
  if (!st.ok()) {
    spdlog::error("migrator: {}", st.message());
    MutexLock lock(mu_);
    stats_.last_error = st.message();
    return -EIO;
  }
  return 0;
}

void Migrator::AfterBatch(const store::BatchResult& batch) {
  MutexLock lock(mu_);
  stats_.batches++;
  if (batch.rolled_back) {
    stats_.rolled_back++;
    stats_.last_verifier = "failed: " + (batch.failures.empty() ? std::string("?")
                                                               : batch.failures[0].ToString());
  } else {
    stats_.last_verifier = "intact";
  }
}

Status Migrator::Pass() {
  MutexLock one(pass_mu_);
  store::CandidateOptions copt;
  copt.policy = config_.policy;
  copt.older_than_s = config_.cold_after_s;
  copt.walk = config_.walk;
  std::vector<store::Candidate> candidates;
  std::vector<store::Skipped> skipped;
  uint64_t hot_files = 0, hot_bytes = 0;
  std::vector<std::string> unwalked;  // named in the log; the rest goes on
  WalkOptions walk = config_.walk;
  walk.warnings = &unwalked;
  Status st = WalkTree(fs_.config().logdir, walk, [&](const WalkEntry& e) {
    if (S_ISREG(e.st.st_mode)) {
      hot_files++;
      hot_bytes += static_cast<uint64_t>(e.st.st_size);
    }
  });
  for (const std::string& w : unwalked) spdlog::warn("migrator: {}", w);
  if (st.ok()) st = store::FindCandidates(fs_.config().logdir, copt, &candidates, &skipped);
  {
    MutexLock lock(mu_);
    stats_.passes++;
    stats_.hot_files = hot_files;
    stats_.hot_bytes = hot_bytes;
    stats_.last_pass_unix = NowNs() / 1'000'000'000;
    stats_.last_error = st.ok() ? "" : st.message();
  }
  if (!st.ok()) return st;
  if (candidates.empty()) return Status::OK();

  store::MigrateOptions mopt;
  mopt.must_have = config_.must_have;
  mopt.walk = config_.walk;
  mopt.threads = 2;
  mopt.batch_files = 64;
  mopt.batch_bytes = 512ull << 20;
  mopt.stop = &stop_flag_;
  mopt.observer = &fs_;  // files stay visible and open handles keep reading as they move
  mopt.after_batch = [this](const store::BatchResult& b) { AfterBatch(b); };
  mopt.batch_lock = &fs_.namespace_lock();
  auto result = store::Migrate(fs_.store(), fs_.config().logdir, candidates, mopt);
  if (!result.ok()) return result.status();
  MutexLock lock(mu_);
  if (result->store_full) {
    stats_.stopped_store_full++;
    stats_.last_error = "the store is full: " + result->store_full_reason;
    spdlog::warn("migrator: {}; hot files stay hot until there is room", result->store_full_reason);
  }
  stats_.hot_files -= std::min(stats_.hot_files, result->files_moved);
  stats_.hot_bytes -= std::min(stats_.hot_bytes, result->bytes_moved);
  stats_.files_moved += result->files_moved;
  stats_.bytes_moved += result->bytes_moved;
  stats_.stored_bytes += result->stored_bytes;
  if (result->files_moved > 0) {
    spdlog::info("migrator: moved {} files, {} bytes -> {} stored", result->files_moved,
                 result->bytes_moved, result->stored_bytes);
  }
  return Status::OK();
}

MigratorStats Migrator::stats() {
  MutexLock lock(mu_);
  return stats_;
}

}  // namespace tbfs::fs
