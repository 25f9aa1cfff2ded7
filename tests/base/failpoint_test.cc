#include "base/failpoint.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <climits>
#include <string>

#include "tests/test_util.h"

namespace tbfs {
namespace {

using testing::RunCommand;

TEST(Failpoint, EveryNameIsListedOnce) {
  for (size_t i = 0; i < std::size(kFailpointNames); ++i) {
    for (size_t j = i + 1; j < std::size(kFailpointNames); ++j) {
      EXPECT_NE(kFailpointNames[i], kFailpointNames[j]);
    }
  }
  static_assert(IsFailpoint("migrate.unlinked"));
  static_assert(!IsFailpoint("migrate.unlink"));
}

TEST(Failpoint, AnEnvironmentNamingNoPointStopsAProcessAsItStarts) {
  ASSERT_TRUE(kFailpointsBuilt) << "the tests need a build with TBFS_FAILPOINTS on";
  char self[PATH_MAX];
  const ssize_t n = ::readlink("/proc/self/exe", self, sizeof(self) - 1);
  ASSERT_GT(n, 0);
  self[n] = '\0';
  const std::string list = std::string(self) + " --gtest_list_tests 2>&1";
  // A known name starts, whichever variable arms it.
  EXPECT_EQ(RunCommand("TBFS_FAIL=migrate.verify TBFS_PAUSE=migrate.batch:/x " + list).exit_code,
            0);
  for (const std::string variable : {"TBFS_FAILPOINT=", "TBFS_FAIL=", "TBFS_PAUSE="}) {
    // A misspelt one (unlinkd) would never fire: the process stops instead.
    const std::string value = variable == "TBFS_PAUSE=" ? "migrate.unlinkd:/x" : "migrate.unlinkd";
    auto r = RunCommand(variable + value + " " + list);
    EXPECT_NE(r.exit_code, 0) << variable;
    EXPECT_NE(r.out.find("migrate.unlinkd names no failpoint"), std::string::npos) << r.out;
  }
  // A pause without its marker file, or without its point, cannot fire.
  for (const std::string pause : {"migrate.batch", ":/x", "migrate.batch:"}) {
    auto r = RunCommand("TBFS_PAUSE=" + pause + " " + list);
    EXPECT_NE(r.exit_code, 0) << pause;
    EXPECT_NE(r.out.find("is not POINT:FILE"), std::string::npos) << r.out;
  }
}

}  // namespace
}  // namespace tbfs
