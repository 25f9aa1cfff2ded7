#include <gtest/gtest.h>

#include "fs/mount.h"

namespace tbfs::fs {
namespace {

TEST(ParseMountOptions, OursAreTakenTheRestGoToLibfuse) {
  MountOptions c;
  ASSERT_EQ(ParseMountOptions("allow_other,store=/s,cold_after=5m,no_migrate,cache=1G,"
                              "migrate_interval=2s,nofail,_netdev,fsname=x,state=/st",
                              &c),
            "");
  EXPECT_EQ(c.store_dir, "/s");
  EXPECT_EQ(c.state_dir, "/st");
  EXPECT_EQ(c.cold_after_s, 300);
  EXPECT_EQ(c.migrate_interval_s, 2);
  EXPECT_EQ(c.cache_bytes, 1ull << 30);
  EXPECT_FALSE(c.migrate);
  EXPECT_EQ(c.fuse_options, (std::vector<std::string>{"allow_other", "fsname=x"}));
}

// Read as libfuse reads -o: a comma inside a value is escaped with '\'.
TEST(ParseMountOptions, EscapedCommasStayInTheirValue) {
  MountOptions c;
  ASSERT_EQ(ParseMountOptions("store=/a\\,b,fsname=x\\,y,,ro", &c), "");
  EXPECT_EQ(c.store_dir, "/a,b");
  EXPECT_EQ(c.fuse_options, (std::vector<std::string>{"fsname=x,y", "ro"}));
}

TEST(ParseMountOptions, BadValuesAreOneLineErrors) {
  MountOptions c;
  EXPECT_EQ(ParseMountOptions("cold_after=soon", &c).rfind("cold_after: ", 0), 0u);
  EXPECT_EQ(ParseMountOptions("migrate_interval=0s", &c),
            "migrate_interval: use a duration of at least 1s");
  EXPECT_EQ(ParseMountOptions("cache=lots", &c).rfind("cache: ", 0), 0u);
  EXPECT_NE(ParseMountOptions("metrics=nowhere:x", &c), "");
}

}  // namespace
}  // namespace tbfs::fs
