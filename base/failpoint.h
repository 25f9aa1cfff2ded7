// Test-only crash, pause, fault and hook points, compiled in only when the
// build defines TBFS_FAILPOINTS (CMake option of the same name: on for the
// development and test builds, off for Release and the shipped .deb, where
// every function below is an empty inline and no point's name, environment
// variable or hook is in the binary).
//
// MaybeCrash("migrate.unlinked") ends the process at once, exit status 86
// when the environment variable TBFS_FAILPOINT names that point (exactly).
// Crash tests set the variable, run a command, and check what recovery
// makes of the state left behind.
//
// MaybePause("migrate.batch") holds the calling thread when TBFS_PAUSE is
// "migrate.batch:/some/file" and that file exists: it creates
// "/some/file.reached", then waits until the file is removed. Tests use it
// to freeze an operation at a known instant and look at the rest of the
// system meanwhile.
//
// ShouldFail("migrate.verify") is true when the point is armed to fail: by
// TBFS_FAIL naming it (for a whole process, e.g. the tbfs command) or by a
// ScopedFailpoint in a test's own process. The caller then takes its
// failure path.
//
// FailpointHook("migrate.copied", path) runs the callback a ScopedFailpoint
// set for that point, if any: tests act at a known instant (a writer
// appears between a file's copy and its unlink).
//
// The environment is read once per process. Thread-safe.
#pragma once

#include <functional>
#include <string>
#include <string_view>

namespace tbfs {

inline constexpr int kFailpointExitCode = 86;

#ifdef TBFS_FAILPOINTS

inline constexpr bool kFailpointsBuilt = true;

void MaybeCrash(std::string_view point);
void MaybePause(std::string_view point);
bool ShouldFail(std::string_view point);
void FailpointHook(std::string_view point, const std::string& arg);

// Arms `point` for as long as it lives: ShouldFail(point) is true, and
// FailpointHook(point, arg) calls `hook(arg)` (when given). One per point
// at a time.
class ScopedFailpoint {
 public:
  explicit ScopedFailpoint(std::string point,
                           std::function<void(const std::string&)> hook = nullptr);
  ~ScopedFailpoint();
  ScopedFailpoint(const ScopedFailpoint&) = delete;
  ScopedFailpoint& operator=(const ScopedFailpoint&) = delete;

 private:
  std::string point_;
};

#else

inline constexpr bool kFailpointsBuilt = false;

inline void MaybeCrash(std::string_view) {}
inline void MaybePause(std::string_view) {}
inline bool ShouldFail(std::string_view) { return false; }
inline void FailpointHook(std::string_view, const std::string&) {}

#endif

}  // namespace tbfs
