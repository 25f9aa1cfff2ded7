// Test-only crash and pause points.
//
// MaybeCrash("migrate.unlinked") ends the process at once with _exit(86)
// when the environment variable TBFS_FAILPOINT names that point (exactly),
// and does nothing otherwise. Crash tests set the variable, run a command,
// and check what recovery makes of the state left behind.
//
// MaybePause("migrate.batch") holds the calling thread when TBFS_PAUSE is
// "migrate.batch:/some/file" and that file exists: it creates
// "/some/file.reached", then waits until the file is removed. Tests use it
// to freeze an operation at a known instant and look at the rest of the
// system meanwhile.
//
// The variables are read once per process. Thread-safe.
#pragma once

#include <string_view>

namespace tbfs {

inline constexpr int kFailpointExitCode = 86;

void MaybeCrash(std::string_view point);
void MaybePause(std::string_view point);

}  // namespace tbfs
