#include "fs/mount.h"

#include <dirent.h>
#include <fcntl.h>
#include <fuse_lowlevel.h>
#include <malloc.h>
#include <sys/file.h>
#include <sys/mount.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <sys/syscall.h>
#include <sys/sysmacros.h>
#include <systemd/sd-daemon.h>
#include <unistd.h>

#include <atomic>
#include <cctype>
#include <climits>
#include <condition_variable>
#include <csignal>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <future>
#include <nlohmann/json.hpp>
#include <set>
#include <shared_mutex>
#include <thread>

#include "base/fs_util.h"
#include "base/log.h"
#include "base/thread_annotations.h"
#include "base/units.h"
#include "fmt/format.h"
#include "fs/control.h"
#include "fs/exporter.h"
#include "fs/filesystem.h"
#include "fs/fuse_ops.h"
#include "fs/metrics.h"
#include "fs/metrics_server.h"
#include "fs/migrator.h"
#include "fs/mount_internal.h"
#include "fs/mount_table.h"
#include "spdlog/spdlog.h"
#include "store/classify.h"
#include "store/config.h"
#include "store/migrate.h"
#include "store/store_dir.h"

namespace tbfs::fs {

namespace {

// The daemon's log: 16 MiB per file, the 4 before it kept (80 MiB at most).
constexpr uint64_t kMountLogBytes = 16ull << 20;
constexpr size_t kMountLogFiles = 4;
// How long the daemon waits for its threads after an unmount or SIGTERM.
constexpr std::chrono::seconds kShutdownGrace{10};

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

// Reports the verdict of a daemon child to its waiting parent.
class Verdict {
 public:
  void Fork(bool foreground) {
    if (foreground) return;
    int fds[2];
    // Close-on-exec: a helper libfuse runs (fusermount3 for auto_unmount)
    // must not hold the pipe open, or the command waits until it exits.
    if (::pipe2(fds, O_CLOEXEC) != 0) return;
    pid_t pid = ::fork();
    if (pid > 0) {
      ::close(fds[1]);
      std::string msg;
      char buf[512];
      ssize_t n;
      while ((n = ::read(fds[0], buf, sizeof(buf))) > 0) msg.append(buf, static_cast<size_t>(n));
      if (msg == "ok") ::_exit(0);
      fmt::print(stderr, "tbfs mount: {}\n", msg.empty() ? "the daemon died while starting" : msg);
      ::_exit(2);
    }
    ::close(fds[0]);
    fd_ = fds[1];
    ::setsid();
  }
  void Send(const std::string& msg) {
    if (fd_ < 0) return;
    (void)!::write(fd_, msg.data(), msg.size());
    ::close(fd_);
    fd_ = -1;
  }
  bool daemon() const { return fd_ >= 0; }

 private:
  int fd_ = -1;
};

int Fail(Verdict& verdict, const std::string& msg) {
  if (verdict.daemon()) {
    verdict.Send(msg);
  } else {
    fmt::print(stderr, "tbfs mount: {}\n", msg);
  }
  return 2;
}

// Tells the kernel of the FUSE session that an inode's attributes changed.
class SessionCache : public Filesystem::KernelCache {
 public:
  void Set(struct fuse_session* se) { se_ = se; }
  void InvalidateAttrs(uint64_t ino) override {
    // Attributes only (offset < 0): the content of a file is the same hot
    // or cold. ENOENT: the kernel does not hold the inode; nothing to do.
    if (struct fuse_session* se = se_.load()) fuse_lowlevel_notify_inval_inode(se, ino, -1, 0);
  }
  void InvalidateEntry(uint64_t parent, const std::string& name) override {
    struct fuse_session* se = se_.load();
    if (se == nullptr) return;
    fuse_lowlevel_notify_inval_entry(se, parent, name.data(), name.size());
  }
  void InvalidateListing(uint64_t folder) override {
    if (struct fuse_session* se = se_.load()) fuse_lowlevel_notify_inval_inode(se, folder, 0, 0);
  }

 private:
  std::atomic<struct fuse_session*> se_{nullptr};
};

// Every inode the kernel holds is an O_PATH fd here (as in libfuse's
// passthrough_hp), so a walk of a large tree needs many: raise the limit as
// far as this process may.
void RaiseFdLimit() {
  struct rlimit lim;
  if (::getrlimit(RLIMIT_NOFILE, &lim) != 0) return;
  rlim_t want = 1 << 20;
  std::string nr_open;
  if (ReadFileToString("/proc/sys/fs/nr_open", &nr_open).ok()) {
    want = std::min<rlim_t>(want, std::strtoull(nr_open.c_str(), nullptr, 10));
  }
  struct rlimit raised = {want, want};
  if (::setrlimit(RLIMIT_NOFILE, &raised) != 0) {
    lim.rlim_cur = lim.rlim_max;
    ::setrlimit(RLIMIT_NOFILE, &lim);
  }
  ::getrlimit(RLIMIT_NOFILE, &lim);
  spdlog::info("open file limit: {}", static_cast<uint64_t>(lim.rlim_cur));
}

// Cold files are read sequentially in big runs; the kernel's default
// readahead for a FUSE mount is 128 KiB. As root, raise it to a chunk, on
// the mount's device `dev`.
void RaiseReadahead(dev_t dev) {
  const std::string device = fmt::format("{}:{}", major(dev), minor(dev));
  int fd =
      ::open(fmt::format("/sys/class/bdi/{}/read_ahead_kb", device).c_str(), O_WRONLY | O_CLOEXEC);
  if (fd < 0) return;  // not root, or no sysfs: keep the default
  std::string kb = std::to_string(store::kDefaultChunkBytes / 1024);
  if (::write(fd, kb.data(), kb.size()) < 0)
    spdlog::info("read_ahead_kb: {}", std::strerror(errno));
  ::close(fd);
}

}  // namespace

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
    // hash of the whole (FNV-1a, 64 bits).
    uint64_t h = 0xcbf29ce484222325ull;
    for (unsigned char c : path) h = (h ^ c) * 0x100000001b3ull;
    out = fmt::format("{}-{:016x}", out.substr(0, 160), h);
  }
  return out.empty() ? "-" : out;
}

// True when the topmost mount at `mountpoint` (an absolute, normal path)
// is a tbfs mount.
bool IsTbfsMountPoint(const std::string& mountpoint) {
  auto mount = FindMount(mountpoint);
  return mount && mount->fstype == "fuse.tbfs";
}

int RunMount(const MountOptions& mc_in) {
  MountOptions mc = mc_in;
  Verdict verdict;
  struct stat st;
  if (::stat(mc.logdir.c_str(), &st) != 0 || !S_ISDIR(st.st_mode)) {
    return Fail(verdict, "LOGDIR " + mc.logdir + " is not a directory");
  }
  const std::string abs = std::filesystem::absolute(mc.mountpoint).lexically_normal().string();
  struct statvfs vfs;
  if (IsTbfsMountPoint(abs) && ::statvfs(abs.c_str(), &vfs) != 0 &&
      (errno == ENOTCONN || errno == ECONNABORTED)) {
    // The mount of a tbfs daemon that died (killed, crashed; its connection
    // is gone: ENOTCONN, or ECONNABORTED while the kernel tears it down):
    // systemd's restart, or an operator's, mounts in its place.
    if (::umount2(abs.c_str(), MNT_DETACH) != 0) {
      return Fail(verdict, fmt::format("MOUNTPOINT {} is the dead mount of a tbfs daemon that "
                                       "exited; detaching it failed ({}): fusermount3 -u -z {}",
                                       abs, std::strerror(errno), abs));
    }
    spdlog::warn("{}: detached the dead mount of a tbfs daemon that exited; mounting again", abs);
  }
  if (::stat(mc.mountpoint.c_str(), &st) != 0 || !S_ISDIR(st.st_mode)) {
    return Fail(verdict, "MOUNTPOINT " + mc.mountpoint + " is not a directory");
  }
  mc.logdir = RealPath(mc.logdir);
  mc.mountpoint = RealPath(mc.mountpoint);
  if (mc.mountpoint == mc.logdir || mc.mountpoint.starts_with(mc.logdir + "/")) {
    return Fail(verdict, "MOUNTPOINT must not be LOGDIR or lie inside it");
  }
  // The daemon must reach the logdir and its store without going through
  // its own mount (it would wait for itself forever).
  auto covers = [&](const std::string& path) {
    return path == mc.mountpoint ||
           path.starts_with(mc.mountpoint == "/" ? "/" : mc.mountpoint + "/");
  };
  if (covers(mc.logdir)) {
    return Fail(verdict, "MOUNTPOINT " + mc.mountpoint + " must not contain LOGDIR " + mc.logdir);
  }
  const bool shared = store::IsRadosUrl(mc.store_dir);
  if (!shared && store::LooksLikeAddress(mc.store_dir)) {
    return Fail(verdict, "store=" + mc.store_dir +
                             ": not a store folder, and not a store address this tbfs knows "
                             "(rados://POOL[/PREFIX]?conf=FILE)");
  }
  if (shared) {
    if (auto where = store::ParseRadosUrl(mc.store_dir); !where.ok())
      return Fail(verdict, where.status().message());
    // The mount's own files: on this host, one folder per mount point.
    if (mc.state_dir.empty()) mc.state_dir = JoinPath(kDefaultStateRoot, EscapePath(mc.mountpoint));
    // Made absolute, symlinks left for PrepareStateDir to refuse.
    if (mc.state_dir[0] != '/') {
      char cwd[PATH_MAX];
      if (::getcwd(cwd, sizeof(cwd)) == nullptr)
        return Fail(verdict, "getcwd: " + std::string(std::strerror(errno)));
      mc.state_dir = JoinPath(cwd, mc.state_dir);
    }
    mc.state_dir = std::filesystem::path(mc.state_dir).lexically_normal().string();
    while (mc.state_dir.size() > 1 && mc.state_dir.back() == '/') mc.state_dir.pop_back();
    if (covers(mc.state_dir)) {
      return Fail(verdict, "MOUNTPOINT " + mc.mountpoint + " must not contain the mount's state " +
                               mc.state_dir);
    }
    if (mc.state_dir == mc.logdir || mc.state_dir.starts_with(mc.logdir + "/") ||
        mc.logdir.starts_with(mc.state_dir + "/")) {
      return Fail(verdict, "state folder " + mc.state_dir + " must not be LOGDIR " + mc.logdir +
                               ", lie inside it or contain it");
    }
  } else {
    if (!mc.state_dir.empty()) {
      return Fail(verdict,
                  "state= is for a RADOS store; a mount of a store folder keeps its files there");
    }
    std::string store_abs = mc.store_dir.empty() ? JoinPath(mc.logdir, store::kStoreDirName)
                                                 : ResolveExisting(mc.store_dir);
    if (covers(store_abs)) {
      return Fail(verdict,
                  "MOUNTPOINT " + mc.mountpoint + " must not contain the store " + store_abs);
    }
    // Absolute: the daemon leaves its working folder (chdir "/"), and the
    // engine opens its files by the store's path long after.
    if (!mc.store_dir.empty()) mc.store_dir = store_abs;
  }
  if (!mc.nonempty && !IsEmptyDir(mc.mountpoint)) {
    return Fail(verdict,
                "MOUNTPOINT " + mc.mountpoint +
                    " is not empty; its files would be hidden (-o nonempty to mount anyway)");
  }
  store::ConfigFile policy;
  if (!mc.config_file.empty()) {
    auto loaded = store::LoadConfigFile(mc.config_file);
    if (!loaded.ok()) return Fail(verdict, loaded.status().message());
    policy = *loaded;
  }
  std::string store_dir =
      mc.store_dir.empty() ? JoinPath(mc.logdir, store::kStoreDirName) : mc.store_dir;
  if (::access("/dev/fuse", R_OK | W_OK) != 0) {
    return Fail(verdict, std::string("cannot open /dev/fuse: ") + std::strerror(errno));
  }

  verdict.Fork(mc.foreground);
  RaiseFdLimit();
  // Blocks of up to 4 MiB (chunk values, migration buffers) come and go
  // all the time: keep them in the heap rather than mmap'ing (and
  // page-faulting) each one afresh, in few arenas so that freed blocks are
  // reused instead of piling up per thread. (Decompressed chunks have an
  // allocator of their own, fs/chunk_buffers.h.)
  ::mallopt(M_ARENA_MAX, 2);
  ::mallopt(M_MMAP_THRESHOLD, 4 << 20);
  ::mallopt(M_TRIM_THRESHOLD, 16 << 20);

  // Store first, recovery before the first request.
  store::OpenOptions so;
  so.create_if_missing = true;
  so.logdir = mc.logdir;
  so.holder = shared ? fmt::format("the tbfs mount on {}:{} (pid {})", HostName(), mc.mountpoint,
                                   ::getpid())
                     : fmt::format("the tbfs mount on {} (pid {})", mc.mountpoint, ::getpid());
  so.lock_wait_ms = 5000;  // a mount of this logdir just unmounted may still be closing
  // A full disk does not keep the mount down: the store is served
  // read-only, and becomes writable when room comes back (the migrator).
  so.read_only_when_full = true;
  std::unique_ptr<store::ColdStore> store;
  UniqueFd state_lock;  // a RADOS mount's hold on its state folder
  if (shared) {
    // The writer when the lease is free; a reader otherwise, which the
    // migrator's passes make the writer when the lease comes free.
    so.lock_wait_ms = 0;
    so.reader_if_busy = true;
    auto prepared = PrepareStateDir(mc.state_dir);
    if (!prepared.ok()) return Fail(verdict, prepared.status().message());
    state_lock = std::move(prepared).value();
    auto opened = store::ColdStore::Open(store_dir, so);
    if (!opened.ok()) return Fail(verdict, opened.status().message());
    store = std::move(opened).value();
  } else {
    auto opened = store::ColdStore::Open(store_dir, so);
    if (!opened.ok()) return Fail(verdict, opened.status().message());
    store = std::move(opened).value();
    store_dir = RealPath(store_dir);
    mc.state_dir = store_dir;
  }
  const std::string& state_dir = mc.state_dir;
  if (!mc.foreground) {
    // Capped: what users' files make the daemon say cannot fill the disk.
    auto logger = RotatingFileLogger("tbfs-mount", JoinPath(state_dir, "tbfs-mount.log"),
                                     kMountLogBytes, kMountLogFiles);
    spdlog::set_default_logger(logger);
    spdlog::set_level(spdlog::level::info);
    spdlog::flush_every(std::chrono::seconds(2));
    spdlog::flush_on(spdlog::level::warn);  // a warning or an error is on disk at once
  } else if (StderrIsJournal() && spdlog::get_level() > spdlog::level::info) {
    // Run by systemd: the journal is this mount's log, and what it does
    // (migrations, rehydrations, retention) is logged at info.
    spdlog::set_level(spdlog::level::info);
  }
  if (store->writer()) {
    auto recovered = store::Recover(*store, mc.logdir);
    if (!recovered.ok()) return Fail(verdict, "recovery: " + recovered.status().message());
    if (recovered->batches > 0) {
      spdlog::warn("recovered {} unfinished batch(es): {} restored, {} dropped", recovered->batches,
                   recovered->restored, recovered->dropped);
    }
    for (const std::string& note : recovered->notes) spdlog::warn("recovery: {}", note);
    for (const std::string& path : recovered->lost) {
      spdlog::error(
          "recovery: LOST {}: journaled by an unfinished migration, found neither in the logdir "
          "nor in the store (recorded: status, metrics and fsck report it until tbfs fsck "
          "--clear-lost)",
          JoinPath(mc.logdir, path));
    }
  } else {
    spdlog::info("{}: serving it read-only; {}", store_dir, store->refusal());
  }

  FsOptions fc;
  fc.logdir = mc.logdir;
  fc.cache_bytes = mc.cache_bytes;
  fc.as_root_owner_fixup = ::geteuid() == 0;
  if (store_dir.starts_with(mc.logdir + "/"))
    fc.store_skip = store_dir.substr(mc.logdir.size() + 1);
  fc.control_socket = JoinPath(state_dir, kControlSocketName);
  auto root = OpenFile(mc.logdir, O_PATH | O_DIRECTORY);
  if (!root.ok()) return Fail(verdict, root.status().message());
  struct stat root_st;
  if (::fstat(root->get(), &root_st) != 0) {
    return Fail(verdict, fmt::format("fstat {}: {}", mc.logdir, std::strerror(errno)));
  }
  // The logdir's namespace lock, shared by the filesystem and the migrator
  // (lock order in fs/filesystem.h).
  SharedMutex namespace_lock;
  Filesystem fs(fc, store.get(), std::move(root).value(), root_st, &namespace_lock);

  MigratorOptions migc;
  migc.cold_after_s = mc.cold_after_s;
  migc.interval_s = mc.migrate_interval_s;
  migc.background = mc.migrate;
  migc.policy.trace_markers = policy.trace_markers;
  migc.policy.protected_markers = policy.protected_markers;
  migc.must_have = policy.must_have_tags;
  migc.retention = policy.retention;
  migc.growth_dir = state_dir;
  migc.writer = so;  // a reader's passes take the writer's role when it comes free
  if (policy.retention.any())
    spdlog::info("retention policy of {} applies after each migrator pass", mc.config_file);
  migc.walk.skip_dirs = {store::kStoreDirName};
  if (!fc.store_skip.empty()) migc.walk.skip_dirs.push_back(fc.store_skip);
  Migrator migrator(*store, fc.logdir, &namespace_lock, fs, migc);
  // Prometheus metrics: through the control socket (`tbfs exporter`), and
  // over HTTP when asked for (fs/metrics_server.h).
  OpLatency latency;  // of the FUSE operations, recorded by the adapters
  MountMetrics metrics(fs, *store, latency, migrator, mc.mountpoint);
  auto control = ControlServer::Start(state_dir, ::getuid(), [&](const std::string& request) {
    if (request == "metrics") {
      return nlohmann::json({{"metrics", metrics.Text()}})
          .dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
    }
    return Control(request, mc, store_dir, *store, fs, migrator);
  });
  if (!control.ok()) return Fail(verdict, "control socket: " + control.status().message());
  std::unique_ptr<MetricsServer> metrics_server;
  if (!mc.metrics_address.empty()) {
    auto started = MetricsServer::Start(mc.metrics_address, [&] { return metrics.Text(); });
    if (!started.ok()) return Fail(verdict, started.status().message());
    metrics_server = std::move(started).value();
    spdlog::info("metrics on http://{}/metrics", mc.metrics_address);
  }

  // The logdir is one value: a comma or a backslash in its name is escaped,
  // never read as the start of another option.
  std::string opts =
      "default_permissions," + EscapeFuseOpt("fsname=tbfs:" + mc.logdir) + ",subtype=tbfs";
  for (const std::string& o : mc.fuse_options) opts += "," + EscapeFuseOpt(o);
  std::vector<std::string> argv_s = {"tbfs", "-o", opts};
  std::vector<char*> argv;
  for (auto& s : argv_s) argv.push_back(s.data());
  struct fuse_args args = FUSE_ARGS_INIT(static_cast<int>(argv.size()), argv.data());
  FuseContext context;
  context.fs = &fs;
  context.latency = &latency;
  std::shared_future<void> initialized = context.initialized.get_future().share();
  struct fuse_session* se =
      fuse_session_new(&args, TbfsOps(), sizeof(struct fuse_lowlevel_ops), &context);
  fuse_opt_free_args(&args);
  if (se == nullptr) return Fail(verdict, "bad FUSE options: " + opts);
  context.session = se;
  SessionCache kernel_cache;
  kernel_cache.Set(se);
  fs.SetKernelCache(&kernel_cache);
  if (fuse_set_signal_handlers(se) != 0) {
    fuse_session_destroy(se);
    return Fail(verdict, "cannot install signal handlers");
  }
  if (fuse_session_mount(se, mc.mountpoint.c_str()) != 0) {
    fuse_remove_signal_handlers(se);
    fuse_session_destroy(se);
    return Fail(verdict, "cannot mount on " + mc.mountpoint + " (see above; is /dev/fuse usable?)");
  }
  (void)WriteFileAtomic(JoinPath(state_dir, kMountInfoFile),
                        fmt::format("{} {}\n", mc.mountpoint, ::getpid()), 0600);
  // Root's mounts are scraped through `tbfs exporter` (fs/exporter.h).
  const bool registered = ::geteuid() == 0;
  if (registered) {
    if (Status r = RegisterWithExporter(kExporterRunDir, mc.mountpoint, (*control)->path());
        !r.ok()) {
      spdlog::warn("tbfs exporter will not see this mount: {}", r.message());
    }
  }
  // Modes of what callers create are exactly what they asked: the kernel
  // applied their umask already. (Everything the daemon writes for itself
  // from here on has an explicit mode.)
  ::umask(0);
  migrator.Start();
  spdlog::info("mounted {} on {} (store {})", mc.logdir, mc.mountpoint, store_dir);
  // A daemon lets go of the terminal; stderr goes once the mount serves,
  // so that what libfuse says of a refused INIT still reaches the user.
  auto detach = [&](std::initializer_list<int> fds) {
    if (!verdict.daemon()) return;
    int null = ::open("/dev/null", O_RDWR | O_CLOEXEC);
    if (null < 0) return;
    for (int fd : fds) ::dup2(null, fd);
    ::close(null);
  };
  detach({0, 1});
  if (verdict.daemon()) (void)!::chdir("/");

  // The kernel sets the mount's readahead when it takes INIT's reply, and
  // holds every other request of the mount until then: once a stat of the
  // mount point (answered by this daemon's other threads) returns, it has.
  // Only then does `tbfs mount` hear "ok": an INIT that libfuse refuses (a
  // max_read it cannot give) ends the loop instead, and the command fails.
  // If the loop ends first (a signal, a refused INIT), the promise is set
  // to wake the thread, which then does nothing; a stat already sent is
  // answered or, after the unmount below, aborted: the thread is joined
  // after it.
  std::atomic<bool> serving{true};
  std::thread readahead([&, initialized] {
    initialized.wait();
    if (!serving) return;
    struct stat root_st;
    if (::stat(mc.mountpoint.c_str(), &root_st) != 0) return;  // unmounted already
    if (serving) {
      detach({2});
      verdict.Send("ok");
      // Type=notify: systemd hears "started" only now (nothing without
      // NOTIFY_SOCKET).
      sd_notifyf(0, "READY=1\nMAINPID=%lu\nSTATUS=serving %s on %s",
                 static_cast<unsigned long>(::getpid()), mc.logdir.c_str(), mc.mountpoint.c_str());
    }
    RaiseReadahead(root_st.st_dev);
  });
  struct fuse_loop_config* loop = fuse_loop_cfg_create();
  fuse_loop_cfg_set_clone_fd(loop, 0);
  fuse_loop_cfg_set_max_threads(loop, 16);
  int rc = fuse_session_loop_mt(se, loop);
  fuse_loop_cfg_destroy(loop);
  serving = false;
  if (initialized.wait_for(std::chrono::seconds(0)) != std::future_status::ready) {
    context.initialized.set_value();  // INIT never came; OpInit can no longer run
  }

  spdlog::info("unmounting {}", mc.mountpoint);
  sd_notifyf(0, "STOPPING=1\nSTATUS=unmounting %s", mc.mountpoint.c_str());
  // The daemon is gone within kShutdownGrace of the unmount or the signal,
  // whatever its threads are doing: a worker stuck in a call that does not
  // return (a store that does not answer, a user's file that blocks) is
  // left behind by exiting, as a crash would. Nothing moved is lost by
  // that (the journal and I2); the next start's recovery finishes or undoes
  // the pass in flight. The logdir's lock goes with the process.
  Mutex shutdown_mu;
  std::condition_variable_any shutdown_cv;
  bool shut_down = false;
  std::thread watchdog([&] {
    MutexLock lock(shutdown_mu);
    if (shutdown_cv.wait_for(lock, kShutdownGrace,
                             [&]() TBFS_NO_THREAD_SAFETY_ANALYSIS { return shut_down; })) {
      return;
    }
    spdlog::error(
        "shutdown: a worker still runs {} s after the unmount (a pass or a store call that "
        "does not return); exiting without it: the next start recovers what it left",
        kShutdownGrace.count());
    spdlog::default_logger()->flush();
    // Detached by its path, not through the session (whose fd the stuck
    // worker may be writing to); a user's mount that cannot do that is
    // left dead, and the next mount detaches it.
    ::umount2(mc.mountpoint.c_str(), MNT_DETACH);
    ::unlink(JoinPath(mc.state_dir, kMountInfoFile).c_str());
    if (registered) UnregisterFromExporter(kExporterRunDir, mc.mountpoint);
    // As a crash would: no destructor, no exit handler (nor a sanitizer's
    // report of the threads left behind, which is the point).
    ::syscall(SYS_exit_group, 2);
  });
  auto finish_watch = [&] {
    {
      MutexLock lock(shutdown_mu);
      shut_down = true;
    }
    shutdown_cv.notify_all();
    watchdog.join();
  };
  metrics_server.reset();
  // First: a pass on a control connection (migrate --now) stops at its
  // next file, so the connection's thread ends soon and can be joined.
  migrator.Stop();
  control->reset();
  kernel_cache.Set(nullptr);
  finish_watch();
  fuse_session_unmount(se);
  readahead.join();
  if (verdict.daemon()) {
    verdict.Send(fmt::format("the mount on {} ended before it served a request (FUSE options?)",
                             mc.mountpoint));
  }
  fuse_remove_signal_handlers(se);
  fuse_session_destroy(se);
  context.CloseHandles();
  ::unlink(JoinPath(state_dir, kMountInfoFile).c_str());
  if (registered) UnregisterFromExporter(kExporterRunDir, mc.mountpoint);
  spdlog::default_logger()->flush();
  // An unmount (0) or SIGTERM, SIGINT or SIGHUP (libfuse's loop returns the
  // signal's number) is the end asked for: exit 0, as `systemctl stop` and
  // an init system expect. Anything else (a negative errno) is a failure.
  const bool asked = rc == 0 || rc == SIGTERM || rc == SIGINT || rc == SIGHUP;
  if (!asked) spdlog::error("the FUSE session of {} ended: {}", mc.mountpoint, std::strerror(-rc));
  return asked ? 0 : 2;
}

}  // namespace tbfs::fs
