#include "store/glob.h"

#include <gtest/gtest.h>

namespace tbfs::store {
namespace {

TEST(GlobMatch, DoubleStarMatchesWholeComponents) {
  EXPECT_TRUE(GlobMatch("**/plugins/profile/**", "run/plugins/profile/2026_01_01/h.xplane.pb"));
  EXPECT_TRUE(GlobMatch("**/plugins/profile/**", "plugins/profile/x"));
  EXPECT_TRUE(GlobMatch("**/*.pt.trace.json", "a.pt.trace.json"));
  EXPECT_TRUE(GlobMatch("**/*.pt.trace.json", "a/b/c/w_1.123.pt.trace.json"));
  EXPECT_FALSE(GlobMatch("**/*.pt.trace.json", "a/b/c/w_1.123.pt.trace.json.gz"));
  EXPECT_FALSE(GlobMatch("*.json", "a/b.json"));  // '*' never crosses '/'
  EXPECT_TRUE(GlobMatch("**/*profile*/**/*.json.gz", "run/my_profile/x/t.json.gz"));
  EXPECT_FALSE(GlobMatch("**/*profile*/**/*.json.gz", "run/other/t.json.gz"));
  EXPECT_TRUE(GlobMatch("**", "anything/at/all"));
}

}  // namespace
}  // namespace tbfs::store
