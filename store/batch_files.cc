// Moving one file of a batch: staging it (copy, checks, aside), then
// unlinking it or putting it back (store/batch_runner.h).
#include <fcntl.h>
#include <signal.h>
#include <unistd.h>

#include <mutex>

#include "base/failpoint.h"
#include "base/time_util.h"
#include "fmt/format.h"
#include "spdlog/spdlog.h"
#include "store/batch_runner.h"
#include "store/format.h"
#include "store/migrate_internal.h"
#include "store/xattrs.h"

namespace tbfs::store {

namespace {

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

// The file open as `fd` was deleted, not saved over: its last link is gone
// and nothing has its name in `dir`.
bool Deleted(int fd, int dir, const std::string& name) {
  struct stat st;
  if (::fstat(fd, &st) != 0 || st.st_nlink != 0) return false;
  return ::fstatat(dir, name.c_str(), &st, AT_SYMLINK_NOFOLLOW) != 0 && errno == ENOENT;
}
}  // namespace

// Who owns the cold file the hot file `st` (in folder dir_fd) would
// replace, when the folder is sticky and its owner could not replace it
// there ("uid N"); "" when it may.
std::string BatchRunner::StickyConflict(int dir_fd, const struct stat& st, const std::string& rel) {
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

std::optional<Staged> BatchRunner::Copy(const storepb::JournalEntry& entry, const Candidate& c,
                                        size_t index, FileResult* result, WorkPool& pool,
                                        std::string* store_full) {
  const std::string path = JoinPath(logdir_, c.path);
  // A copy given up leaves the store under the namespace lock (the
  // mount's renames and unlinks wait).
  auto give_up = [&](Outcome outcome, const std::string& reason) {
    auto lock = NamespaceLock();
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
      OpenAtOwnRead(s.dir.get(), s.name.c_str(), O_RDONLY | O_NOFOLLOW | O_NONBLOCK | kOwnRead));
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
  io.head_chunk_bytes = options_.head_chunk_bytes;
  io.level = options_.level;
  io.dictionaries = options_.dictionaries;
  io.file_class = std::string(ClassName(c.cls));
  io.pool = &pool;
  io.progress = options_.progress;
  io.should_stop = [this, fd] { return stopped() || !LeaseHeld(fd); };
  io.commit_lock = options_.batch_lock;
  io.root_fd = root_fd_;
  io.retire_replaced = retire();
  auto manifest = IngestFile(store_, logdir_, c.path, fd, st, entry.file_id(), io);
  if (!manifest.ok()) {
    const int err = manifest.status().sys_errno();
    if (err == ENOSPC || err == EDQUOT) {
      *store_full = manifest.status().message();
      return give_up(Outcome::kChanged, "the store has no room");
    }
    if (err == E2BIG) {  // the file's to keep as it is, not a failure of the store
      return give_up(Outcome::kChanged, manifest.status().message() +
                                            " (a cold file keeps 64 KiB at most); left in place");
    }
    if (stopping()) return give_up(Outcome::kChanged, kStoppedReason);
    if (Deleted(fd, s.dir.get(), s.name))
      return give_up(Outcome::kDeleted, "deleted while it was copied");
    bool changed = manifest.status().code() == Code::kAborted;
    return give_up(changed ? Outcome::kChanged : Outcome::kFailed, manifest.status().message());
  }
  MaybeCrash("migrate.stored");
  Status verified = VerifyCopiedFile(store_, *manifest, &pool);
  if (verified.ok() && ShouldFail("migrate.read_back")) {
    verified = Status::Corruption(path + ": read back wrong (failpoint migrate.read_back)");
  }
  if (!verified.ok()) return give_up(Outcome::kFailed, verified.message());
  MaybeCrash("migrate.read_back");
  // Tests: a writer can appear here, after the copy, before the checks
  // that precede the unlink.
  FailpointHook("migrate.copied", path);
  s.manifest = std::move(manifest).value();
  return s;
}

std::optional<Staged> BatchRunner::CopyBeside(const storepb::JournalEntry& entry,
                                              const Candidate& c, size_t index, FileResult* result,
                                              SideCopy* side) {
  std::optional<Staged> s = Copy(entry, c, index, result, *side_pool_, &side->store_full);
  std::unique_lock lock(side->mu);
  side->copied = true;
  while (s && !side->taken) {
    if (!LeaseHeld(s->file.get())) {
      lock.unlock();
      auto ns = NamespaceLock();
      GiveUp(entry.file_id(), &entry, result, Outcome::kChanged,
             "opened for writing after its copy; left in place");
      return std::nullopt;  // the file closed: the writer goes on
    }
    side->cv.wait_for(lock, std::chrono::milliseconds(10));
  }
  return s;
}

std::optional<Staged> BatchRunner::MoveAside(Staged s, const storepb::JournalEntry& entry,
                                             FileResult* result) {
  const std::string path = JoinPath(logdir_, result->path);
  // Held from the checks before the file moves aside on.
  auto lock = NamespaceLock();
  auto give_up = [&](Outcome outcome, const std::string& reason) {
    GiveUp(entry.file_id(), &entry, result, outcome, reason);
    return std::nullopt;
  };
  storepb::Manifest manifest = std::move(s.manifest);
  const int fd = s.file.get();
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
  if (Deleted(fd, s.dir.get(), s.name))
    return give_up(Outcome::kDeleted, "deleted while it was copied");
  struct stat after;
  if (::fstat(fd, &after) != 0 || !SameIdentity(after, entry) || after.st_nlink != 1) {
    return give_up(Outcome::kChanged, "modified while it was copied; left in place");
  }
  auto now_dir = OpenParentNaming(root_fd_, current->path(), after, &s.name);
  if (!now_dir.ok()) {
    return give_up(Outcome::kChanged, "renamed while it was copied; left in place");
  }
  s.dir = std::move(now_dir).value();
  manifest.set_path(current->path());
  result->dev = after.st_dev;
  result->ino = after.st_ino;
  if (options_.observer != nullptr && !options_.observer->BeginMove(fd, after, manifest)) {
    return give_up(Outcome::kChanged, "open for writing through the mount; left in place");
  }
  s.aside = AsideName(s.name, entry.file_id());
  // Tests: a new file renamed over the name between its check and the move.
  FailpointHook("migrate.named", path);
  folder_times_.Before(s.dir.get());
  const int aside =
      ::renameat2(s.dir.get(), s.name.c_str(), s.dir.get(), s.aside.c_str(), RENAME_NOREPLACE);
  folder_times_.After(s.dir.get());
  if (aside != 0) {
    Status err = Status::FromErrno(errno, "rename aside", path);
    if (options_.observer != nullptr) options_.observer->EndMove(entry.file_id(), false);
    return give_up(Outcome::kChanged, err.message());
  }
  // The name is checked, then moved: a new file renamed over it between
  // the two (an editor's save) went aside instead of the one copied, and
  // would be unlinked. It goes back; the copied one is gone (replaced).
  struct stat moved;
  if (::fstatat(s.dir.get(), s.aside.c_str(), &moved, AT_SYMLINK_NOFOLLOW) != 0 ||
      moved.st_ino != after.st_ino || moved.st_dev != after.st_dev) {
    std::string where = PutAsideBack(s.dir.get(), s.name, s.aside, entry.file_id());
    if (options_.observer != nullptr) options_.observer->EndMove(entry.file_id(), false);
    return give_up(Outcome::kChanged,
                   "replaced by a new file as it moved; left in place" +
                       (where == s.name ? "" : " (the new one is " + where + ")"));
  }
  s.aside_at = std::chrono::steady_clock::now();
  MaybeCrash("migrate.aside");
  s.manifest = std::move(manifest);
  return s;
}

std::string BatchRunner::PutAsideBack(int dir_fd, const std::string& name, const std::string& aside,
                                      uint64_t file_id) {
  folder_times_.Before(dir_fd);
  std::string where = name;
  if (::renameat2(dir_fd, aside.c_str(), dir_fd, name.c_str(), RENAME_NOREPLACE) != 0) {
    where = RecoveredName(name, file_id);
    if (::renameat2(dir_fd, aside.c_str(), dir_fd, where.c_str(), RENAME_NOREPLACE) != 0) {
      spdlog::error("migrate: {} stays as {}: {}", name, aside, std::strerror(errno));
      where = aside;
    }
  }
  folder_times_.After(dir_fd);
  return where;
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
    // gets it deleted, as it would on a disk). An rmdir of its folder
    // through the mount may have unlinked it already (fs/folder_removal.cc).
    if (::unlinkat(dir, s.aside.c_str(), 0) != 0 && errno != ENOENT) {
      spdlog::error("migrate: {} stays as {}: {}", result->path, s.aside, std::strerror(errno));
    }
    if (options_.observer != nullptr) options_.observer->EndMove(id, true);
    result->outcome = Outcome::kDeleted;
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
  // The bytes go back whatever happens below; an attribute that cannot be
  // given back is said, with the file.
  CarryChanges(s.file.get(), s.manifest, *now);
  std::string where = now->path();
  int to = target.ok() ? target->get() : dir;
  folder_times_.Before(dir);
  if (to != dir) folder_times_.Before(to);
  const int back =
      target.ok() ? ::renameat2(dir, s.aside.c_str(), to, name.c_str(), RENAME_NOREPLACE) : -1;
  folder_times_.After(dir);
  if (to != dir) folder_times_.After(to);
  if (back != 0) {
    std::string beside = RecoveredName(target.ok() ? name : s.name, id);
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

}  // namespace tbfs::store
