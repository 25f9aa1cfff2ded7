#include "fs/inode_table.h"

#include <fcntl.h>
#include <gtest/gtest.h>

#include <thread>

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

// A table whose root is the folder p (guaranteed elision: no move needed).
InodeTable NewTable(const std::string& p) { return InodeTable(OpenPath(p), Stat(p)); }

storepb::Manifest Manifest(uint64_t id, const std::string& path) {
  storepb::Manifest m;
  m.set_file_id(id);
  m.set_path(path);
  m.set_size(100 + id);
  return m;
}

class InodeTableTest : public ::testing::Test {
 protected:
  // The handle lookups compare, as Filesystem::HotLookupAt gets it.
  std::string Handle(const std::string& name) {
    UniqueFd root = OpenPath(dir_.path());
    return table_.HandleAt(root.get(), name.c_str(), Stat(dir_ / name));
  }
  TempDir dir_;
  InodeTable table_ = NewTable(dir_.path());
};

TEST_F(InodeTableTest, HardLinksShareOneInodeAndLookupsCount) {
  WriteBytes(dir_ / "a", "x");
  ASSERT_EQ(::link((dir_ / "a").c_str(), (dir_ / "b").c_str()), 0);
  uint64_t a = table_.AddHot(OpenPath(dir_ / "a"), Stat(dir_ / "a")).id;
  uint64_t b = table_.AddHot(OpenPath(dir_ / "b"), Stat(dir_ / "b")).id;
  EXPECT_EQ(a, b);
  EXPECT_EQ(table_.size(), 2u);  // root + one
  table_.Forget(a, 1);
  EXPECT_EQ(table_.size(), 2u);  // one lookup left
  table_.Forget(a, 1);
  EXPECT_EQ(table_.size(), 1u);
}

TEST_F(InodeTableTest, AMoveKeepsTheNodeIdAndShowsANumberNoBackingFileHas) {
  WriteBytes(dir_ / "t.json", "trace");
  struct stat st = Stat(dir_ / "t.json");
  uint64_t id = table_.AddHot(OpenPath(dir_ / "t.json"), st).id;
  EXPECT_EQ(table_.ShownIno(id), st.st_ino);
  UniqueFd fd(::open((dir_ / "t.json").c_str(), O_RDONLY | O_CLOEXEC));
  ASSERT_TRUE(table_.BeginMove(fd.get(), st, Manifest(7, "t.json")));
  // Served from the store from now on, under a number of the store's range,
  // and found by either side's lookup.
  InodeView cold = table_.View(id);
  EXPECT_EQ(cold.kind, Kind::kColdFile);
  EXPECT_EQ(cold.shown_ino, ColdIno(7));
  EXPECT_GE(ColdIno(7), kColdInoBase);
  InodeRef by_backing = table_.RefHot(st, Handle("t.json"), false);
  EXPECT_EQ(by_backing.id, id);
  ASSERT_TRUE(by_backing.cold);
  EXPECT_EQ(by_backing.cold->size, 107u);
  EXPECT_EQ(table_.View(by_backing.id).file_id, 7u);
  EXPECT_EQ(table_.AddColdFile(Manifest(7, "t.json")).id, id);
  table_.EndMove(7, true);
  EXPECT_EQ(table_.RefHot(st, Handle("t.json"), false).id, 0u);
  EXPECT_EQ(table_.AddColdFile(Manifest(7, "t.json")).id, id);
}

TEST_F(InodeTableTest, AMoveThatDidNotHappenGivesTheFileBack) {
  WriteBytes(dir_ / "t.json", "trace");
  struct stat st = Stat(dir_ / "t.json");
  uint64_t id = table_.AddHot(OpenPath(dir_ / "t.json"), st).id;
  UniqueFd fd(::open((dir_ / "t.json").c_str(), O_RDONLY | O_CLOEXEC));
  ASSERT_TRUE(table_.BeginMove(fd.get(), st, Manifest(8, "t.json")));
  table_.EndMove(8, false);
  EXPECT_EQ(table_.View(id).kind, Kind::kHot);
  EXPECT_EQ(table_.ShownIno(id), st.st_ino);
  EXPECT_EQ(table_.RefHot(st, Handle("t.json"), false).id, id);
}

TEST_F(InodeTableTest, AMoveOfAFileTheKernelNeverSawIsFoundAndThenFreed) {
  WriteBytes(dir_ / "u.json", "trace");
  struct stat st = Stat(dir_ / "u.json");
  UniqueFd fd(::open((dir_ / "u.json").c_str(), O_RDONLY | O_CLOEXEC));
  ASSERT_TRUE(table_.BeginMove(fd.get(), st, Manifest(9, "u.json")));
  EXPECT_EQ(table_.size(), 2u);
  InodeRef found = table_.RefHot(st, Handle("u.json"), false);
  ASSERT_NE(found.id, 0u);
  table_.EndMove(9, true);
  EXPECT_EQ(table_.size(), 2u);  // the lookup holds it
  table_.Forget(found.id, 1);
  EXPECT_EQ(table_.size(), 1u);
}

TEST_F(InodeTableTest, WritersAndMovesExcludeEachOther) {
  WriteBytes(dir_ / "t", "x");
  struct stat st = Stat(dir_ / "t");
  uint64_t id = table_.AddHot(OpenPath(dir_ / "t"), st).id;
  UniqueFd fd(::open((dir_ / "t").c_str(), O_RDONLY | O_CLOEXEC));
  // Open for writing through the mount: it does not move.
  ASSERT_EQ(table_.OpenHandle(id, true, 0), InodeTable::Open::kOk);
  EXPECT_FALSE(table_.BeginMove(fd.get(), st, Manifest(3, "t")));
  table_.CloseHandle(id, true, 0);
  // Moving: a writer finds a cold file, whose rehydration waits for the end.
  ASSERT_TRUE(table_.BeginMove(fd.get(), st, Manifest(3, "t")));
  EXPECT_EQ(table_.OpenHandle(id, true, 0), InodeTable::Open::kRetry);
  EXPECT_EQ(table_.BeginRehydrate(id), InodeTable::Rehydrate::kBusy);
  std::thread ender([&] { table_.EndMove(3, true); });
  table_.WaitSettled(id);
  ender.join();
  EXPECT_EQ(table_.BeginRehydrate(id), InodeTable::Rehydrate::kStarted);
}

TEST_F(InodeTableTest, RehydrationMakesTheSameNodeTheBackingFile) {
  uint64_t id = table_.AddColdFile(Manifest(5, "r.json")).id;
  EXPECT_EQ(table_.ShownIno(id), ColdIno(5));
  ASSERT_EQ(table_.BeginRehydrate(id), InodeTable::Rehydrate::kStarted);
  WriteBytes(dir_ / "r.json", "back");
  struct stat st = Stat(dir_ / "r.json");
  UniqueFd fd(::open((dir_ / "r.json").c_str(), O_RDONLY | O_CLOEXEC));
  table_.RehydrateTarget(id, fd.get(), st);
  // Before it is done, a lookup that finds the new file finds this inode,
  // still serving the store's copy.
  InodeRef early = table_.RefHot(st, Handle("r.json"), false);
  EXPECT_EQ(early.id, id);
  EXPECT_TRUE(early.cold);
  table_.EndRehydrate(id, true);
  EXPECT_EQ(table_.View(id).kind, Kind::kHot);
  EXPECT_EQ(table_.ShownIno(id), st.st_ino);
  EXPECT_EQ(table_.AddHot(OpenPath(dir_ / "r.json"), st).id, id);
  // A lookup that still found the store's entry gets the same inode.
  InodeRef late = table_.AddColdFile(Manifest(5, "r.json"));
  EXPECT_EQ(late.id, id);
  EXPECT_FALSE(late.cold);
}

TEST_F(InodeTableTest, AFailedRehydrationLeavesTheFileCold) {
  uint64_t id = table_.AddColdFile(Manifest(6, "f.json")).id;
  ASSERT_EQ(table_.BeginRehydrate(id), InodeTable::Rehydrate::kStarted);
  WriteBytes(dir_ / "f.json", "x");
  struct stat st = Stat(dir_ / "f.json");
  UniqueFd fd(::open((dir_ / "f.json").c_str(), O_RDONLY | O_CLOEXEC));
  table_.RehydrateTarget(id, fd.get(), st);
  table_.EndRehydrate(id, false);
  EXPECT_EQ(table_.View(id).kind, Kind::kColdFile);
  EXPECT_EQ(table_.RefHot(st, Handle("f.json"), false).id, 0u);
}

TEST_F(InodeTableTest, ColdHandlesAreCountedAsReadersOfTheirFile) {
  auto m = Manifest(4, "x");
  uint64_t id = table_.AddColdFile(m).id;
  ASSERT_EQ(table_.OpenHandle(id, false, 4), InodeTable::Open::kOk);
  ASSERT_EQ(table_.OpenHandle(id, false, 4), InodeTable::Open::kOk);
  EXPECT_EQ(table_.Readers(4), 2);
  EXPECT_EQ(table_.CloseHandle(id, false, 4), 1);
  EXPECT_EQ(table_.CloseHandle(id, false, 4), 0);
  EXPECT_EQ(table_.Readers(4), 0);
  // A handle on another file id than the inode serves is refused.
  EXPECT_EQ(table_.OpenHandle(id, false, 5), InodeTable::Open::kRetry);
}

TEST_F(InodeTableTest, ColdFolderRenamesMoveTheirDescendantsAndNumbers) {
  uint64_t a = table_.AddColdDir("a");
  uint64_t ab = table_.AddColdDir("a/b");
  uint64_t ax = table_.AddColdDir("ax");
  ino_t ab_ino = table_.ShownIno(ab);
  EXPECT_GE(ab_ino, kAssignedInoBase);
  EXPECT_LT(ab_ino, kColdInoBase);
  EXPECT_NE(table_.ShownIno(a), ab_ino);
  table_.RenameColdDirs("a", "z");
  EXPECT_EQ(table_.View(a).cold_path, "z");
  EXPECT_EQ(table_.View(ab).cold_path, "z/b");
  EXPECT_EQ(table_.View(ax).cold_path, "ax");
  EXPECT_EQ(table_.AddColdDir("z/b"), ab);
  EXPECT_EQ(table_.ColdDirIno("z/b"), ab_ino);
}

TEST(InodeTableReuse, AReusedInodeNumberIsANewInode) {
  testing::TempDir dir;
  testing::WriteBytes(dir / "a", "old");
  testing::WriteBytes(dir / "b", "new");
  InodeTable table = NewTable(dir.path());
  struct stat a;
  ASSERT_EQ(::stat((dir / "a").c_str(), &a), 0);
  int root = ::open(dir.path().c_str(), O_PATH | O_CLOEXEC);
  std::string handle_a = table.HandleAt(root, "a", a);
  std::string handle_b = table.HandleAt(root, "b", a);
  ::close(root);
  if (handle_a.empty()) GTEST_SKIP() << "no file handles on this filesystem: inodes keep fds";
  uint64_t id = table.AddHot(UniqueFd(::open((dir / "a").c_str(), O_PATH | O_CLOEXEC)), a).id;
  InodeRef ref = table.RefHot(a, handle_a, false);
  EXPECT_EQ(ref.id, id);
  EXPECT_EQ(ref.shown_ino, a.st_ino);
  // Another file with a's (dev, ino), as after a delete and a create.
  EXPECT_EQ(table.RefHot(a, handle_b, false).id, 0u);
  EXPECT_EQ(table.View(id).kind, Kind::kHot);  // the old one lives on for the kernel
}

}  // namespace
}  // namespace tbfs::fs
