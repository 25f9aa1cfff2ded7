// The migrator's holds: runs whose check failed after their batch moved,
// their owners' traces, and the runs a damaged tfevents file keeps hot;
// the batches whose end the store refused; and the recompression it runs
// between passes (fs/migrator.h).
#include <nlohmann/json.hpp>

#include "base/heap.h"
#include "fmt/format.h"
#include "fs/migrator.h"
#include "spdlog/spdlog.h"

namespace tbfs::fs {

namespace {

// A run that failed the check after its batch moved stays hot this long:
// one user cannot make every pass roll back everyone's batches.
constexpr int64_t kHoldAfterFailureNs = 600ll * 1'000'000'000;

// What a recompress through the mount borrows of the chunk cache.
constexpr uint64_t kRecompressBytes = 48ull << 20;

}  // namespace

void Migrator::CurrentHolds(int64_t now, std::map<std::string, std::string>* runs,
                            std::set<uint32_t>* owners) {
  for (auto it = held_.begin(); it != held_.end();) {
    if (it->second.until_ns <= now) {
      it = held_.erase(it);
    } else {
      (*runs)[it->first] = it->second.why;
      ++it;
    }
  }
  for (auto it = held_owners_.begin(); it != held_owners_.end();) {
    if (it->second <= now) {
      it = held_owners_.erase(it);
    } else {
      owners->insert(it->first);
      ++it;
    }
  }
}

void Migrator::HoldFailed(const store::MigrateResult& result, int64_t now,
                          std::set<uint32_t>* owners) {
  for (const auto& [folder, why] : result.failed_runs) {
    spdlog::warn(
        "migrator: run {} failed the check after its batch moved; its batch rolled back "
        "and ran again without it; its traces stay hot for {} s: {}",
        folder.empty() ? "." : folder, kHoldAfterFailureNs / 1'000'000'000, why);
    held_[folder] = {now + kHoldAfterFailureNs,
                     "failed the check after its batch moved (held for a while): " + why};
  }
  for (uint32_t uid : result.failed_owners) {
    spdlog::warn(
        "migrator: every trace of uid {} stays hot for {} s: a tfevents file of theirs "
        "failed the check after its batch moved",
        uid, kHoldAfterFailureNs / 1'000'000'000);
    held_owners_[uid] = now + kHoldAfterFailureNs;
    owners->insert(uid);
  }
}

void Migrator::NoteBlockedRuns(std::vector<store::BlockedRun> runs) {
  std::vector<std::string> lines;
  for (const store::BlockedRun& b : runs) {
    // Without the trace count: a line that changed with every new trace
    // would be logged every pass (the count is in status).
    lines.push_back(fmt::format("{} ({})", b.run.empty() ? "." : b.run, b.reason));
  }
  blocked_log_.Log(lines);
  MutexLock lock(mu_);
  stats_.blocked_runs = std::move(runs);
}

void Migrator::CommitRefusedBatches() {
  {
    MutexLock lock(mu_);
    if (refused_batches_.empty()) return;
  }
  // Deferred by the store (ColdStore::Defer): any write it took since
  // committed them already.
  Status st = store_.CommitDeferred();
  MutexLock lock(mu_);
  if (!st.ok()) {
    spdlog::warn("migrator: batch {} and later still not committed: {}",
                 refused_batches_.front().id, st.message());
  }
  NoteRefusedLanded();
}

void Migrator::NoteRefusedLanded() {
  const uint64_t landed = store_.deferred_landed();
  for (auto it = refused_batches_.begin(); it != refused_batches_.end();) {
    if (landed == it->landed) {
      ++it;
      continue;
    }
    spdlog::info("migrator: batch {} committed (the store had refused it)", it->id);
    stats_.files_moved += it->files;
    stats_.bytes_moved += it->bytes;
    stats_.stored_bytes += it->stored_bytes;
    const std::string said = "batch " + std::to_string(it->id) + " not committed: ";
    if (stats_.last_error.find(said) != std::string::npos) stats_.last_error.clear();
    it = refused_batches_.erase(it);
  }
}

MigratorStats Migrator::stats() {
  MutexLock lock(mu_);
  NoteRefusedLanded();
  return stats_;
}

Result<store::RecompressReport> Migrator::Recompress(int level, bool dictionaries) {
  if (ReadOnly()) {
    return Status::FromErrno(EROFS, "recompress",
                             "the mount is read-only: nothing is compressed again (mount -o "
                             "remount,rw MOUNTPOINT first)");
  }
  // Before the pass lock, which a running one takes again after each file.
  if (recompressing_.exchange(true)) {
    return Status::Busy("another tbfs recompress is running on this mount");
  }
  {
    MutexLock one(pass_mu_);
    if (!store_.writer()) {
      recompressing_ = false;
      return Status::Busy(store_.shared()
                              ? "this mount reads the shared store " + store_.dir() +
                                    "; run it on the writer's mount: " + store_.refusal()
                              : "the store " + store_.dir() + " is " + store_.refusal());
    }
  }
  // One thread, the control request's own: the other cores keep serving
  // reads and migrating. Its memory (one zstd context, a wave of two
  // chunks, the file's check, and the memtables its chunks fill until the
  // engine flushes them: the heap grew by 40-45 MiB at level 15, with the
  // pages each file freed handed back after it) is
  // borrowed from the chunk cache while it runs, so that the daemon stays
  // within the cache's budget (README, `tbfs recompress`).
  WorkPool pool(1);
  const uint64_t lent = fs_.chunk_cache().Lend(kRecompressBytes);
  struct GiveBack {
    Filesystem& fs;
    uint64_t bytes;
    ~GiveBack() {
      // The pages it freed go back first: the cache's refill would
      // otherwise come on top of them.
      ReleaseFreeHeap();
      fs.chunk_cache().Return(bytes);
    }
  } give_back{fs_, lent};
  store::RecompressOptions o;
  o.level = level;
  o.dictionaries = dictionaries;
  o.pool = &pool;
  o.file_lock = &pass_mu_;
  o.namespace_lock = &ns_mu_;
  o.stop = &stop_flag_;
  o.read_only = config_.read_only;
  o.after_file = ReleaseFreeHeap;
  spdlog::info("recompress: at level {}{}, a file at a time between passes", level,
               dictionaries ? ", with dictionaries" : "");
  auto r = store::Recompress(store_, o);
  recompressing_ = false;
  if (!r.ok()) {
    spdlog::error("recompress: {}", r.status().message());
  } else {
    spdlog::info(
        "recompress: {} file(s) compressed again, {} -> {} bytes stored; {} already "
        "there, {} gone meanwhile, {} failed{}",
        r->files, r->stored_before, r->stored_after, r->unchanged, r->gone, r->failed.size(),
        r->stopped ? "; stopped: the mount is stopping or read-only" : "");
  }
  return r;
}

nlohmann::json RecompressJson(const store::RecompressReport& r, const std::string& store_dir,
                              int level, double seconds) {
  nlohmann::json failed = nlohmann::json::array();
  for (const auto& [path, why] : r.failed) failed.push_back({{"path", path}, {"why", why}});
  return {{"store", store_dir},
          {"level", level},
          {"files", r.files},
          {"unchanged", r.unchanged},
          {"gone", r.gone},
          {"stopped", r.stopped},
          {"bytes", r.bytes},
          {"stored_before", r.stored_before},
          {"stored_after", r.stored_after},
          {"disk_before", r.disk_before},
          {"disk_after", r.disk_after},
          {"compact_error", r.compact_error},
          {"seconds", seconds},
          {"problems", r.problems},
          {"failed", failed}};
}

}  // namespace tbfs::fs
