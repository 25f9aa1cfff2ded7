// `tbfs exporter`: one endpoint for every mount of the host, through real
// mounts (root's, so they register in /run/tbfs/mounts).
#include <gtest/gtest.h>
#include <poll.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <sys/wait.h>

#include <atomic>
#include <fstream>

#include "tests/mount/mount_fixture.h"

namespace tbfs::testing {
namespace {

class Exporter : public MountTest {
 protected:
  void SetUp() override {
    MountTest::SetUp();
    std::filesystem::create_directories(mnt2_);
    for (const std::string& l : {logdir_, logdir2_}) {
      ASSERT_EQ(
          RunCommand(Tbfs("gen " + l + " --runs 1 --steps 50 --trace-mb 1 >/dev/null")).exit_code,
          0);
    }
  }
  void TearDown() override {
    if (IsMounted(mnt2_)) RunCommand("fusermount3 -u -z " + Quote(mnt2_));
    if (exporter_ > 0) {
      ::kill(exporter_, SIGKILL);
      ::waitpid(exporter_, nullptr, 0);
    }
    MountTest::TearDown();
  }
  // The lines of a scrape's body that are samples of `name` (with labels).
  static int Count(const std::string& text, const std::string& line_start) {
    int n = 0;
    for (size_t at = 0; (at = text.find("\n" + line_start, at)) != std::string::npos; ++at) ++n;
    return n;
  }
  std::string logdir2_ = dir_ / "logdir2";
  std::string mnt2_ = dir_ / "mnt 2";  // a space, escaped in the registration's name
  pid_t exporter_ = -1;
};

TEST_F(Exporter, OneEndpointServesEveryMountLabelledByItsMountPoint) {
  Mount("--no-migrate --cold-after 0");
  auto r = RunCommand(Tbfs("mount " + logdir2_ + " " + Quote(mnt2_) + " --no-migrate --store " +
                           (dir_ / "store2") + " 2>&1"));
  ASSERT_EQ(r.exit_code, 0) << r.out;
  ASSERT_EQ(RunCommand(Tbfs("migrate --now " + mnt_)).exit_code, 0);

  auto once = RunCommand(Tbfs("exporter --once"));
  ASSERT_EQ(once.exit_code, 0);
  const std::string text = "\n" + once.out;
  // Both mounts, each by its label, the first with its migration counted.
  EXPECT_GT(Sample(text, "tbfs_migrated_files_total", mnt_), 0) << once.out;
  EXPECT_EQ(Sample(text, "tbfs_migrated_files_total", mnt2_), 0) << once.out;
  EXPECT_EQ(Sample(text, "tbfs_exporter_mount_up", mnt_), 1);
  EXPECT_EQ(Sample(text, "tbfs_exporter_mount_up", mnt2_), 1);
  // One HELP and one TYPE per family, whatever the number of mounts.
  EXPECT_EQ(Count(text, "# HELP tbfs_migrated_files_total "), 1);
  EXPECT_EQ(Count(text, "# TYPE tbfs_migrated_files_total "), 1);
  EXPECT_EQ(Count(text, "# TYPE tbfs_fuse_operation_duration_seconds "), 1);
  // What Prometheus's own linter says of it.
  { std::ofstream(dir_ / "scrape.prom") << once.out; }
  auto lint = RunCommand("promtool check metrics < " + (dir_ / "scrape.prom") + " 2>&1");
  EXPECT_EQ(lint.exit_code, 0) << lint.out;

  // A daemon that died leaves its registration; the exporter skips it.
  const int pid2 = [&] {
    auto s = RunCommand(Tbfs("status --json " + Quote(mnt2_)));
    return nlohmann::json::parse(s.out)["pid"].get<int>();
  }();
  ASSERT_EQ(::kill(pid2, SIGKILL), 0);
  WaitUntil([&] { return !Alive(pid2); }, std::chrono::milliseconds(5000));
  RunCommand("fusermount3 -u -z " + Quote(mnt2_));
  once = RunCommand(Tbfs("exporter --once"));
  EXPECT_EQ(Sample("\n" + once.out, "tbfs_exporter_mount_up", mnt_), 1);
  EXPECT_EQ(Sample("\n" + once.out, "tbfs_exporter_mount_up", mnt2_), -1) << once.out;

  // As a server: scraped over HTTP, stopped by SIGTERM with exit 0.
  const int port = FreePort();
  ASSERT_GT(port, 0);
  exporter_ = ::fork();
  if (exporter_ == 0) {
    const std::string listen = std::to_string(port);
    ::execl(TBFS_BINARY, TBFS_BINARY, "exporter", "--listen", listen.c_str(),
            static_cast<char*>(nullptr));
    ::_exit(127);
  }
  std::string scrape;
  WaitUntil(
      [&] {
        scrape = Scrape(port);
        return scrape.find("200 OK") != std::string::npos;
      },
      std::chrono::milliseconds(5000));
  ASSERT_NE(scrape.find("200 OK"), std::string::npos) << scrape;
  EXPECT_GT(Sample(scrape, "tbfs_files", mnt_, ",state=\"cold\""), 0) << scrape;
  EXPECT_EQ(scrape.find("exposer_"), std::string::npos);
  ASSERT_EQ(::kill(exporter_, SIGTERM), 0);
  int status = 0;
  ASSERT_EQ(::waitpid(exporter_, &status, 0), exporter_);
  exporter_ = -1;
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << status;
}

TEST_F(Exporter, APortInUseIsOneLineAndExit2) {
  const int port = FreePort();
  UniqueFd held(::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0));
  sockaddr_in addr = Loopback(port);
  ASSERT_EQ(::bind(held.get(), reinterpret_cast<sockaddr*>(&addr), sizeof(addr)), 0);
  ASSERT_EQ(::listen(held.get(), 1), 0);
  auto r = RunCommand(Tbfs("exporter --listen " + std::to_string(port) + " 2>&1"));
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.out.find("Address already in use"), std::string::npos) << r.out;
  r = RunCommand(Tbfs("exporter --listen nonsense 2>&1"));
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.out.find("tbfs exporter: --listen nonsense"), std::string::npos) << r.out;
}

// What listens at a registered socket path may not be the mount's daemon
// (a user who owns a folder above it can put a server there): only the
// registered pid, as root, is believed; and no answer, however slowly it
// trickles, holds a scrape past the timeout.
TEST_F(Exporter, OnlyTheRegisteredDaemonIsBelievedAndNoMountHoldsAScrape) {
  Mount("--no-migrate");
  // This mount's registration.
  std::string reg_path, original;
  for (const auto& e : std::filesystem::directory_iterator("/run/tbfs/mounts")) {
    std::string data = ReadBytes(e.path());
    if (data.starts_with(mnt_ + std::string(1, '\0'))) reg_path = e.path(), original = data;
  }
  ASSERT_FALSE(reg_path.empty());
  // A server of the test's: it answers fake series, or drips a byte a second.
  const std::string fake = dir_ / "fake.sock";
  UniqueFd server(::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0));
  sockaddr_un sa{};
  sa.sun_family = AF_UNIX;
  std::snprintf(sa.sun_path, sizeof(sa.sun_path), "%s", fake.c_str());
  ASSERT_EQ(::bind(server.get(), reinterpret_cast<sockaddr*>(&sa), sizeof(sa)), 0);
  ASSERT_EQ(::listen(server.get(), 8), 0);
  std::atomic<bool> drip{false}, done{false};
  std::thread serve([&] {
    while (!done) {
      struct pollfd p = {server.get(), POLLIN, 0};
      if (::poll(&p, 1, 100) != 1) continue;
      UniqueFd c(::accept4(server.get(), nullptr, nullptr, SOCK_CLOEXEC));
      const std::string reply =
          "{\"metrics\": \"tbfs_verifier_ok{mountpoint=\\\"" + mnt_ + "\\\"} 0\\n\"}\n";
      for (size_t i = 0; i < reply.size() && !done; ++i) {
        if (::send(c.get(), &reply[i], drip ? 1 : reply.size() - i, MSG_NOSIGNAL) <= 0) break;
        if (!drip) break;
        std::this_thread::sleep_for(std::chrono::seconds(1));
      }
    }
  });
  auto registration = [&](pid_t pid) {
    WriteBytes(reg_path, mnt_ + std::string(1, '\0') + fake + std::string(1, '\0') +
                             std::to_string(pid) + std::string(1, '\0'));
  };
  registration(pid_);  // the daemon's pid, but another process answers
  auto once = RunCommand(Tbfs("exporter --once"));
  EXPECT_EQ(Sample("\n" + once.out, "tbfs_exporter_mount_up", mnt_), 0) << once.out;
  EXPECT_EQ(Sample("\n" + once.out, "tbfs_verifier_ok", mnt_), -1) << once.out;
  drip = true;
  registration(::getpid());  // believed (this process, root), but never done answering
  const auto start = std::chrono::steady_clock::now();
  once = RunCommand(Tbfs("exporter --once"));
  const double took =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  EXPECT_EQ(Sample("\n" + once.out, "tbfs_exporter_mount_up", mnt_), 0) << once.out;
  EXPECT_LT(took, 20.0) << "a trickling answer held the scrape (60 s of bytes)";
  done = true;
  serve.join();
  WriteBytes(reg_path, original);
  once = RunCommand(Tbfs("exporter --once"));
  EXPECT_EQ(Sample("\n" + once.out, "tbfs_exporter_mount_up", mnt_), 1) << once.out;
}

// A socket path through a mount that does not answer (a user can mount a
// FUSE filesystem of their own in a folder above a store's socket) hangs
// before any socket timeout applies: the scrape still ends at its deadline.
TEST_F(Exporter, ASocketPathThroughAHungMountCostsOneDeadline) {
  Mount("--no-migrate");
  auto r = RunCommand(Tbfs("mount " + logdir2_ + " " + Quote(mnt2_) + " --no-migrate --store " +
                           (dir_ / "store2") + " 2>&1"));
  ASSERT_EQ(r.exit_code, 0) << r.out;
  const int pid2 =
      nlohmann::json::parse(RunCommand(Tbfs("status --json " + Quote(mnt2_))).out)["pid"]
          .get<int>();
  std::string reg_path, original;
  for (const auto& e : std::filesystem::directory_iterator("/run/tbfs/mounts")) {
    std::string data = ReadBytes(e.path());
    if (data.starts_with(mnt_ + std::string(1, '\0'))) reg_path = e.path(), original = data;
  }
  ASSERT_FALSE(reg_path.empty());
  WriteBytes(reg_path, mnt_ + std::string(1, '\0') + mnt2_ + "/run/control.sock" +
                           std::string(1, '\0') + std::to_string(pid_) + std::string(1, '\0'));
  ASSERT_EQ(::kill(pid2, SIGSTOP), 0);
  const auto start = std::chrono::steady_clock::now();
  auto once = RunCommand(Tbfs("exporter --once"));
  const double took =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  ::kill(pid2, SIGCONT);
  WriteBytes(reg_path, original);
  EXPECT_EQ(Sample("\n" + once.out, "tbfs_exporter_mount_up", mnt_), 0) << once.out;
  EXPECT_LT(took, 20.0) << "a hung mount on the socket's path held the scrape";
}

TEST_F(Exporter, AnotherUserIsToldItSeesNoMountsAndWhy) {
  Mount("--no-migrate");  // root's: /run/tbfs/mounts exists, 0700
  auto r = RunCommand("setpriv --reuid 65534 --regid 65534 --clear-groups " +
                      Tbfs("exporter --once 2>&1"));
  EXPECT_EQ(r.exit_code, 2) << r.out;
  EXPECT_NE(r.out.find("/run/tbfs/mounts: Permission denied"), std::string::npos) << r.out;
}

}  // namespace
}  // namespace tbfs::testing
