#include "store/restore.h"

#include <fcntl.h>
#include <sys/stat.h>

#include <chrono>
#include <map>

#include "base/failpoint.h"
#include "base/fs_util.h"
#include "base/time_util.h"
#include "store/file_io.h"
#include "store/migrate_internal.h"

namespace tbfs::store {

Result<std::string> NormalizeUserPath(const std::string& logdir, const std::string& arg) {
  std::string p = arg;
  if (!p.empty() && p.front() == '/') {
    std::string root = logdir;
    while (root.size() > 1 && root.back() == '/') root.pop_back();
    if (p.compare(0, root.size() + 1, root + "/") != 0) {
      return Status::InvalidArgument("path is not inside the logdir: " + arg);
    }
    p = p.substr(root.size() + 1);
  }
  while (p.starts_with("./")) p = p.substr(2);
  while (p.size() > 1 && p.back() == '/') p.pop_back();
  if (p == "." || p.empty()) return std::string();
  if (!IsSafeRelativePath(p)) {
    return Status::InvalidArgument("path escapes the logdir or is malformed: " + arg);
  }
  return p;
}

Status SelectCold(ColdStore& store, const std::vector<std::string>& paths,
                  std::vector<storepb::Manifest>* out, std::vector<std::string>* not_found) {
  out->clear();
  not_found->clear();
  if (paths.empty()) {
    return store.ForEachManifest([&](const storepb::Manifest& m) {
      out->push_back(m);
      return true;
    });
  }
  for (const std::string& p : paths) {
    if (!p.empty()) {
      auto entry = store.GetEntry(p);
      if (!entry.ok() && !entry.status().IsNotFound()) return entry.status();
      if (!entry.ok()) {
        not_found->push_back(p);
        continue;
      }
      if (entry->kind() == storepb::Entry::FILE) {
        auto m = store.GetManifest(entry->file_id());
        if (!m.ok()) return m.status();
        out->push_back(*m);
        continue;
      }
    }
    std::string prefix = p.empty() ? "" : p + "/";
    TBFS_RETURN_IF_ERROR(store.ForEachManifest([&](const storepb::Manifest& m) {
      if (m.path().compare(0, prefix.size(), prefix) == 0) out->push_back(m);
      return true;
    }));
  }
  return Status::OK();
}

Status DropInFlight(ColdStore& store, const std::string& logdir,
                    std::vector<storepb::Manifest>* files) {
  std::vector<storepb::JournalRecord> journal;
  TBFS_RETURN_IF_ERROR(store.ListJournal(&journal));
  std::map<uint64_t, storepb::JournalEntry> migrating;
  for (const auto& record : journal) {
    if (record.kind() == storepb::JournalRecord::RESTORE) continue;
    for (const auto& e : record.entries()) migrating[e.file_id()] = e;
  }
  if (migrating.empty()) return Status::OK();
  auto root = OpenFile(logdir, O_PATH | O_DIRECTORY);
  if (!root.ok()) return root.status();
  std::erase_if(*files, [&](const storepb::Manifest& m) {
    auto it = migrating.find(m.file_id());
    if (it == migrating.end()) return false;
    std::string name;
    auto dir = OpenParentBeneath(root->get(), m.path(), &name);
    struct stat st;
    return dir.ok() && ::fstatat(dir->get(), name.c_str(), &st, AT_SYMLINK_NOFOLLOW) == 0 &&
           SameIdentity(st, it->second);
  });
  return Status::OK();
}

Status RestoreOne(ColdStore& store, const std::string& logdir, const storepb::Manifest& m,
                  const RestoreOptions& options) {
  auto existing = OpenUnder(logdir, m.path(), O_PATH);
  if (existing.ok()) {
    return Status::FromErrno(EEXIST, "restore (a file exists at this path; left cold)",
                             JoinPath(logdir, m.path()));
  }
  MaterializeOptions mo;
  mo.pool = options.pool;
  mo.progress = options.progress;
  mo.folders_as_stored = true;
  if (options.placing) mo.before_rename = [&](int fd) { options.placing(m, fd); };
  TBFS_RETURN_IF_ERROR(MaterializeFile(store, m, logdir, m.path(), mo));
  MaybeCrash("restore.in_place");
  MaybePause("restore.in_place");
  if (options.placed) options.placed(m);
  // A file of a migration not yet committed (rehydrated after its move)
  // is hot again: deleted next, it is not lost to a recovery of that batch.
  WriteBatch drop;
  Status s = store.Drop(&drop, m, options.retire);
  store.journal_index().MarkDeleted(&drop, m.file_id());
  if (s.ok()) s = store.Commit(drop, true);
  if (!s.ok()) return Status::Aborted("restored, but not dropped from the store: " + s.message());
  return Status::OK();
}

Result<CopyResult> Restore(ColdStore& store, const std::string& logdir,
                           const std::vector<storepb::Manifest>& files,
                           const RestoreOptions& options) {
  CopyResult result;
  if (files.empty()) return result;
  storepb::JournalRecord record;
  record.set_kind(storepb::JournalRecord::RESTORE);
  record.set_batch_id(store.NewBatchId());
  record.set_started_ns(NowNs());
  for (const storepb::Manifest& m : files) {
    storepb::JournalEntry* e = record.add_entries();
    e->set_path(m.path());
    e->set_file_id(m.file_id());
  }
  TBFS_RETURN_IF_ERROR(store.PutJournal(record));
  for (const storepb::Manifest& m : files) {
    Status s = RestoreOne(store, logdir, m, options);
    if (!s.ok()) {
      result.failed.push_back({m.path(), s.sys_errno() == EEXIST
                                             ? "a file exists at this path; left cold"
                                             : s.message()});
      if (result.first_errno == 0) result.first_errno = s.sys_errno();
      continue;
    }
    result.files++;
    result.bytes += m.size();
  }
  TBFS_RETURN_IF_ERROR(store.DeleteJournal(record.batch_id()));
  // Give the space back now rather than at some later compaction.
  if (options.compact && result.files > 0) {
    if (Status c = store.Compact(); !c.ok()) result.compact_error = c.message();
  }
  return result;
}

Result<CopyResult> Export(ColdStore& store, const std::string& to_dir,
                          const std::vector<storepb::Manifest>& files, bool force, WorkPool* pool,
                          std::atomic<uint64_t>* progress) {
  CopyResult result;
  // Opened once, checked on the way (no symlink, no folder another user
  // could change): every file goes beneath this fd, whatever happens to
  // the path meanwhile.
  auto root = OpenOwnFolder(to_dir);
  if (!root.ok()) return root.status();
  MaterializeOptions mo;
  mo.root_fd = root->get();
  mo.pool = pool;
  mo.progress = progress;
  mo.replace = force;
  mo.keep_owner = ::geteuid() == 0;
  mo.sync = false;  // copies for a profiling session; the store keeps the originals
  for (const storepb::Manifest& m : files) {
    if (!IsSafeRelativePath(m.path())) {
      result.failed.push_back({m.path(), "path would escape the export folder"});
      continue;
    }
    Status s = MaterializeFile(store, m, to_dir, m.path(), mo);
    if (!s.ok()) {
      result.failed.push_back({m.path(), s.sys_errno() == EEXIST
                                             ? "exists in the export folder (use --force)"
                                             : s.message()});
      continue;
    }
    result.files++;
    result.bytes += m.size();
  }
  return result;
}

}  // namespace tbfs::store
