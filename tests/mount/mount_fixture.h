// A real tbfs mount in a temporary folder for integration tests. The mount
// is always taken down in teardown, even when the test failed: fusermount3
// -u, then a lazy unmount, then the daemon is killed.
#pragma once

#include <arpa/inet.h>
#include <fcntl.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <sys/xattr.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <fstream>
#include <future>
#include <map>
#include <mutex>
#include <nlohmann/json.hpp>
#include <string>
#include <thread>
#include <vector>

#include "base/fs_util.h"
#include "tests/test_util.h"

namespace tbfs::testing {

// A path as one shell word.
inline std::string Quote(const std::string& s) {
  std::string q = "'";
  for (char c : s) q += c == '\'' ? std::string("'\\''") : std::string(1, c);
  return q + "'";
}

inline bool IsMounted(const std::string& mountpoint) {
  std::string escaped;  // as /proc/mounts writes it: a space is \040
  for (char c : mountpoint) {
    if (c == ' ' || c == '\t' || c == '\n' || c == '\\') {
      char buf[5];
      std::snprintf(buf, sizeof(buf), "\\%03o", static_cast<unsigned char>(c));
      escaped += buf;
    } else {
      escaped += c;
    }
  }
  std::ifstream in("/proc/mounts");
  std::string line;
  while (std::getline(in, line)) {
    if (line.find(" " + escaped + " ") != std::string::npos) return true;
  }
  return false;
}

// The user.tbfs.state xattr of a path through the mount ("hot", "cold"), or
// "error: ..." when it cannot be read.
inline std::string State(const std::string& path) {
  char buf[16];
  ssize_t n = ::getxattr(path.c_str(), "user.tbfs.state", buf, sizeof(buf));
  return n < 0 ? std::string("error: ") + std::strerror(errno) : std::string(buf, n);
}

inline sockaddr_in Loopback(int port) {
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(static_cast<uint16_t>(port));
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  return addr;
}

// A TCP connection to 127.0.0.1:port; invalid when refused.
inline UniqueFd ConnectLoopback(int port) {
  UniqueFd s(::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0));
  sockaddr_in addr = Loopback(port);
  if (::connect(s.get(), reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0) return UniqueFd();
  return s;
}

// GET /metrics from the mount's Prometheus endpoint (plain HTTP/1.0).
inline std::string Scrape(int port) {
  UniqueFd s = ConnectLoopback(port);
  if (!s.valid()) return "";
  struct timeval limit = {30, 0};  // a server that never answers fails the test, not hangs it
  ::setsockopt(s.get(), SOL_SOCKET, SO_RCVTIMEO, &limit, sizeof(limit));
  const std::string request = "GET /metrics HTTP/1.0\r\nHost: localhost\r\n\r\n";
  if (::write(s.get(), request.data(), request.size()) != static_cast<ssize_t>(request.size()))
    return "";
  std::string out;
  char buf[65536];
  for (ssize_t n; (n = ::read(s.get(), buf, sizeof(buf))) > 0;)
    out.append(buf, static_cast<size_t>(n));
  return out;
}

// The value of the sample `name{mountpoint="...",extra}` in a scrape; -1 if absent.
inline double Sample(const std::string& scrape, const std::string& name, const std::string& mnt,
                     const std::string& extra = "") {
  const std::string key = name + "{mountpoint=\"" + mnt + "\"" + extra + "} ";
  size_t at = scrape.find("\n" + key);
  if (at == std::string::npos) return -1;
  return std::stod(scrape.substr(at + 1 + key.size()));
}

inline int FreePort() {
  UniqueFd s(::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0));
  sockaddr_in addr = Loopback(0);
  socklen_t len = sizeof(addr);
  if (::bind(s.get(), reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0 ||
      ::getsockname(s.get(), reinterpret_cast<sockaddr*>(&addr), &len) != 0) {
    return 0;
  }
  return ntohs(addr.sin_port);
}

// The regular files beneath root (not .tbfs): its tfevents files, or all the others.
inline std::vector<std::string> Files(const std::string& root, bool events) {
  std::vector<std::string> out;
  WalkOptions w;
  w.skip_dirs = {".tbfs"};
  EXPECT_TRUE(WalkTree(root, w, [&](const WalkEntry& e) {
                if (S_ISREG(e.st.st_mode) &&
                    (e.rel.find("tfevents") != std::string::npos) == events) {
                  out.push_back(e.rel);
                }
              }).ok());
  return out;
}

// The mount points MountTest::Mount made and no Unmount took down yet. A
// test that ends in std::terminate (a std::thread still joinable when a
// failed ASSERT returned from the test's body) skips TearDown: the handler
// this installs takes them down lazily before the abort, so no mount
// outlives its test.
inline std::vector<std::string>& LiveMounts() {
  static std::vector<std::string> mounts;
  return mounts;
}
inline void UnmountOnTerminate() {
  static std::once_flag once;
  std::call_once(once, [] {
    std::set_terminate([] {
      for (const std::string& m : LiveMounts()) {
        std::fprintf(stderr, "terminate: taking down the mount on %s\n", m.c_str());
        std::system(("fusermount3 -u -z " + Quote(m) + " 2>/dev/null").c_str());
      }
      std::abort();
    });
  });
}

class MountTest : public ::testing::Test {
 protected:
  void SetUp() override {
    int fd = ::open("/dev/fuse", O_RDWR);
    ASSERT_GE(fd, 0) << "this test mounts a real FUSE filesystem and needs /dev/fuse, which "
                        "cannot be opened here: "
                     << std::strerror(errno);
    ::close(fd);
    std::filesystem::create_directories(mnt_);
  }

  void TearDown() override { Unmount(); }

  // Mounts logdir_ on mnt_ (a daemon; returns once the mount serves).
  void Mount(const std::string& extra = "--no-migrate") {
    auto r =
        RunCommand(Tbfs("mount " + Quote(logdir_) + " " + Quote(mnt_) + " " + extra + " 2>&1"));
    ASSERT_EQ(r.exit_code, 0) << r.out;
    UnmountOnTerminate();
    LiveMounts().push_back(mnt_);
    ASSERT_TRUE(IsMounted(mnt_));
    pid_ = Status()["pid"].get<int>();
  }

  // Mount(extra) with the failpoint `point` armed in the daemon (TBFS_FAIL).
  void MountFailing(const std::string& point, const std::string& extra) {
    ASSERT_EQ(::setenv("TBFS_FAIL", point.c_str(), 1), 0);
    Mount(extra);
    ::unsetenv("TBFS_FAIL");
  }

  // `tbfs migrate MOUNTPOINT --now` on another thread (stdout and stderr).
  std::future<CommandResult> MigrateNowAsync() {
    return std::async(std::launch::async, [this] {
      return RunCommand(Tbfs("migrate --now " + Quote(mnt_) + " 2>&1"));
    });
  }

  // `count` tiny traces in the logdir's `folder` (path -> bytes).
  std::map<std::string, std::string> WriteTinyTraces(const std::string& folder, int count) {
    std::map<std::string, std::string> files;
    for (int i = 0; i < count; ++i) {
      char name[32];
      std::snprintf(name, sizeof(name), "/t%03d.pt.trace.json", i);
      const std::string rel = folder + name;
      files[rel] = "{\"traceEvents\": [" + std::to_string(i) + "]}";
      WriteBytes(L(rel), files[rel]);
    }
    return files;
  }

  void Unmount() {
    std::erase(LiveMounts(), mnt_);
    if (!IsMounted(mnt_)) return;
    RunCommand("fusermount3 -u " + Quote(mnt_) + " 2>/dev/null");
    if (IsMounted(mnt_)) RunCommand("fusermount3 -u -z " + Quote(mnt_) + " 2>/dev/null");
    WaitForExit();
  }

  // True while the daemon runs (an exited, unreaped daemon is a zombie:
  // the daemon is nobody's child here, so nobody here can reap it).
  static bool Alive(int pid) {
    std::ifstream in("/proc/" + std::to_string(pid) + "/stat");
    std::string stat;
    if (!std::getline(in, stat)) return false;
    size_t paren = stat.rfind(')');
    return paren != std::string::npos && paren + 2 < stat.size() && stat[paren + 2] != 'Z';
  }

  // Waits up to 10 s for the daemon to exit after an unmount; kills it after.
  void WaitForExit() {
    if (pid_ <= 0) return;
    WaitUntil([&] { return !Alive(pid_); }, std::chrono::milliseconds(10000));
    if (Alive(pid_)) ::kill(pid_, SIGKILL);
    pid_ = -1;
  }

  nlohmann::json Status() {
    auto r = RunCommand(Tbfs("status --json " + Quote(mnt_)));
    EXPECT_EQ(r.exit_code, 0);
    return nlohmann::json::parse(r.out, nullptr, false);
  }

  void Gen(const std::string& args = "--runs 2 --steps 200 --trace-mb 6") {
    ASSERT_EQ(RunCommand(Tbfs("gen " + logdir_ + " " + args + " >/dev/null")).exit_code, 0);
  }

  std::string M(const std::string& rel) const { return mnt_ + "/" + rel; }
  std::string L(const std::string& rel) const { return logdir_ + "/" + rel; }

  TempDir dir_;
  std::string logdir_ = dir_ / "logdir";
  std::string mnt_ = dir_ / "mnt";
  int pid_ = -1;
};

}  // namespace tbfs::testing
