#include "base/failpoint.h"

#ifdef TBFS_FAILPOINTS

#include <fcntl.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <mutex>
#include <thread>

namespace tbfs {

namespace {

std::string Env(const char* name) {
  const char* v = std::getenv(name);
  return v ? v : "";
}

// The points armed by ScopedFailpoint in this process, with their hooks.
struct Armed {
  std::mutex mu;
  std::map<std::string, std::function<void(const std::string&)>, std::less<>> points;
  std::atomic<int> count{0};  // spares the lock when nothing is armed
};

Armed& ArmedPoints() {
  static Armed* armed = new Armed;  // never destroyed: points may fire at exit
  return *armed;
}

// A process armed through its environment with a name that is no point
// would never fire it: it stops before main, saying which.
struct CheckEnvironment {
  CheckEnvironment() {
    const std::string pause = Env("TBFS_PAUSE");
    if (!pause.empty() &&
        (pause.find(':') == std::string::npos || pause.front() == ':' || pause.back() == ':')) {
      std::fprintf(stderr, "TBFS_PAUSE=%s is not POINT:FILE\n", pause.c_str());
      std::abort();
    }
    for (const auto& [variable, name] :
         {std::pair{"TBFS_FAILPOINT", Env("TBFS_FAILPOINT")},
          std::pair{"TBFS_FAIL", Env("TBFS_FAIL")},
          std::pair{"TBFS_PAUSE", pause.substr(0, pause.find(':'))}}) {
      if (name.empty() || IsFailpoint(name)) continue;
      std::fprintf(stderr, "%s=%s names no failpoint (base/failpoint.h lists them)\n", variable,
                   name.c_str());
      std::abort();
    }
  }
} check_environment;

}  // namespace

void MaybeCrash(Failpoint point) {
  static const std::string armed = Env("TBFS_FAILPOINT");
  if (armed.empty() || armed != point.name()) return;
  if (const std::string reached = Env("TBFS_FAILPOINT_REACHED"); !reached.empty()) {
    int fd = ::open(reached.c_str(), O_WRONLY | O_CREAT | O_CLOEXEC, 0644);
    if (fd >= 0) ::close(fd);
  }
  // The raw system call, as a crash is: libc's _exit is hooked by the
  // sanitizers, which would report the threads and memory a crash leaves.
  ::syscall(SYS_exit_group, kFailpointExitCode);
}

void MaybePause(Failpoint failpoint) {
  static const std::string armed = Env("TBFS_PAUSE");
  const std::string_view point = failpoint.name();
  if (armed.empty() || armed.compare(0, point.size(), point) != 0 || armed.size() <= point.size() ||
      armed[point.size()] != ':') {
    return;
  }
  const std::string marker = armed.substr(point.size() + 1);
  if (::access(marker.c_str(), F_OK) != 0) return;
  int fd = ::open((marker + ".reached").c_str(), O_WRONLY | O_CREAT | O_CLOEXEC, 0644);
  if (fd >= 0) ::close(fd);
  while (::access(marker.c_str(), F_OK) == 0) {
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
}

bool ShouldFail(Failpoint point) {
  static const std::string from_env = Env("TBFS_FAIL");
  if (!from_env.empty() && from_env == point.name()) return true;
  Armed& a = ArmedPoints();
  if (a.count.load(std::memory_order_acquire) == 0) return false;
  std::lock_guard lock(a.mu);
  return a.points.find(point.name()) != a.points.end();
}

void FailpointHook(Failpoint point, const std::string& arg) {
  Armed& a = ArmedPoints();
  if (a.count.load(std::memory_order_acquire) == 0) return;
  std::function<void(const std::string&)> hook;
  {
    std::lock_guard lock(a.mu);
    auto it = a.points.find(point.name());
    if (it == a.points.end() || !it->second) return;
    hook = it->second;
  }
  hook(arg);  // outside the lock: a hook may take its time or arm others
}

ScopedFailpoint::ScopedFailpoint(Failpoint point, std::function<void(const std::string&)> hook)
    : point_(point.name()) {
  Armed& a = ArmedPoints();
  std::lock_guard lock(a.mu);
  a.points[point_] = std::move(hook);
  a.count.store(static_cast<int>(a.points.size()), std::memory_order_release);
}

ScopedFailpoint::~ScopedFailpoint() {
  Armed& a = ArmedPoints();
  std::lock_guard lock(a.mu);
  a.points.erase(point_);
  a.count.store(static_cast<int>(a.points.size()), std::memory_order_release);
}

}  // namespace tbfs

#endif  // TBFS_FAILPOINTS
