#include "base/fs_util.h"

#include <fcntl.h>
#include <grp.h>
#include <gtest/gtest.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstring>
#include <future>

#include "base/failpoint.h"
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

// A FIFO swapped in for a checked file: the open must not wait for a
// writer (it would wait for ever), and the FIFO is not read.
TEST(OpenRegularUnder, AFifoSwappedInIsRefusedWithoutBlocking) {
  static_assert(kFailpointsBuilt, "the test build has failpoints");
  TempDir dir;
  WriteBytes(dir / "run/events.out.tfevents.1", "x");
  ScopedFailpoint swap("open_regular.before", [&](const std::string& path) {
    ASSERT_EQ(::unlink(path.c_str()), 0);
    ASSERT_EQ(::mkfifo(path.c_str(), 0644), 0);
  });
  auto opened = std::async(std::launch::async, [&] {
    return OpenRegularUnder(dir.path(), "run/events.out.tfevents.1");
  });
  if (opened.wait_for(std::chrono::seconds(20)) != std::future_status::ready) {
    ADD_FAILURE() << "the open of a FIFO blocked";
    // Release it: a writer's open ends the reader's wait.
    ::close(::open((dir / "run/events.out.tfevents.1").c_str(), O_WRONLY | O_NONBLOCK));
  }
  auto fd = opened.get();
  ASSERT_FALSE(fd.ok());
  EXPECT_NE(fd.status().message().find("not a regular file"), std::string::npos)
      << fd.status().ToString();
}

TEST(WalkTree, DoesNotEnterAnotherFilesystemAndGoesOn) {
  TempDir dir;
  WriteBytes(dir / "a/1", "x");
  WriteBytes(dir / "c/1", "x");
  ASSERT_EQ(::mkdir((dir / "b").c_str(), 0755), 0);
  ASSERT_EQ(::mount("tmpfs", (dir / "b").c_str(), "tmpfs", 0, "size=1m"), 0)
      << "the tests run as root: " << std::strerror(errno);
  WriteBytes(dir / "b/inside", "x");
  std::vector<std::string> seen, warnings;
  WalkOptions options;
  options.warnings = &warnings;
  Status st = WalkTree(dir.path(), options, [&](const WalkEntry& e) { seen.push_back(e.rel); });
  ::umount2((dir / "b").c_str(), MNT_DETACH);
  ASSERT_TRUE(st.ok()) << st.ToString();
  EXPECT_EQ(seen, (std::vector<std::string>{"a/1", "c/1"}));
  ASSERT_EQ(warnings.size(), 1u);
  EXPECT_NE(warnings[0].find("another filesystem"), std::string::npos) << warnings[0];
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

// kOwnRead (O_NOATIME) where the kernel refuses it, on a file the reader
// does not own, is dropped: the open succeeds as anyone else's would.
TEST(OwnRead, SomeoneElsesFileOpensWithoutNoAtime) {
  TempDir dir;
  ASSERT_EQ(::chmod(dir.path().c_str(), 0755), 0);
  WriteBytes(dir / "f", "root's");
  ASSERT_EQ(::chmod((dir / "f").c_str(), 0644), 0);
  ASSERT_EQ(::geteuid(), 0u) << "this test makes a second user: run it as root";
  const pid_t pid = ::fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) {
    if (::setgroups(0, nullptr) != 0 || ::setgid(65534) != 0 || ::setuid(65534) != 0) _exit(3);
    // The kernel itself refuses O_NOATIME here: the case under test.
    if (::open((dir / "f").c_str(), O_RDONLY | O_NOATIME) >= 0 || errno != EPERM) _exit(4);
    if (!OpenFile(dir / "f", O_RDONLY | kOwnRead).ok()) _exit(5);
    auto root = OpenFile(dir.path(), O_PATH | O_DIRECTORY);
    if (!root.ok() || !OpenBeneath(root->get(), "f", O_RDONLY | kOwnRead).ok()) _exit(6);
    if (OpenAtOwnRead(root->get(), "f", O_RDONLY | kOwnRead) < 0) _exit(7);
    _exit(0);
  }
  int status = 0;
  ASSERT_EQ(::waitpid(pid, &status, 0), pid);
  ASSERT_TRUE(WIFEXITED(status));
  EXPECT_EQ(WEXITSTATUS(status), 0) << "3 setuid, 4 the kernel took O_NOATIME, 5 OpenFile, "
                                       "6 OpenBeneath, 7 OpenAtOwnRead";
}

}  // namespace
}  // namespace tbfs
