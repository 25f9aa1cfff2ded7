#include "store/migrate.h"

#include <fcntl.h>
#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <map>
#include <mutex>
#include <optional>
#include <set>
#include <thread>

#include "base/failpoint.h"
#include "base/fs_util.h"
#include "base/time_util.h"
#include "base/work_pool.h"
#include "events/logdir_digest.h"
#include "events/verifier.h"
#include "fmt/format.h"
#include "nlohmann/json.hpp"
#include "spdlog/spdlog.h"
#include "store/file_io.h"
#include "store/format.h"
#include "store/migrate_internal.h"

namespace tbfs::store {

namespace {

// How long the last staged file of a group waits aside, at least, for a
// writer that found it by name just before it moved (the others wait the
// next files' copies too).
constexpr auto kAsideGrace = std::chrono::milliseconds(20);

// Staged files wait aside in groups: before the first unlink of a group the
// engine flushes, so that nothing a moved file needs lives only in its
// write-ahead log (I2; docs/format.md). A group closes at this many files
// or when its first file has waited this long.
constexpr size_t kGroupFiles = 256;
constexpr auto kGroupAge = std::chrono::seconds(1);

constexpr char kStoppedReason[] =
    "the migration was stopped (or its time budget ran out); left in place";

// A read lease on the file open (read-only) as fd. The kernel refuses it
// while any process has the file open for writing and breaks it when one
// opens it for writing or truncates it; the opener then waits (at most
// /proc/sys/fs/lease-break-time) until the lease is released. The break
// notice (SIGIO) is ignored: the lease's state is asked instead.
Status TakeReadLease(int fd) {
  static std::once_flag once;
  std::call_once(once, [] { ::signal(SIGIO, SIG_IGN); });
  if (::fcntl(fd, F_SETLEASE, F_RDLCK) == 0) return Status::OK();
  if (errno == EAGAIN) return Status::Aborted("open for writing by another process; left in place");
  return Status::Aborted(
      fmt::format("no lease on it ({}): nothing proves that no process writes it; left in place",
                  std::strerror(errno)));
}

// False once a writer has broken the lease (or the kernel revoked it).
bool LeaseHeld(int fd) { return ::fcntl(fd, F_GETLEASE) == F_RDLCK; }

// The tfevents files of every run that holds one of the candidates: those
// whose folder is the candidate's folder or one of its ancestors.
std::vector<std::string> AffectedEventFiles(const std::vector<std::string>& event_files,
                                            const std::vector<Candidate>& batch) {
  std::set<std::string> folders;
  for (const Candidate& c : batch) {
    std::string dir = ParentPath(c.path);
    for (;;) {
      folders.insert(dir);
      if (dir.empty()) break;
      dir = ParentPath(dir);
    }
  }
  std::vector<std::string> out;
  for (const std::string& f : event_files) {
    if (folders.count(ParentPath(f))) out.push_back(f);
  }
  return out;
}

// A file copied into the store and renamed aside in its folder, waiting for
// its unlink while the next files of its group are copied.
struct Staged {
  size_t index = 0;
  std::chrono::steady_clock::time_point aside_at;
  storepb::Manifest manifest;
  UniqueFd dir;   // its folder (O_PATH)
  UniqueFd file;  // the file, read-only, holding the read lease
  std::string name, aside;
};

class BatchRunner {
 public:
  BatchRunner(ColdStore& store, const std::string& logdir, int root_fd,
              const MigrateOptions& options, WorkPool& pool)
      : store_(store), logdir_(logdir), root_fd_(root_fd), options_(options), pool_(pool) {}

  BatchResult Run(const std::vector<Candidate>& batch, const std::vector<std::string>& event_files,
                  events::LogdirDigest* full);

 private:
  std::string StickyConflict(int dir_fd, const struct stat& st, const std::string& rel);
  // Copies one file and moves it aside; nothing when it stays in place
  // (*result says why).
  std::optional<Staged> Stage(const storepb::JournalEntry& entry, const Candidate& c, size_t index,
                              FileResult* result);
  // Unlinks a staged file, or puts it back where a writer showed up or
  // where the store could not make its copy durable (`durable` not ok).
  void Finish(Staged staged, const Status& durable, FileResult* result,
              std::vector<storepb::Manifest>* moved);
  // The folder of `rel` beneath the logdir, made where missing; *name gets
  // the last component.
  Result<UniqueFd> FolderFor(const std::string& rel, std::string* name);
  // The file stays hot: its copy leaves the store (by the file id's
  // current manifest: a rename through the mount may have moved it).
  void GiveUp(uint64_t file_id, const storepb::JournalEntry* entry, FileResult* result,
              Outcome outcome, const std::string& reason);
  void Rollback(const std::vector<storepb::Manifest>& moved, BatchResult* result);
  // The engine's flush (I2), counted and timed in *result.
  Status Flush(BatchResult* result) {
    const auto start = std::chrono::steady_clock::now();
    Status st = store_.Flush();
    result->flushes++;
    result->flush_seconds +=
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    return st;
  }
  std::shared_lock<SharedMutex> NamespaceLock() {
    if (options_.batch_lock == nullptr) return {};
    return std::shared_lock(*options_.batch_lock);
  }
  bool retire() const { return options_.observer != nullptr; }
  // Asked to stop (an unmount, SIGTERM): even a copy in flight ends.
  bool stopped() const { return options_.stop != nullptr && options_.stop->load(); }
  // Or out of the pass's budget: no new file starts (a copy in flight ends
  // as it would, or a file longer to copy than the budget never moves).
  bool stopping() const {
    return stopped() || std::chrono::steady_clock::now() >= options_.deadline;
  }

 public:
  // Why the store could take no more (empty while it could).
  std::string store_full_;
  // The folders this batch changes get their mtime back at its end.
  FolderTimes folder_times_;

 private:
  ColdStore& store_;
  const std::string& logdir_;
  const int root_fd_;
  const MigrateOptions& options_;
  WorkPool& pool_;
};

void BatchRunner::GiveUp(uint64_t file_id, const storepb::JournalEntry* entry, FileResult* result,
                         Outcome outcome, const std::string& reason) {
  result->outcome = outcome;
  result->reason = reason;
  auto current = store_.GetManifest(file_id);
  Status st;
  if (current.ok()) {
    st = DropFromStore(store_, *current, retire());
    if (st.ok() && options_.observer != nullptr) options_.observer->Retired();
  } else if (current.status().IsNotFound() && entry != nullptr) {
    st = DropFromStore(store_, Stub(*entry));  // chunks of a copy cut short
  } else {
    st = current.status();
  }
  if (!st.ok()) spdlog::error("migrate: drop the copy of {}: {}", result->path, st.message());
}

// Who owns the cold file the hot file `st` (in folder dir_fd) would
// replace, when the folder is sticky and its owner could not replace it
// there ("uid N"); "" when it may.
std::string BatchRunner::StickyConflict(int dir_fd, const struct stat& st,
                                        const std::string& rel) {
  struct stat folder;
  if (::fstat(dir_fd, &folder) != 0 || MayReplaceInFolder(folder, st.st_uid, st.st_uid + 1)) {
    return "";  // not sticky, or the folder's or root's file (the cold owner aside)
  }
  auto entry = store_.GetEntry(rel);
  if (!entry.ok() || entry->kind() != storepb::Entry::FILE) return "";
  auto cold = store_.GetManifest(entry->file_id());
  if (!cold.ok() || MayReplaceInFolder(folder, st.st_uid, cold->uid())) return "";
  return fmt::format("uid {}", cold->uid());
}

std::optional<Staged> BatchRunner::Stage(const storepb::JournalEntry& entry, const Candidate& c,
                                         size_t index, FileResult* result) {
  const std::string path = JoinPath(logdir_, c.path);
  // Held from the checks before the file moves aside on; a copy given up
  // leaves the store under it too (the mount's renames and unlinks wait).
  std::shared_lock<SharedMutex> lock;
  auto give_up = [&](Outcome outcome, const std::string& reason) {
    if (!lock.owns_lock()) lock = NamespaceLock();
    GiveUp(entry.file_id(), &entry, result, outcome, reason);
    return std::nullopt;
  };
  Staged s;
  s.index = index;
  auto dir = OpenParentBeneath(root_fd_, c.path, &s.name);
  if (!dir.ok()) return give_up(Outcome::kChanged, dir.status().message());
  s.dir = std::move(dir).value();
  // O_NONBLOCK: something swapped in for the file (a FIFO) cannot hang us.
  s.file.reset(
      ::openat(s.dir.get(), s.name.c_str(), O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC));
  if (!s.file.valid()) {
    return give_up(Outcome::kChanged, Status::FromErrno(errno, "open", path).message());
  }
  const int fd = s.file.get();
  struct stat st;
  if (::fstat(fd, &st) != 0) return give_up(Outcome::kFailed, "fstat failed");
  if (!S_ISREG(st.st_mode) || st.st_nlink != 1 || !SameIdentity(st, entry)) {
    return give_up(Outcome::kChanged, "changed before the copy began");
  }
  if (std::string who = StickyConflict(s.dir.get(), st, c.path); !who.empty()) {
    return give_up(Outcome::kChanged, fmt::format("{} ({}) in a sticky folder: both kept, this "
                                                  "one stays in place",
                                                  kStickyReason, who));
  }
  if (Status lease = TakeReadLease(fd); !lease.ok())
    return give_up(Outcome::kChanged, lease.message());

  IngestOptions io;
  io.chunk_bytes = options_.chunk_bytes;
  io.level = options_.level;
  io.dictionaries = options_.dictionaries;
  io.file_class = std::string(ClassName(c.cls));
  io.pool = &pool_;
  io.progress = options_.progress;
  io.should_stop = [this, fd] { return stopped() || !LeaseHeld(fd); };
  io.commit_lock = options_.batch_lock;
  io.root_fd = root_fd_;
  io.retire_replaced = retire();
  auto manifest = IngestFile(store_, logdir_, c.path, fd, st, entry.file_id(), io);
  if (!manifest.ok()) {
    const int err = manifest.status().sys_errno();
    if (err == ENOSPC || err == EDQUOT) {
      store_full_ = manifest.status().message();
      return give_up(Outcome::kChanged, "the store has no room; left in place");
    }
    if (err == E2BIG) {  // the file's to keep as it is, not a failure of the store
      return give_up(Outcome::kChanged, manifest.status().message() +
                                            " (a cold file keeps 64 KiB at most); left in place");
    }
    if (stopping()) return give_up(Outcome::kChanged, kStoppedReason);
    bool changed = manifest.status().code() == Code::kAborted;
    return give_up(changed ? Outcome::kChanged : Outcome::kFailed, manifest.status().message());
  }
  MaybeCrash("migrate.stored");
  Status verified = VerifyStoredFile(store_, *manifest, &pool_);
  if (!verified.ok()) return give_up(Outcome::kFailed, verified.message());
  MaybeCrash("migrate.read_back");
  // Tests: a writer can appear here, after the copy, before the checks
  // that precede the unlink.
  FailpointHook("migrate.copied", path);

  lock = NamespaceLock();
  // I2: only the file that was copied, unchanged, and no writer anywhere.
  if (!LeaseHeld(fd))
    return give_up(Outcome::kChanged, "opened for writing while it was copied; left in place");
  // Where the store shows it now: a folder renamed through the mount since
  // the commit took the entry along. That path must still name the file,
  // or the file would leave one path and show up at another.
  auto current = store_.GetManifest(entry.file_id());
  if (!current.ok()) {
    return give_up(Outcome::kChanged,
                   "its store copy is gone (" + current.status().message() + "); left in place");
  }
  struct stat after;
  if (::fstat(fd, &after) != 0 || !SameIdentity(after, entry) || after.st_nlink != 1) {
    return give_up(Outcome::kChanged, "modified while it was copied; left in place");
  }
  auto now_dir = OpenParentNaming(root_fd_, current->path(), after, &s.name);
  if (!now_dir.ok()) {
    return give_up(Outcome::kChanged, "renamed while it was copied; left in place");
  }
  s.dir = std::move(now_dir).value();
  manifest->set_path(current->path());
  result->dev = after.st_dev;
  result->ino = after.st_ino;
  if (options_.observer != nullptr && !options_.observer->BeginMove(fd, after, *manifest)) {
    return give_up(Outcome::kChanged, "open for writing through the mount; left in place");
  }
  s.aside = AsideName(s.name, entry.file_id());
  folder_times_.Before(s.dir.get());
  const int aside =
      ::renameat2(s.dir.get(), s.name.c_str(), s.dir.get(), s.aside.c_str(), RENAME_NOREPLACE);
  folder_times_.After(s.dir.get());
  if (aside != 0) {
    Status err = Status::FromErrno(errno, "rename aside", path);
    if (options_.observer != nullptr) options_.observer->EndMove(entry.file_id(), false);
    return give_up(Outcome::kChanged, err.message());
  }
  s.aside_at = std::chrono::steady_clock::now();
  MaybeCrash("migrate.aside");
  s.manifest = std::move(manifest).value();
  return s;
}

Result<UniqueFd> BatchRunner::FolderFor(const std::string& rel, std::string* name) {
  // Folders missing in the logdir (a rename through the mount into a folder
  // only the store has) are made as the store remembers them.
  *name = std::string(BaseName(rel));
  UniqueFd dir(::fcntl(root_fd_, F_DUPFD_CLOEXEC, 0));
  std::string parent = ParentPath(rel), sofar;
  size_t start = 0;
  while (!parent.empty() && start <= parent.size()) {
    size_t slash = parent.find('/', start);
    if (slash == std::string::npos) slash = parent.size();
    std::string part = parent.substr(start, slash - start);
    sofar = JoinPath(sofar, part);
    start = slash + 1;
    auto entry = store_.GetEntry(sofar);
    mode_t mode = entry.ok() ? entry->mode() & 07777 : 0755;
    if (::mkdirat(dir.get(), part.c_str(), mode) == 0 && entry.ok() &&
        ::fchownat(dir.get(), part.c_str(), entry->uid(), entry->gid(), AT_SYMLINK_NOFOLLOW) != 0) {
      spdlog::warn("migrate: chown folder {}: {}", sofar, std::strerror(errno));
    }
    int next = ::openat(dir.get(), part.c_str(), O_PATH | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    if (next < 0) return Status::FromErrno(errno, "open", sofar);
    dir.reset(next);
  }
  return dir;
}

void BatchRunner::Finish(Staged s, const Status& durable, FileResult* result,
                         std::vector<storepb::Manifest>* moved) {
  MaybePause("migrate.staged");
  auto lock = NamespaceLock();
  const uint64_t id = s.manifest.file_id();
  const int dir = s.dir.get();
  // While it waited aside the mount served the store's copy, and what was
  // done to it through the mount (a rename, a chmod, a delete) was done to
  // that copy: it is the truth now.
  auto now = store_.GetManifest(id);
  if (!now.ok()) {
    if (!now.status().IsNotFound())
      spdlog::error("migrate: {}: {}", result->path, now.status().message());
    // Deleted through the mount: so is the file (a writer waiting for it
    // gets it deleted, as it would on a disk).
    if (::unlinkat(dir, s.aside.c_str(), 0) != 0) {
      spdlog::error("migrate: {} stays as {}: {}", result->path, s.aside, std::strerror(errno));
    }
    if (options_.observer != nullptr) options_.observer->EndMove(id, true);
    result->outcome = Outcome::kChanged;
    result->reason = "deleted through the mount as it moved";
    return;
  }
  std::string name;
  auto target = now->path() == s.manifest.path()
                    ? Result<UniqueFd>(UniqueFd(::fcntl(dir, F_DUPFD_CLOEXEC, 0)))
                    : FolderFor(now->path(), &name);
  if (now->path() == s.manifest.path()) name = s.name;
  struct stat taken;
  const bool free =
      target.ok() && ::fstatat(target->get(), name.c_str(), &taken, AT_SYMLINK_NOFOLLOW) != 0;
  if (durable.ok() && LeaseHeld(s.file.get()) && free) {
    folder_times_.Before(dir);
    const int unlinked = ::unlinkat(dir, s.aside.c_str(), 0);
    folder_times_.After(dir);
    if (unlinked == 0) {
      MaybeCrash("migrate.unlinked");
      if (options_.observer != nullptr) options_.observer->EndMove(id, true);
      result->outcome = Outcome::kMoved;
      result->stored_bytes = s.manifest.stored_bytes();
      moved->push_back(std::move(s.manifest));
      return;
    }
    spdlog::warn("migrate: unlink {}: {}", result->path, std::strerror(errno));
  }
  // Back into the logdir: a writer is waiting for it, or a new file took
  // its path (then it goes beside that one, under another name).
  const std::string reason =
      !durable.ok()
          ? "the store could not make its copy durable (" + durable.message() + "); left in place"
      : !LeaseHeld(s.file.get()) ? "opened for writing as it moved; left in place"
                                 : "a new file took its path as it moved";
  const int fd = s.file.get();
  // The bytes go back whatever happens below; an attribute that cannot be
  // given back is said, with the file.
  auto warn = [&](const char* op) {
    spdlog::warn("migrate: {} {} as it goes back: {}", op, now->path(), std::strerror(errno));
  };
  if ((now->mode() & 07777) != (s.manifest.mode() & 07777) &&
      ::fchmod(fd, now->mode() & 07777) != 0) {
    warn("chmod");
  }
  if ((now->uid() != s.manifest.uid() || now->gid() != s.manifest.gid()) &&
      ::fchown(fd, now->uid(), now->gid()) != 0) {
    warn("chown");
  }
  if (now->mtime_ns() != s.manifest.mtime_ns() || now->atime_ns() != s.manifest.atime_ns()) {
    struct timespec times[2] = {FromNs(now->atime_ns()), FromNs(now->mtime_ns())};
    if (::futimens(fd, times) != 0) warn("set the times of");
  }
  std::string where = now->path();
  int to = target.ok() ? target->get() : dir;
  folder_times_.Before(dir);
  if (to != dir) folder_times_.Before(to);
  const int back =
      target.ok() ? ::renameat2(dir, s.aside.c_str(), to, name.c_str(), RENAME_NOREPLACE) : -1;
  folder_times_.After(dir);
  if (to != dir) folder_times_.After(to);
  if (back != 0) {
    std::string beside = fmt::format("{}.tbfs-recovered-{}", target.ok() ? name : s.name, id);
    where = JoinPath(ParentPath(target.ok() ? now->path() : s.manifest.path()), beside);
    if (::renameat2(dir, s.aside.c_str(), to, beside.c_str(), RENAME_NOREPLACE) != 0) {
      spdlog::error("migrate: {} stays as {}: {}", result->path, s.aside, std::strerror(errno));
      where = s.aside;
    }
    spdlog::warn("migrate: {} was taken as it moved; the file is {}", now->path(), where);
  }
  if (options_.observer != nullptr) options_.observer->EndMove(id, false);
  GiveUp(id, nullptr, result, Outcome::kChanged,
         where == now->path() ? reason : reason + "; it is now " + where);
}  // the lease goes with the fd

void BatchRunner::Rollback(const std::vector<storepb::Manifest>& moved, BatchResult* result) {
  bool first = true;
  for (const storepb::Manifest& was : moved) {
    // Its current path: a rename through the mount may have moved it.
    auto m = store_.GetManifest(was.file_id());
    if (!m.ok()) {
      // Deleted through the mount meanwhile: there is nothing to put back.
      if (!m.status().IsNotFound())
        spdlog::error("migrate rollback of {}: {}", was.path(), m.status().message());
      continue;
    }
    std::string dest, note;
    Status st = PutBack(store_, logdir_, *m, &pool_, options_.observer, &dest, &note);
    if (!note.empty()) spdlog::warn("migrate rollback: {}", note);
    if (!st.ok()) {
      // The store copy stays (and the journal record with it): recovery
      // tries again; nothing is lost.
      spdlog::error("migrate rollback of {}: {}", m->path(), st.message());
      continue;
    }
    if (first) MaybeCrash("migrate.rollback_one");
    first = false;
    st = DropFromStore(store_, *m, retire());
    if (!st.ok()) spdlog::error("migrate rollback: drop {}: {}", m->path(), st.message());
    for (FileResult& f : result->files) {
      if (f.path == was.path()) {
        f.outcome = Outcome::kRolledBack;
        f.reason = "verifier failure: batch rolled back";
      }
    }
  }
  if (options_.observer != nullptr) options_.observer->Retired();
  result->rolled_back = true;
}

BatchResult BatchRunner::Run(const std::vector<Candidate>& batch,
                             const std::vector<std::string>& event_files,
                             events::LogdirDigest* full) {
  MaybePause("migrate.batch");
  BatchResult result;
  result.batch_id = store_.NewBatchId();
  for (const Candidate& c : batch) {
    FileResult f;
    f.path = c.path;
    f.bytes = c.size;
    result.files.push_back(std::move(f));
  }

  // 1. Baseline of every run the batch touches.
  std::vector<std::string> affected = AffectedEventFiles(event_files, batch);
  std::vector<events::FileDigest> before(affected.size());
  for (size_t i = 0; i < affected.size(); ++i) {
    Status st = events::DigestFile(logdir_, affected[i], &before[i]);
    if (!st.ok()) {
      result.not_run = "cannot take the verifier baseline: " + st.message();
      for (FileResult& f : result.files) f.reason = result.not_run;
      return result;
    }
    result.runs_verified.push_back(events::RunOf(affected[i]));
  }
  std::sort(result.runs_verified.begin(), result.runs_verified.end());
  result.runs_verified.erase(std::unique(result.runs_verified.begin(), result.runs_verified.end()),
                             result.runs_verified.end());

  // 2. Journal first.
  storepb::JournalRecord record;
  record.set_kind(storepb::JournalRecord::MIGRATE);
  record.set_batch_id(result.batch_id);
  record.set_started_ns(NowNs());
  std::vector<bool> present(batch.size(), false);
  for (size_t i = 0; i < batch.size(); ++i) {
    storepb::JournalEntry* e = record.add_entries();
    e->set_path(batch[i].path);
    e->set_file_id(store_.NewFileId());
    auto fd = OpenBeneath(root_fd_, batch[i].path, O_PATH);
    struct stat st;
    if (fd.ok() && ::fstat(fd->get(), &st) == 0 && S_ISREG(st.st_mode)) {
      e->set_ino(st.st_ino);
      e->set_size(static_cast<uint64_t>(st.st_size));
      e->set_mtime_ns(ToNs(st.st_mtim));
      e->set_ctime_ns(ToNs(st.st_ctim));
      present[i] = true;
    }
  }
  Status st = store_.PutJournal(record);
  // In the engine's tables before the first file moves aside: recovery
  // finds the files aside by their journal record, and a damaged log must
  // not take it with it.
  if (st.ok()) {
    st = Flush(&result);
    if (!st.ok() && !store_.DeleteJournal(result.batch_id).ok()) {
      spdlog::error("migrate: batch {}: its journal record stays (recovery drops it)",
                    result.batch_id);
    }
  }
  if (!st.ok()) {
    result.not_run = st.message();
    for (FileResult& f : result.files) f.reason = st.message();
    return result;
  }
  MaybeCrash("migrate.journaled");

  // 3. Move the files: each is staged aside while the next ones of its
  // group are copied; the engine flushes; then the group is unlinked.
  std::vector<storepb::Manifest> moved;
  std::set<std::string> folders;
  std::vector<Staged> group;
  auto finish_group = [&] {
    if (group.empty()) return;
    const auto waited = std::chrono::steady_clock::now() - group.back().aside_at;
    if (waited < kAsideGrace) std::this_thread::sleep_for(kAsideGrace - waited);
    // I2: the copies, their manifests and the journal record in the engine's
    // flushed, checksummed files, not only in its log, before any unlink.
    Status durable = Flush(&result);
    if (ShouldFail("migrate.flush"))
      durable =
          Status::FromErrno(EIO, "flush", "failure injected for testing (failpoint migrate.flush)");
    if (!durable.ok()) {
      spdlog::error("migrate: batch {}: {}", result.batch_id, durable.message());
    } else {
      MaybeCrash("migrate.flushed");
    }
    for (Staged& s : group) {
      const size_t i = s.index;
      Finish(std::move(s), durable, &result.files[i], &moved);
      if (result.files[i].outcome == Outcome::kMoved) folders.insert(ParentPath(batch[i].path));
    }
    group.clear();
  };
  for (size_t i = 0; i < batch.size(); ++i) {
    if (!present[i] || !store_full_.empty() || stopping()) {
      result.files[i].outcome = Outcome::kChanged;
      result.files[i].reason = !present[i]           ? "gone before the batch began"
                               : store_full_.empty() ? kStoppedReason
                                                     : "the store has no room; left in place";
      continue;
    }
    // Tests: a pass that takes its time (a mount stopped in the middle).
    if (ShouldFail("migrate.slow_file"))
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
    auto next = Stage(record.entries(static_cast<int>(i)), batch[i], i, &result.files[i]);
    if (next) group.push_back(std::move(*next));
    if (!group.empty() &&
        (group.size() >= kGroupFiles ||
         std::chrono::steady_clock::now() - group.front().aside_at >= kGroupAge)) {
      finish_group();
    }
  }
  finish_group();
  // Before the folders are synced: their times as the users left them.
  folder_times_.Restore();
  FailpointHook("migrate.before_folder_sync", logdir_);
  for (const std::string& dir : folders) {
    auto fd = dir.empty() ? OpenFile(logdir_, O_RDONLY | O_DIRECTORY)
                          : OpenBeneath(root_fd_, dir, O_RDONLY | O_DIRECTORY);
    // The unlinks reach the disk before the verdict. A folder that cannot
    // be synced leaves them to the journal: its record stays, and recovery
    // finishes or undoes the batch whichever way the disk kept it.
    Status synced = fd.status();
    if (fd.ok() && ::fsync(fd->get()) != 0)
      synced = Status::FromErrno(errno, "fsync", JoinPath(logdir_, dir));
    const int gone = fd.ok() ? 0 : fd.status().sys_errno();
    if (gone == ENOENT || gone == ENOTDIR) {
      // Renamed or removed since (a user's rename through the mount): the
      // unlinks made in it reach the disk with the whole filesystem. Left
      // to the journal, the record would name files the batch skipped
      // because their folder moved, which recovery finds nowhere.
      auto top = OpenFile(logdir_, O_RDONLY | O_DIRECTORY);
      synced = top.status();
      if (top.ok() && ::syncfs(top->get()) != 0)
        synced = Status::FromErrno(errno, "syncfs", logdir_);
    }
    if (synced.ok() && ShouldFail("migrate.fsync_folder"))
      synced = Status::FromErrno(EIO, "fsync", JoinPath(logdir_, dir) + " (failpoint)");
    if (!synced.ok()) {
      spdlog::error("migrate: batch {}: {}; its journal record stays", result.batch_id,
                    synced.message());
      if (result.unsynced.empty()) result.unsynced = synced.message();
    }
  }
  MaybeCrash("migrate.all_unlinked");
  FailpointHook("migrate.before_verify", logdir_);

  // 4. Verify every run the batch touched.
  auto lock = NamespaceLock();
  std::vector<events::FileDigest> now;
  result.failures = events::VerifyFiles(logdir_, before, options_.threads, &now);
  for (size_t i = 0; i < affected.size(); ++i) {
    for (events::FileDigest& f : full->files) {
      if (f.path == affected[i] && now[i].offset_bytes > 0) f = now[i];
    }
  }
  events::MergeRuns(full);
  for (events::Failure& f : events::CheckMustHave(*full, options_.must_have)) {
    result.failures.push_back(std::move(f));
  }
  if (ShouldFail("migrate.verify")) {
    result.failures.push_back(
        {"*", "", "", 0, "failure injected for testing (failpoint migrate.verify)"});
  }

  // 5. Commit or roll back.
  if (!result.failures.empty()) {
    Rollback(moved, &result);
  } else {
    MaybeCrash("migrate.verified");
  }
  WriteBatch commit;
  if (result.unsynced.empty()) commit.Delete(Space::kJournal, EncodeId(result.batch_id));
  commit.Put(Space::kBaselines, kLastBaselineKey,
             nlohmann::json{{"batch", result.batch_id},
                            {"time_ns", NowNs()},
                            {"intact", result.failures.empty()},
                            {"files_checked", before.size()}}
                 .dump());
  st = store_.Commit(commit, true);
  if (!st.ok()) spdlog::error("migrate: commit batch {}: {}", result.batch_id, st.message());
  MaybeCrash("migrate.committed");
  result.store_full = !store_full_.empty();
  if (options_.after_batch) options_.after_batch(result);
  return result;
}

}  // namespace

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
