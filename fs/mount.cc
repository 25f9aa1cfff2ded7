// RunMount: the daemon's life as named steps (fs/mount.h gives the order).
// Checking is in mount_checks.cc, the process's own settings in
// mount_process.cc, the FUSE session in fuse_session.cc.
#include "fs/mount.h"

#include <fcntl.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <systemd/sd-daemon.h>
#include <unistd.h>

#include <atomic>
#include <condition_variable>
#include <csignal>
#include <cstring>
#include <functional>
#include <future>
#include <nlohmann/json.hpp>
#include <shared_mutex>
#include <thread>

#include "base/fs_util.h"
#include "base/thread_annotations.h"
#include "fmt/format.h"
#include "fs/control.h"
#include "fs/exporter.h"
#include "fs/filesystem.h"
#include "fs/fuse_ops.h"
#include "fs/fuse_session.h"
#include "fs/metrics.h"
#include "fs/metrics_server.h"
#include "fs/migrator.h"
#include "fs/mount_internal.h"
#include "fs/mount_watch.h"
#include "spdlog/spdlog.h"
#include "store/migrate.h"
#include "store/store_dir.h"

namespace tbfs::fs {

namespace {

// How long the daemon waits for its threads after an unmount or SIGTERM.
constexpr std::chrono::seconds kShutdownGrace{10};
// The FUSE loop's worker threads at most.
constexpr unsigned kMaxFuseThreads = 16;

// The store as the mount opened it.
struct OpenedStore {
  std::unique_ptr<store::ColdStore> store;
  store::OpenOptions options;  // what the migrator reopens it with as the writer
  UniqueFd state_lock;         // a RADOS mount's hold on its state folder
};

// Opens (creating) the store: a folder store as the writer; a RADOS store
// as the writer when its lease is free, else as a reader. Fixes
// plan->store_dir (a folder store's real path) and, for a folder store,
// plan->options.state_dir (the store folder).
Result<OpenedStore> OpenStore(MountPlan* plan) {
  const MountOptions& mc = plan->options;
  OpenedStore opened;
  store::OpenOptions& so = opened.options;
  so.create_if_missing = true;
  so.logdir = mc.logdir;
  so.holder =
      plan->shared
          ? fmt::format("the tbfs mount on {}:{} (pid {})", HostName(), mc.mountpoint, ::getpid())
          : fmt::format("the tbfs mount on {} (pid {})", mc.mountpoint, ::getpid());
  so.lock_wait_ms = 5000;  // a mount of this logdir just unmounted may still be closing
  // A full disk does not keep the mount down: the store is served
  // read-only, and becomes writable when room comes back (the migrator).
  so.read_only_when_full = true;
  if (plan->shared) {
    // The writer when the lease is free; a reader otherwise, which the
    // migrator's passes make the writer when the lease comes free.
    so.lock_wait_ms = 0;
    so.reader_if_busy = true;
    auto prepared = PrepareStateDir(mc.state_dir);
    if (!prepared.ok()) return prepared.status();
    opened.state_lock = std::move(prepared).value();
  }
  auto store = store::ColdStore::Open(plan->store_dir, so);
  if (!store.ok()) return store.status();
  opened.store = std::move(store).value();
  if (!plan->shared) {
    plan->store_dir = RealPath(plan->store_dir);
    plan->options.state_dir = plan->store_dir;
  }
  return opened;
}

// Journal recovery (I4), before the first request is served; a reader
// leaves it to the writer.
Status RecoverStore(store::ColdStore& store, const MountPlan& plan) {
  if (!store.writer()) {
    spdlog::info("{}: serving it read-only; {}", plan.store_dir, store.refusal());
    return Status::OK();
  }
  auto recovered = store::Recover(store, plan.options.logdir);
  if (!recovered.ok()) return Status::Aborted("recovery: " + recovered.status().message());
  if (recovered->batches > 0) {
    spdlog::warn("recovered {} unfinished batch(es): {} restored, {} dropped", recovered->batches,
                 recovered->restored, recovered->dropped);
  }
  for (const std::string& note : recovered->notes) spdlog::warn("recovery: {}", note);
  for (const std::string& path : recovered->lost) {
    spdlog::error(
        "recovery: LOST {}: in neither the logdir nor the store's index (recorded: status, "
        "metrics and fsck report it until tbfs fsck --clear-lost)",
        JoinPath(plan.options.logdir, path));
  }
  return Status::OK();
}

FsOptions FilesystemOptions(const MountPlan& plan, const std::atomic<bool>* read_only) {
  const MountOptions& mc = plan.options;
  FsOptions fc;
  fc.logdir = mc.logdir;
  fc.cache_bytes = mc.cache_bytes;
  fc.as_root_owner_fixup = ::geteuid() == 0;
  if (plan.store_dir.starts_with(mc.logdir + "/"))
    fc.store_skip = plan.store_dir.substr(mc.logdir.size() + 1);
  fc.control_socket = JoinPath(mc.state_dir, kControlSocketName);
  fc.noatime = mc.noatime;
  fc.nodiratime = mc.nodiratime;
  fc.read_only = read_only;
  return fc;
}

MigratorOptions MigratorOptionsFor(const MountPlan& plan, const FsOptions& fc,
                                   const store::OpenOptions& so) {
  const MountOptions& mc = plan.options;
  MigratorOptions migc;
  migc.cold_after_s = mc.cold_after_s;
  migc.interval_s = mc.migrate_interval_s;
  migc.background = mc.migrate;
  migc.policy.trace_markers = plan.policy.trace_markers;
  migc.policy.protected_markers = plan.policy.protected_markers;
  migc.must_have = plan.policy.must_have_tags;
  migc.retention = plan.policy.retention;
  migc.growth_dir = mc.state_dir;
  migc.writer = so;  // a reader's passes take the writer's role when it comes free
  migc.read_only = fc.read_only;
  if (plan.policy.retention.any())
    spdlog::info("retention policy of {} applies after each migrator pass", mc.config_file);
  migc.walk.skip_dirs = {store::kStoreDirName};
  if (!fc.store_skip.empty()) migc.walk.skip_dirs.push_back(fc.store_skip);
  return migc;
}

// Ends the process as a crash would when the daemon's teardown has not
// finished within kShutdownGrace: a worker stuck in a call that does not
// return (a store that does not answer, a user's file that blocks) is left
// behind. Nothing moved is lost by that (the journal and I2); the next
// start's recovery finishes or undoes the pass in flight, and the
// logdir's lock goes with the process. `last_words` runs first.
class ShutdownWatchdog {
 public:
  explicit ShutdownWatchdog(std::function<void()> last_words)
      : thread_([this, last_words = std::move(last_words)] {
          MutexLock lock(mu_);
          if (cv_.wait_for(lock, kShutdownGrace,
                           [&]() TBFS_NO_THREAD_SAFETY_ANALYSIS { return done_; })) {
            return;
          }
          last_words();
          // No destructor, no exit handler (nor a sanitizer's report of
          // the threads left behind, which is the point).
          ::syscall(SYS_exit_group, 2);
        }) {}
  // The teardown it watched is done.
  ~ShutdownWatchdog() {
    {
      MutexLock lock(mu_);
      done_ = true;
    }
    cv_.notify_all();
    thread_.join();
  }

 private:
  Mutex mu_;
  std::condition_variable_any cv_;
  bool done_ TBFS_GUARDED_BY(mu_) = false;
  std::thread thread_;
};

// What serves one mount, built in the order each part needs the others
// and, on any early return, destroyed in reverse.
class Daemon {
 public:
  Daemon(const MountPlan& plan, OpenedStore& opened, UniqueFd root, const struct stat& root_st)
      : plan_(plan),
        store_(*opened.store),
        fs_options_(FilesystemOptions(plan, &read_only_)),
        fs_(fs_options_, &store_, std::move(root), root_st, &namespace_lock_),
        migrator_(store_, plan.options.logdir, &namespace_lock_, fs_,
                  MigratorOptionsFor(plan, fs_options_, opened.options)),
        metrics_(fs_, store_, latency_, migrator_, plan.options.mountpoint) {
    context_.fs = &fs_;
    context_.latency = &latency_;
  }
  ~Daemon() { kernel_cache_.Set(nullptr); }

  // The control socket (status, metrics, migrate --now) and, when asked
  // for, the metrics' HTTP server.
  Status StartServices();
  // The FUSE session mounted, the mount recorded, the migrator started.
  Status Mount();
  // Serves until the unmount or a signal, then tears down in order.
  // Returns the exit status.
  int Serve(Verdict& verdict);

 private:
  void Detach(Verdict& verdict, std::initializer_list<int> fds);
  void Unrecord();

  const MountPlan& plan_;
  store::ColdStore& store_;
  // The logdir's namespace lock, shared by the filesystem and the migrator
  // (lock order in fs/filesystem.h).
  SharedMutex namespace_lock_;
  SessionCache kernel_cache_;  // outlives fs_, which holds it
  // Whether the mount is ro now, as ro_watch_ sees it from the mount on.
  std::atomic<bool> read_only_{false};
  std::unique_ptr<ReadOnlyWatch> ro_watch_;
  const FsOptions fs_options_;
  Filesystem fs_;
  Migrator migrator_;
  OpLatency latency_;  // of the FUSE operations, recorded by the adapters
  MountMetrics metrics_;
  std::unique_ptr<ControlServer> control_;
  std::unique_ptr<MetricsServer> metrics_server_;
  FuseContext context_;
  std::unique_ptr<FuseSession> session_;
  bool registered_ = false;  // with `tbfs exporter`
};

Status Daemon::StartServices() {
  // Prometheus metrics: through the control socket (`tbfs exporter`), and
  // over HTTP when asked for (fs/metrics_server.h).
  auto control =
      ControlServer::Start(plan_.options.state_dir, ::getuid(), [this](const std::string& request) {
        if (request == "metrics") {
          return nlohmann::json({{"metrics", metrics_.Text()}})
              .dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
        }
        return Control(request, plan_.options, plan_.store_dir, store_, fs_, migrator_);
      });
  if (!control.ok()) return Status::Aborted("control socket: " + control.status().message());
  control_ = std::move(control).value();
  if (!plan_.options.metrics_address.empty()) {
    auto started =
        MetricsServer::Start(plan_.options.metrics_address, [this] { return metrics_.Text(); });
    if (!started.ok()) return started.status();
    metrics_server_ = std::move(started).value();
    spdlog::info("metrics on http://{}/metrics", plan_.options.metrics_address);
  }
  return Status::OK();
}

Status Daemon::Mount() {
  const MountOptions& mc = plan_.options;
  // The logdir is one value: a comma or a backslash in its name is escaped,
  // never read as the start of another option.
  std::string opts =
      "default_permissions," + EscapeFuseOpt("fsname=tbfs:" + mc.logdir) + ",subtype=tbfs";
  for (const std::string& o : mc.fuse_options) opts += "," + EscapeFuseOpt(o);
  auto session = FuseSession::Create(opts, &context_);
  if (!session.ok()) return session.status();
  session_ = std::move(session).value();
  context_.session = session_->get();
  kernel_cache_.Set(session_->get());
  fs_.SetKernelCache(&kernel_cache_);
  if (Status s = session_->Mount(mc.mountpoint); !s.ok()) return s;
  auto watch = ReadOnlyWatch::Start(mc.mountpoint, &read_only_);
  if (!watch.ok()) return watch.status();
  ro_watch_ = std::move(watch).value();
  (void)WriteFileAtomic(JoinPath(mc.state_dir, kMountInfoFile),
                        fmt::format("{} {}\n", mc.mountpoint, ::getpid()), 0600);
  // Root's mounts are scraped through `tbfs exporter` (fs/exporter.h).
  registered_ = ::geteuid() == 0;
  if (registered_) {
    if (Status r = RegisterWithExporter(kExporterRunDir, mc.mountpoint, control_->path());
        !r.ok()) {
      spdlog::warn("tbfs exporter will not see this mount: {}", r.message());
    }
  }
  // Modes of what callers create are exactly what they asked: the kernel
  // applied their umask already. (Everything the daemon writes for itself
  // from here on has an explicit mode.)
  ::umask(0);
  migrator_.Start();
  spdlog::info("mounted {} on {} (store {})", mc.logdir, mc.mountpoint, plan_.store_dir);
  return Status::OK();
}

// A daemon lets go of the terminal: stdin and stdout once the mount
// serves, stderr once the kernel's INIT is answered, so that what libfuse
// says of a refused INIT still reaches the user.
void Daemon::Detach(Verdict& verdict, std::initializer_list<int> fds) {
  if (!verdict.daemon()) return;
  int null = ::open("/dev/null", O_RDWR | O_CLOEXEC);
  if (null < 0) return;
  for (int fd : fds) ::dup2(null, fd);
  ::close(null);
}

// What Mount recorded outside the process: the mount info file and the
// exporter's registration.
void Daemon::Unrecord() {
  ::unlink(JoinPath(plan_.options.state_dir, kMountInfoFile).c_str());
  if (registered_) UnregisterFromExporter(kExporterRunDir, plan_.options.mountpoint);
}

int Daemon::Serve(Verdict& verdict) {
  const MountOptions& mc = plan_.options;
  Detach(verdict, {0, 1});
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
  std::shared_future<void> initialized = context_.initialized.get_future().share();
  std::atomic<bool> serving{true};
  // Then the same thread has the store open what it would open at the
  // first read of each of its files (their first bytes do not wait for it).
  std::thread readahead([&, initialized] {
    initialized.wait();
    if (!serving) return;
    struct stat root_st;
    if (::stat(mc.mountpoint.c_str(), &root_st) != 0) return;  // unmounted already
    if (serving) {
      Detach(verdict, {2});
      verdict.Send("ok");
      // Type=notify: systemd hears "started" only now (nothing without
      // NOTIFY_SOCKET).
      sd_notifyf(0, "READY=1\nMAINPID=%lu\nSTATUS=serving %s on %s",
                 static_cast<unsigned long>(::getpid()), mc.logdir.c_str(), mc.mountpoint.c_str());
    }
    RaiseReadahead(root_st.st_dev);
    store_.OpenReaders([&] { return !serving; });
  });
  const int rc = session_->Loop(kMaxFuseThreads);
  serving = false;
  if (initialized.wait_for(std::chrono::seconds(0)) != std::future_status::ready) {
    context_.initialized.set_value();  // INIT never came; OpInit can no longer run
  }

  spdlog::info("unmounting {}", mc.mountpoint);
  sd_notifyf(0, "STOPPING=1\nSTATUS=unmounting %s", mc.mountpoint.c_str());
  {
    ShutdownWatchdog watchdog([&] {
      spdlog::error(
          "shutdown: a worker still runs {} s after the unmount (a pass or a store call that "
          "does not return); exiting without it: the next start recovers what it left",
          kShutdownGrace.count());
      spdlog::default_logger()->flush();
      // Detached by its path, not through the session (whose fd the stuck
      // worker may be writing to); a user's mount that cannot do that is
      // left dead, and the next mount detaches it.
      ::umount2(mc.mountpoint.c_str(), MNT_DETACH);
      Unrecord();
    });
    metrics_server_.reset();
    // First: a pass on a control connection (migrate --now) stops at its
    // next file, so the connection's thread ends soon and can be joined.
    migrator_.Stop();
    control_.reset();
    kernel_cache_.Set(nullptr);
  }
  session_->Unmount();
  readahead.join();
  if (verdict.daemon()) {
    verdict.Send(fmt::format("the mount on {} ended before it served a request (FUSE options?)",
                             mc.mountpoint));
  }
  session_.reset();
  context_.CloseHandles();
  Unrecord();
  spdlog::default_logger()->flush();
  // An unmount (0) or SIGTERM, SIGINT or SIGHUP (libfuse's loop returns the
  // signal's number) is the end asked for: exit 0, as `systemctl stop` and
  // an init system expect. Anything else (a negative errno) is a failure.
  const bool asked = rc == 0 || rc == SIGTERM || rc == SIGINT || rc == SIGHUP;
  if (!asked) spdlog::error("the FUSE session of {} ended: {}", mc.mountpoint, std::strerror(-rc));
  return asked ? 0 : 2;
}

}  // namespace

int RunMount(const MountOptions& options) {
  Verdict verdict;
  auto checked = CheckMount(options);
  if (!checked.ok()) return Fail(verdict, checked.status().message());
  MountPlan& plan = *checked;
  verdict.Fork(plan.options.foreground);
  TuneProcess();
  KeepEarlyLog(plan.options.foreground);
  // Store first, recovery before the first request.
  auto opened = OpenStore(&plan);
  if (!opened.ok()) return Fail(verdict, opened.status().message());
  StartMountLog(plan.options.foreground, plan.options.state_dir);
  if (Status s = RecoverStore(*opened->store, plan); !s.ok()) return Fail(verdict, s.message());
  auto root = OpenFile(plan.options.logdir, O_PATH | O_DIRECTORY);
  if (!root.ok()) return Fail(verdict, root.status().message());
  struct stat root_st;
  if (::fstat(root->get(), &root_st) != 0)
    return Fail(verdict, fmt::format("fstat {}: {}", plan.options.logdir, std::strerror(errno)));
  Daemon daemon(plan, *opened, std::move(root).value(), root_st);
  if (Status s = daemon.StartServices(); !s.ok()) return Fail(verdict, s.message());
  if (Status s = daemon.Mount(); !s.ok()) return Fail(verdict, s.message());
  return daemon.Serve(verdict);
}

}  // namespace tbfs::fs
