#include "base/failpoint.h"

#include <fcntl.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <string>
#include <thread>

namespace tbfs {

namespace {

std::string Env(const char* name) {
  const char* v = std::getenv(name);
  return v ? v : "";
}

}  // namespace

void MaybeCrash(std::string_view point) {
  static const std::string armed = Env("TBFS_FAILPOINT");
  if (!armed.empty() && armed == point) ::_exit(kFailpointExitCode);
}

void MaybePause(std::string_view point) {
  static const std::string armed = Env("TBFS_PAUSE");
  if (armed.empty() || armed.compare(0, point.size(), point) != 0 ||
      armed.size() <= point.size() || armed[point.size()] != ':') {
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

}  // namespace tbfs
