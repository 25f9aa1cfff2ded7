// Small POSIX helpers shared by every layer: an owning fd, full reads and
// writes that retry on EINTR and short counts, and a sorted tree walk.
//
// All functions are thread-safe (they share no state). Errors come back as
// Status values that name the operation and the path.
#pragma once

#include <fcntl.h>
#include <sys/stat.h>

#include <atomic>
#include <functional>
#include <map>
#include <string>
#include <string_view>
#include <vector>

#include "base/status.h"

namespace tbfs {

// Owns one file descriptor and closes it on destruction.
class UniqueFd {
 public:
  UniqueFd() = default;
  explicit UniqueFd(int fd) : fd_(fd) {}
  UniqueFd(UniqueFd&& o) noexcept : fd_(o.release()) {}
  UniqueFd& operator=(UniqueFd&& o) noexcept {
    if (this != &o) reset(o.release());
    return *this;
  }
  UniqueFd(const UniqueFd&) = delete;
  UniqueFd& operator=(const UniqueFd&) = delete;
  ~UniqueFd() { reset(); }

  int get() const { return fd_; }
  bool valid() const { return fd_ >= 0; }
  int release() {
    int fd = fd_;
    fd_ = -1;
    return fd;
  }
  void reset(int fd = -1);

 private:
  int fd_ = -1;
};

// tbfs's own reads of a logdir (walks, scans, migration, verification)
// leave access times as they were, as backup tools do: kOwnRead is
// O_NOATIME, which OpenFile, OpenBeneath and OpenAtOwnRead drop where the
// kernel refuses it (EPERM: someone else's file, and not root).
inline constexpr int kOwnRead = O_NOATIME;
// openat(2) for a read of tbfs's own: O_NOATIME where allowed (above),
// O_CLOEXEC added; -1 and errno as openat's.
int OpenAtOwnRead(int dir_fd, const char* name, int flags, mode_t mode = 0);
// open(2) with O_CLOEXEC added (O_NOATIME as above).
Result<UniqueFd> OpenFile(const std::string& path, int flags, mode_t mode = 0);
// Writes all n bytes at the current offset.
Status WriteAll(int fd, const void* data, size_t n, const std::string& path);
// Reads up to n bytes at offset; *got is short only at end of file.
Status PreadFull(int fd, void* data, size_t n, uint64_t offset, size_t* got,
                 const std::string& path);
// The whole of a (small) regular file (anything else is InvalidArgument; a
// FIFO does not block); extra_flags such as O_NOFOLLOW go to open(2).
Status ReadFileToString(const std::string& path, std::string* out, int extra_flags = 0);
// Writes data to path (mode `mode`) through a temporary file, fsync and rename.
Status WriteFileAtomic(const std::string& path, std::string_view data, mode_t mode = 0644);
// mkdir -p.
Status MakeDirs(const std::string& path, mode_t mode = 0755);

// Opens `rel` (a path that passes IsSafeRelativePath) beneath the folder
// dir_fd without following any symlink, on the way or at the end (a symlink
// anywhere is ELOOP; with O_PATH | O_NOFOLLOW a final symlink itself is
// opened). O_CLOEXEC is added (O_NOATIME as above). Paths longer than PATH_MAX are walked one
// folder at a time. Invariant I8: the caller acts on the fd it gets.
Result<UniqueFd> OpenBeneath(int dir_fd, std::string_view rel, int flags, mode_t mode = 0);
// The folder holding `rel` beneath dir_fd (O_PATH | O_DIRECTORY), and the
// last component in *name; dir_fd itself (duplicated) for a one-component path.
Result<UniqueFd> OpenParentBeneath(int dir_fd, std::string_view rel, std::string* name);
// OpenParentBeneath, when the name in that folder is the file `st`
// describes (same device and inode) now; NotFound otherwise: a file that
// was renamed, or whose folder was, is no longer named by its old path.
// Act on the folder returned, not on `rel` resolved again.
Result<UniqueFd> OpenParentNaming(int dir_fd, std::string_view rel, const struct stat& st,
                                  std::string* name);
// OpenBeneath from the folder `root` (a path the administrator gave, such
// as the logdir, which may itself be reached through symlinks).
Result<UniqueFd> OpenUnder(const std::string& root, std::string_view rel, int flags,
                           mode_t mode = 0);
// A user's file, to read: OpenUnder with O_RDONLY | O_NONBLOCK (a FIFO
// swapped in after the caller's lstat cannot block the open) and a type
// check on the fd. Anything but a regular file is InvalidArgument.
Result<UniqueFd> OpenRegularUnder(const std::string& root, std::string_view rel);
// The same check for an fd already open: InvalidArgument naming `path`
// unless it is a regular file.
Status CheckRegular(int fd, const std::string& path);
// Cheap first look from a stat: fewer bytes allocated than the size. Only
// then is it worth looking for holes (SEEK_HOLE; a compressing filesystem,
// such as ZFS, allocates less without holes; so do tiny inline files).
bool MayBeSparse(const struct stat& st);
// The folder `dir` (absolute, or relative to the working folder) for
// output no other user may redirect or read: opened one component at a
// time from "/" without following symlinks, and made (0700) where
// missing. Every folder on the way is root's or this user's and, unless
// sticky, writable by no one else; `dir` itself is this user's and
// writable by no one else. InvalidArgument naming the component
// otherwise. Returns it open (O_RDONLY | O_DIRECTORY): act beneath the fd.
Result<UniqueFd> OpenOwnFolder(const std::string& dir);
// The folder `rel` beneath dir_fd, made (mkdirat, `mode`) where missing, one
// component at a time without following symlinks; opened O_RDONLY |
// O_DIRECTORY (it can be fsynced). made(rel_so_far, fd) is called for every
// folder it creates, with that folder open (O_RDONLY, not through a
// symlink): give it its owner and mode through that fd, never by name
// ("" rel: dir_fd itself, duplicated).
Result<UniqueFd> MakeDirsBeneath(
    int dir_fd, std::string_view rel, mode_t mode,
    const std::function<void(const std::string& rel, int fd)>& made = {});

// Gives folders back the modification time they had before tbfs's own
// changes to them (a file moved aside and unlinked by a migration, a file
// put in place by a rehydration), so that `find -newer`, backups and
// rsync see a folder change only where a user changed it. Around each
// change of its own a caller calls Before(dir) and After(dir); Restore()
// then sets each folder's mtime back to what it was before the first of
// them, unless the folder changed between them or since (someone else's
// change, which then stands). The ctime cannot be given back. Not
// thread-safe: one per batch or operation.
class FolderTimes {
 public:
  void Before(int dir_fd);
  void After(int dir_fd);
  void Restore();

 private:
  struct Folder {
    UniqueFd fd;
    struct timespec original {
    }, expected{};
    bool foreign = false;
  };
  std::map<std::pair<dev_t, ino_t>, Folder> folders_;
};

// "a" + "b" -> "a/b"; either side may be empty.
std::string JoinPath(std::string_view a, std::string_view b);
// Parent folder of a relative path ("a/b/c" -> "a/b", "c" -> "").
std::string ParentPath(std::string_view rel);
// True for a non-empty relative path with no "", "." or ".." component
// and no leading '/': a path that cannot escape the folder it is joined to.
bool IsSafeRelativePath(std::string_view rel);
// Last component ("a/b/c" -> "c").
std::string_view BaseName(std::string_view path);

struct WalkEntry {
  std::string rel;             // path relative to the walk root, '/'-separated (any length)
  struct stat st;              // lstat of the entry
  int dir_fd = -1;             // its folder, open during the visit only
  const char* name = nullptr;  // its name in dir_fd
};

struct WalkOptions {
  // Relative paths (from the root) of folders not to enter, such as the
  // store folder ".tbfs". Compared exactly.
  std::vector<std::string> skip_dirs;
  // Where a folder cannot be read or entered, or an entry stat'ed, the
  // walk notes it here (one line naming it) and goes on; without it, the
  // walk stops with that error.
  std::vector<std::string>* warnings = nullptr;
  // When set and it becomes true, the walk ends with Status::Aborted at
  // the next entry (a mount shutting down mid-pass).
  const std::atomic<bool>* stop = nullptr;
};

// Visits every non-directory entry below root (files, symlinks, ...) in
// sorted path order. Folders are entered by fd, never through a symlink,
// so paths of any length are walked; a folder on another filesystem than
// root's (a mount point) is not entered, like one that cannot be read. An
// entry removed during the walk is passed over. A missing root is NotFound.
Status WalkTree(const std::string& root, const WalkOptions& options,
                const std::function<void(const WalkEntry&)>& visit);

}  // namespace tbfs
