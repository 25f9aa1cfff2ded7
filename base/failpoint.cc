#include "base/failpoint.h"

#include <unistd.h>

#include <cstdlib>
#include <string>

namespace tbfs {

void MaybeCrash(std::string_view point) {
  static const std::string armed = [] {
    const char* v = std::getenv("TBFS_FAILPOINT");
    return std::string(v ? v : "");
  }();
  if (!armed.empty() && armed == point) ::_exit(kFailpointExitCode);
}

}  // namespace tbfs
