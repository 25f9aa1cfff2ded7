#include "store/migrate.h"

#include <fcntl.h>
#include <limits.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <map>
#include <set>

#include "base/fs_util.h"
#include "base/time_util.h"
#include "base/work_pool.h"
#include "events/logdir_digest.h"
#include "events/verifier.h"
#include "fmt/format.h"
#include "spdlog/spdlog.h"
#include "store/batch_runner.h"
#include "store/file_io.h"
#include "store/format.h"
#include "store/migrate_internal.h"

namespace tbfs::store {

bool SameIdentity(const struct stat& st, const storepb::JournalEntry& e) {
  return st.st_ino == e.ino() && static_cast<uint64_t>(st.st_size) == e.size() &&
         ToNs(st.st_mtim) == e.mtime_ns() && ToNs(st.st_ctim) == e.ctime_ns();
}

// A manifest with just enough to remove whatever a file id left in the store.
storepb::Manifest Stub(const storepb::JournalEntry& e) {
  storepb::Manifest m;
  m.set_file_id(e.file_id());
  m.set_path(e.path());
  return m;
}

Status DropFromStore(ColdStore& store, const storepb::Manifest& m, bool retire, Mark mark) {
  WriteBatch batch;
  TBFS_RETURN_IF_ERROR(store.Drop(&batch, m, retire));
  if (mark != Mark::kNone) store.journal_index().Put(&batch, m.file_id(), mark);
  return store.Commit(batch, true);
}

// The name a file has while it waits aside, beside its own.
std::string AsideName(std::string_view name, uint64_t file_id) {
  std::string aside = fmt::format(".{}.tbfs-mig-{}", name, file_id);
  // A name near NAME_MAX has no room for the rest: the id alone (hidden
  // through a mount all the same, fs/filesystem.cc IsTransientName).
  return aside.size() <= NAME_MAX ? aside : fmt::format(".tbfs-mig-{}", file_id);
}

// The name a moved file gets when it goes back and a new file took its own
// (`name` may be a path: its last part gets the suffix).
std::string RecoveredName(std::string_view name, uint64_t file_id) {
  const std::string suffix = fmt::format(".tbfs-recovered-{}", file_id);
  const size_t slash = name.rfind('/');
  const size_t base = slash == std::string_view::npos ? name.size() : name.size() - slash - 1;
  // A name near NAME_MAX gives up its last bytes to the suffix, so that it
  // fits (bytes: a Linux name need not be UTF-8). It went back under no
  // name at all, and stayed hidden aside.
  const size_t over = base + suffix.size() > NAME_MAX ? base + suffix.size() - NAME_MAX : 0;
  return std::string(name.substr(0, name.size() - std::min(over, base))) + suffix;
}

// Writes a moved file back. When something new took its path meanwhile, the
// old content goes beside it, so neither is lost. *dest receives the path.
// The observer hears of the new file before it has a name (no lookup can
// find it unannounced).
Status PutBack(ColdStore& store, const std::string& logdir, const storepb::Manifest& m,
               WorkPool* pool, MoveObserver* observer, std::string* dest, std::string* note) {
  MaterializeOptions mo;
  mo.pool = pool;
  mo.folders_as_stored = true;
  if (observer != nullptr) {
    mo.before_rename = [&](int fd) {
      struct stat sb;
      if (::fstat(fd, &sb) == 0) observer->PutBack(m.file_id(), fd, sb);
    };
  }
  *dest = m.path();
  Status st = MaterializeFile(store, m, logdir, *dest, mo);
  if (st.sys_errno() == EEXIST) {
    std::string aside = RecoveredName(m.path(), m.file_id());
    *note = fmt::format("{} was recreated meanwhile; the migrated content is back as {}",
                        JoinPath(logdir, m.path()), JoinPath(logdir, aside));
    *dest = aside;
    st = MaterializeFile(store, m, logdir, aside, mo);
  }
  return st;
}

bool MigrateResult::ok() const {
  return rolled_back_batches == 0 && unsynced_batches == 0 && uncommitted_batches == 0 &&
         unrun_batches == 0;
}

Result<MigrateResult> Migrate(ColdStore& store, const std::string& logdir,
                              const std::vector<Candidate>& candidates,
                              const MigrateOptions& options) {
  return MigrateFrom(
      store, logdir,
      [&](const std::function<void(Candidate &&)>& sink) {
        for (const Candidate& c : candidates) sink(Candidate(c));
        return Status::OK();
      },
      options);
}

namespace {

// How many times a batch runs again after runs failed the check after it
// (each time without them and their owners' traces).
constexpr int kRetriesAfterAFailedRun = 4;

// One MigrateFrom: candidates in, batches out, with the runs and owners
// held hot along the way.
class Migration {
 public:
  Migration(ColdStore& store, const MigrateOptions& options, int root_fd,
            std::vector<std::string> event_files, events::LogdirDigest full, WorkPool& pool,
            const std::string& logdir)
      : store_(store),
        options_(options),
        root_fd_(root_fd),
        event_files_(std::move(event_files)),
        full_(std::move(full)),
        runner_(store, logdir, root_fd, options, pool) {
    // A run whose tfevents file cannot be digested keeps its traces (I3
    // could not be proven for it); the other runs' traces move.
    if (options.held_runs != nullptr) {
      for (const auto& [folder, why] : *options.held_runs) blocked_[folder] = {folder, "", why, 0};
    }
    for (const events::FileError& e : full_.errors) {
      std::string folder = ParentPath(e.path);
      if (blocked_.count(folder) > 0) continue;
      blocked_[folder] = BlockedRun{folder, e.path, e.status.message(), 0};
    }
  }

  // A candidate found by the source: refused (not one), counted against a
  // blocked run, left (a held owner's), or added to the batch, which runs
  // once full.
  void Take(Candidate&& c);
  // The last batch, then the result.
  Result<MigrateResult> Finish(const Status& found);

 private:
  bool stopping() const { return StopAsked(options_); }
  // The blocked run a trace lies beneath (its folder or any folder above).
  BlockedRun* BlockedFor(const std::string& path);
  // An owner held by the caller, or by a failed check earlier on.
  bool HeldOwner(const Candidate& c) const {
    return result_.failed_owners.count(c.uid) > 0 ||
           (options_.held_owners != nullptr && options_.held_owners->count(c.uid) > 0);
  }
  void RunBatch();
  // A rolled-back batch's failed runs and their owners, now held; true when
  // one was not held before (the rest of the batch may run again).
  bool HoldFailed(const BatchResult& b);
  void Account(BatchResult&& b);

  ColdStore& store_;
  const MigrateOptions& options_;
  const int root_fd_;
  const std::vector<std::string> event_files_;
  events::LogdirDigest full_;
  BatchRunner runner_;
  std::map<std::string, BlockedRun> blocked_;  // by folder
  MigrateResult result_;
  std::vector<Candidate> batch_;
  uint64_t batch_bytes_ = 0;
  Status refused_;
};

BlockedRun* Migration::BlockedFor(const std::string& path) {
  if (blocked_.empty()) return nullptr;
  std::string dir = ParentPath(path);
  for (;;) {
    auto it = blocked_.find(dir);
    if (it != blocked_.end()) return &it->second;
    if (dir.empty()) return nullptr;
    dir = ParentPath(dir);
  }
}

void Migration::Take(Candidate&& c) {
  if (!refused_.ok() || stopping() || result_.store_full || result_.uncommitted_batches > 0) {
    return;
  }
  bool in_skipped_dir =
      std::find(options_.walk.skip_dirs.begin(), options_.walk.skip_dirs.end(),
                c.path.substr(0, c.path.find('/'))) != options_.walk.skip_dirs.end();
  if (!IsSafeRelativePath(c.path) || !IsTraceClass(c.cls) || in_skipped_dir) {
    refused_ = Status::InvalidArgument("not a migration candidate: " + c.path);
    return;
  }
  if (events::IsEventsFileName(c.path)) {
    refused_ = Status::InvalidArgument("refusing to migrate a tfevents file: " + c.path);  // I1
    return;
  }
  if (BlockedRun* b = BlockedFor(c.path); b != nullptr) {
    b->traces++;
    return;
  }
  if (HeldOwner(c)) return;
  batch_bytes_ += c.size;
  batch_.push_back(std::move(c));
  if (batch_bytes_ >= options_.batch_bytes || batch_.size() >= options_.batch_files) RunBatch();
}

void Migration::Account(BatchResult&& b) {
  if (b.store_full) {
    result_.store_full = true;
    result_.store_full_reason = runner_.store_full_;
  }
  // A batch the store did not commit is undone by the next recovery: its
  // files are not counted as moved.
  for (const FileResult& f : b.files) {
    if (f.outcome == Outcome::kMoved && b.uncommitted.empty()) {
      result_.files_moved++;
      result_.bytes_moved += f.bytes;
      result_.stored_bytes += f.stored_bytes;
    }
  }
  result_.rolled_back_batches += b.rolled_back ? 1 : 0;
  result_.unsynced_batches += b.unsynced.empty() ? 0 : 1;
  result_.uncommitted_batches += b.uncommitted.empty() ? 0 : 1;
  result_.unrun_batches += b.not_run.empty() ? 0 : 1;
  if (b.journal_refused && result_.refused_batches++ == 0) result_.first_refusal = b.not_run;
  result_.flushes += b.flushes;
  result_.flush_seconds += b.flush_seconds;
  if (options_.keep_batches) result_.batches.push_back(std::move(b));
}

bool Migration::HoldFailed(const BatchResult& b) {
  bool held = false;
  if (!b.rolled_back) return false;
  for (const events::Failure& f : b.failures) {
    if (f.file.empty()) continue;  // not one run's (a must-have tag)
    const std::string folder = ParentPath(f.file);
    struct stat st;
    if (::fstatat(root_fd_, f.file.c_str(), &st, AT_SYMLINK_NOFOLLOW) == 0) {
      held |= result_.failed_owners.insert(st.st_uid).second;
    }
    if (blocked_.count(folder) > 0) continue;
    blocked_[folder] = {folder, f.file, "failed the check after its batch moved: " + f.reason, 0};
    result_.failed_runs.emplace_back(folder, f.ToString());
    held = true;
  }
  return held;
}

// A run whose tfevents file failed the check after the move (changed or
// damaged meanwhile, perhaps on purpose) held the whole batch back: that
// run, and every trace of the file's owner, are held for the rest of the
// migration, and the others run again. Each retry that fails so holds one
// more owner; a few are allowed, then the rest waits.
void Migration::RunBatch() {
  // After a commit the engine refused, no file leaves the logdir.
  if (batch_.empty() || result_.store_full || result_.uncommitted_batches > 0 || stopping()) {
    return;
  }
  // Not even the margin free: no batch starts.
  if (Status room = store_.CheckRoom(0); !room.ok()) {
    result_.store_full = true;
    result_.store_full_reason = room.message();
  }
  for (int attempt = 0;
       !result_.store_full && attempt <= kRetriesAfterAFailedRun && !batch_.empty(); ++attempt) {
    BatchResult b = runner_.Run(batch_, event_files_, &full_);
    const bool held = HoldFailed(b);
    const bool retry =
        held && !b.store_full && b.unsynced.empty() && b.uncommitted.empty() && !stopping();
    Account(std::move(b));
    if (!retry) break;
    std::vector<Candidate> rest;
    for (Candidate& c : batch_) {
      if (BlockedRun* r = BlockedFor(c.path); r != nullptr) {
        r->traces++;
      } else if (!HeldOwner(c)) {
        rest.push_back(std::move(c));
      }
    }
    batch_ = std::move(rest);
  }
  batch_.clear();
  batch_bytes_ = 0;
}

Result<MigrateResult> Migration::Finish(const Status& found) {
  if (!refused_.ok()) return refused_;
  if (found.ok()) RunBatch();
  for (auto& [folder, b] : blocked_) {
    if (b.traces > 0) result_.blocked_runs.push_back(std::move(b));
  }
  if (result_.files_moved > 0) {
    Status st = store_.Flush();  // the WAL would hold a second copy
    if (!st.ok()) spdlog::warn("migrate: {}", st.message());
  }
  // A walk stopped on purpose (MigrateOptions::stop) is not an error.
  if (!found.ok() && !(found.code() == Code::kAborted && stopping())) return found;
  return std::move(result_);
}

}  // namespace

Result<MigrateResult> MigrateFrom(ColdStore& store, const std::string& logdir,
                                  const CandidateSource& source, const MigrateOptions& options) {
  std::vector<std::string> event_files;
  events::LogdirDigest full;
  if (options.events_digest != nullptr) {
    full = *options.events_digest;
    for (const events::FileDigest& f : full.files) event_files.push_back(f.path);
  } else {
    uint64_t event_bytes = 0;
    // A folder the walk cannot enter has no candidate either (FindCandidates
    // skipped it too): its tfevents files are not the batches' business.
    std::vector<std::string> walk_warnings;
    WalkOptions walk = options.walk;
    walk.warnings = &walk_warnings;
    TBFS_RETURN_IF_ERROR(events::ListEventFiles(logdir, walk, &event_files, &event_bytes));
    events::DigestOptions digest_options;
    digest_options.threads = options.threads;
    full = events::DigestFiles(logdir, event_files, digest_options);
  }
  auto root = OpenFile(logdir, O_PATH | O_DIRECTORY);
  if (!root.ok()) return root.status();
  WorkPool pool(options.threads);
  Migration migration(store, options, root->get(), std::move(event_files), std::move(full), pool,
                      logdir);
  Status found = source([&](Candidate&& c) { migration.Take(std::move(c)); });
  return migration.Finish(found);
}

}  // namespace tbfs::store
