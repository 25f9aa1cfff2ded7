// The mount daemon as a process: forking with a verdict for the parent,
// its limits and allocator, its log, the kernel's readahead for its mount
// (fs/mount_internal.h).
#include <dirent.h>
#include <fcntl.h>
#include <sys/resource.h>
#include <sys/sysmacros.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <vector>

#include "base/fs_util.h"
#include "base/heap.h"
#include "base/log.h"
#include "fmt/format.h"
#include "fs/mount_internal.h"
#include "spdlog/sinks/ringbuffer_sink.h"
#include "spdlog/spdlog.h"
#include "store/cold_store.h"

namespace tbfs::fs {

namespace {

// The daemon's log: 16 MiB per file, the 4 before it kept (80 MiB at most).
constexpr uint64_t kMountLogBytes = 16ull << 20;
constexpr size_t kMountLogFiles = 4;
// Warnings and errors kept from before the log file opens (the last ones).
constexpr size_t kEarlyLogLines = 1000;

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

// Closes what the caller left open beyond stderr (a CI runner's log pipe,
// a shell's `3>&1`): a daemon holding it would keep its reader waiting for
// the mount to end. The caller's are those without close-on-exec (they
// came through exec); every descriptor tbfs opens has it.
void CloseInheritedFds() {
  DIR* dir = ::opendir("/proc/self/fd");
  if (dir == nullptr) return;
  std::vector<int> inherited;
  while (struct dirent* e = ::readdir(dir)) {
    const int fd = std::atoi(e->d_name);
    if (fd <= 2 || fd == ::dirfd(dir)) continue;
    const int flags = ::fcntl(fd, F_GETFD);
    if (flags >= 0 && (flags & FD_CLOEXEC) == 0) inherited.push_back(fd);
  }
  ::closedir(dir);
  for (int fd : inherited) ::close(fd);
}

}  // namespace

void Verdict::Fork(bool foreground) {
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
  CloseInheritedFds();
}

void Verdict::Send(const std::string& msg) {
  if (fd_ < 0) return;
  (void)!::write(fd_, msg.data(), msg.size());
  ::close(fd_);
  fd_ = -1;
}

int Fail(Verdict& verdict, const std::string& msg) {
  if (verdict.daemon()) {
    verdict.Send(msg);
  } else {
    fmt::print(stderr, "tbfs mount: {}\n", msg);
  }
  return 2;
}

void TuneProcess() {
  RaiseFdLimit();
  TuneHeap();  // glibc's; jemalloc is set by the tbfs command (tools/cli/main.cc)
}

// An exception nothing catches (std::bad_alloc when the address space
// runs out, one thrown through libfuse's C frames) ends the daemon: its
// log says why before it aborts, where it said nothing.
[[noreturn]] void LogAndAbort() {
  try {
    std::string what = "no exception (std::terminate)";
    if (std::exception_ptr e = std::current_exception()) {
      try {
        std::rethrow_exception(e);
      } catch (const std::exception& x) {
        what = x.what();
      } catch (...) {
        what = "not a std::exception";
      }
    }
    spdlog::critical("the daemon ends: uncaught exception: {}", what);
    spdlog::shutdown();  // flushed
  } catch (...) {        // no memory even for that: the abort says the rest
  }
  std::abort();
}

namespace {
// What the daemon said before its log file was open (KeepEarlyLog).
std::shared_ptr<spdlog::sinks::ringbuffer_sink_mt> early_log;
}  // namespace

void KeepEarlyLog(bool foreground) {
  if (foreground) return;
  // (Before the store's open: no engine thread logs yet beside this.)
  early_log = std::make_shared<spdlog::sinks::ringbuffer_sink_mt>(kEarlyLogLines);
  early_log->set_level(spdlog::level::warn);
  spdlog::default_logger()->sinks().push_back(early_log);
}

void StartMountLog(bool foreground, const std::string& state_dir) {
  std::set_terminate(LogAndAbort);
  if (!foreground) {
    // Capped: what users' files make the daemon say cannot fill the disk.
    auto logger = RotatingFileLogger("tbfs-mount", JoinPath(state_dir, "tbfs-mount.log"),
                                     kMountLogBytes, kMountLogFiles);
    if (early_log != nullptr) {
      for (const auto& msg : early_log->last_raw()) {
        for (const auto& sink : logger->sinks()) sink->log(msg);
      }
      logger->flush();  // warnings are on disk at once (flush_on below)
    }
    spdlog::set_default_logger(logger);
    spdlog::set_level(spdlog::level::info);
    spdlog::flush_every(std::chrono::seconds(2));
    spdlog::flush_on(spdlog::level::warn);  // a warning or an error is on disk at once
  } else if (StderrIsJournal() && spdlog::get_level() > spdlog::level::info) {
    // Run by systemd: the journal is this mount's log, and what it does
    // (migrations, rehydrations, retention) is logged at info.
    spdlog::set_level(spdlog::level::info);
  }
}

// Cold files are read sequentially in big runs; the kernel's default
// readahead for a FUSE mount is 128 KiB.
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

}  // namespace tbfs::fs
