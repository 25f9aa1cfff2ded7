// What a crash left of a migration's files aside, found and settled by
// recovery (store/recovery.cc).
#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>

#include "base/fs_util.h"
#include "base/time_util.h"
#include "spdlog/spdlog.h"
#include "store/file_io.h"
#include "store/migrate_internal.h"
#include "store/store_dir.h"
#include "store/xattrs.h"

namespace tbfs::store {

namespace {

// The file a migration set aside is still the one it journaled: its move
// aside changed its ctime, nothing else.
bool IsJournaled(const struct stat& st, const storepb::JournalEntry& e) {
  return S_ISREG(st.st_mode) && st.st_ino == e.ino() &&
         static_cast<uint64_t>(st.st_size) == e.size() && ToNs(st.st_mtim) == e.mtime_ns();
}

void SyncFolder(int dir_fd, const std::string& path) {
  UniqueFd fd(::openat(dir_fd, ".", O_RDONLY | O_DIRECTORY | O_CLOEXEC));
  if (!fd.valid() || ::fsync(fd.get()) != 0)
    spdlog::warn("recovery: fsync the folder of {}: {}", path, std::strerror(errno));
}

// A file a migration left aside (in folder dfd) whose store copy is there:
// what the mount did to that copy meanwhile (a rename, a chmod, a chown, a
// touch) is the truth, as the batch's Finish has it. The file goes where
// the copy is (beside a file that took that name), with its attributes.
// False, nothing done, when it is not the journaled file or the copy's
// folder is not in the logdir.
bool PutWhereTheStoreHasIt(int root_fd, int dfd, const std::string& aside,
                           const storepb::JournalEntry& e, const storepb::Manifest& m,
                           const std::string& logdir, RecoveryResult* result) {
  UniqueFd fd(OpenAtOwnRead(dfd, aside.c_str(), O_RDONLY | O_NOFOLLOW | O_NONBLOCK | kOwnRead));
  struct stat st;
  std::string name;
  if (!fd.valid() || ::fstat(fd.get(), &st) != 0 || !IsJournaled(st, e)) return false;
  auto to = OpenParentBeneath(root_fd, m.path(), &name);
  if (!to.ok()) return false;
  // What the file is, against what the store's copy says now.
  storepb::Manifest is;
  is.set_uid(st.st_uid);
  is.set_gid(st.st_gid);
  is.set_mode(st.st_mode);
  is.set_atime_ns(ToNs(st.st_atim));
  is.set_mtime_ns(ToNs(st.st_mtim));
  (void)ReadXattrs(fd.get(), m.path(), &is);  // unread: set again
  CarryChanges(fd.get(), is, m);
  std::string where = name;
  if (::renameat2(dfd, aside.c_str(), to->get(), name.c_str(), RENAME_NOREPLACE) != 0) {
    where = RecoveredName(name, m.file_id());
    if (errno != EEXIST ||
        ::renameat2(dfd, aside.c_str(), to->get(), where.c_str(), RENAME_NOREPLACE) != 0) {
      return false;
    }
    result->notes.push_back(JoinPath(logdir, m.path()) + " was taken meanwhile; the file is " +
                            JoinPath(logdir, JoinPath(ParentPath(m.path()), where)));
  }
  // The name was checked through fd, then moved: a file swapped in between
  // went instead, and the store copy stays (written back beside it next).
  struct stat moved;
  if (::fstatat(to->get(), where.c_str(), &moved, AT_SYMLINK_NOFOLLOW) != 0 ||
      moved.st_ino != st.st_ino || moved.st_dev != st.st_dev) {
    result->notes.push_back(JoinPath(logdir, m.path()) + ": another file took its place aside as " +
                            "it was put back; its store copy stays");
    return false;
  }
  SyncFolder(dfd, aside);
  SyncFolder(to->get(), m.path());
  return true;
}

}  // namespace

// Where every file a migration set aside is (`.NAME.tbfs-mig-ID`, or
// `.tbfs-mig-ID`), by id, when a record is a migration's: a folder renamed
// through the mount took those in it along, wherever the store copy's path
// (or its deletion) went since. One walk of the logdir, as a pass makes.
std::map<uint64_t, std::string> FindAsideFiles(const std::vector<storepb::JournalRecord>& records,
                                               const std::string& logdir, RecoveryResult* result) {
  // Each journaled file's name aside (its basename, which no rename through
  // the mount changes, and its id), and its entry.
  std::map<std::string, const storepb::JournalEntry*> names;
  for (const storepb::JournalRecord& r : records) {
    if (r.kind() != storepb::JournalRecord::MIGRATE) continue;
    for (const storepb::JournalEntry& e : r.entries())
      names[AsideName(BaseName(e.path()), e.file_id())] = &e;
  }
  std::map<uint64_t, std::string> found;
  if (names.empty()) return found;
  WalkOptions w;
  w.skip_dirs = {kStoreDirName};
  std::vector<std::string> unread;
  w.warnings = &unread;
  // A file by that name elsewhere than its folder is taken only when it is
  // the journaled file (a copy made in the logdir is not: red team); in
  // its folder, when it is that file or was written since (the same inode:
  // a file put at the name by someone else, even a user allowed to write
  // there, is not, and went back under the trace's name: red team); of
  // two, the journaled file, then the one in its folder.
  std::map<uint64_t, int> rank;
  Status st = WalkTree(logdir, w, [&](const WalkEntry& f) {
    auto it = names.find(f.name);
    // Never a FIFO, a symlink or a folder: something put at a name aside
    // (freed by an rmdir through the mount, fs/folder_removal.cc) after the
    // file that had it went.
    if (it == names.end() || !S_ISREG(f.st.st_mode)) return;
    const storepb::JournalEntry& e = *it->second;
    const int r = 2 * IsJournaled(f.st, e) +
                  (ParentPath(f.rel) == ParentPath(e.path()) && f.st.st_ino == e.ino());
    if (r == 0 || rank[e.file_id()] >= r) return;
    rank[e.file_id()] = r;
    found[e.file_id()] = f.rel;
  });
  for (const std::string& u : unread) result->notes.push_back("files set aside: " + u);
  if (!st.ok()) result->notes.push_back("files set aside: " + st.message());
  return found;
}

// PutWhereTheStoreHasIt, for the file aside wherever it is.
bool SettleAside(int root_fd, const std::map<uint64_t, std::string>& asides,
                 const storepb::JournalEntry& e, const storepb::Manifest& m,
                 const std::string& logdir, RecoveryResult* result) {
  auto it = asides.find(e.file_id());
  std::string name;
  auto dir = it == asides.end() ? Result<UniqueFd>(Status::NotFound("none"))
                                : OpenParentBeneath(root_fd, it->second, &name);
  return dir.ok() && PutWhereTheStoreHasIt(root_fd, dir->get(), name, e, m, logdir, result);
}

// The file a migration left aside, wherever it is: unlinked when it is the
// file as the batch journaled it and was deleted meanwhile (`deleted`);
// otherwise back under its name in its folder (beside it, when a new file
// took the name), to be judged like any other. True, with *st, when it went
// back into another folder than the journaled one (a folder renamed).
bool PutAsideBack(int root_fd, const std::map<uint64_t, std::string>& asides,
                  const storepb::JournalEntry& e, const std::string& logdir, bool deleted,
                  struct stat* st, RecoveryResult* result) {
  auto it = asides.find(e.file_id());
  std::string aside;
  auto dir = it == asides.end() ? Result<UniqueFd>(Status::NotFound("none"))
                                : OpenParentBeneath(root_fd, it->second, &aside);
  if (!dir.ok()) return false;
  const int dfd = dir->get();
  // Written since (by its name aside, after the crash), it is someone's
  // work, and goes back.
  if (deleted && ::fstatat(dfd, aside.c_str(), st, AT_SYMLINK_NOFOLLOW) == 0 &&
      IsJournaled(*st, e) && ::unlinkat(dfd, aside.c_str(), 0) == 0) {
    return false;
  }
  const std::string folder = ParentPath(it->second), name = std::string(BaseName(e.path()));
  std::string back = name;
  if (::renameat2(dfd, aside.c_str(), dfd, back.c_str(), RENAME_NOREPLACE) != 0) {
    back = RecoveredName(name, e.file_id());
    if (errno != EEXIST ||
        ::renameat2(dfd, aside.c_str(), dfd, back.c_str(), RENAME_NOREPLACE) != 0)
      return false;
    result->notes.push_back(JoinPath(logdir, JoinPath(folder, name)) +
                            " was recreated meanwhile; the migrated content is back as " + back);
  }
  if (folder == ParentPath(e.path())) return false;
  result->notes.push_back(JoinPath(logdir, e.path()) + ": its folder was renamed; the file is " +
                          JoinPath(logdir, JoinPath(folder, back)));
  return ::fstatat(dfd, back.c_str(), st, AT_SYMLINK_NOFOLLOW) == 0;
}

}  // namespace tbfs::store
