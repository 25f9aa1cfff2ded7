#include "fs/mount_table.h"

#include <gtest/gtest.h>
#include <sys/mount.h>
#include <sys/stat.h>

#include <cstring>
#include <filesystem>

#include "tests/test_util.h"

namespace tbfs::fs {
namespace {

// The table writes a space as \040, a tab as \011: libmount reads them back.
TEST(FindMount, FindsAMountPointWhoseNameTheTableEscapes) {
  testing::TempDir dir;
  const std::string target = dir / "a mount\tpoint\\here";
  std::filesystem::create_directories(target);
  EXPECT_FALSE(FindMount(target).has_value());
  ASSERT_EQ(::mount("tbfs-test", target.c_str(), "tmpfs", 0, "size=1m"), 0)
      << "mounting a tmpfs needs root: " << std::strerror(errno);
  auto found = FindMount(target);
  struct stat st {};
  ASSERT_EQ(::stat(target.c_str(), &st), 0);
  ::umount2(target.c_str(), MNT_DETACH);
  ASSERT_TRUE(found.has_value());
  EXPECT_EQ(found->fstype, "tmpfs");
  EXPECT_EQ(found->dev, st.st_dev);
  EXPECT_FALSE(FindMount(dir / "a mount").has_value());
}

}  // namespace
}  // namespace tbfs::fs
