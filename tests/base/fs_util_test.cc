#include "base/fs_util.h"

#include <gtest/gtest.h>

#include "tests/test_util.h"

namespace tbfs {
namespace {

using testing::TempDir;
using testing::WriteBytes;

TEST(SafeRelativePath, RejectsEscapesAndOddComponents) {
  EXPECT_TRUE(IsSafeRelativePath("a/b/c.pt.trace.json"));
  EXPECT_TRUE(IsSafeRelativePath("a..b/c"));
  EXPECT_FALSE(IsSafeRelativePath(""));
  EXPECT_FALSE(IsSafeRelativePath("/etc/passwd"));
  EXPECT_FALSE(IsSafeRelativePath("../x"));
  EXPECT_FALSE(IsSafeRelativePath("a/../../x"));
  EXPECT_FALSE(IsSafeRelativePath("a/./b"));
  EXPECT_FALSE(IsSafeRelativePath("a//b"));
  EXPECT_FALSE(IsSafeRelativePath("a/"));
}

TEST(Paths, JoinParentBase) {
  EXPECT_EQ(JoinPath("a", "b"), "a/b");
  EXPECT_EQ(JoinPath("a/", "b"), "a/b");
  EXPECT_EQ(JoinPath("", "b"), "b");
  EXPECT_EQ(ParentPath("a/b/c"), "a/b");
  EXPECT_EQ(ParentPath("c"), "");
  EXPECT_EQ(BaseName("a/b/c"), "c");
}

TEST(WalkTree, VisitsFilesSortedAndSkipsFolders) {
  TempDir dir;
  WriteBytes(dir / "b/2", "x");
  WriteBytes(dir / "b/1", "x");
  WriteBytes(dir / "a", "x");
  WriteBytes(dir / ".tbfs/db", "x");
  std::vector<std::string> seen;
  WalkOptions options;
  options.skip_dirs = {".tbfs"};
  ASSERT_TRUE(
      WalkTree(dir.path(), options, [&](const WalkEntry& e) { seen.push_back(e.rel); }).ok());
  EXPECT_EQ(seen, (std::vector<std::string>{"a", "b/1", "b/2"}));
}

TEST(WalkTree, MissingRootIsNotFound) {
  Status st = WalkTree("/nonexistent/tbfs", {}, [](const WalkEntry&) {});
  EXPECT_TRUE(st.IsNotFound()) << st.ToString();
  EXPECT_NE(st.message().find("/nonexistent/tbfs"), std::string::npos);
}

TEST(WriteFileAtomic, ReplacesContent) {
  TempDir dir;
  ASSERT_TRUE(WriteFileAtomic(dir / "f", "one").ok());
  ASSERT_TRUE(WriteFileAtomic(dir / "f", "two").ok());
  std::string got;
  ASSERT_TRUE(ReadFileToString(dir / "f", &got).ok());
  EXPECT_EQ(got, "two");
}

}  // namespace
}  // namespace tbfs
