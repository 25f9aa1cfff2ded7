#include "base/fs_util.h"

#include <dirent.h>
#include <fcntl.h>
#include <linux/openat2.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <climits>

#include "base/failpoint.h"
#include "base/text.h"
#include "fmt/format.h"

namespace tbfs {

void UniqueFd::reset(int fd) {
  if (fd_ >= 0) ::close(fd_);
  fd_ = fd;
}

int OpenAtOwnRead(int dir_fd, const char* name, int flags, mode_t mode) {
  int fd;
  do {
    fd = ::openat(dir_fd, name, flags | O_CLOEXEC, mode);
    if (fd < 0 && errno == EPERM && (flags & O_NOATIME))
      flags &= ~O_NOATIME, errno = EINTR;  // not ours to keep unchanged: open as anyone would
  } while (fd < 0 && errno == EINTR);
  return fd;
}

Result<UniqueFd> OpenFile(const std::string& path, int flags, mode_t mode) {
  const int fd = OpenAtOwnRead(AT_FDCWD, path.c_str(), flags, mode);
  if (fd < 0) return Status::FromErrno(errno, "open", path);
  return UniqueFd(fd);
}

Status WriteAll(int fd, const void* data, size_t n, const std::string& path) {
  const char* p = static_cast<const char*>(data);
  while (n > 0) {
    ssize_t w = ::write(fd, p, n);
    if (w < 0) {
      if (errno == EINTR) continue;
      return Status::FromErrno(errno, "write", path);
    }
    p += w;
    n -= static_cast<size_t>(w);
  }
  return Status::OK();
}

Status PreadFull(int fd, void* data, size_t n, uint64_t offset, size_t* got,
                 const std::string& path) {
  char* p = static_cast<char*>(data);
  size_t done = 0;
  while (done < n) {
    ssize_t r = ::pread(fd, p + done, n - done, static_cast<off_t>(offset + done));
    if (r < 0) {
      if (errno == EINTR) continue;
      return Status::FromErrno(errno, "read", path);
    }
    if (r == 0) break;
    done += static_cast<size_t>(r);
  }
  *got = done;
  return Status::OK();
}

Status ReadFileToString(const std::string& path, std::string* out, int extra_flags) {
  // Non-blocking: a FIFO planted at the name must not hang the reader.
  auto fd = OpenFile(path, O_RDONLY | O_NONBLOCK | extra_flags);
  if (!fd.ok()) return fd.status();
  struct stat st;
  if (::fstat(fd->get(), &st) != 0) return Status::FromErrno(errno, "stat", path);
  if (!S_ISREG(st.st_mode)) return Status::InvalidArgument(path + " is not a regular file");
  out->clear();
  char buf[1 << 16];
  for (;;) {
    ssize_t r = ::read(fd->get(), buf, sizeof(buf));
    if (r < 0) {
      if (errno == EINTR) continue;
      return Status::FromErrno(errno, "read", path);
    }
    if (r == 0) break;
    out->append(buf, static_cast<size_t>(r));
  }
  return Status::OK();
}

Status WriteFileAtomic(const std::string& path, std::string_view data, mode_t mode) {
  std::string tmp = path + ".tmp." + std::to_string(::getpid());
  {
    // A new file, never one found at that name (a symlink planted there
    // would make the write land elsewhere): a leftover is removed first.
    ::unlink(tmp.c_str());
    auto fd = OpenFile(tmp, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW, mode);
    if (!fd.ok()) return fd.status();
    Status st = WriteAll(fd->get(), data.data(), data.size(), tmp);
    if (st.ok() && ::fsync(fd->get()) != 0) st = Status::FromErrno(errno, "fsync", tmp);
    if (!st.ok()) {
      ::unlink(tmp.c_str());
      return st;
    }
  }
  if (::rename(tmp.c_str(), path.c_str()) != 0) {
    Status st = Status::FromErrno(errno, "rename", path);
    ::unlink(tmp.c_str());
    return st;
  }
  return Status::OK();
}

Status MakeDirs(const std::string& path, mode_t mode) {
  if (path.empty()) return Status::OK();
  struct stat st;
  if (::stat(path.c_str(), &st) == 0) {
    if (S_ISDIR(st.st_mode)) return Status::OK();
    return Status::FromErrno(ENOTDIR, "mkdir", path);
  }
  size_t slash = path.find_last_of('/');
  if (slash != std::string::npos && slash > 0) {
    TBFS_RETURN_IF_ERROR(MakeDirs(path.substr(0, slash), mode));
  }
  if (::mkdir(path.c_str(), mode) != 0 && errno != EEXIST) {
    return Status::FromErrno(errno, "mkdir", path);
  }
  return Status::OK();
}

namespace {

// openat2(2) through syscall(2): glibc 2.36 has no wrapper.
int OpenAt2(int dir_fd, const char* path, int flags, mode_t mode, uint64_t resolve) {
  struct open_how how {};
  how.flags = static_cast<uint64_t>(flags);
  how.mode = (flags & (O_CREAT | O_TMPFILE)) ? mode : 0;
  how.resolve = resolve;
  return static_cast<int>(::syscall(SYS_openat2, dir_fd, path, &how, sizeof(how)));
}

}  // namespace

Result<UniqueFd> OpenBeneath(int dir_fd, std::string_view rel, int flags, mode_t mode) {
  const std::string path(rel);
  if (!IsSafeRelativePath(rel))
    return Status::InvalidArgument("not a path beneath a folder: " + path);
  flags |= O_CLOEXEC | O_NOFOLLOW;
  if (path.size() < PATH_MAX) {
    int fd;
    do {
      fd = OpenAt2(dir_fd, path.c_str(), flags, mode, RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS);
      if (fd < 0 && errno == EPERM && (flags & O_NOATIME))
        flags &= ~O_NOATIME, errno = EINTR;  // as OpenAtOwnRead
    } while (fd < 0 && errno == EINTR);
    if (fd >= 0) return UniqueFd(fd);
    if (errno != ENOSYS) return Status::FromErrno(errno, "open", path);
  }
  // One folder at a time, each opened O_NOFOLLOW beneath the last.
  UniqueFd dir(::fcntl(dir_fd, F_DUPFD_CLOEXEC, 0));
  if (!dir.valid()) return Status::FromErrno(errno, "dup", path);
  size_t start = 0;
  for (;;) {
    size_t slash = path.find('/', start);
    std::string part =
        path.substr(start, slash == std::string::npos ? std::string::npos : slash - start);
    if (slash == std::string::npos) {
      const int fd = OpenAtOwnRead(dir.get(), part.c_str(), flags, mode);
      if (fd < 0) return Status::FromErrno(errno, "open", path);
      return UniqueFd(fd);
    }
    int next = ::openat(dir.get(), part.c_str(), O_PATH | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    if (next < 0) return Status::FromErrno(errno, "open", path);  // a symlink: ENOTDIR
    dir.reset(next);
    start = slash + 1;
  }
}

Result<UniqueFd> OpenParentBeneath(int dir_fd, std::string_view rel, std::string* name) {
  if (!IsSafeRelativePath(rel)) {
    return Status::InvalidArgument("not a path beneath a folder: " + std::string(rel));
  }
  *name = std::string(BaseName(rel));
  std::string parent = ParentPath(rel);
  if (parent.empty()) {
    UniqueFd dup(::fcntl(dir_fd, F_DUPFD_CLOEXEC, 0));
    if (!dup.valid()) return Status::FromErrno(errno, "dup", std::string(rel));
    return dup;
  }
  return OpenBeneath(dir_fd, parent, O_PATH | O_DIRECTORY);
}

Result<UniqueFd> OpenParentNaming(int dir_fd, std::string_view rel, const struct stat& st,
                                  std::string* name) {
  auto parent = OpenParentBeneath(dir_fd, rel, name);
  if (!parent.ok()) return parent.status();
  struct stat now;
  if (::fstatat(parent->get(), name->c_str(), &now, AT_SYMLINK_NOFOLLOW) != 0)
    return Status::FromErrno(errno, "stat", std::string(rel));
  if (now.st_dev != st.st_dev || now.st_ino != st.st_ino)
    return Status::NotFound(std::string(rel) + " names another file now");
  return parent;
}

Result<UniqueFd> OpenUnder(const std::string& root, std::string_view rel, int flags, mode_t mode) {
  auto dir = OpenFile(root, O_PATH | O_DIRECTORY);
  if (!dir.ok()) return dir.status();
  auto fd = OpenBeneath(dir->get(), rel, flags, mode);
  if (!fd.ok() && fd.status().code() != Code::kInvalidArgument) {
    // Name the whole path, as callers expect of an open that failed.
    return Status::FromErrno(fd.status().sys_errno(), "open", JoinPath(root, rel));
  }
  return fd;
}

Result<UniqueFd> OpenRegularUnder(const std::string& root, std::string_view rel) {
  FailpointHook("open_regular.before", JoinPath(root, rel));
  auto fd = OpenUnder(root, rel, O_RDONLY | O_NONBLOCK | kOwnRead);
  if (!fd.ok()) return fd;
  TBFS_RETURN_IF_ERROR(CheckRegular(fd->get(), JoinPath(root, rel)));
  return fd;
}

Status CheckRegular(int fd, const std::string& path) {
  struct stat st;
  if (::fstat(fd, &st) != 0) return Status::FromErrno(errno, "fstat", path);
  if (!S_ISREG(st.st_mode)) {
    return Status::InvalidArgument(Printable(path) + ": not a regular file (not read)");
  }
  return Status::OK();
}

Result<UniqueFd> OpenOwnFolder(const std::string& dir) {
  std::string abs = dir;
  if (abs.empty()) return Status::InvalidArgument("no folder given");
  if (abs[0] != '/') {
    char cwd[PATH_MAX];
    if (::getcwd(cwd, sizeof(cwd)) == nullptr) return Status::FromErrno(errno, "getcwd", dir);
    abs = JoinPath(cwd, abs);
  }
  UniqueFd cur(::open("/", O_RDONLY | O_DIRECTORY | O_CLOEXEC));
  if (!cur.valid()) return Status::FromErrno(errno, "open", "/");
  std::string sofar;
  size_t start = 0;
  while (start < abs.size()) {
    const size_t slash = std::min(abs.find('/', start), abs.size());
    const std::string part = abs.substr(start, slash - start);
    start = slash + 1;
    if (part.empty() || part == ".") continue;
    if (part == "..")
      return Status::InvalidArgument(Printable(dir) + ": give the folder without '..'");
    sofar += "/" + part;
    const bool last = abs.find_first_not_of('/', slash) == std::string::npos;
    if (::mkdirat(cur.get(), part.c_str(), 0700) != 0 && errno != EEXIST)
      return Status::FromErrno(errno, "mkdir", sofar);
    UniqueFd next(
        ::openat(cur.get(), part.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC));
    if (!next.valid()) {
      if (errno == ELOOP || errno == ENOTDIR) {
        return Status::InvalidArgument(
            fmt::format("{}: {} is a symlink or not a folder", Printable(dir), Printable(sofar)));
      }
      return Status::FromErrno(errno, "open", sofar);
    }
    struct stat st;
    if (::fstat(next.get(), &st) != 0) return Status::FromErrno(errno, "stat", sofar);
    auto unsafe = [&](const std::string& why) {
      return Status::InvalidArgument(
          fmt::format("{}: {} {}; name a folder no other user can change", Printable(dir),
                      Printable(sofar), why));
    };
    if (st.st_uid != 0 && st.st_uid != ::geteuid())
      return unsafe(fmt::format("is owned by uid {}", st.st_uid));
    if (last && st.st_uid != ::geteuid()) return unsafe("is not this user's");
    if ((st.st_mode & 022) != 0 && (last || !(st.st_mode & S_ISVTX)))
      return unsafe("is writable by other users");
    cur = std::move(next);
  }
  return cur;
}

bool MayBeSparse(const struct stat& st) {
  return static_cast<uint64_t>(st.st_blocks) * 512 < static_cast<uint64_t>(st.st_size);
}

Result<UniqueFd> MakeDirsBeneath(int dir_fd, std::string_view rel, mode_t mode,
                                 const std::function<void(const std::string&, int)>& made) {
  UniqueFd dir(::openat(dir_fd, ".", O_RDONLY | O_DIRECTORY | O_CLOEXEC));
  if (!dir.valid()) return Status::FromErrno(errno, "open", ".");
  std::string sofar;
  size_t start = 0;
  while (start < rel.size()) {
    size_t slash = rel.find('/', start);
    if (slash == std::string_view::npos) slash = rel.size();
    std::string part(rel.substr(start, slash - start));
    start = slash + 1;
    if (part.empty() || part == "." || part == "..") {
      return Status::InvalidArgument("not a path beneath a folder: " + std::string(rel));
    }
    sofar = JoinPath(sofar, part);
    bool created = ::mkdirat(dir.get(), part.c_str(), mode) == 0;
    if (!created && errno != EEXIST) return Status::FromErrno(errno, "mkdir", sofar);
    int next = ::openat(dir.get(), part.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    if (next < 0) return Status::FromErrno(errno, "open", sofar);  // a symlink: ELOOP or ENOTDIR
    dir.reset(next);
    if (created && made) made(sofar, dir.get());
  }
  return dir;
}

std::string JoinPath(std::string_view a, std::string_view b) {
  if (a.empty()) return std::string(b);
  if (b.empty()) return std::string(a);
  std::string out(a);
  if (out.back() != '/') out += '/';
  out.append(b);
  return out;
}

std::string ParentPath(std::string_view rel) {
  size_t slash = rel.find_last_of('/');
  return slash == std::string_view::npos ? std::string() : std::string(rel.substr(0, slash));
}

bool IsSafeRelativePath(std::string_view rel) {
  if (rel.empty() || rel.front() == '/') return false;
  size_t start = 0;
  while (start <= rel.size()) {
    size_t end = rel.find('/', start);
    if (end == std::string_view::npos) end = rel.size();
    std::string_view part = rel.substr(start, end - start);
    if (part.empty() || part == "." || part == "..") return false;
    start = end + 1;
  }
  return true;
}

std::string_view BaseName(std::string_view path) {
  size_t slash = path.find_last_of('/');
  return slash == std::string_view::npos ? path : path.substr(slash + 1);
}

namespace {

// Folders deeper than this are not entered (a warning names them): a walk
// holds one fd per level, and nobody's logdir is that deep but on purpose.
constexpr size_t kMaxWalkDepth = 1000;

// One folder being walked: its fd, its sorted names, the next one to visit.
struct WalkFrame {
  UniqueFd dir;
  std::string rel;
  std::vector<std::string> names;
  size_t next = 0;
};

Status ListFolder(int dir_fd, const std::string& rel, std::vector<std::string>* names) {
  const std::string where = rel.empty() ? "." : rel;
  int listing = ::dup(dir_fd);
  DIR* d = listing < 0 ? nullptr : ::fdopendir(listing);
  if (d == nullptr) {
    if (listing >= 0) ::close(listing);
    return Status::FromErrno(errno, "opendir", where);
  }
  errno = 0;
  while (struct dirent* de = ::readdir(d)) {
    std::string_view name = de->d_name;
    if (name == "." || name == "..") continue;
    names->emplace_back(name);
  }
  int err = errno;
  ::closedir(d);
  if (err != 0) return Status::FromErrno(err, "readdir", where);
  std::sort(names->begin(), names->end());
  return Status::OK();
}

// Depth first, with an explicit stack (a deep tree cannot overflow ours).
Status WalkFrom(UniqueFd root, const WalkOptions& options,
                const std::function<void(const WalkEntry&)>& visit) {
  struct stat root_st;
  if (::fstat(root.get(), &root_st) != 0) return Status::FromErrno(errno, "fstat", ".");
  std::vector<WalkFrame> stack;
  stack.push_back({std::move(root), "", {}, 0});
  TBFS_RETURN_IF_ERROR(ListFolder(stack.back().dir.get(), "", &stack.back().names));
  while (!stack.empty()) {
    if (options.stop != nullptr && options.stop->load()) return Status::Aborted("walk stopped");
    WalkFrame& top = stack.back();
    if (top.next == top.names.size()) {
      stack.pop_back();
      continue;
    }
    const std::string& name = top.names[top.next++];
    WalkEntry entry;
    entry.rel = JoinPath(top.rel, name);
    entry.dir_fd = top.dir.get();
    entry.name = name.c_str();
    if (::fstatat(top.dir.get(), name.c_str(), &entry.st, AT_SYMLINK_NOFOLLOW) != 0) {
      if (errno == ENOENT) continue;  // removed while we walked
      // Another user's FUSE mount answers EACCES even to root: one entry,
      // not the walk.
      Status st = Status::FromErrno(errno, "lstat", entry.rel);
      if (options.warnings == nullptr) return st;
      options.warnings->push_back(st.message() + " (skipped)");
      continue;
    }
    if (!S_ISDIR(entry.st.st_mode)) {
      visit(entry);
      continue;
    }
    if (std::find(options.skip_dirs.begin(), options.skip_dirs.end(), entry.rel) !=
        options.skip_dirs.end()) {
      continue;
    }
    WalkFrame sub;
    sub.rel = entry.rel;
    Status st;
    if (entry.st.st_dev != root_st.st_dev) {
      // A mount inside the logdir (someone's own FUSE mount, say) is not
      // the logdir's: its server could stall every call the walk makes.
      st = Status::InvalidArgument(entry.rel + ": another filesystem is mounted there");
    } else if (stack.size() > kMaxWalkDepth) {
      st = Status::InvalidArgument(
          fmt::format("{}: nested more than {} folders deep", entry.rel, kMaxWalkDepth));
    } else {
      sub.dir.reset(OpenAtOwnRead(top.dir.get(), name.c_str(),
                                  O_RDONLY | O_DIRECTORY | O_NOFOLLOW | kOwnRead));
      st = sub.dir.valid() ? ListFolder(sub.dir.get(), sub.rel, &sub.names)
                           : Status::FromErrno(errno, "open", entry.rel);
    }
    if (st.ok()) {
      stack.push_back(std::move(sub));  // (top is not used after this)
      continue;
    }
    if (st.IsNotFound()) continue;  // removed while we walked
    if (options.warnings == nullptr) return st;
    options.warnings->push_back(st.message() + " (skipped)");
  }
  return Status::OK();
}

}  // namespace

Status WalkTree(const std::string& root, const WalkOptions& options,
                const std::function<void(const WalkEntry&)>& visit) {
  struct stat st;
  if (::stat(root.c_str(), &st) != 0) return Status::FromErrno(errno, "stat", root);
  if (!S_ISDIR(st.st_mode)) return Status::InvalidArgument("not a directory: " + root);
  auto dir = OpenFile(root, O_RDONLY | O_DIRECTORY | kOwnRead);
  if (!dir.ok()) return dir.status();
  return WalkFrom(std::move(dir).value(), options, visit);
}

namespace {
bool SameTime(const struct timespec& a, const struct timespec& b) {
  return a.tv_sec == b.tv_sec && a.tv_nsec == b.tv_nsec;
}
}  // namespace

void FolderTimes::Before(int dir_fd) {
  struct stat st;
  if (::fstat(dir_fd, &st) != 0) return;
  auto [it, added] = folders_.try_emplace({st.st_dev, st.st_ino});
  Folder& f = it->second;
  if (added) {
    f.fd.reset(::fcntl(dir_fd, F_DUPFD_CLOEXEC, 0));
    f.original = f.expected = st.st_mtim;
  } else if (!SameTime(st.st_mtim, f.expected)) {
    f.foreign = true;  // changed by someone else since our last change
  }
}

void FolderTimes::After(int dir_fd) {
  struct stat st;
  if (::fstat(dir_fd, &st) != 0) return;
  auto it = folders_.find({st.st_dev, st.st_ino});
  if (it != folders_.end()) it->second.expected = st.st_mtim;
}

void FolderTimes::Restore() {
  for (auto& [key, f] : folders_) {
    struct stat st;
    if (f.foreign || !f.fd.valid() || ::fstat(f.fd.get(), &st) != 0 ||
        !SameTime(st.st_mtim, f.expected) || SameTime(st.st_mtim, f.original)) {
      continue;
    }
    // The fd may be O_PATH: set the times through its /proc name.
    const std::string proc = "/proc/self/fd/" + std::to_string(f.fd.get());
    struct timespec times[2] = {{0, UTIME_OMIT}, f.original};
    (void)::utimensat(AT_FDCWD, proc.c_str(), times, 0);
  }
  folders_.clear();
}

}  // namespace tbfs
