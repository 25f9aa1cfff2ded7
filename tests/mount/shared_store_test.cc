// Many hosts, one RADOS store: two real mounts of one logdir on two mount
// points share a store on the test cluster (scripts/ceph-cluster.sh). One
// holds the writer's lease and migrates; the other serves the same bytes
// read-only and takes the lease over, recovery first, when the writer dies.
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstring>
#include <map>

#include "base/fs_util.h"
#include "tests/ceph_cluster.h"
#include "tests/mount/mount_fixture.h"

namespace tbfs::testing {
namespace {

class SharedStore : public MountTest {
 protected:
  void SetUp() override {
    MountTest::SetUp();
    TBFS_NEED_CEPH();
    static int n = 0;
    url_ = "rados://tbfs/shared-" + std::to_string(::getpid()) + "-" + std::to_string(n++) +
           "?conf=" + CephCluster::Get().conf() + "&lease=5s&timeout=10s";
    std::filesystem::create_directories(mnt_b_);
    Gen();
    WalkOptions w;
    w.skip_dirs = {".tbfs"};
    ASSERT_TRUE(WalkTree(logdir_, w, [&](const WalkEntry& e) {
                  if (S_ISREG(e.st.st_mode)) originals_[e.rel] = ReadBytes(L(e.rel));
                  if (S_ISREG(e.st.st_mode) && e.rel.find("tfevents") == std::string::npos)
                    traces_++;
                }).ok());
    ASSERT_GT(traces_, 0u);
    auto base = RunCommand(
        Tbfs("verify " + logdir_ + " --save-baseline " + (dir_ / "b.json") + " >/dev/null"));
    ASSERT_EQ(base.exit_code, 0);
  }
  void TearDown() override {
    UnmountB();
    MountTest::TearDown();
  }

  std::string Options(const std::string& state, const std::string& extra = "") const {
    return " -o 'store=" + url_ + ",state=" + (dir_ / state) + ",cold_after=0,migrate_interval=1" +
           extra + "'";
  }
  // Mount A on mnt_ (pid_), as MountTest's; `env` before the command.
  void MountA(const std::string& env = "", const std::string& extra = "") {
    auto r = RunCommand(
        env + Tbfs("mount " + logdir_ + " " + mnt_ + Options("state-a", extra) + " 2>&1"));
    ASSERT_EQ(r.exit_code, 0) << r.out;
    pid_ = Status()["pid"].get<int>();
  }
  void MountB(const std::string& env = "") {
    auto r =
        RunCommand(env + Tbfs("mount " + logdir_ + " " + mnt_b_ + Options("state-b") + " 2>&1"));
    ASSERT_EQ(r.exit_code, 0) << r.out;
    pid_b_ = StatusOf(mnt_b_)["pid"].get<int>();
  }
  void UnmountB() {
    if (IsMounted(mnt_b_)) {
      RunCommand("fusermount3 -u " + mnt_b_ + " 2>/dev/null");
      if (IsMounted(mnt_b_)) RunCommand("fusermount3 -u -z " + mnt_b_ + " 2>/dev/null");
    }
    std::swap(pid_, pid_b_);
    WaitForExit();
    std::swap(pid_, pid_b_);
  }
  nlohmann::json StatusOf(const std::string& mountpoint) {
    auto r = RunCommand(Tbfs("status --json " + mountpoint));
    return nlohmann::json::parse(r.out, nullptr, false);
  }
  // Waits up to `seconds` for the mount's status to satisfy `done`.
  template <typename Pred>
  bool WaitFor(const std::string& mountpoint, int seconds, Pred done) {
    return WaitUntil(
        [&] {
          nlohmann::json s = StatusOf(mountpoint);
          return !s.is_discarded() && done(s);
        },
        std::chrono::seconds(seconds), std::chrono::milliseconds(200));
  }
  static bool IsWriter(const nlohmann::json& s) {
    return s.value("store_role", "").starts_with("writer");
  }
  // Every file of the logdir through the mount, byte for byte.
  void ExpectOriginals(const std::string& mountpoint) {
    for (const auto& [rel, bytes] : originals_) {
      EXPECT_TRUE(ReadBytes(mountpoint + "/" + rel) == bytes) << mountpoint << ": " << rel;
    }
  }
  size_t ColdCount(const std::string& mountpoint) {
    size_t cold = 0;
    for (const auto& [rel, bytes] : originals_) cold += State(mountpoint + "/" + rel) == "cold";
    return cold;
  }

  std::string url_;
  std::string mnt_b_ = dir_ / "mnt-b";
  int pid_b_ = -1;
  std::map<std::string, std::string> originals_;
  size_t traces_ = 0;
};

TEST_F(SharedStore, OneMountMigratesBothServeTheSameBytesAndTheReaderChangesNothing) {
  MountA("", ",no_migrate");  // migrates on request only: B looks at every file first
  MountB();
  EXPECT_TRUE(IsWriter(Status())) << Status().dump();
  nlohmann::json b = StatusOf(mnt_b_);
  EXPECT_NE(b.value("store_role", "").find("reader: "), std::string::npos) << b.dump();
  EXPECT_NE(b.value("store_role", "").find(mnt_), std::string::npos)
      << "the reader names the writer: " << b.dump();
  ExpectOriginals(mnt_b_);  // the reader knows every file as a hot one now
  // Plain status says the role too, and a reader's names the writer's host.
  char host[256] = {};
  ASSERT_EQ(::gethostname(host, sizeof(host) - 1), 0);
  auto plain = RunCommand(Tbfs("status " + mnt_b_));
  EXPECT_NE(plain.out.find("role:  reader: "), std::string::npos) << plain.out;
  EXPECT_NE(plain.out.find(std::string(host) + ":" + mnt_), std::string::npos) << plain.out;
  // A reader's pass moves nothing but counts what it serves and samples
  // growth (its --now says it cannot migrate).
  EXPECT_NE(RunCommand(Tbfs("migrate --now " + mnt_b_ + " 2>&1")).exit_code, 0);
  b = StatusOf(mnt_b_);
  EXPECT_GT(b["hot"]["files"].get<uint64_t>(), traces_) << b.dump();
  EXPECT_TRUE(b.contains("growth")) << b.dump();

  auto r = RunCommand(Tbfs("migrate --now " + mnt_ + " 2>&1"));
  ASSERT_EQ(r.exit_code, 0) << r.out;
  EXPECT_EQ(Status()["migrations"]["files_moved"].get<size_t>(), traces_) << Status().dump();
  // At once, before its caches expire, the reader still serves every file
  // (a file it knew as hot is looked up again and found cold).
  ExpectOriginals(mnt_b_);
  // It sees them turn cold within its attribute timeout, and reads them
  // from the store.
  WaitUntil([&] { return ColdCount(mnt_b_) >= traces_; }, std::chrono::milliseconds(15000),
            std::chrono::milliseconds(300));
  EXPECT_EQ(ColdCount(mnt_b_), traces_);
  ExpectOriginals(mnt_);
  ExpectOriginals(mnt_b_);
  // gc --garbage runs while both serve: on the writer's mount point; a
  // reader's names the writer.
  r = RunCommand(Tbfs("gc " + mnt_b_ + " --garbage --apply 2>&1"));
  EXPECT_EQ(r.exit_code, 2) << r.out;
  EXPECT_NE(r.out.find(mnt_), std::string::npos) << r.out;
  r = RunCommand(Tbfs("gc " + mnt_ + " --garbage --apply 2>&1"));
  EXPECT_EQ(r.exit_code, 0) << r.out;
  ExpectOriginals(mnt_b_);
  b = StatusOf(mnt_b_);
  EXPECT_EQ(b["migrations"]["files_moved"].get<size_t>(), 0u)
      << "the reader migrated: " << b.dump();
  EXPECT_GT(b["cold_reads"].get<uint64_t>(), 0u);

  // A change to a cold file through the reader is refused and changes nothing.
  std::string cold;
  for (const auto& [rel, bytes] : originals_) {
    if (rel.find("tfevents") == std::string::npos) cold = rel;
  }
  EXPECT_EQ(::unlink((mnt_b_ + "/" + cold).c_str()), -1);
  EXPECT_EQ(errno, EROFS);
  EXPECT_EQ(::chmod((mnt_b_ + "/" + cold).c_str(), 0600), -1);
  EXPECT_EQ(errno, EROFS);
  EXPECT_EQ(::open((mnt_b_ + "/" + cold).c_str(), O_WRONLY), -1);
  EXPECT_EQ(errno, EROFS);
  // Renames that involve the store are refused before anything moves: a
  // cold file over a hot one (the hot one stays), a hot one over a cold
  // one, a hot folder holding cold files.
  const std::string run = cold.substr(0, cold.find('/'));
  WriteBytes(M(run + "/notes.txt"), "precious");
  EXPECT_EQ(::rename((mnt_b_ + "/" + cold).c_str(), (mnt_b_ + "/" + run + "/notes.txt").c_str()),
            -1);
  EXPECT_EQ(errno, EROFS);
  EXPECT_EQ(ReadBytes(L(run + "/notes.txt")), "precious");
  EXPECT_EQ(::rename((mnt_b_ + "/" + run + "/notes.txt").c_str(), (mnt_b_ + "/" + cold).c_str()),
            -1);
  EXPECT_EQ(errno, EROFS);
  EXPECT_EQ(::rename((mnt_b_ + "/" + run).c_str(), (mnt_b_ + "/renamed").c_str()), -1);
  EXPECT_EQ(errno, EROFS);
  EXPECT_FALSE(std::filesystem::exists(L("renamed")));
  EXPECT_EQ(ReadBytes(L(run + "/notes.txt")), "precious");
  r = RunCommand(Tbfs("migrate --now " + mnt_b_ + " 2>&1"));
  EXPECT_NE(r.exit_code, 0);
  EXPECT_NE(r.out.find("another one writes it"), std::string::npos) << r.out;
  ExpectOriginals(mnt_b_);
  EXPECT_EQ(State(mnt_ + "/" + cold), "cold");

  // Offline writers take the same lease: refused while the mount holds it.
  r = RunCommand(Tbfs("gc " + logdir_ + " --store '" + url_ + "' --older-than 0 --apply 2>&1"));
  EXPECT_EQ(r.exit_code, 2) << r.out;
  EXPECT_NE(r.out.find(mnt_), std::string::npos) << r.out;
  // Readers need none.
  r = RunCommand(Tbfs("ls " + logdir_ + " --store '" + url_ + "' --json"));
  EXPECT_EQ(r.exit_code, 0) << r.out;
  EXPECT_EQ(nlohmann::json::parse(r.out, nullptr, false).size(), traces_) << r.out;
}

// A RADOS mount's state folder (its log, its control socket) is root's
// alone: a symlink, a folder another user can write, or one another mount
// holds is refused, with one line, and nothing is mounted.
TEST_F(SharedStore, TheStateFolderIsPrivateAndOneMountsOwn) {
  auto mount_b = [&](const std::string& state) {
    return RunCommand(Tbfs("mount " + logdir_ + " " + mnt_b_ + " -o 'store=" + url_ +
                           ",state=" + state + "' 2>&1"));
  };
  std::filesystem::create_directories(dir_ / "target");
  struct stat target_st;
  ASSERT_EQ(::stat((dir_ / "target").c_str(), &target_st), 0);
  const mode_t target_mode = target_st.st_mode & 07777;
  ASSERT_EQ(::symlink((dir_ / "target").c_str(), (dir_ / "link").c_str()), 0);
  std::filesystem::create_directories(dir_ / "open");
  ASSERT_EQ(::chmod((dir_ / "open").c_str(), 0777), 0);
  std::filesystem::create_directories(dir_ / "theirs/state");
  ASSERT_EQ(::chown((dir_ / "theirs").c_str(), 65534, 65534), 0);
  for (const std::string& state :
       {dir_ / "link", dir_ / "link/below", dir_ / "open", dir_ / "open/below",
        dir_ / "theirs/state", dir_ / "theirs/new"}) {
    auto r = mount_b(state);
    EXPECT_EQ(r.exit_code, 2) << state << ": " << r.out;
    EXPECT_EQ(std::count(r.out.begin(), r.out.end(), '\n'), 1) << r.out;
    EXPECT_NE(r.out.find("no other user can change"), std::string::npos) << r.out;
    EXPECT_FALSE(IsMounted(mnt_b_));
  }
  // Nothing was made beneath a folder that was refused.
  EXPECT_FALSE(std::filesystem::exists(dir_ / "target/below"));
  EXPECT_FALSE(std::filesystem::exists(dir_ / "open/below"));
  EXPECT_FALSE(std::filesystem::exists(dir_ / "theirs/new"));
  // Nor is a folder of other files (or the logdir) taken over and made private.
  std::filesystem::create_directories(dir_ / "full/bin");
  for (const std::string& state : {dir_ / "full", logdir_, logdir_ + "/sub", dir_.path()}) {
    auto r = mount_b(state);
    EXPECT_EQ(r.exit_code, 2) << state << ": " << r.out;
    EXPECT_EQ(std::count(r.out.begin(), r.out.end(), '\n'), 1) << r.out;
    EXPECT_FALSE(IsMounted(mnt_b_));
  }
  ASSERT_EQ(::stat((dir_ / "full").c_str(), &target_st), 0);
  EXPECT_NE(target_st.st_mode & 07777, 0700u) << "a refused state folder was made private";
  EXPECT_FALSE(std::filesystem::exists(logdir_ + "/sub"));
  EXPECT_FALSE(std::filesystem::exists(dir_ / "full/state.lock"));
  // state= with a store folder would be ignored: said, not done.
  auto local =
      RunCommand(Tbfs("mount " + logdir_ + " " + mnt_b_ + " -o state=" + (dir_ / "s") + " 2>&1"));
  EXPECT_EQ(local.exit_code, 2) << local.out;
  EXPECT_FALSE(IsMounted(mnt_b_));
  struct stat st;
  ASSERT_EQ(::stat((dir_ / "target").c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 07777, target_mode) << "a refused state folder was changed";
  ASSERT_EQ(::stat((dir_ / "open").c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 07777, 0777u) << "a refused state folder was changed";
  MountA();
  auto r = mount_b(dir_ / "state-a");
  EXPECT_EQ(r.exit_code, 2) << r.out;
  EXPECT_NE(r.out.find("in use by another tbfs mount"), std::string::npos) << r.out;
  EXPECT_FALSE(IsMounted(mnt_b_));
  EXPECT_TRUE(IsWriter(Status())) << "the first mount lost its control socket: " << Status().dump();
}

// Without state=, a RADOS mount keeps its files in /var/lib/tbfs/mounts/
// under its mount point as one file name, also for a mount point too long
// to be one.
TEST_F(SharedStore, TheDefaultStateFolderFitsAnyMountPoint) {
  const std::string mnt = dir_ / (std::string(120, 'm') + "/" + std::string(110, 'n') + "\xff");
  std::filesystem::create_directories(mnt);
  auto r = RunCommand(Tbfs("mount " + logdir_ + " '" + mnt + "' -o 'store=" + url_ + "' 2>&1"));
  ASSERT_EQ(r.exit_code, 0) << r.out;
  nlohmann::json s = StatusOf(mnt);
  const std::string state = s.value("state", "");
  EXPECT_TRUE(state.starts_with("/var/lib/tbfs/mounts/")) << s.dump();
  EXPECT_LE(state.size() - std::string("/var/lib/tbfs/mounts/").size(), 255u) << state;
  pid_b_ = s["pid"].get<int>();
  EXPECT_TRUE(ReadBytes(mnt + "/" + originals_.begin()->first) == originals_.begin()->second);
  RunCommand("fusermount3 -u '" + mnt + "'");
  std::swap(pid_, pid_b_);
  WaitForExit();
  std::swap(pid_, pid_b_);
  if (!state.empty()) std::filesystem::remove_all(state);
}

// The writer dies in the middle of a batch (a file already unlinked from the
// logdir, its batch unfinished): the reader takes the lease over once it runs
// out, undoes the batch, and migrates everything itself. Nothing is lost.
TEST_F(SharedStore, KillNineOfTheWriterMidBatchAndTheOtherMountTakesOver) {
  const std::string reached = dir_ / "reached";
  MountA("TBFS_FAILPOINT=migrate.unlinked TBFS_FAILPOINT_REACHED=" + reached + " ");
  // B stops once it took over (recovery done), until `hold` goes.
  const std::string hold = dir_ / "hold";
  WriteBytes(hold, "");
  MountB("TBFS_PAUSE=migrator.took_over:" + hold + " ");
  const int writer = pid_;
  // A's first pass ends it at the failpoint, as kill -9 would.
  WaitUntil([&] { return !Alive(writer); }, std::chrono::milliseconds(10000),
            std::chrono::milliseconds(100));
  ASSERT_FALSE(Alive(writer)) << "the writer did not reach the failpoint";
  ASSERT_TRUE(std::filesystem::exists(reached)) << "the writer died, but not at the failpoint";
  RunCommand("fusermount3 -u -z " + mnt_ + " 2>/dev/null");
  pid_ = -1;
  // Through B, the reader: the file A unlinked is cold, and the kernel
  // keeps its name. Recovery then puts it back hot; B's kernel must not
  // answer ENOENT from what it kept (it did, for up to 10 s).
  const bool before_takeover = !std::filesystem::exists(hold + ".reached");
  ExpectOriginals(mnt_b_);
  WaitUntil([&] { return std::filesystem::exists(hold + ".reached"); },
            std::chrono::milliseconds(30000), std::chrono::milliseconds(100));
  ASSERT_TRUE(std::filesystem::exists(hold + ".reached")) << "B did not take over";
  EXPECT_TRUE(before_takeover) << "B took over before the reads meant to come first";
  ExpectOriginals(mnt_b_);
  ASSERT_EQ(::unlink(hold.c_str()), 0);

  ASSERT_TRUE(WaitFor(mnt_b_, 60, [&](const nlohmann::json& s) {
    return IsWriter(s) && s["migrations"]["files_moved"].get<size_t>() == traces_;
  })) << StatusOf(mnt_b_).dump();
  EXPECT_NE(ReadBytes(dir_ / "state-b/tbfs-mount.log").find("recovery undid 1 unfinished batch"),
            std::string::npos)
      << ReadBytes(dir_ / "state-b/tbfs-mount.log");
  EXPECT_EQ(ColdCount(mnt_b_), traces_);
  ExpectOriginals(mnt_b_);
  auto v = RunCommand(Tbfs("verify " + mnt_b_ + " --baseline " + (dir_ / "b.json") + " 2>&1"));
  EXPECT_EQ(v.exit_code, 0) << v.out;
  UnmountB();
  // The store checks clean, and the logdir holds every file exactly once.
  auto f = RunCommand(Tbfs("fsck " + logdir_ + " --store '" + url_ + "' 2>&1"));
  EXPECT_EQ(f.exit_code, 0) << f.out;
  MountA();
  ExpectOriginals(mnt_);
}

// A cluster of its own, paused and resumed: the shared one serves the
// other tests meanwhile.
class UnreachableStore : public SharedStore {
 protected:
  void SetUp() override {
    SharedStore::SetUp();
    if (IsSkipped()) return;
    auto r = RunCommand("bash " TBFS_SOURCE_DIR "/scripts/ceph-cluster.sh start " + ceph_ +
                        " tbfs 2>&1");
    ASSERT_EQ(r.exit_code, 0) << r.out;
    url_ = "rados://tbfs/x?conf=" + r.out.substr(0, r.out.find('\n')) + "&lease=5s&timeout=3s";
  }
  void TearDown() override {
    RunCommand("pkill -CONT -f 'ceph-osd -c " + ceph_ + "/ceph.conf'");
    SharedStore::TearDown();
    RunCommand("bash " TBFS_SOURCE_DIR "/scripts/ceph-cluster.sh stop " + ceph_);
  }
  // The cluster's OSD stopped (SIGSTOP), every process of it, for sure.
  void PauseOsd() {
    auto r = RunCommand("bash " TBFS_SOURCE_DIR "/scripts/ceph-cluster.sh pause " + ceph_ + " 2>&1");
    ASSERT_EQ(r.exit_code, 0) << r.out;
  }
  std::string ceph_ = dir_ / "ceph";
};

TEST_F(UnreachableStore, ColdReadsFailWithEioAfterTheTimeoutHotFilesKeepWorkingAndReadsComeBack) {
  MountA();
  ASSERT_TRUE(WaitFor(mnt_, 60, [&](const nlohmann::json& s) {
    return s["migrations"]["files_moved"].get<size_t>() == traces_;
  })) << Status().dump();
  std::vector<std::string> cold;
  for (const auto& [rel, bytes] : originals_) {
    if (rel.find("tfevents") == std::string::npos) cold.push_back(rel);
  }
  // One opened before (its manifest read), read after: its chunk's read
  // fails. Not a gzip file (its pieces are made from the content's chunks).
  const auto plain = std::find_if(cold.begin() + 1, cold.end(), [](const std::string& rel) {
    return rel.size() < 3 || rel.compare(rel.size() - 3, 3, ".gz") != 0;
  });
  ASSERT_NE(plain, cold.end());
  UniqueFd opened(::open(M(*plain).c_str(), O_RDONLY));
  ASSERT_TRUE(opened.valid()) << std::strerror(errno);
  PauseOsd();
  for (const auto& [rel, bytes] : originals_) {
    if (rel.find("tfevents") != std::string::npos) {
      EXPECT_TRUE(ReadBytes(M(rel)) == bytes) << rel;
    }
  }
  {
    char buf[4096];
    EXPECT_EQ(::read(opened.get(), buf, sizeof(buf)), -1);
    EXPECT_EQ(errno, EIO) << std::strerror(errno);
    opened.reset();
    // The mount's log names the file and the chunk, not only the object.
    const std::string log = ReadBytes(dir_ / "state-a/tbfs-mount.log");
    EXPECT_NE(log.find("[EIO:cold-chunk] " + *plain + ": chunk 0: "), std::string::npos) << log;
  }
  // Neither opened nor read through the mount before: nothing is cached.
  // (The bound below only catches a hang; the timeout is 3 s.)
  const auto start = std::chrono::steady_clock::now();
  int err = 0;
  {
    UniqueFd fd(::open(M(cold[0]).c_str(), O_RDONLY));
    char buf[4096];
    if (!fd.valid()) {
      err = errno;
    } else if (::read(fd.get(), buf, sizeof(buf)) < 0) {
      err = errno;
    }
  }
  EXPECT_EQ(err, EIO) << std::strerror(err);
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(60));
  for (const auto& [rel, bytes] : originals_) {
    if (rel.find("tfevents") != std::string::npos) {
      EXPECT_TRUE(ReadBytes(M(rel)) == bytes) << rel;
    }
  }
  nlohmann::json eio = Status()["eio"];
  EXPECT_GT(eio["store_by_cause"]["unreachable"].get<uint64_t>() +
                eio["cold_chunk_by_cause"]["unreachable"].get<uint64_t>(),
            0u)
      << eio.dump();
  // Each EIO is counted where it was answered (the open's manifest, or the
  // chunk), and status says so.
  uint64_t by_site = 0;
  for (const auto& [site, n] : eio["by_site"].items()) by_site += n.get<uint64_t>();
  EXPECT_GE(by_site, 1u) << eio.dump();
  EXPECT_NE(
      RunCommand(Tbfs("status " + mnt_)).out.find("I/O errors (EIO) by where they were answered: "),
      std::string::npos);

  // The cluster serves again (scripts/ceph-cluster.sh says why resuming
  // is more than SIGCONT); the mount was never told.
  auto resumed =
      RunCommand("bash " TBFS_SOURCE_DIR "/scripts/ceph-cluster.sh resume " + ceph_ + " tbfs 2>&1");
  ASSERT_EQ(resumed.exit_code, 0) << resumed.out;
  EXPECT_TRUE(WaitUntil([&] { return ReadBytes(M(cold[0])) == originals_[cold[0]]; },
                        std::chrono::milliseconds(30000), std::chrono::milliseconds(500)))
      << "cold reads did not come back after the cluster did";
  for (const std::string& rel : cold) EXPECT_TRUE(ReadBytes(M(rel)) == originals_[rel]) << rel;
  // The writer's lease lapsed while the cluster was away; the mount takes it back.
  EXPECT_TRUE(WaitFor(mnt_, 30, IsWriter)) << Status().dump();
}

}  // namespace
}  // namespace tbfs::testing
