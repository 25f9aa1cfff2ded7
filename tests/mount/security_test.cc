// Nothing escapes the logdir through the mount (issue 8): rehydration under
// a symlinked folder, mount points that would trap the store, a second tbfs
// on the same logdir.
#include <grp.h>
#include <linux/fs.h>
#include <sys/stat.h>
#include <sys/wait.h>

#include <atomic>
#include <filesystem>
#include <thread>

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
      WriteBytes(L(fmt::format("u/plugins/profile/t{}.pt.trace.json", i)),
                 std::string(30000, 'a' + i));
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
       {"mount " + (dir_ / "x/L") + " " + (dir_ / "x"),  // the logdir's parent
        "mount " + (dir_ / "x/L") + " " + dir_.path(),   // an ancestor
        "mount " + (dir_ / "x/L") + " " + (dir_ / "s") + " --store " +
            (dir_ / "s/store")}) {  // the store's
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

// LOGDIR/.tbfs swapped for a symbolic link (by whoever can write the
// logdir's top folder) was followed: the store, and the logdir's lock,
// went where it pointed. Now the mount refuses it; a link named by
// --store is the admin's and is followed.
TEST_F(Confined, ALinkedStoreBesideTheLogdirIsRefusedAndANamedOneFollowed) {
  std::filesystem::remove_all(L(".tbfs"));
  std::filesystem::create_directory_symlink(outside_, L(".tbfs"));
  auto r = RunCommand(Tbfs("mount " + logdir_ + " " + mnt_ + " 2>&1"));
  EXPECT_EQ(r.exit_code, 2) << r.out;
  EXPECT_NE(r.out.find(L(".tbfs") + " is a symbolic link"), std::string::npos) << r.out;
  EXPECT_FALSE(IsMounted(mnt_));
  EXPECT_TRUE(std::filesystem::is_empty(outside_));
  std::filesystem::remove(L(".tbfs"));
  const std::string link = dir_ / "store-link";
  std::filesystem::create_directory_symlink(outside_, link);
  Mount("--no-migrate --store " + link);
  EXPECT_TRUE(IsMounted(mnt_));
  EXPECT_TRUE(std::filesystem::exists(outside_ + "/CURRENT"));
}

TEST_F(Confined, ASecondTbfsOnTheLogdirIsRefusedWhateverItsStore) {
  Mount("--no-migrate");
  std::string m2 = dir_ / "m2";
  std::filesystem::create_directories(m2);
  auto r =
      RunCommand(Tbfs("mount " + logdir_ + " " + m2 + " --store " + (dir_ / "other") + " 2>&1"));
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

namespace tbfs::testing {
namespace {

// A user swaps names in their folder for symlinks to `victim` as fast as
// they can, while tbfs creates things there; the victim must never change.
class SwapRace : public Confined {
 protected:
  void SetUp() override {
    Confined::SetUp();
    victim_ = outside_ + "/secret";
    WriteBytes(victim_, "root's");
    ASSERT_EQ(::chmod(victim_.c_str(), 0600), 0);
    ASSERT_EQ(::chmod(dir_.path().c_str(), 0755), 0);
  }
  // Exchanges `name` with a symlink to the victim in LOGDIR/dir, until stop.
  std::thread Swapper(const std::string& dir, std::atomic<bool>* stop, std::atomic<int>* round) {
    return std::thread([this, dir, stop, round] {
      UniqueFd d(::open(L(dir).c_str(), O_PATH | O_DIRECTORY | O_CLOEXEC));
      int seen = -1;
      std::string a, b;
      while (!*stop) {
        if (*round != seen) {
          seen = *round;
          a = fmt::format("n{}", seen);
          b = fmt::format("l{}", seen);
          ::symlinkat(victim_.c_str(), d.get(), b.c_str());
        }
        ::renameat2(d.get(), a.c_str(), d.get(), b.c_str(), RENAME_EXCHANGE);
      }
    });
  }
  void ExpectVictimUntouched() {
    struct stat st;
    ASSERT_EQ(::stat(victim_.c_str(), &st), 0);
    EXPECT_EQ(st.st_mode & 07777, 0600u);
    EXPECT_EQ(st.st_uid, 0u);
    EXPECT_EQ(ReadBytes(victim_), "root's");
  }
  std::string victim_;
};

TEST_F(SwapRace, CreatingWithSetIdBitsNeverChangesAFileSwappedIn) {
  Mount("--no-migrate -o allow_other");
  std::atomic<bool> stop{false};
  std::atomic<int> round{0};
  std::thread swapper = Swapper("u", &stop, &round);
  for (int i = 0; i < 300; ++i) {
    round = i;
    std::string path = M(fmt::format("u/n{}", i));
    pid_t child = ::fork();
    if (child == 0) {  // the user, through the mount
      if (::setgroups(0, nullptr) != 0 || ::setgid(65534) != 0 || ::setuid(65534) != 0) _exit(3);
      ::umask(0);
      int fd = ::open(path.c_str(), O_CREAT | O_EXCL | O_WRONLY | O_CLOEXEC, 06777);
      if (fd >= 0) ::close(fd);
      int dfd = ::mkdir((path + "d").c_str(), 06777);
      _exit(dfd == 0 ? 0 : 1);
    }
    int status;
    ::waitpid(child, &status, 0);
  }
  stop = true;
  swapper.join();
  ExpectVictimUntouched();
}

TEST_F(SwapRace, RecreatingAFolderOnlyTheStoreHasNeverChangesAFileSwappedIn) {
  // Folders that exist only in the store (their traces migrated, the
  // folders then removed), remembered with the modes their owner chose.
  for (int i = 0; i < 150; ++i) {
    std::string d = fmt::format("u/n{}", i);
    WriteBytes(L(d + "/t.pt.trace.json"), "trace");
    ASSERT_EQ(::chmod(L(d).c_str(), 06777), 0);
  }
  ASSERT_EQ(RunCommand("chown -R 65534 " + L("u")).exit_code, 0);
  ASSERT_EQ(
      RunCommand(Tbfs("migrate " + logdir_ + " --older-than 0 --apply >/dev/null 2>&1")).exit_code,
      0);
  for (int i = 0; i < 150; ++i) ASSERT_EQ(::rmdir(L(fmt::format("u/n{}", i)).c_str()), 0);
  Mount("--no-migrate -o allow_other");
  std::atomic<bool> stop{false};
  std::atomic<int> round{0};
  std::thread swapper = Swapper("u", &stop, &round);
  for (int i = 0; i < 150; ++i) {
    round = i;
    WriteBytes(M(fmt::format("u/n{}/new.txt", i)), "x");  // recreates u/nI in the logdir
  }
  stop = true;
  swapper.join();
  ExpectVictimUntouched();
}

}  // namespace
}  // namespace tbfs::testing
