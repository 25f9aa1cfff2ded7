// Test-only crash points.
//
// MaybeCrash("migrate.unlinked") ends the process at once with _exit(86)
// when the environment variable TBFS_FAILPOINT names that point (exactly),
// and does nothing otherwise. Crash tests set the variable, run a command,
// and check what recovery makes of the state left behind. The variable is
// read once per process. Thread-safe.
#pragma once

#include <string_view>

namespace tbfs {

inline constexpr int kFailpointExitCode = 86;

void MaybeCrash(std::string_view point);

}  // namespace tbfs
