#include "store/store_dir.h"

#include <dirent.h>
#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstring>
#include <filesystem>
#include <vector>

#include "fmt/format.h"
#include "spdlog/spdlog.h"
#include "store/classify.h"

namespace tbfs::store {

Status CheckLogdirFolder(const std::string& logdir) {
  const std::string path = JoinPath(logdir, kStoreDirName);
  struct stat st;
  if (::lstat(path.c_str(), &st) != 0) {
    if (errno == ENOENT) return Status::OK();
    return Status::FromErrno(errno, "lstat", path);
  }
  if (S_ISDIR(st.st_mode)) return Status::OK();
  if (S_ISLNK(st.st_mode)) {
    return Status::InvalidArgument(
        path +
        " is a symbolic link: tbfs never follows one there (whoever can write the logdir could "
        "point its store anywhere); name the store's folder with --store");
  }
  return Status::InvalidArgument(path + " is not a folder: tbfs keeps its own files there");
}

Result<UniqueFd> LockLogdir(const std::string& logdir, const std::string& holder) {
  TBFS_RETURN_IF_ERROR(CheckLogdirFolder(logdir));
  auto root = OpenFile(logdir, O_PATH | O_DIRECTORY);
  if (!root.ok()) return root.status();
  if (::mkdirat(root->get(), kStoreDirName, 0700) != 0 && errno != EEXIST) {
    return Status::FromErrno(errno, "mkdir", JoinPath(logdir, kStoreDirName));
  }
  const std::string path = JoinPath(JoinPath(logdir, kStoreDirName), kLogdirLockName);
  UniqueFd dir(::openat(root->get(), kStoreDirName, O_PATH | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC));
  if (!dir.valid()) return Status::FromErrno(errno, "open", JoinPath(logdir, kStoreDirName));
  UniqueFd fd(
      ::openat(dir.get(), kLogdirLockName, O_RDWR | O_CREAT | O_NOFOLLOW | O_CLOEXEC, 0600));
  if (!fd.valid()) return Status::FromErrno(errno, "open", path);
  if (::flock(fd.get(), LOCK_EX | LOCK_NB) != 0) {
    if (errno != EWOULDBLOCK) return Status::FromErrno(errno, "lock", path);
    std::string who(256, '\0');
    ssize_t n = ::pread(fd.get(), who.data(), who.size(), 0);
    who.resize(n > 0 ? static_cast<size_t>(n) : 0);
    return Status::Busy(
        fmt::format("{} is in use by {}", logdir, who.empty() ? "another tbfs process" : who));
  }
  if (::ftruncate(fd.get(), 0) != 0 || ::pwrite(fd.get(), holder.data(), holder.size(), 0) < 0) {
    spdlog::warn("{}: cannot record the holder: {}", path, std::strerror(errno));
  }
  return fd;
}

Status CheckStoreFolder(const std::string& dir) {
  struct stat st;
  if (::stat(JoinPath(dir, "CURRENT").c_str(), &st) == 0) return Status::OK();
  DIR* d = ::opendir(dir.c_str());
  if (d == nullptr) return Status::FromErrno(errno, "opendir", dir);
  bool empty = true, engine = false;
  while (struct dirent* de = ::readdir(d)) {
    std::string_view n = de->d_name;
    if (n != "." && n != ".." && n != kLogdirLockName && n != kGrowthFileName && n != kCreatingName)
      empty = false;
    engine = engine || n.starts_with("MANIFEST-") || n.ends_with(".sst") || n.ends_with(".blob");
  }
  ::closedir(d);
  if (empty) return Status::OK();
  if (engine) {
    return Status::Corruption(dir +
                              " holds a store's files but no CURRENT file: the store is damaged");
  }
  return Status::InvalidArgument(dir + " exists and is not a tbfs store; refusing to use it");
}

void RemoveStaleScratch(const std::string& store) {
  std::vector<std::string> stale;
  if (DIR* d = ::opendir(store.c_str())) {
    while (struct dirent* de = ::readdir(d)) {
      if (std::string_view(de->d_name).starts_with(kScratchPrefix)) stale.emplace_back(de->d_name);
    }
    ::closedir(d);
  }
  for (const std::string& name : stale) {
    const std::string path = JoinPath(store, name);
    UniqueFd held(::open(path.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC));
    if (!held.valid() || ::flock(held.get(), LOCK_EX | LOCK_NB) != 0) continue;  // in use
    // Only tbfs's own (its marker is made once it is held: a folder not
    // marked yet is being made, or is someone else's).
    struct stat st;
    if (::fstatat(held.get(), kScratchMarker, &st, AT_SYMLINK_NOFOLLOW) != 0) continue;
    std::error_code ec;
    std::filesystem::remove_all(path, ec);  // the store's own folder: 0700, no one swaps in it
    if (!ec) {
      spdlog::info("store {}: removed {}, left by a salvage or fsck that did not finish", store,
                   name);
    } else {
      spdlog::warn("store {}: cannot remove {}, left by a salvage or fsck that did not finish: {}",
                   store, name, ec.message());
    }
  }
}

bool CreationCutShort(const std::string& dir) {
  struct stat st;
  if (::lstat(JoinPath(dir, kCreatingName).c_str(), &st) != 0) return false;
  // A store that holds a blob file has held a file (chunks are written only
  // after its creation ended): the marker is stale (red team: one put back
  // by hand or by a copy of the folder had the next writer delete every
  // file of the store).
  DIR* d = ::opendir(dir.c_str());
  if (d == nullptr) return true;
  bool blobs = false;
  while (struct dirent* de = ::readdir(d))
    blobs = blobs || std::string_view(de->d_name).ends_with(".blob");
  ::closedir(d);
  return !blobs;
}

namespace {
Status SyncFolder(const std::string& dir) {
  auto fd = OpenFile(dir, O_RDONLY | O_DIRECTORY | O_NOFOLLOW);
  if (!fd.ok()) return fd.status();
  if (::fsync(fd->get()) != 0) return Status::FromErrno(errno, "fsync", dir);
  return Status::OK();
}

// What the engine writes into its folder.
bool IsEngineFile(std::string_view n) {
  return n == "CURRENT" || n == "IDENTITY" || n == "LOCK" || n == "LOG" ||
         n.starts_with("LOG.old.") || n.starts_with("MANIFEST-") || n.starts_with("OPTIONS-") ||
         n.ends_with(".log") || n.ends_with(".sst") || n.ends_with(".blob") ||
         n.ends_with(".dbtmp");
}
}  // namespace

Status MarkCreation(const std::string& dir) {
  const std::string path = JoinPath(dir, kCreatingName);
  UniqueFd fd(::open(path.c_str(), O_WRONLY | O_CREAT | O_NOFOLLOW | O_CLOEXEC, 0600));
  if (!fd.valid()) return Status::FromErrno(errno, "create", path);
  if (::fsync(fd.get()) != 0) return Status::FromErrno(errno, "fsync", path);
  return SyncFolder(dir);
}

Status EndCreation(const std::string& dir) {
  const std::string path = JoinPath(dir, kCreatingName);
  if (::unlink(path.c_str()) != 0) return Status::FromErrno(errno, "unlink", path);
  return SyncFolder(dir);
}

Status UndoCutShortCreation(const std::string& dir) {
  // The engine holds a POSIX lock on LOCK while its store is open.
  UniqueFd lock(::open(JoinPath(dir, "LOCK").c_str(), O_RDWR | O_NOFOLLOW | O_CLOEXEC));
  if (lock.valid()) {
    struct flock fl = {};
    fl.l_type = F_WRLCK;
    fl.l_whence = SEEK_SET;
    if (::fcntl(lock.get(), F_GETLK, &fl) == 0 && fl.l_type != F_UNLCK) {
      return Status::Busy(
          fmt::format("{} is being created by another tbfs process (pid {})", dir, fl.l_pid));
    }
  }
  DIR* d = ::opendir(dir.c_str());
  if (d == nullptr) return Status::FromErrno(errno, "opendir", dir);
  std::vector<std::string> names;
  while (struct dirent* de = ::readdir(d)) {
    if (IsEngineFile(de->d_name)) names.emplace_back(de->d_name);
  }
  ::closedir(d);
  for (const std::string& n : names) {
    const std::string path = JoinPath(dir, n);
    if (::unlink(path.c_str()) != 0 && errno != ENOENT) {
      return Status::FromErrno(errno, "unlink", path);
    }
  }
  TBFS_RETURN_IF_ERROR(SyncFolder(dir));
  spdlog::warn("store {}: its creation was cut short (it never held a file): made anew", dir);
  return EndCreation(dir);
}

Status MakeStorePrivate(const std::string& dir) {
  auto fd = OpenFile(dir, O_RDONLY | O_DIRECTORY | O_NOFOLLOW);
  if (!fd.ok()) return fd.status();
  struct stat st;
  if (::fstat(fd->get(), &st) != 0) return Status::FromErrno(errno, "stat", dir);
  if (st.st_uid != ::geteuid()) {
    return Status::InvalidArgument(fmt::format(
        "the store folder {} belongs to uid {}, not to this user ({}): refusing to use it", dir,
        st.st_uid, ::geteuid()));
  }
  int fixed = 0;
  if ((st.st_mode & 07777) != 0700) {
    if (::fchmod(fd->get(), 0700) != 0) return Status::FromErrno(errno, "chmod", dir);
    fixed++;
  }
  int listing = ::dup(fd->get());
  DIR* d = listing < 0 ? nullptr : ::fdopendir(listing);
  if (d == nullptr) {
    if (listing >= 0) ::close(listing);
    return Status::FromErrno(errno, "opendir", dir);
  }
  while (struct dirent* de = ::readdir(d)) {
    struct stat f;
    if (::fstatat(fd->get(), de->d_name, &f, AT_SYMLINK_NOFOLLOW) != 0 || !S_ISREG(f.st_mode))
      continue;
    if ((f.st_mode & 077) == 0) continue;
    UniqueFd file(::openat(fd->get(), de->d_name, O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC));
    if (file.valid() && ::fchmod(file.get(), f.st_mode & 0700) == 0) fixed++;
  }
  ::closedir(d);
  if (fixed > 0) {
    spdlog::warn("store {}: made private (folder 0700, files 0600); {} mode(s) changed", dir,
                 fixed);
  }
  return Status::OK();
}

}  // namespace tbfs::store
