// Nothing escapes the logdir through the mount (issue 8): rehydration under
// a symlinked folder, mount points that would trap the store, a second tbfs
// on the same logdir.
#include <sys/stat.h>

#include <filesystem>

#include "base/fs_util.h"
#include "fmt/format.h"
#include "tests/mount/mount_fixture.h"

namespace tbfs::testing {
namespace {

class Confined : public MountTest {
 protected:
  void SetUp() override {
    MountTest::SetUp();
    WriteBytes(L("u/events.out.tfevents.1.host"), "");
    for (int i = 0; i < 2; ++i) {
      WriteBytes(L(fmt::format("u/plugins/profile/t{}.pt.trace.json", i)), std::string(30000, 'a' + i));
    }
    ASSERT_EQ(RunCommand("chown -R 65534 " + L("u")).exit_code, 0);
    std::filesystem::create_directories(outside_);
  }
  std::string outside_ = dir_ / "outside";
};

TEST_F(Confined, RehydrationNeverWritesThroughASymlinkedFolder) {
  Mount("--no-migrate --cold-after 0 -o allow_other");
  ASSERT_EQ(RunCommand(Tbfs("migrate --now " + mnt_ + " >/dev/null")).exit_code, 0);
  const std::string rel = "u/plugins/profile/t0.pt.trace.json";
  ASSERT_EQ(State(M(rel)), "cold");
  auto held = OpenFile(M(rel), O_RDONLY);  // the user keeps it open...
  ASSERT_TRUE(held.ok());
  // ...swaps the folder (theirs) for a symlink to somewhere else...
  std::filesystem::rename(L("u/plugins/profile"), L("u/plugins/profile.old"));
  std::filesystem::create_directory_symlink(outside_, L("u/plugins/profile"));
  // ...and opens the file for writing, which rehydrates it.
  auto writer = OpenFile(M(rel), O_WRONLY);
  EXPECT_FALSE(writer.ok());
  EXPECT_TRUE(std::filesystem::is_empty(outside_)) << "rehydration wrote outside the logdir";
  // The file is still there, cold, with its bytes.
  std::string bytes(30000, '\0');
  size_t got = 0;
  ASSERT_TRUE(PreadFull(held->get(), bytes.data(), bytes.size(), 0, &got, rel).ok());
  EXPECT_EQ(bytes, std::string(30000, 'a'));
}

TEST_F(MountTest, MountPointsThatWouldTrapTheStoreAreRefused) {
  WriteBytes(dir_ / "x/L/r/events.out.tfevents.1.h", "");
  std::filesystem::create_directories(dir_ / "s/store");
  for (const std::string& args :
       {"mount " + (dir_ / "x/L") + " " + (dir_ / "x"),                                // the logdir's parent
        "mount " + (dir_ / "x/L") + " " + dir_.path(),                                  // an ancestor
        "mount " + (dir_ / "x/L") + " " + (dir_ / "s") + " --store " + (dir_ / "s/store")}) {  // the store's
    // (bounded: such a mount used to hang every access, itself included)
    auto r = RunCommand("timeout 20 " + Tbfs(args + " 2>&1"));
    EXPECT_EQ(r.exit_code, 2) << args << ": " << r.out;
    EXPECT_EQ(std::count(r.out.begin(), r.out.end(), '\n'), 1) << r.out;
    EXPECT_FALSE(IsMounted(dir_ / "x")) << args;
    EXPECT_FALSE(IsMounted(dir_.path())) << args;
    EXPECT_FALSE(IsMounted(dir_ / "s")) << args;
  }
}

TEST_F(Confined, ANonEmptyMountPointIsRefusedUnlessAsked) {
  WriteBytes(mnt_ + "/hidden-by-the-mount.txt", "x");
  auto r = RunCommand(Tbfs("mount " + logdir_ + " " + mnt_ + " 2>&1"));
  EXPECT_EQ(r.exit_code, 2) << r.out;
  EXPECT_NE(r.out.find("nonempty"), std::string::npos) << r.out;
  EXPECT_FALSE(IsMounted(mnt_));
  Mount("--no-migrate -o nonempty");
  EXPECT_TRUE(IsMounted(mnt_));
}

TEST_F(Confined, ASecondTbfsOnTheLogdirIsRefusedWhateverItsStore) {
  Mount("--no-migrate");
  std::string m2 = dir_ / "m2";
  std::filesystem::create_directories(m2);
  auto r = RunCommand(Tbfs("mount " + logdir_ + " " + m2 + " --store " + (dir_ / "other") + " 2>&1"));
  EXPECT_EQ(r.exit_code, 2) << r.out;
  EXPECT_NE(r.out.find(mnt_), std::string::npos) << r.out;  // names the holder
  EXPECT_FALSE(IsMounted(m2));
  auto offline = RunCommand(Tbfs("migrate " + logdir_ + " --older-than 0 --apply --store " +
                                 (dir_ / "other2") + " 2>&1"));
  EXPECT_EQ(offline.exit_code, 2) << offline.out;
  EXPECT_NE(offline.out.find(mnt_), std::string::npos) << offline.out;
  // Readers may still look.
  EXPECT_EQ(RunCommand(Tbfs("scan " + logdir_ + " >/dev/null")).exit_code, 0);
}

}  // namespace
}  // namespace tbfs::testing
