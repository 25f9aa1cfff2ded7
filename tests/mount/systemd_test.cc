// The systemd unit's mount, run as systemd would run it, as far as a
// machine without systemd as init allows: the unit's ExecStart with its
// config, its capability bounding set and NoNewPrivileges applied (setpriv),
// NOTIFY_SOCKET pointed at a socket of the test's, stderr as the journal
// stream. Then what users do through the mount under those limits.
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/poll.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#include <fstream>
#include <sstream>

#include "tests/mount/mount_fixture.h"

namespace tbfs::testing {
namespace {

// Key=value lines of the unit (the last of a key wins, as in systemd).
std::map<std::string, std::string> ReadUnit() {
  std::map<std::string, std::string> keys;
  std::ifstream in(std::string(TBFS_SOURCE_DIR) + "/packaging/tbfs@.service");
  for (std::string line; std::getline(in, line);) {
    if (line.empty() || line[0] == '#' || line[0] == '[') continue;
    const size_t eq = line.find('=');
    if (eq != std::string::npos) keys[line.substr(0, eq)] = line.substr(eq + 1);
  }
  return keys;
}

std::vector<std::string> Words(const std::string& s) {
  std::istringstream in(s);
  std::vector<std::string> out;
  for (std::string w; in >> w;) out.push_back(w);
  return out;
}

std::string Replace(std::string s, const std::string& from, const std::string& to) {
  for (size_t at; (at = s.find(from)) != std::string::npos;) s.replace(at, from.size(), to);
  return s;
}

class SystemdService : public MountTest {
 protected:
  void SetUp() override {
    MountTest::SetUp();
    ASSERT_EQ(RunCommand(Tbfs("gen " + logdir_ + " --runs 1 --steps 50 --trace-mb 2 >/dev/null"))
                  .exit_code,
              0);
    ASSERT_EQ(::chmod(dir_.path().c_str(), 0755), 0);  // users reach the mount
    std::filesystem::create_directories(logdir_ + "/pub");
    ::chmod((logdir_ + "/pub").c_str(), 01777);
    sock_path_ = dir_ / "notify";
    sock_ = UniqueFd(::socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC, 0));
    sockaddr_un sa{};
    sa.sun_family = AF_UNIX;
    std::snprintf(sa.sun_path, sizeof(sa.sun_path), "%s", sock_path_.c_str());
    ASSERT_EQ(::bind(sock_.get(), reinterpret_cast<sockaddr*>(&sa), sizeof(sa)), 0);
  }
  void TearDown() override {
    if (child_ > 0 && IsMounted(mnt_)) ::kill(child_, SIGTERM);
    if (child_ > 0) {
      int status;
      WaitUntil([&] { return ::waitpid(child_, &status, WNOHANG) != 0; },
                std::chrono::milliseconds(10000));
      ::kill(child_, SIGKILL);
      ::waitpid(child_, &status, 0);
    }
    MountTest::TearDown();
  }
  // The next notification, "" after `seconds` without one.
  std::string Next(int seconds) {
    struct pollfd p = {sock_.get(), POLLIN, 0};
    if (::poll(&p, 1, seconds * 1000) != 1) return "";
    char buf[4096];
    ssize_t n = ::recv(sock_.get(), buf, sizeof(buf), 0);
    return n > 0 ? std::string(buf, static_cast<size_t>(n)) : "";
  }
  std::string sock_path_;
  UniqueFd sock_;
  pid_t child_ = -1;
};

TEST_F(SystemdService, TheUnitsCommandSaysReadyOnlyOnceItServesAndWorksInItsSandbox) {
  auto unit = ReadUnit();
  ASSERT_EQ(unit["Type"], "notify");
  ASSERT_EQ(unit["NoNewPrivileges"], "yes");
  const std::string config = dir_ / "run.yaml";
  {
    std::ofstream out(config);
    out << "logdir: " << logdir_ << "\nmount:\n  mountpoint: " << mnt_
        << "\n  store: " << (dir_ / "store")
        << "\n  migrate: false\n  cold_after: 0s\n  options: [allow_other]\n";
  }
  std::string exec = Replace(unit["ExecStart"], "/usr/bin/tbfs", TBFS_BINARY);
  exec = Replace(exec, "/etc/tbfs/%i.yaml", config);
  // The bounding set as setpriv spells it: -all,+sys_admin,+chown ...
  std::string bounding = "-all";
  for (const std::string& cap : Words(unit["CapabilityBoundingSet"])) {
    ASSERT_TRUE(cap.starts_with("CAP_")) << cap;
    std::string name = cap.substr(4);
    for (char& c : name) c = static_cast<char>(std::tolower(c));
    bounding += ",+" + name;
  }
  std::vector<std::string> argv_s = {"setpriv", "--no-new-privs", "--bounding-set", bounding, "--"};
  for (const std::string& w : Words(exec)) argv_s.push_back(w);
  std::vector<char*> argv;
  for (auto& s : argv_s) argv.push_back(s.data());
  argv.push_back(nullptr);

  const std::string log = dir_ / "journal";
  UniqueFd log_fd(::open(log.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600));
  struct stat log_st;
  ASSERT_EQ(::fstat(log_fd.get(), &log_st), 0);
  const std::string journal = std::to_string(log_st.st_dev) + ":" + std::to_string(log_st.st_ino);
  child_ = ::fork();
  if (child_ == 0) {
    ::dup2(log_fd.get(), 2);
    ::setenv("NOTIFY_SOCKET", sock_path_.c_str(), 1);
    ::setenv("JOURNAL_STREAM", journal.c_str(), 1);
    ::execvp("setpriv", argv.data());
    ::_exit(127);
  }
  ASSERT_GT(child_, 0);

  // READY=1 comes once, when a request through the mount is answered.
  std::string ready = Next(60);
  ASSERT_NE(ready.find("READY=1"), std::string::npos) << "no READY=1 within 60 s: " << ready << "\n"
                                                      << ReadBytes(log);
  const std::string run = Files(logdir_, true).at(0);
  EXPECT_TRUE(IsMounted(mnt_));
  EXPECT_EQ(ReadBytes(M(run)), ReadBytes(L(run)));  // served, at the moment systemd hears it
  EXPECT_NE(ready.find("MAINPID=" + std::to_string(child_)), std::string::npos) << ready;
  EXPECT_NE(ready.find("STATUS=serving " + logdir_), std::string::npos) << ready;

  // Users' operations, with only the unit's capabilities in the daemon.
  auto as_user = [](const std::string& cmd) {
    return RunCommand("setpriv --reuid 65534 --regid 65534 --clear-groups -- sh -c " + Quote(cmd) +
                      " 2>&1");
  };
  const std::string pub = M("pub");
  auto r = as_user("echo hi > " + pub + "/f && chmod 6755 " + pub + "/f && mkfifo " + pub +
                   "/fifo && setfacl -m u:0:r " + pub + "/f && chmod 600 " + pub + "/f");
  EXPECT_EQ(r.exit_code, 0) << r.out;
  struct stat st;
  ASSERT_EQ(::lstat((logdir_ + "/pub/f").c_str(), &st), 0);
  EXPECT_EQ(st.st_uid, 65534u);  // CAP_CHOWN
  EXPECT_EQ(st.st_mode & 07777, 0600u);
  ASSERT_EQ(::lstat((logdir_ + "/pub/fifo").c_str(), &st), 0);
  EXPECT_TRUE(S_ISFIFO(st.st_mode));  // CAP_MKNOD
  EXPECT_EQ(st.st_uid, 65534u);
  EXPECT_EQ(ReadBytes(pub + "/f"), "hi\n");  // root reads a user's 0600 file: DAC_OVERRIDE
  r = RunCommand("setfattr -n trusted.tbfs -v 1 " + pub + "/f 2>&1 && getfattr -n trusted.tbfs " +
                 pub + "/f 2>&1");
  EXPECT_EQ(r.exit_code, 0) << r.out;  // CAP_SYS_ADMIN
  r = RunCommand("setcap cap_net_raw+ep " + pub + "/f 2>&1 && getcap " + pub + "/f");
  EXPECT_EQ(r.exit_code, 0) << r.out;  // CAP_SETFCAP
  EXPECT_NE(r.out.find("cap_net_raw"), std::string::npos) << r.out;
  r = as_user("echo x > " + pub + "/g && chmod 2755 " + pub + "/g && stat -c %a " + pub + "/g");
  EXPECT_EQ(r.exit_code, 0) << r.out;
  EXPECT_EQ(r.out, "2755\n");  // a set-gid bit for a group the daemon is not in: CAP_FSETID
  // Every trace moves, the user's too (a lease on a file root does not own
  // needs CAP_LEASE), and reads back cold.
  r = as_user("mkdir " + pub + "/run && cp " + L(Files(logdir_, false).at(0)) + " " + pub +
              "/run/u.pt.trace.json && touch -d '1 hour ago' " + pub + "/run/u.pt.trace.json");
  EXPECT_EQ(r.exit_code, 0) << r.out;
  r = RunCommand(Tbfs("migrate --now " + mnt_ + " 2>&1"));
  EXPECT_EQ(r.exit_code, 0) << r.out;
  EXPECT_EQ(State(pub + "/run/u.pt.trace.json"), "cold") << "the user's trace did not move";
  for (const std::string& t : Files(logdir_, false)) {
    if (t.starts_with("pub/") && !t.ends_with(".pt.trace.json")) continue;
    EXPECT_EQ(State(M(t)), "cold") << t;
    EXPECT_EQ(ReadBytes(M(t)).size(),
              static_cast<size_t>(std::stoll(RunCommand("stat -c %s " + Quote(M(t))).out)))
        << t;
  }

  // SIGTERM (systemctl stop): STOPPING=1, the mount gone, exit 0.
  ASSERT_EQ(::kill(child_, SIGTERM), 0);
  std::string stopping = Next(30);
  EXPECT_NE(stopping.find("STOPPING=1"), std::string::npos) << stopping;
  int status = 0;
  ASSERT_EQ(::waitpid(child_, &status, 0), child_);
  child_ = -1;
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << status << "\n" << ReadBytes(log);
  EXPECT_FALSE(IsMounted(mnt_));
  // The journal has the mount's info lines without -v.
  const std::string journal_text = ReadBytes(log);
  EXPECT_NE(journal_text.find("mounted " + logdir_ + " on " + mnt_), std::string::npos)
      << journal_text;
}

TEST(SystemdUnit, KeepsItsSandboxExposureAtMost6Point5) {
  // systemd's own measure of the unit's sandboxing (10 = none). Options
  // that would give the mount a namespace of its own cannot be used (the
  // unit says why); this holds the rest in place.
  auto r = RunCommand("systemd-analyze security --offline=true --threshold=65 " +
                      std::string(TBFS_SOURCE_DIR) + "/packaging/tbfs@.service 2>&1");
  EXPECT_EQ(r.exit_code, 0) << r.out;
  // The exporter mounts nothing and writes nothing: it takes far more.
  r = RunCommand("systemd-analyze security --offline=true --threshold=30 " +
                 std::string(TBFS_SOURCE_DIR) + "/packaging/tbfs-exporter.service 2>&1");
  EXPECT_EQ(r.exit_code, 0) << r.out;
}

}  // namespace
}  // namespace tbfs::testing
