// Compiled, never linked, by the test Failpoint.AnUnknownNameDoesNotCompile
// (tests/CMakeLists.txt) with POINT defined to a known and an unknown name.
#include "base/failpoint.h"

bool Armed() { return tbfs::ShouldFail(POINT); }
