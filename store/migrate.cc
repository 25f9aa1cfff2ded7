#include "store/migrate.h"

#include <fcntl.h>
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

Status DropFromStore(ColdStore& store, const storepb::Manifest& m, bool retire) {
  WriteBatch batch;
  TBFS_RETURN_IF_ERROR(store.Drop(&batch, m, retire));
  return store.Commit(batch, true);
}

// The name a file has while it waits aside, beside its own.
std::string AsideName(std::string_view name, uint64_t file_id) {
  return fmt::format(".{}.tbfs-mig-{}", name, file_id);
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
    std::string aside = fmt::format("{}.tbfs-recovered-{}", m.path(), m.file_id());
    *note = fmt::format("{} was recreated meanwhile; the migrated content is back as {}",
                        JoinPath(logdir, m.path()), JoinPath(logdir, aside));
    *dest = aside;
    st = MaterializeFile(store, m, logdir, aside, mo);
  }
  return st;
}

bool MigrateResult::ok() const { return rolled_back_batches == 0 && unsynced_batches == 0; }

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

// How many times a batch runs again after runs failed the check after it
// (each time without them and their owners' traces).
constexpr int kRetriesAfterAFailedRun = 4;

Result<MigrateResult> MigrateFrom(ColdStore& store, const std::string& logdir,
                                  const CandidateSource& source, const MigrateOptions& options) {
  std::vector<std::string> event_files;
  uint64_t event_bytes = 0;
  // A folder the walk cannot enter has no candidate either (FindCandidates
  // skipped it too): its tfevents files are not the batches' business.
  std::vector<std::string> walk_warnings;
  WalkOptions walk = options.walk;
  walk.warnings = &walk_warnings;
  TBFS_RETURN_IF_ERROR(events::ListEventFiles(logdir, walk, &event_files, &event_bytes));
  events::DigestOptions digest_options;
  digest_options.threads = options.threads;
  events::LogdirDigest full = events::DigestFiles(logdir, event_files, digest_options);
  // A run whose tfevents file cannot be digested keeps its traces (I3 could
  // not be proven for it); the other runs' traces move. Keyed by folder.
  std::map<std::string, BlockedRun> blocked;
  if (options.held_runs != nullptr) {
    for (const auto& [folder, why] : *options.held_runs) blocked[folder] = {folder, "", why, 0};
  }
  for (const events::FileError& e : full.errors) {
    std::string folder = ParentPath(e.path);
    if (blocked.count(folder) > 0) continue;
    blocked[folder] = BlockedRun{folder, e.path, e.status.message(), 0};
  }
  // The blocked run a trace lies beneath (its folder or any folder above).
  auto blocked_for = [&](const std::string& path) -> BlockedRun* {
    if (blocked.empty()) return nullptr;
    std::string dir = ParentPath(path);
    for (;;) {
      auto it = blocked.find(dir);
      if (it != blocked.end()) return &it->second;
      if (dir.empty()) return nullptr;
      dir = ParentPath(dir);
    }
  };

  auto root = OpenFile(logdir, O_PATH | O_DIRECTORY);
  if (!root.ok()) return root.status();
  WorkPool pool(options.threads);
  BatchRunner runner(store, logdir, root->get(), options, pool);
  MigrateResult result;
  std::vector<Candidate> batch;
  uint64_t batch_bytes = 0;
  auto stopping = [&] { return options.stop != nullptr && options.stop->load(); };
  // An owner held by the caller, or by a failed check earlier on.
  auto held_owner = [&](const Candidate& c) {
    return result.failed_owners.count(c.uid) > 0 ||
           (options.held_owners != nullptr && options.held_owners->count(c.uid) > 0);
  };
  auto flush = [&] {
    if (batch.empty() || result.store_full || stopping()) return;
    // Not even the margin free: no batch starts.
    if (Status room = store.CheckRoom(0); !room.ok()) {
      result.store_full = true;
      result.store_full_reason = room.message();
      batch.clear();
      batch_bytes = 0;
      return;
    }
    auto account = [&](BatchResult&& b) {
      if (b.store_full) {
        result.store_full = true;
        result.store_full_reason = runner.store_full_;
      }
      for (const FileResult& f : b.files) {
        if (f.outcome == Outcome::kMoved) {
          result.files_moved++;
          result.bytes_moved += f.bytes;
          result.stored_bytes += f.stored_bytes;
        }
      }
      result.rolled_back_batches += b.rolled_back ? 1 : 0;
      result.unsynced_batches += b.unsynced.empty() ? 0 : 1;
      result.flushes += b.flushes;
      result.flush_seconds += b.flush_seconds;
      if (options.keep_batches) result.batches.push_back(std::move(b));
    };
    // A run whose tfevents file failed the check after the move (changed
    // or damaged meanwhile, perhaps on purpose) held the whole batch back:
    // that run, and every trace of the file's owner, are held for the rest
    // of the migration, and the others run again. Each retry that fails
    // so holds one more owner; a few are allowed, then the rest waits.
    for (int attempt = 0; attempt <= kRetriesAfterAFailedRun && !batch.empty(); ++attempt) {
      BatchResult b = runner.Run(batch, event_files, &full);
      bool held = false;
      if (b.rolled_back) {
        for (const events::Failure& f : b.failures) {
          if (f.file.empty()) continue;  // not one run's (a must-have tag)
          const std::string folder = ParentPath(f.file);
          struct stat st;
          if (::fstatat(root->get(), f.file.c_str(), &st, AT_SYMLINK_NOFOLLOW) == 0) {
            held |= result.failed_owners.insert(st.st_uid).second;
          }
          if (blocked.count(folder) > 0) continue;
          blocked[folder] = {folder, f.file, "failed the check after its batch moved: " + f.reason,
                             0};
          result.failed_runs.emplace_back(folder, f.ToString());
          held = true;
        }
      }
      const bool retry = held && !b.store_full && b.unsynced.empty() && !stopping();
      account(std::move(b));
      if (!retry) break;
      std::vector<Candidate> rest;
      for (Candidate& c : batch) {
        if (BlockedRun* r = blocked_for(c.path); r != nullptr) {
          r->traces++;
        } else if (!held_owner(c)) {
          rest.push_back(std::move(c));
        }
      }
      batch = std::move(rest);
    }
    batch.clear();
    batch_bytes = 0;
  };
  Status refused;
  Status found = source([&](Candidate&& c) {
    if (!refused.ok() || stopping() || result.store_full) return;
    bool in_skipped_dir =
        std::find(options.walk.skip_dirs.begin(), options.walk.skip_dirs.end(),
                  c.path.substr(0, c.path.find('/'))) != options.walk.skip_dirs.end();
    if (!IsSafeRelativePath(c.path) || !IsTraceClass(c.cls) || in_skipped_dir) {
      refused = Status::InvalidArgument("not a migration candidate: " + c.path);
      return;
    }
    if (events::IsEventsFileName(c.path)) {
      refused = Status::InvalidArgument("refusing to migrate a tfevents file: " + c.path);  // I1
      return;
    }
    if (BlockedRun* b = blocked_for(c.path); b != nullptr) {
      b->traces++;
      return;
    }
    if (held_owner(c)) return;
    batch_bytes += c.size;
    batch.push_back(std::move(c));
    if (batch_bytes >= options.batch_bytes || batch.size() >= options.batch_files) flush();
  });
  if (!refused.ok()) return refused;
  if (found.ok()) flush();
  for (auto& [folder, b] : blocked) {
    if (b.traces > 0) result.blocked_runs.push_back(std::move(b));
  }
  if (result.files_moved > 0) {
    Status st = store.Flush();  // the WAL would hold a second copy
    if (!st.ok()) spdlog::warn("migrate: {}", st.message());
  }
  // A walk stopped on purpose (MigrateOptions::stop) is not an error.
  if (!found.ok() && !(found.code() == Code::kAborted && stopping())) return found;
  return result;
}

}  // namespace tbfs::store
