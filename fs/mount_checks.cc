// Checking a mount before anything changes: its paths, its store's
// address, its state folder (fs/mount_internal.h).
#include <dirent.h>
#include <sys/file.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <unistd.h>
#include <xxhash.h>

#include <cctype>
#include <climits>
#include <cstring>
#include <filesystem>
#include <set>

#include "base/fs_util.h"
#include "fmt/format.h"
#include "fs/control.h"
#include "fs/mount_internal.h"
#include "fs/mount_table.h"
#include "spdlog/spdlog.h"
#include "store/migrate.h"
#include "store/store_dir.h"

namespace tbfs::fs {

namespace {

// The absolute path `p` will have: its deepest existing part resolved.
std::string ResolveExisting(const std::string& p) {
  std::string head = p, tail;
  while (!head.empty() && head != "/" && RealPath(head).empty()) {
    size_t slash = head.find_last_of('/');
    std::string last = slash == std::string::npos ? head : head.substr(slash + 1);
    tail = tail.empty() ? last : last + "/" + tail;
    head = slash == std::string::npos ? "." : slash == 0 ? "/" : head.substr(0, slash);
  }
  std::string real = RealPath(head.empty() ? "." : head);
  return tail.empty() ? real : JoinPath(real, tail);
}

bool IsEmptyDir(const std::string& path) {
  DIR* d = ::opendir(path.c_str());
  if (d == nullptr) return false;
  bool empty = true;
  while (struct dirent* de = ::readdir(d)) {
    std::string_view n = de->d_name;
    if (n != "." && n != "..") {
      empty = false;
      break;
    }
  }
  ::closedir(d);
  return empty;
}

// True when the topmost mount at `mountpoint` (an absolute, normal path)
// is a tbfs mount.
bool IsTbfsMountPoint(const std::string& mountpoint) {
  auto mount = FindMount(mountpoint);
  return mount && mount->fstype == "fuse.tbfs";
}

}  // namespace

std::string RealPath(const std::string& p) {
  char buf[PATH_MAX];
  return ::realpath(p.c_str(), buf) ? std::string(buf) : std::string();
}

std::string HostName() {
  char name[256] = {};
  return ::gethostname(name, sizeof(name) - 1) == 0 ? std::string(name) : std::string("?");
}

// The folder a RADOS mount keeps its own files in (log, control socket,
// growth series; the lock that keeps it to one mount): made 0700 when
// missing, and refused unless no other user can change it or anything
// on the way to it: no symlink, each folder owned by root or this user,
// none writable by others but sticky ones (like /tmp), and the folder
// itself this user's and not writable by others. Returns the lock's fd.
Result<UniqueFd> PrepareStateDir(const std::string& dir) {
  if (dir.empty() || dir[0] != '/')
    return Status::InvalidArgument("state=" + dir + ": not an absolute path");
  if (("/" + dir + "/").find("/../") != std::string::npos) {
    return Status::InvalidArgument("state=" + dir + ": give the folder without '..'");
  }
  auto unsafe = [&](const std::string& path, const std::string& why) {
    return Status::InvalidArgument(
        fmt::format("state folder {}: {} {}; tbfs keeps a mount's state where no "
                    "other user can change it (name another with -o state=DIR)",
                    dir, path, why));
  };
  // Each folder on the way is checked before the next is looked at (or
  // made): nothing is created beneath one that is not safe.
  bool made_last = false;
  for (size_t start = 1;;) {
    const size_t slash = dir.find('/', start);
    const std::string path = dir.substr(0, slash);
    const bool last =
        slash == std::string::npos || dir.find_first_not_of('/', slash) == std::string::npos;
    if (path.size() > 1 && path.back() != '/') {
      struct stat st;
      made_last = false;
      if (::lstat(path.c_str(), &st) != 0) {
        if (errno != ENOENT) return Status::FromErrno(errno, "lstat", path);
        if (::mkdir(path.c_str(), 0700) != 0 && errno != EEXIST)
          return Status::FromErrno(errno, "mkdir", path);
        if (::lstat(path.c_str(), &st) != 0) return Status::FromErrno(errno, "lstat", path);
        made_last = true;
      }
      if (S_ISLNK(st.st_mode)) return unsafe(path, "is a symlink");
      if (!S_ISDIR(st.st_mode)) return unsafe(path, "is not a folder");
      if (st.st_uid != 0 && st.st_uid != ::geteuid())
        return unsafe(path, fmt::format("is owned by uid {}", st.st_uid));
      if (last && st.st_uid != ::geteuid()) return unsafe(path, "is not this user's");
      if ((st.st_mode & 022) != 0 && (last || !(st.st_mode & S_ISVTX)))
        return unsafe(path, "is writable by other users");
    }
    if (last) break;
    start = slash + 1;
  }
  if (!made_last) {
    // An existing folder is taken only when it is a mount's state already
    // (or empty): never a folder of other files made private by mistake.
    static const std::set<std::string> kOwn = {"state.lock", "tbfs-mount.log", kControlSocketName,
                                               kMountInfoFile, store::kGrowthFileName};
    std::error_code ec;
    for (const auto& e : std::filesystem::directory_iterator(dir, ec)) {
      const std::string name = e.path().filename().string();
      const bool rotated_log = name.starts_with("tbfs-mount.") && name.ends_with(".log");
      if (!kOwn.count(name) && !rotated_log && !name.starts_with(".tbfs-tmp")) {
        return Status::InvalidArgument(
            fmt::format("state folder {} holds other files ({}); give an empty or a new "
                        "folder with -o state=DIR",
                        dir, name));
      }
    }
    if (ec) return Status::FromErrno(ec.value(), "list", dir);
  }
  if (::chmod(dir.c_str(), 0700) != 0) return Status::FromErrno(errno, "chmod", dir);
  const std::string lock_path = JoinPath(dir, "state.lock");
  UniqueFd lock(::open(lock_path.c_str(), O_RDWR | O_CREAT | O_NOFOLLOW | O_CLOEXEC, 0600));
  if (!lock.valid()) return Status::FromErrno(errno, "open", lock_path);
  if (::flock(lock.get(), LOCK_EX | LOCK_NB) != 0) {
    std::string who(64, '\0');
    const ssize_t n = ::pread(lock.get(), who.data(), who.size(), 0);
    who.resize(n > 0 ? static_cast<size_t>(n) : 0);
    return Status::Busy(
        fmt::format("state folder {} is in use by another tbfs mount ({}); give each mount its own "
                    "state=DIR",
                    dir, who.empty() ? "?" : who));
  }
  const std::string me = fmt::format("pid {}", ::getpid());
  if (::ftruncate(lock.get(), 0) != 0 || ::pwrite(lock.get(), me.data(), me.size(), 0) < 0) {
    spdlog::warn("{}: cannot record the holder: {}", lock_path, std::strerror(errno));
  }
  return lock;
}

std::string EscapePath(const std::string& path) {
  std::string out;
  for (size_t i = path.starts_with('/') ? 1 : 0; i < path.size(); ++i) {
    const unsigned char c = static_cast<unsigned char>(path[i]);
    if (c == '/') {
      out += '-';
    } else if (std::isalnum(c) || c == '_' || c == '.') {
      out += static_cast<char>(c);
    } else {
      out += fmt::format("%{:02X}", c);
    }
  }
  if (out.size() > 200) {
    // A file name has 255 bytes at most: a long one keeps its start and a
    // hash of the whole (XXH3, 64 bits).
    out = fmt::format("{}-{:016x}", out.substr(0, 160), XXH3_64bits(path.data(), path.size()));
  }
  return out.empty() ? "-" : out;
}

namespace {

// Detaches the mount of a tbfs daemon that died at `mountpoint` (killed,
// crashed; its connection is gone: ENOTCONN, or ECONNABORTED while the
// kernel tears it down): systemd's restart, or an operator's, mounts in
// its place.
Status DetachDeadMount(const std::string& mountpoint) {
  const std::string abs = std::filesystem::absolute(mountpoint).lexically_normal().string();
  struct statvfs vfs;
  if (!IsTbfsMountPoint(abs) || ::statvfs(abs.c_str(), &vfs) == 0 ||
      (errno != ENOTCONN && errno != ECONNABORTED)) {
    return Status::OK();
  }
  if (::umount2(abs.c_str(), MNT_DETACH) != 0) {
    return Status::InvalidArgument(
        fmt::format("MOUNTPOINT {} is the dead mount of a tbfs daemon that "
                    "exited; detaching it failed ({}): fusermount3 -u -z {}",
                    abs, std::strerror(errno), abs));
  }
  spdlog::warn("{}: detached the dead mount of a tbfs daemon that exited; mounting again", abs);
  return Status::OK();
}

// True when `path` is the mount point or beneath it: the daemon must
// reach the logdir, its store and its state without going through its own
// mount (it would wait for itself forever).
bool Covers(const std::string& mountpoint, const std::string& path) {
  return path == mountpoint || path.starts_with(mountpoint == "/" ? "/" : mountpoint + "/");
}

// A RADOS mount's state folder: the default one for the mount point when
// none is given, made absolute and normal, and apart from the logdir and
// the mount.
Status PlaceStateDir(MountOptions* mc) {
  if (auto where = store::ParseRadosUrl(mc->store_dir); !where.ok()) return where.status();
  // The mount's own files: on this host, one folder per mount point.
  if (mc->state_dir.empty())
    mc->state_dir = JoinPath(kDefaultStateRoot, EscapePath(mc->mountpoint));
  // Made absolute, symlinks left for PrepareStateDir to refuse.
  if (mc->state_dir[0] != '/') {
    char cwd[PATH_MAX];
    if (::getcwd(cwd, sizeof(cwd)) == nullptr)
      return Status::InvalidArgument("getcwd: " + std::string(std::strerror(errno)));
    mc->state_dir = JoinPath(cwd, mc->state_dir);
  }
  mc->state_dir = std::filesystem::path(mc->state_dir).lexically_normal().string();
  while (mc->state_dir.size() > 1 && mc->state_dir.back() == '/') mc->state_dir.pop_back();
  if (Covers(mc->mountpoint, mc->state_dir)) {
    return Status::InvalidArgument("MOUNTPOINT " + mc->mountpoint +
                                   " must not contain the mount's state " + mc->state_dir);
  }
  if (mc->state_dir == mc->logdir || mc->state_dir.starts_with(mc->logdir + "/") ||
      mc->logdir.starts_with(mc->state_dir + "/")) {
    return Status::InvalidArgument("state folder " + mc->state_dir + " must not be LOGDIR " +
                                   mc->logdir + ", lie inside it or contain it");
  }
  return Status::OK();
}

// A store folder: absolute (the daemon leaves its working folder, and the
// engine opens its files by the store's path long after) and apart from
// the mount. Returns where it opens.
Result<std::string> PlaceStoreDir(MountOptions* mc) {
  if (!mc->state_dir.empty()) {
    return Status::InvalidArgument(
        "state= is for a RADOS store; a mount of a store folder keeps its files there");
  }
  if (mc->store_dir.empty()) TBFS_RETURN_IF_ERROR(store::CheckLogdirFolder(mc->logdir));
  std::string store_abs = mc->store_dir.empty() ? JoinPath(mc->logdir, store::kStoreDirName)
                                                : ResolveExisting(mc->store_dir);
  if (Covers(mc->mountpoint, store_abs)) {
    return Status::InvalidArgument("MOUNTPOINT " + mc->mountpoint + " must not contain the store " +
                                   store_abs);
  }
  if (!mc->store_dir.empty()) mc->store_dir = store_abs;
  return store_abs;
}

}  // namespace

Result<MountPlan> CheckMount(const MountOptions& options) {
  MountPlan plan;
  MountOptions& mc = plan.options;
  mc = options;
  struct stat st;
  if (::stat(mc.logdir.c_str(), &st) != 0 || !S_ISDIR(st.st_mode)) {
    return Status::InvalidArgument("LOGDIR " + mc.logdir + " is not a directory");
  }
  if (Status s = DetachDeadMount(mc.mountpoint); !s.ok()) return s;
  if (::stat(mc.mountpoint.c_str(), &st) != 0 || !S_ISDIR(st.st_mode)) {
    return Status::InvalidArgument("MOUNTPOINT " + mc.mountpoint + " is not a directory");
  }
  mc.logdir = RealPath(mc.logdir);
  mc.mountpoint = RealPath(mc.mountpoint);
  if (mc.strictatime) {
    struct statvfs vfs;
    if (::statvfs(mc.logdir.c_str(), &vfs) != 0)
      return Status::FromErrno(errno, "statvfs", mc.logdir);
    if (vfs.f_flag & (ST_RELATIME | ST_NOATIME)) {
      return Status::InvalidArgument(fmt::format(
          "strictatime: the filesystem of LOGDIR {} is mounted {}, and every read through "
          "tbfs is a read of it; mount that filesystem strictatime first, or leave the option out",
          mc.logdir, (vfs.f_flag & ST_NOATIME) ? "noatime" : "relatime"));
    }
  }
  if (mc.mountpoint == mc.logdir || mc.mountpoint.starts_with(mc.logdir + "/")) {
    return Status::InvalidArgument("MOUNTPOINT must not be LOGDIR or lie inside it");
  }
  if (Covers(mc.mountpoint, mc.logdir)) {
    return Status::InvalidArgument("MOUNTPOINT " + mc.mountpoint + " must not contain LOGDIR " +
                                   mc.logdir);
  }
  plan.shared = store::IsRadosUrl(mc.store_dir);
  if (!plan.shared && store::LooksLikeAddress(mc.store_dir)) {
    return Status::InvalidArgument("store=" + mc.store_dir +
                                   ": not a store folder, and not a store address this tbfs knows "
                                   "(rados://POOL[/PREFIX]?conf=FILE)");
  }
  if (plan.shared) {
    if (Status s = PlaceStateDir(&mc); !s.ok()) return s;
    plan.store_dir = mc.store_dir;
  } else {
    auto place = PlaceStoreDir(&mc);
    if (!place.ok()) return place.status();
    plan.store_dir = *place;
  }
  if (!mc.nonempty && !IsEmptyDir(mc.mountpoint)) {
    return Status::InvalidArgument(
        "MOUNTPOINT " + mc.mountpoint +
        " is not empty; its files would be hidden (-o nonempty to mount anyway)");
  }
  if (!mc.config_file.empty()) {
    auto loaded = store::LoadConfigFile(mc.config_file);
    if (!loaded.ok()) return loaded.status();
    plan.policy = *loaded;
  }
  if (::access("/dev/fuse", R_OK | W_OK) != 0) {
    return Status::InvalidArgument(std::string("cannot open /dev/fuse: ") + std::strerror(errno));
  }
  return plan;
}

}  // namespace tbfs::fs
