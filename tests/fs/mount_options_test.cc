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

// The atime words: noatime and atime go on to the kernel (libfuse 3.14
// refuses the others, so they are the daemon's alone), the last of each
// pair wins, as mount(8) reads them; strictatime is taken here and checked
// against the logdir's filesystem when the mount starts (CheckMount).
TEST(ParseMountOptions, AtimeWordsAreReadInOrder) {
  MountOptions c;
  ASSERT_EQ(ParseMountOptions("noatime", &c), "");
  EXPECT_TRUE(c.noatime);
  EXPECT_FALSE(c.nodiratime);
  EXPECT_EQ(c.fuse_options, (std::vector<std::string>{"noatime"}));
  for (const char* undo : {"noatime,atime", "noatime,relatime", "noatime,nostrictatime"}) {
    MountOptions u;
    ASSERT_EQ(ParseMountOptions(undo, &u), "") << undo;
    EXPECT_FALSE(u.noatime) << undo;
    // What the kernel is told (noatime, atime) ends as atime, or nothing.
    EXPECT_TRUE(u.fuse_options.empty() || u.fuse_options.back() == "atime") << undo;
  }
  MountOptions d;
  ASSERT_EQ(ParseMountOptions("nodiratime,relatime", &d), "");
  EXPECT_FALSE(d.noatime);
  EXPECT_TRUE(d.nodiratime);
  EXPECT_TRUE(d.fuse_options.empty());
  ASSERT_EQ(ParseMountOptions("diratime", &d), "");
  EXPECT_FALSE(d.nodiratime);
  MountOptions none;
  ASSERT_EQ(ParseMountOptions("ro,allow_other", &none), "");
  EXPECT_FALSE(none.noatime || none.nodiratime);
  for (const char* strict : {"strictatime", "norelatime", "noatime,strictatime"}) {
    MountOptions s;
    ASSERT_EQ(ParseMountOptions(strict, &s), "") << strict;
    EXPECT_TRUE(s.strictatime) << strict;
    EXPECT_FALSE(s.noatime) << strict;
    EXPECT_TRUE(s.fuse_options.empty()) << strict;
  }
  for (const char* undo : {"strictatime,relatime", "strictatime,noatime"}) {
    MountOptions u;
    ASSERT_EQ(ParseMountOptions(undo, &u), "") << undo;
    EXPECT_FALSE(u.strictatime) << undo;
  }
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
  EXPECT_EQ(ParseMountOptions("cache=0", &c), "cache: use a size of at least 1M");
  EXPECT_EQ(ParseMountOptions("store=", &c), "store: give a path (store=PATH)");
  EXPECT_EQ(ParseMountOptions("state=", &c), "state: give a path (state=PATH)");
}

// A value from a config file is one value: a comma or a backslash in it
// starts no other option.
TEST(ParseMountOption, AValueIsTakenAsItIs) {
  MountOptions c;
  ASSERT_EQ(ParseMountOption("store", "/tmp/st,allow_other\\x", &c), "");
  EXPECT_EQ(c.store_dir, "/tmp/st,allow_other\\x");
  EXPECT_NE(ParseMountOption("cold_after", "10m,allow_other", &c), "");
  EXPECT_NE(ParseMountOption("cache", "64M,ro", &c), "");
  EXPECT_TRUE(c.fuse_options.empty());
}

}  // namespace
}  // namespace tbfs::fs
