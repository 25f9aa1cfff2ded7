#include "fs/migrator.h"

#include <fcntl.h>

#include <algorithm>
#include <chrono>
#include <set>

#include "base/failpoint.h"
#include "base/heap.h"
#include "base/log.h"
#include "base/text.h"
#include "base/time_util.h"
#include "spdlog/spdlog.h"

namespace tbfs::fs {

namespace {

constexpr size_t kWarningExamples = 3;
constexpr size_t kWarningExampleBytes = 240;
constexpr int64_t kWarningRepeatNs = 3600ll * 1'000'000'000;
// A pass moves files for this long at most, then ends (its batch verified
// and committed); the rest waits for the next pass. One huge logdir, or a
// user's thousands of new traces, cannot keep the migrator (retention,
// the walk's warnings, status's figures) from coming round.
constexpr auto kPassBudget = std::chrono::minutes(10);
// What the failpoint retention.slow_delete adds to each deletion (tests).
constexpr auto kSlowDelete = std::chrono::milliseconds(100);

}  // namespace

void RepeatedWarning::Log(const std::vector<std::string>& lines) {
  if (lines.empty()) {
    if (!last_.empty()) spdlog::info("migrator: no {} now", what_);
    last_.clear();
    return;
  }
  std::string text = fmt::format("{} {}", lines.size(), what_);
  for (size_t i = 0; i < lines.size() && i < kWarningExamples; ++i) {
    text += (i == 0 ? ": " : "; ") + Shorten(lines[i], kWarningExampleBytes);
  }
  if (lines.size() > kWarningExamples)
    text += fmt::format("; and {} more", lines.size() - kWarningExamples);
  const int64_t now = NowNs();
  if (text == last_ && now - last_ns_ < kWarningRepeatNs) return;
  spdlog::warn("migrator: {}", text);
  last_ = std::move(text);
  last_ns_ = now;
}

Migrator::Migrator(store::ColdStore& store, std::string logdir, SharedMutex* namespace_lock,
                   Filesystem& fs, MigratorOptions options)
    : store_(store),
      logdir_(std::move(logdir)),
      ns_mu_(*namespace_lock),
      fs_(fs),
      config_(std::move(options)) {}

Migrator::~Migrator() { Stop(); }

void Migrator::Start() {
  // Without background passes a mount of a shared store still keeps (or
  // takes back) the writer's role.
  if (config_.background || store_.shared()) thread_ = std::thread([this] { Loop(); });
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
  bool was_read_only = false;
  for (;;) {
    {
      MutexLock lock(mu_);
      if (cv_.wait_for(lock, std::chrono::seconds(config_.interval_s),
                       [&]() TBFS_NO_THREAD_SAFETY_ANALYSIS { return stopping_; })) {
        return;
      }
    }
    const bool read_only = ReadOnly();
    if (read_only != was_read_only) {
      spdlog::info(read_only ? "migrator: the mount is read-only: no pass until it is rw"
                             : "migrator: the mount is writable: passes go on");
      was_read_only = read_only;
    }
    if (read_only) continue;
    Status st = config_.background ? Pass() : KeepWriterRole();
    if (!st.ok() && !stop_flag_) {
      // Said in the status too, as after `migrate --now` (red team: a
      // background pass's error was only in the log).
      spdlog::error("migrator: {}", st.message());
      MutexLock lock(mu_);
      stats_.last_error = st.message();
    }
    // A pass (and the cold reads since the last) leave freed blocks
    // behind: hand their pages back (base/heap.h).
    ReleaseFreeHeap();
  }
}

Status Migrator::KeepWriterRole() {
  MutexLock one(pass_mu_);
  if (store_.writer()) return Status::OK();
  Status st = TakeWriterRole();
  return st.code() == Code::kBusy ? Status::OK() : st;
}

int Migrator::RunNow() {
  if (ReadOnly()) {
    MutexLock lock(mu_);
    stats_.last_error =
        "the mount is read-only: nothing moves (tbfs mount MOUNTPOINT -o remount,rw first)";
    return -EROFS;
  }
  Status st = Pass();
  if (st.code() == Code::kAborted && stop_flag_) return -ECANCELED;
  if (!st.ok()) {
    spdlog::error("migrator: {}", st.message());
    MutexLock lock(mu_);
    stats_.last_error = st.message();
    return -EIO;
  }
  return 0;
}

Status Migrator::CollectGarbage(bool apply, store::Garbage* out) {
  MutexLock one(pass_mu_);
  // A dry run needs no writer: what a full store holds as garbage is what
  // its admin wants to know. (On a shared store's reader, a writer's batch
  // in flight elsewhere may count too: a dry run says "at most".)
  if (apply && !store_.writer()) {
    return Status::Busy(store_.shared() ? "this mount reads the shared store " + store_.dir() +
                                              "; run it on the writer's mount: " + store_.refusal()
                                        : "the store " + store_.dir() + " is " + store_.refusal());
  }
  // Shared: a rename (exclusive) moves manifests to other keys, and a scan
  // of the manifests that a rename crosses could miss one whose chunks
  // would then look like garbage. Unlinks and rehydrations may go on: the
  // chunks they leave behind are garbage indeed. Renames through the mount
  // wait for the scan.
  ReaderMutexLock ns(ns_mu_);
  TBFS_RETURN_IF_ERROR(store::FindGarbage(store_, out));
  if (apply && !out->chunks.empty()) {
    TBFS_RETURN_IF_ERROR(store::RemoveGarbage(store_, *out));
    spdlog::info("gc: removed {} unreachable chunk(s) of {} file id(s)", out->chunks.size(),
                 out->files);
  }
  return Status::OK();
}

void Migrator::AfterBatch(const store::BatchResult& batch) {
  MutexLock lock(mu_);
  stats_.batches++;
  for (const store::FileResult& f : batch.files) {
    if (f.reason.starts_with(store::kStickyReason)) pass_conflicts_.push_back(f.path);
  }
  if (!batch.not_run.empty()) {
    // Nothing was verified: the last verifier's word stands.
    stats_.last_error = "batch " + std::to_string(batch.batch_id) + " not run: " + batch.not_run;
    spdlog::warn("migrator: {}", stats_.last_error);
  } else if (batch.rolled_back) {
    stats_.rolled_back++;
    stats_.last_verifier =
        "failed: " + (batch.failures.empty() ? std::string("?") : batch.failures[0].ToString());
    // Put back: not those deleted through the mount, or left in place.
    const auto back = std::count_if(batch.files.begin(), batch.files.end(), [](const auto& f) {
      return f.outcome == store::Outcome::kRolledBack;
    });
    spdlog::warn("migrator: batch {} rolled back ({} file(s) back in place): {}", batch.batch_id,
                 back, stats_.last_verifier);
  } else {
    stats_.last_verifier = "intact";
  }
  if (!batch.unsynced.empty()) {
    stats_.last_error = "batch " + std::to_string(batch.batch_id) +
                        " not synced: " + batch.unsynced + " (its journal record stays)";
  }
  if (!batch.uncommitted.empty()) {
    stats_.last_error = "batch " + std::to_string(batch.batch_id) +
                        " not committed: " + batch.uncommitted + " (its journal record stays)";
    if (batch.unsynced.empty()) {
      RefusedBatch r{batch.batch_id, 0, 0, 0, batch.deferred_at};
      for (const store::FileResult& f : batch.files) {
        if (f.outcome != store::Outcome::kMoved) continue;
        r.files++;
        r.bytes += f.bytes;
        r.stored_bytes += f.stored_bytes;
      }
      refused_batches_.push_back(r);
    }
  }
}

Status Migrator::TakeWriterRole() {
  store::ColdStore& store = store_;
  Result<store::RecoveryResult> recovered{store::RecoveryResult()};
  {
    // No change to the namespace while the last writer's unfinished
    // batches are undone (reads go on).
    WriterMutexLock ns(ns_mu_);
    Status st = store.TakeWriterRole(config_.writer);
    if (!st.ok()) return st;
    // The mount served the store until now: handles open on its cold files
    // read on (what recovery drops is retired, reaped when they close).
    recovered = store::RecoverServing(store, logdir_);
    fs_.Retired();
    if (!recovered.ok()) {
      store.DropWriterRole();
      return Status::FromErrno(EIO, "recovery", store.dir() + ": " + recovered.status().message());
    }
  }
  // The kernel still holds the names as this mount served them (a cold
  // file there now hot): it looks them up again.
  for (const std::string& path : recovered->changed) fs_.ForgetName(path);
  MaybePause("migrator.took_over");
  for (const std::string& note : recovered->notes) spdlog::warn("recovery: {}", note);
  for (const std::string& path : recovered->lost) {
    spdlog::error("recovery: LOST {}: found neither in the logdir nor in the store (recorded)",
                  JoinPath(logdir_, path));
  }
  spdlog::warn(
      "migrator: this mount writes {} now; recovery undid {} unfinished batch(es) of the last "
      "writer "
      "({} file(s) written back, {} store copies dropped)",
      store.dir(), recovered->batches, recovered->restored, recovered->dropped);
  return Status::OK();
}

Status Migrator::Pass() {
  MutexLock one(pass_mu_);
  bool writer = store_.writer();
  if (!writer) {
    // Another mount writes the store (or did, until its lease ran out), or
    // its filesystem had no room for a writer: the store is read-only.
    Status role = TakeWriterRole();
    {
      MutexLock lock(mu_);
      stats_.last_error = role.ok() || role.code() == Code::kBusy ? "" : role.message();
    }
    if (!role.ok() && role.code() != Code::kBusy) return role;
    writer = role.ok();
  }
  // A reader moves nothing, but counts what it serves and samples growth
  // like the writer: its status and metrics show the logdir too.
  // The candidates' walk counts the hot part of the growth sample too: a
  // pass that moved nothing walks the logdir once.
  Status st;
  store::GrowthSample walked;
  bool walked_is_current = false;
  if (writer) st = MovePass(&walked, &walked_is_current);
  if (writer && config_.retention.any() && !stop_flag_ && !ReadOnly()) {
    Status r = ApplyRetention();
    if (st.ok()) st = r;
  }
  if (stop_flag_) return Status::Aborted("the mount is stopping; the pass stopped at a file");
  if (writer && ReadOnly() && st.ok()) {
    st = Status::IOError(
        EROFS,
        "migrate: the mount turned read-only during the pass: it stopped at its next "
        "file (what moved is cold, the rest stays hot until the mount is rw)");
  }
  // After what the pass changed: hot and cold as they are now. Folders the
  // walk cannot enter were named by the candidates' walk already.
  Result<store::GrowthSample> sample = walked;
  if (walked_is_current) {
    if (Status f = store::FinishGrowthSample(logdir_, &store_, &*sample); !f.ok()) sample = f;
  } else {
    std::vector<std::string> unwalked;
    WalkOptions walk = config_.walk;
    walk.warnings = &unwalked;
    {
      MutexLock lock(mu_);
      stats_.logdir_walks++;
    }
    sample = store::TakeGrowthSample(logdir_, &store_, config_.policy, walk);
  }
  if (!sample.ok()) {
    spdlog::warn("migrator: growth sample: {}", sample.status().message());
    return st;
  }
  {
    MutexLock lock(mu_);
    stats_.hot_files = sample->hot_files;
    stats_.hot_bytes = sample->hot_bytes();
  }
  KeepGrowthSample(*sample);
  return st;
}

Status Migrator::ApplyRetention() {
  std::vector<storepb::Manifest> chosen;
  std::vector<std::string> why;
  Status st = store::SelectForRetention(store_, config_.retention, &chosen, &why);
  if (!st.ok()) return st;
  uint64_t files = 0, bytes = 0;
  // A remount to ro stops the deletions at the next file, as an unmount does.
  for (size_t i = 0; i < chosen.size() && !stop_flag_ && !ReadOnly(); ++i) {
    // On record before it happens, and after: a crash between the two
    // leaves "deleting" as the last word on the file (check it with ls).
    const std::string path = Printable(chosen[i].path());
    spdlog::info("retention: deleting {} ({}; {} bytes, {} stored)", path, why[i], chosen[i].size(),
                 chosen[i].stored_bytes());
    spdlog::default_logger()->flush();
    if (ShouldFail("retention.slow_delete")) std::this_thread::sleep_for(kSlowDelete);
    const int r = fs_.DeleteColdFile(chosen[i]);
    if (r == -ENOENT) {
      spdlog::info("retention: left {}: rehydrated, renamed or replaced since it was chosen", path);
      continue;
    }
    if (r != 0) {
      st = Status::FromErrno(-r, "retention: delete", path);
      break;
    }
    spdlog::info("retention: deleted {}", path);
    spdlog::default_logger()->flush();
    files++;
    bytes += chosen[i].size();
  }
  if (files > 0) {
    {
      MutexLock lock(mu_);
      stats_.retention_files += files;
      stats_.retention_bytes += bytes;
    }
    // The space comes back when the engine rewrites what held them.
    if (Status c = store_.Compact(); !c.ok()) spdlog::warn("retention: compact: {}", c.message());
    spdlog::info("retention: deleted {} cold files, {} bytes", files, bytes);
  }
  return st;
}

Status Migrator::FindMovable(const store::CandidateOptions& copt,
                             std::vector<store::Candidate>* candidates) {
  {
    MutexLock lock(mu_);
    stats_.logdir_walks++;
  }
  std::vector<store::Skipped> skipped;
  Status st = store::FindCandidates(logdir_, copt, candidates, &skipped);
  // Folders the walk could not enter come back as skipped entries without
  // a path: one line for them all (RepeatedWarning).
  std::vector<std::string> unwalked, big_xattrs;
  for (store::Skipped& s : skipped) {
    if (s.path.empty()) {
      unwalked.push_back(std::move(s.reason));
    } else if (s.reason.starts_with(store::kXattrsReason)) {
      big_xattrs.push_back(std::move(s.path));
    }
  }
  unwalked_log_.Log(unwalked);
  big_xattrs_log_.Log(big_xattrs);
  MutexLock lock(mu_);
  stats_.passes++;
  stats_.last_pass_unix = NowNs() / 1'000'000'000;
  stats_.last_error = st.ok() ? "" : st.message();
  stats_.unwalked = unwalked.size();
  unwalked.resize(std::min(unwalked.size(), kWarningExamples));
  stats_.unwalked_examples = std::move(unwalked);
  stats_.big_xattrs = big_xattrs.size();
  big_xattrs.resize(std::min(big_xattrs.size(), kWarningExamples));
  stats_.big_xattrs_examples = std::move(big_xattrs);
  return st;
}

Status Migrator::NoteMoved(const store::MigrateResult& result, bool over_budget,
                           const std::set<uint32_t>& held_owners) {
  MutexLock lock(mu_);
  if (over_budget) stats_.over_budget++;
  stats_.held_owners.assign(held_owners.begin(), held_owners.end());
  stats_.files_moved += result.files_moved;
  stats_.bytes_moved += result.bytes_moved;
  stats_.stored_bytes += result.stored_bytes;
  if (result.files_moved > 0) {
    spdlog::info("migrator: moved {} files, {} bytes -> {} stored", result.files_moved,
                 result.bytes_moved, result.stored_bytes);
  }
  if (result.store_full) {
    // The pass stopped: said (status, migrate --now, the log), not a success.
    stats_.stopped_store_full++;
    stats_.last_error = "the store is full: " + result.store_full_reason;
    return Status::IOError(
        ENOSPC, "migrate: the pass stopped, the store is full: " + result.store_full_reason +
                    "; hot files stay hot until there is room");
  }
  if (result.refused_batches > 0) {
    // Not one file of those batches moved (a store that takes no writes
    // refuses them all): a pass that says it is done would hide it.
    return Status::IOError(EIO, fmt::format("migrate: {} batch(es) not run, the first: {}",
                                            result.refused_batches, result.first_refusal));
  }
  if (result.unsynced_batches > 0) {
    return Status::IOError(
        EIO, "migrate: " + stats_.last_error + " (the next start's recovery undoes the batch)");
  }
  if (result.uncommitted_batches > 0) {
    return Status::IOError(EIO, "migrate: " + stats_.last_error +
                                    " (committed with the store's next write: the next pass, or a "
                                    "change through the mount; a restart before that undoes the "
                                    "batch)");
  }
  return Status::OK();
}

Status Migrator::MovePass(store::GrowthSample* walked, bool* walked_is_current) {
  *walked_is_current = false;
  CommitRefusedBatches();
  store::CandidateOptions copt;
  copt.policy = config_.policy;
  copt.older_than_s = config_.cold_after_s;
  copt.walk = config_.walk;
  copt.walk.stop = &stop_flag_;
  copt.on_entry = [&](const WalkEntry& e) { store::CountHotEntry(e, config_.policy, walked); };
  std::vector<store::Candidate> candidates;
  if (Status st = FindMovable(copt, &candidates); !st.ok()) return st;
  if (candidates.empty()) {
    NoteBlockedRuns({});
    *walked_is_current = true;  // nothing moves: the walk's figures stand
    return Status::OK();
  }

  store::MigrateOptions mopt;
  mopt.must_have = config_.must_have;
  mopt.walk = copt.walk;
  mopt.threads = 2;
  mopt.batch_files = 64;
  mopt.batch_bytes = 512ull << 20;
  mopt.stop = &stop_flag_;
  mopt.read_only = config_.read_only;  // a remount to ro stops the pass at the next file
  mopt.deadline = std::chrono::steady_clock::now() + kPassBudget;
  mopt.observer = &fs_;  // files stay visible and open handles keep reading as they move
  mopt.after_batch = [this](const store::BatchResult& b) { AfterBatch(b); };
  mopt.batch_lock = &ns_mu_;
  std::map<std::string, std::string> held;
  std::set<uint32_t> held_owners;
  const int64_t now = NowNs();
  CurrentHolds(now, &held, &held_owners);
  mopt.held_runs = &held;
  mopt.held_owners = &held_owners;
  {
    MutexLock lock(mu_);
    pass_conflicts_.clear();
  }
  auto result = store::Migrate(store_, logdir_, candidates, mopt);
  std::vector<std::string> conflicts;
  {
    MutexLock lock(mu_);
    conflicts.swap(pass_conflicts_);
    stats_.conflicts = conflicts.size();
    stats_.conflict_examples.assign(
        conflicts.begin(), conflicts.begin() + std::min(conflicts.size(), kWarningExamples));
  }
  conflict_log_.Log(conflicts);
  if (!result.ok()) return result.status();
  HoldFailed(*result, now, &held_owners);
  NoteBlockedRuns(result->blocked_runs);
  const bool over_budget = !stop_flag_ && std::chrono::steady_clock::now() >= mopt.deadline;
  if (over_budget) {
    spdlog::info("migrator: the pass used its {} min; what is left moves at the next pass",
                 std::chrono::duration_cast<std::chrono::minutes>(kPassBudget).count());
  }
  return NoteMoved(*result, over_budget, held_owners);
}

void Migrator::KeepGrowthSample(const store::GrowthSample& sample) {
  const double every = static_cast<double>(config_.growth_keep_every_s);
  bool due;
  {
    MutexLock lock(mu_);
    latest_ = sample;
    due = !config_.growth_dir.empty() &&
          (series_.empty() || sample.unix_s - series_.back().unix_s >= every);
  }
  if (!due) return;
  // Read afresh: `tbfs watch` may have kept samples of its own meanwhile.
  std::vector<store::GrowthSample> kept = store::LoadGrowthSeries(config_.growth_dir);
  if (kept.empty() || sample.unix_s - kept.back().unix_s >= every) {
    if (Status st = store::SaveGrowthSample(config_.growth_dir, sample, &kept); !st.ok()) {
      spdlog::warn("migrator: keeping a growth sample in {}: {}", config_.growth_dir, st.message());
    }
  }
  MutexLock lock(mu_);
  series_ = std::move(kept);
}

std::vector<store::GrowthSample> Migrator::growth() {
  MutexLock lock(mu_);
  std::vector<store::GrowthSample> out = series_;
  if (latest_ && (out.empty() || out.back().unix_s < latest_->unix_s)) out.push_back(*latest_);
  return out;
}

}  // namespace tbfs::fs
