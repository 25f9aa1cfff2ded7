#include "fs/inode_table.h"

#include <fcntl.h>
#include <gtest/gtest.h>

#include "tests/test_util.h"

namespace tbfs::fs {
namespace {

using testing::TempDir;
using testing::WriteBytes;

UniqueFd OpenPath(const std::string& p) { return UniqueFd(::open(p.c_str(), O_PATH | O_CLOEXEC)); }

struct stat Stat(const std::string& p) {
  struct stat st;
  EXPECT_EQ(::stat(p.c_str(), &st), 0);
  return st;
}

class InodeTableTest : public ::testing::Test {
 protected:
  TempDir dir_;
  InodeTable table_{OpenPath(dir_.path())};
};

TEST_F(InodeTableTest, HardLinksShareOneInodeAndLookupsCount) {
  WriteBytes(dir_ / "a", "x");
  ASSERT_EQ(::link((dir_ / "a").c_str(), (dir_ / "b").c_str()), 0);
  uint64_t a = table_.AddHot(OpenPath(dir_ / "a"), Stat(dir_ / "a"));
  uint64_t b = table_.AddHot(OpenPath(dir_ / "b"), Stat(dir_ / "b"));
  EXPECT_EQ(a, b);
  EXPECT_EQ(table_.size(), 2u);  // root + one
  table_.Forget(a, 1);
  EXPECT_EQ(table_.size(), 2u);  // one lookup left
  table_.Forget(a, 1);
  EXPECT_EQ(table_.size(), 1u);
}

TEST_F(InodeTableTest, RootIsNeverForgotten) {
  uint64_t root = table_.AddHot(OpenPath(dir_.path()), Stat(dir_.path()));
  EXPECT_EQ(root, InodeTable::kRootId);
  table_.Forget(root, 100);
  EXPECT_EQ(table_.View(root).kind, Kind::kHot);
}

TEST_F(InodeTableTest, MigrationAndRehydrationKeepTheNodeIdAndShownInode) {
  WriteBytes(dir_ / "t.json", "trace");
  struct stat st = Stat(dir_ / "t.json");
  uint64_t id = table_.AddHot(OpenPath(dir_ / "t.json"), st);
  auto m = std::make_shared<storepb::Manifest>();
  m->set_file_id(7);
  m->set_path("t.json");
  m->set_ino(st.st_ino);
  table_.ToCold(st.st_dev, st.st_ino, m);
  InodeView cold = table_.View(id);
  EXPECT_EQ(cold.kind, Kind::kColdFile);
  EXPECT_EQ(cold.shown_ino, st.st_ino);
  EXPECT_EQ(table_.AddColdFile(m), id);  // a lookup of the cold file finds it

  WriteBytes(dir_ / "t2.json", "trace");  // rehydrated: a new backing inode
  struct stat st2 = Stat(dir_ / "t2.json");
  table_.ToHot(id, OpenPath(dir_ / "t2.json"), st2);
  InodeView hot = table_.View(id);
  EXPECT_EQ(hot.kind, Kind::kHot);
  EXPECT_EQ(hot.shown_ino, st.st_ino);  // what stat shows did not change
  EXPECT_EQ(table_.AddHot(OpenPath(dir_ / "t2.json"), st2), id);
}

TEST_F(InodeTableTest, WritersWaitWhileTheMigratorUnlinks) {
  WriteBytes(dir_ / "t", "x");
  struct stat st = Stat(dir_ / "t");
  uint64_t id = table_.AddHot(OpenPath(dir_ / "t"), st);
  ASSERT_TRUE(table_.BeginUnlink(st.st_dev, st.st_ino));
  EXPECT_FALSE(table_.OpenHandle(id, true));
  EXPECT_TRUE(table_.OpenHandle(id, false));  // readers see the same bytes
  table_.EndUnlink(st.st_dev, st.st_ino);
  EXPECT_TRUE(table_.OpenHandle(id, true));
  // Open handles veto a migration.
  EXPECT_TRUE(table_.IsOpen(st.st_dev, st.st_ino));
  EXPECT_FALSE(table_.BeginUnlink(st.st_dev, st.st_ino));
}

TEST_F(InodeTableTest, UnlinkedColdFileWaitsForItsLastHandle) {
  auto m = std::make_shared<storepb::Manifest>();
  m->set_file_id(3);
  m->set_path("x");
  uint64_t id = table_.AddColdFile(m);
  EXPECT_FALSE(table_.MarkUnlinked(3));  // nothing open: delete now
  ASSERT_TRUE(table_.OpenHandle(id, false));
  ASSERT_TRUE(table_.OpenHandle(id, false));
  EXPECT_TRUE(table_.MarkUnlinked(3));
  EXPECT_FALSE(table_.CloseHandle(id, false));
  EXPECT_TRUE(table_.CloseHandle(id, false));  // the last one
}

TEST_F(InodeTableTest, ColdFolderRenamesMoveTheirDescendants) {
  uint64_t a = table_.AddColdDir("a", 11);
  uint64_t ab = table_.AddColdDir("a/b", 12);
  uint64_t ax = table_.AddColdDir("ax", 13);
  table_.RenameColdDirs("a", "z");
  EXPECT_EQ(table_.View(a).cold_path, "z");
  EXPECT_EQ(table_.View(ab).cold_path, "z/b");
  EXPECT_EQ(table_.View(ax).cold_path, "ax");
  EXPECT_EQ(table_.AddColdDir("z/b", 99), ab);
}

}  // namespace
}  // namespace tbfs::fs

namespace tbfs::fs {
namespace {

TEST(InodeTableReuse, AReusedInodeNumberIsANewInode) {
  testing::TempDir dir;
  testing::WriteBytes(dir / "a", "old");
  testing::WriteBytes(dir / "b", "new");
  InodeTable table{UniqueFd(::open(dir.path().c_str(), O_PATH | O_CLOEXEC))};
  struct stat a;
  ASSERT_EQ(::stat((dir / "a").c_str(), &a), 0);
  int root = ::open(dir.path().c_str(), O_PATH | O_CLOEXEC);
  std::string handle_a = table.HandleAt(root, "a", a);
  std::string handle_b = table.HandleAt(root, "b", a);
  ::close(root);
  if (handle_a.empty()) GTEST_SKIP() << "no file handles on this filesystem: inodes keep fds";
  uint64_t id = table.AddHot(UniqueFd(::open((dir / "a").c_str(), O_PATH | O_CLOEXEC)), a);
  ino_t shown = 0;
  EXPECT_EQ(table.RefHot(a, handle_a, false, &shown), id);
  EXPECT_EQ(shown, a.st_ino);
  // Another file with a's (dev, ino), as after a delete and a create.
  EXPECT_EQ(table.RefHot(a, handle_b, false, &shown), 0u);
  EXPECT_EQ(table.View(id).kind, Kind::kHot);  // the old one lives on for the kernel
}

}  // namespace
}  // namespace tbfs::fs
