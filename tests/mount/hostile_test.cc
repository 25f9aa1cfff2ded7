// What one ordinary user's files can do to everyone else's mount (issue 21):
// a FIFO swapped in for a tfevents file, a damaged tfevents file, a tree
// too deep to walk. Each user runs as uid 65534 in a child process and
// writes straight into the logdir, as training jobs do; root runs tbfs.
#include <fcntl.h>
#include <grp.h>
#include <linux/fs.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <sys/xattr.h>
#include <unistd.h>

#include <chrono>
#include <cstring>
#include <filesystem>
#include <functional>
#include <regex>
#include <string>
#include <thread>

#include "base/text.h"
#include "fmt/format.h"
#include "tests/mount/mount_fixture.h"

namespace tbfs::testing {
namespace {

constexpr uid_t kUser = 65534;

// Starts `body` as the ordinary user in a child process. Fork it from the
// test's main thread before any RunCommand runs beside it: the child would
// inherit that command's pipe and hold its output open.
pid_t StartAsUser(const std::function<int()>& body, const std::vector<gid_t>& groups = {}) {
  pid_t child = ::fork();
  if (child == 0) {
    if (::setgroups(groups.size(), groups.data()) != 0 || ::setgid(kUser) != 0 ||
        ::setuid(kUser) != 0) {
      _exit(3);
    }
    int code = 99;  // an exception must not run the rest of the tests as the user
    try {
      code = body();
    } catch (...) {
    }
    _exit(code);
  }
  return child;
}

// Its exit status.
int WaitForUser(pid_t child) {
  int status = 0;
  ::waitpid(child, &status, 0);
  return WIFEXITED(status) ? WEXITSTATUS(status) : 128;
}

int AsUser(const std::function<int()>& body) { return WaitForUser(StartAsUser(body)); }

class HostileUser : public MountTest {
 protected:
  // A generated run for each user: "u" (the hostile one) and "v".
  void SetUp() override {
    MountTest::SetUp();
    ASSERT_EQ(::chmod(dir_.path().c_str(), 0755), 0);  // the user reaches the logdir
    for (const char* who : {"u", "v"}) {
      ASSERT_EQ(RunCommand(Tbfs(fmt::format("gen {} --runs 1 --steps 100 --trace-mb 1 >/dev/null",
                                            L(who))))
                    .exit_code,
                0);
    }
    ASSERT_EQ(RunCommand("chown -R " + std::to_string(kUser) + " " + Quote(L("u"))).exit_code, 0);
    for (const auto& e : std::filesystem::recursive_directory_iterator(L("u"))) {
      if (e.is_regular_file() &&
          e.path().filename().string().find("tfevents") != std::string::npos &&
          e.file_size() > 1000) {
        events_ = e.path().string();
      }
    }
    ASSERT_FALSE(events_.empty());
  }

  // The traces under `who` (relative to the logdir).
  std::vector<std::string> Traces(const std::string& who) {
    std::vector<std::string> out;
    for (const auto& e : std::filesystem::recursive_directory_iterator(L(who))) {
      const std::string name = e.path().filename().string();
      if (e.is_regular_file() && name.find("tfevents") == std::string::npos) {
        out.push_back(e.path().string().substr(logdir_.size() + 1));
      }
    }
    return out;
  }

  std::string MountLog() { return ReadBytes(L(".tbfs/tbfs-mount.log")); }

  std::string events_;  // u's tfevents file (absolute path in the logdir)
};

size_t Count(const std::string& text, const std::string& what) {
  size_t n = 0;
  for (size_t at = text.find(what); at != std::string::npos; at = text.find(what, at + 1)) ++n;
  return n;
}

// The user exchanges a FIFO and their tfevents file in a tight loop while
// passes run (each with a new trace of v's to move, so each digests u's
// tfevents). A digest that opened the FIFO would wait for a writer for ever:
// every pass here must end, and v's traces move.
TEST_F(HostileUser, AFifoExchangedWithATfeventsFileNeverStallsAPass) {
  Mount("--no-migrate --cold-after 0");
  const std::string fifo = ParentPath(events_) + "/fifo";
  // The loop runs until the passes are done (the file `done` appears), or
  // for a minute at most: a count of passes, never a time, decides.
  const std::string done = dir_ / "done";
  const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(60);
  const pid_t user = StartAsUser([&] {
    if (::mkfifo(fifo.c_str(), 0644) != 0) return 4;
    uint64_t swaps = 0;
    struct stat ignored;
    while (std::chrono::steady_clock::now() < until && ::stat(done.c_str(), &ignored) != 0) {
      if (::syscall(SYS_renameat2, AT_FDCWD, events_.c_str(), AT_FDCWD, fifo.c_str(),
                    RENAME_EXCHANGE) == 0) {
        ++swaps;
      }
    }
    // The tfevents file back at its name.
    if (swaps % 2 == 1) {
      ::syscall(SYS_renameat2, AT_FDCWD, events_.c_str(), AT_FDCWD, fifo.c_str(), RENAME_EXCHANGE);
    }
    return swaps > 1000 ? 0 : 5;
  });
  int passes = 0;
  for (; passes < 5 && std::chrono::steady_clock::now() < until; ++passes) {
    WriteBytes(L(fmt::format("v/new{}.pt.trace.json", passes)), "{\"traceEvents\": []}");
    auto r = RunCommand("timeout 60 " + Tbfs("migrate --now " + Quote(mnt_) + " 2>&1"));
    if (r.exit_code == 124) WriteBytes(done, "");  // the user's loop ends too
    ASSERT_NE(r.exit_code, 124) << "a pass hung (FIFO opened?) after " << passes << " passes";
  }
  WriteBytes(done, "");
  EXPECT_EQ(WaitForUser(user), 0) << "the user's exchange loop did not run";
  EXPECT_EQ(passes, 5) << "the passes took over a minute";
  // The loop over, the next pass moves v's traces. u's move too, unless
  // the exchange landed between a batch's baseline and its check after
  // the move: then u (the owner) is held for a while, and shown so.
  RunCommand("timeout 60 " + Tbfs("migrate --now " + Quote(mnt_) + " 2>&1"));
  for (const std::string& t : Traces("v")) EXPECT_EQ(State(M(t)), "cold") << t;
  nlohmann::json s = Status();
  const bool u_held = s["blocked"]["owners"] == nlohmann::json::array({kUser});
  for (const std::string& t : Traces("u")) {
    if (!u_held) {
      EXPECT_EQ(State(M(t)), "cold") << t << " " << s["blocked"].dump();
    }
  }
}

// One byte flipped in u's tfevents file: u's traces stay hot (nothing can
// prove u's curves intact), v's move; status, metrics and the log (once)
// name the run and the file.
TEST_F(HostileUser, ADamagedTfeventsFileHoldsOnlyItsOwnRunAndIsShown) {
  ASSERT_EQ(AsUser([&] {
              std::string bytes = ReadBytes(events_);
              bytes[bytes.size() / 2] ^= 0x40;
              WriteBytes(events_, bytes);
              return 0;
            }),
            0);
  const int port = FreePort();
  ASSERT_GT(port, 0);
  Mount("--cold-after 0 -o migrate_interval=1s,metrics=" + std::to_string(port));
  const std::vector<std::string> v = Traces("v"), u = Traces("u");
  auto all_cold = [&](const std::vector<std::string>& traces) {
    return std::all_of(traces.begin(), traces.end(),
                       [&](const std::string& t) { return State(M(t)) == "cold"; });
  };
  ASSERT_TRUE(WaitUntil([&] { return all_cold(v); }, std::chrono::milliseconds(60000),
                        std::chrono::milliseconds(100)))
      << "v's traces did not move";
  for (const std::string& t : u) EXPECT_EQ(State(M(t)), "hot") << t;

  const std::string run = ParentPath(events_.substr(logdir_.size() + 1));
  const std::string file = events_.substr(logdir_.size() + 1);
  // The held runs are published when the pass ends, after v's batch
  // committed (a moment later on a loaded machine).
  nlohmann::json s;
  WaitUntil(
      [&] {
        s = Status();
        return s["blocked"]["runs"].get<uint64_t>() > 0;
      },
      std::chrono::milliseconds(10000), std::chrono::milliseconds(100));
  ASSERT_EQ(s["blocked"]["runs"].get<uint64_t>(), 1u) << s.dump();
  EXPECT_EQ(s["blocked"]["list"][0]["run"].get<std::string>(), run);
  EXPECT_EQ(s["blocked"]["list"][0]["file"].get<std::string>(), file);
  EXPECT_EQ(s["blocked"]["list"][0]["traces"].get<uint64_t>(), u.size());
  const std::string plain = RunCommand(Tbfs("status " + Quote(mnt_))).out;
  EXPECT_NE(plain.find("HELD HOT: 1 run(s)"), std::string::npos) << plain;
  EXPECT_NE(plain.find(run), std::string::npos) << plain;
  const std::string scrape = Scrape(port);
  EXPECT_EQ(Sample(scrape, "tbfs_blocked_runs", mnt_), 1) << scrape;
  EXPECT_NE(scrape.find("run=\"" + run + "\""), std::string::npos) << scrape;

  // Passes go on (interval 1 s): the run is logged once, not per pass.
  const uint64_t passes = s["migrations"]["passes"].get<uint64_t>();
  WaitUntil([&] { return Status()["migrations"]["passes"].get<uint64_t>() >= passes + 3; },
            std::chrono::milliseconds(10000), std::chrono::milliseconds(100));
  const std::string log = MountLog();
  EXPECT_EQ(Count(log, "a tfevents file of theirs cannot be read"), 1u) << log;
  EXPECT_NE(log.find(run), std::string::npos) << log;

  // Mended (the user writes the file anew), the run's traces move.
  ASSERT_EQ(RunCommand(Tbfs("gen " + Quote(dir_ / "fresh") + " --runs 1 --steps 100 >/dev/null"))
                .exit_code,
            0);
  std::string fresh;
  for (const auto& e : std::filesystem::recursive_directory_iterator(dir_ / "fresh")) {
    if (e.path().filename().string().find("tfevents") != std::string::npos && e.file_size() > 1000)
      fresh = e.path().string();
  }
  WriteBytes(events_, ReadBytes(fresh));
  EXPECT_TRUE(WaitUntil([&] { return all_cold(u); }, std::chrono::milliseconds(60000),
                        std::chrono::milliseconds(100)))
      << Status().dump();
  // The held runs are published when the pass ends, a moment after the
  // batch that moved the traces commits.
  uint64_t held = 1;
  WaitUntil([&] { return (held = Status()["blocked"]["runs"].get<uint64_t>()) == 0; },
            std::chrono::milliseconds(10000), std::chrono::milliseconds(100));
  EXPECT_EQ(held, 0u) << Status().dump();
}

// `truncate -s 15T` by a user, and a few bytes written: almost no disk
// blocks, 15 TB of zeros to read. A pass moves it without reading its
// holes (v's traces move in the same pass), it reads through the mount as
// it did, the bytes status shows are those it takes, and written to, it
// comes back sparse (not 15 TB written out as root).
TEST_F(HostileUser, ASparseTraceMovesWithoutReadingItsHolesAndComesBackSparse) {
  const std::string huge = L("u/huge.pt.trace.json");
  const uint64_t size = uint64_t{15} << 40;
  const std::string head = "{\"traceEvents\": [", middle = "{\"name\": \"step\"},";
  const uint64_t middle_at = uint64_t{7} << 40;
  ASSERT_EQ(AsUser([&] {
              int fd = ::open(huge.c_str(), O_WRONLY | O_CREAT | O_EXCL, 0644);
              if (fd < 0) return 4;
              bool ok =
                  ::ftruncate(fd, static_cast<off_t>(size)) == 0 &&
                  ::pwrite(fd, head.data(), head.size(), 0) == static_cast<ssize_t>(head.size()) &&
                  ::pwrite(fd, middle.data(), middle.size(), static_cast<off_t>(middle_at)) ==
                      static_cast<ssize_t>(middle.size());
              ::close(fd);
              return ok ? 0 : 5;
            }),
            0);
  Mount("--no-migrate --cold-after 0 -o allow_other");
  auto r = RunCommand("timeout 120 " + Tbfs("migrate --now " + Quote(mnt_) + " 2>&1"));
  ASSERT_EQ(r.exit_code, 0) << r.out;
  for (const std::string& t : Traces("v")) EXPECT_EQ(State(M(t)), "cold") << t;
  ASSERT_EQ(State(M("u/huge.pt.trace.json")), "cold");
  struct stat st;
  ASSERT_EQ(::stat(M("u/huge.pt.trace.json").c_str(), &st), 0);
  EXPECT_EQ(static_cast<uint64_t>(st.st_size), size);
  EXPECT_LT(st.st_blocks, 1 << 16);  // what it takes in the store
  nlohmann::json s = Status();
  EXPECT_LT(s["cold"]["bytes"].get<uint64_t>(), uint64_t{1} << 30) << s["cold"].dump();
  EXPECT_LT(s["bytes_saved"].get<uint64_t>(), uint64_t{1} << 30) << s.dump();
  EXPECT_LT(s["growth"]["bytes"]["traces_hot"].get<uint64_t>(), uint64_t{1} << 30)
      << s["growth"].dump();

  // Through the mount: the bytes written, zeros around.
  auto read_at = [&](uint64_t offset, size_t n) {
    std::string out(n, 'x');
    UniqueFd fd(::open(M("u/huge.pt.trace.json").c_str(), O_RDONLY | O_CLOEXEC));
    if (!fd.valid() ||
        ::pread(fd.get(), out.data(), n, static_cast<off_t>(offset)) != static_cast<ssize_t>(n)) {
      return std::string("read failed");
    }
    return out;
  };
  EXPECT_EQ(read_at(0, head.size()), head);
  EXPECT_EQ(read_at(middle_at - 3, middle.size() + 6),
            std::string(3, '\0') + middle + std::string(3, '\0'));
  EXPECT_EQ(read_at(size - 5, 5), std::string(5, '\0'));
  EXPECT_EQ(read_at(uint64_t{3} << 40, 4096), std::string(4096, '\0'));

  // Its owner appends through the mount: it comes back hot, and sparse.
  const std::string more = "{}]}";
  ASSERT_EQ(AsUser([&] {
              int fd = ::open(M("u/huge.pt.trace.json").c_str(), O_WRONLY | O_APPEND);
              if (fd < 0) return 100 + errno;
              bool ok = ::write(fd, more.data(), more.size()) == static_cast<ssize_t>(more.size());
              ::close(fd);
              return ok ? 0 : 5;
            }),
            0)
      << MountLog();
  EXPECT_EQ(State(M("u/huge.pt.trace.json")), "hot");
  ASSERT_EQ(::stat(huge.c_str(), &st), 0);
  EXPECT_EQ(static_cast<uint64_t>(st.st_size), size + more.size());
  EXPECT_EQ(st.st_uid, 65534u);
  EXPECT_LT(st.st_blocks, 1 << 16);  // under 32 MiB on disk, as before
  EXPECT_EQ(read_at(middle_at, middle.size()), middle);
  EXPECT_EQ(read_at(size, more.size()), more);
}

// A chain of folders with 250-byte names and 200 folders at its bottom,
// just deeper than a walk goes: every pass meets 200 folders it does not
// enter, each named by a 250 KB path. Said in one line, once, not 200 lines of 250 KB per pass.
TEST_F(HostileUser, FoldersTooDeepToWalkDoNotFloodTheLog) {
  const std::string top = L("u/deep");
  ASSERT_EQ(
      AsUser([&] {
        if (::mkdir(top.c_str(), 0755) != 0) return 4;
        int fd = ::open(top.c_str(), O_RDONLY | O_DIRECTORY);
        const std::string name(250, 'd');
        // u/deep/<998 folders>/<200 folders>: the 200 are 1001
        // deep, one more than a walk enters.
        for (int depth = 0; depth < 998; ++depth) {
          if (::mkdirat(fd, name.c_str(), 0755) != 0) return 5;
          int next = ::openat(fd, name.c_str(), O_RDONLY | O_DIRECTORY);
          ::close(fd);
          if (next < 0) return 6;
          fd = next;
        }
        for (int i = 0; i < 200; ++i) {
          if (::mkdirat(fd, fmt::format("{:03}{}", i, std::string(247, 's')).c_str(), 0755) != 0)
            return 7;
        }
        ::close(fd);
        return 0;
      }),
      0);
  Mount("--cold-after 0 -o migrate_interval=1s");
  // A pass walks the 998 folders of 250-byte names: seconds each under a
  // sanitizer on a loaded machine (3 passes in 30 s once).
  WaitUntil([&] { return Status()["migrations"]["passes"].get<uint64_t>() >= 5; },
            std::chrono::milliseconds(120000), std::chrono::milliseconds(100));
  nlohmann::json s = Status();
  EXPECT_GE(s["migrations"]["passes"].get<uint64_t>(), 5u);
  EXPECT_GE(s["unwalked"]["entries"].get<uint64_t>(), 200u) << s["unwalked"].dump();
  for (const std::string& t : Traces("v")) EXPECT_EQ(State(M(t)), "cold") << t;
  const std::string log = MountLog();
  EXPECT_EQ(Count(log, "entries not walked"), 1u);
  EXPECT_LT(log.size(), 64u << 10) << "the log grew to " << log.size() << " bytes";
  Unmount();
  RunCommand("rm -rf " + Quote(top));  // too deep for the fixture's remove_all
}

// A folder's default ACL, not the creator's umask, says what a new file,
// folder or FIFO in it may do, as on a disk filesystem; elsewhere the umask
// applies (xfstests generic/099). The kernel applied the umask before the
// default ACL could say otherwise.
TEST_F(HostileUser, AFolderWithADefaultAclSetsNewModesNotTheUmask) {
  ASSERT_EQ(::mkdir(L("acldir").c_str(), 0777), 0);
  ASSERT_EQ(::mkdir(L("plain").c_str(), 0777), 0);
  const std::string inherit = AccessAcl(0540, {});  // u::r-x,g::r--,o::---
  ASSERT_EQ(::setxattr(L("acldir").c_str(), "system.posix_acl_default", inherit.data(),
                       inherit.size(), 0),
            0)
      << std::strerror(errno);
  Mount("--no-migrate -o allow_other");
  const mode_t umask_was = ::umask(0722);
  for (const char* folder : {"acldir", "plain"}) {
    const int fd = ::open(M(std::string(folder) + "/f").c_str(), O_CREAT | O_WRONLY, 0666);
    EXPECT_GE(fd, 0) << folder << ": " << std::strerror(errno);
    if (fd >= 0) ::close(fd);
    EXPECT_EQ(::mkdir(M(std::string(folder) + "/d").c_str(), 0777), 0) << std::strerror(errno);
    EXPECT_EQ(::mkfifo(M(std::string(folder) + "/p").c_str(), 0666), 0) << std::strerror(errno);
  }
  ::umask(umask_was);
  auto mode = [&](const std::string& rel) {
    struct stat st;
    return ::stat(M(rel).c_str(), &st) == 0 ? st.st_mode & 07777 : 07777;
  };
  EXPECT_EQ(mode("acldir/f"), 0440u);  // 0666 within u::r-x,g::r--,o::---
  EXPECT_EQ(mode("acldir/d"), 0540u);
  EXPECT_EQ(mode("acldir/p"), 0440u);
  EXPECT_EQ(mode("plain/f"), 0044u);  // 0666 less the umask 0722
  EXPECT_EQ(mode("plain/d"), 0055u);
  EXPECT_EQ(mode("plain/p"), 0044u);
  // A user's set-id file in their folder with a default ACL: the ACL's
  // permissions, the set-id bits kept (the daemon's chown to the user
  // cleared them); a FIFO's too.
  ASSERT_EQ(::mkdir(L("u/acl").c_str(), 0777), 0);
  ASSERT_EQ(::chown(L("u/acl").c_str(), kUser, kUser), 0);
  const std::string user_inherit = AccessAcl(0640, {});  // u::rw-,g::r--,o::---
  ASSERT_EQ(::setxattr(L("u/acl").c_str(), "system.posix_acl_default", user_inherit.data(),
                       user_inherit.size(), 0),
            0);
  EXPECT_EQ(AsUser([&] {
              ::umask(077);
              const int fd = ::open(M("u/acl/setid").c_str(), O_CREAT | O_WRONLY, 06777);
              if (fd < 0) return 1;
              ::close(fd);
              ::umask(0);
              return ::mkfifo(M("u/fifo").c_str(), 02777) == 0 ? 0 : 2;
            }),
            0);
  EXPECT_EQ(mode("u/acl/setid"), 06640u) << "the mode asked for replaced the default ACL's";
  EXPECT_EQ(mode("u/fifo"), 02777u);
}

// A write, truncation or fallocate by someone outside a file's group
// clears its set-group-ID bit, as on a disk filesystem, group execute or
// not; so does their setting an ACL, on a file or a folder (xfstests
// generic/375, 683-685). Root's changes keep it. The kernel's FUSE side
// cleared it only for group-executable files, and never for an ACL.
TEST_F(HostileUser, AChangeBySomeoneOutsideTheGroupClearsSetgid) {
  WriteBytes(L("shared.bin"), std::string(8192, 'x'));  // root's, group root
  ASSERT_EQ(::mkdir(L("u/sgid").c_str(), 0777), 0);
  ASSERT_EQ(::chown(L("u/sgid").c_str(), kUser, 0), 0);  // the user's, group root
  Mount("--no-migrate -o allow_other");
  const std::string f = M("shared.bin");
  auto mode = [](const std::string& path) {
    struct stat st;
    return ::stat(path.c_str(), &st) == 0 ? st.st_mode & 07777 : 07777;
  };
  // Each change, made by the user (then the bit goes) and by root (it stays).
  const std::vector<std::pair<std::string, std::function<int()>>> changes = {
      {"write",
       [&] {
         const int fd = ::open(f.c_str(), O_WRONLY);
         const bool ok = fd >= 0 && ::pwrite(fd, "y", 1, 10) == 1;
         if (fd >= 0) ::close(fd);
         return ok ? 0 : 1;
       }},
      {"truncate", [&] { return ::truncate(f.c_str(), 4096) == 0 ? 0 : 1; }},
      {"open with O_TRUNC",
       [&] {
         const int fd = ::open(f.c_str(), O_WRONLY | O_TRUNC);
         if (fd >= 0) ::close(fd);
         return fd >= 0 ? 0 : 1;
       }},
      {"fallocate", [&] {
         const int fd = ::open(f.c_str(), O_WRONLY);
         const bool ok = fd >= 0 && ::fallocate(fd, 0, 0, 65536) == 0;
         if (fd >= 0) ::close(fd);
         return ok ? 0 : 1;
       }}};
  for (const auto& [what, change] : changes) {
    ASSERT_EQ(::chmod(f.c_str(), 02666), 0);
    EXPECT_EQ(change(), 0) << what << " by root";
    EXPECT_EQ(mode(f), 02666u) << what << " by root";
    EXPECT_EQ(AsUser(change), 0) << what << " by the user";
    EXPECT_EQ(mode(f), 0666u) << what << " by the user, outside group root";
  }
  // Set-user-ID goes at any change of the data by anyone but root; the
  // kernel's FUSE side missed an O_TRUNC open.
  for (const auto& [what, change] : changes) {
    ASSERT_EQ(::chmod(f.c_str(), 04666), 0);
    EXPECT_EQ(AsUser(change), 0) << what << " by the user";
    EXPECT_EQ(mode(f), 0666u) << what << " by the user left set-user-ID";
  }
  const std::string acl = AccessAcl(0777, {});
  ASSERT_EQ(::chmod(M("u/sgid").c_str(), 02755), 0);
  EXPECT_EQ(AsUser([&] {
              return ::setxattr(M("u/sgid").c_str(), "system.posix_acl_access", acl.data(),
                                acl.size(), 0);
            }),
            0);
  EXPECT_EQ(mode(M("u/sgid")), 0777u) << "an ACL set by the owner, outside group root";
}

// What another user swaps in under a name the daemon has just made (by
// name: mkdir, mkfifo), before it gives it to its maker, is left as it is:
// a folder of root's renamed over the new one in that moment stays root's.
TEST_F(HostileUser, AFolderSwappedInUnderANewNameIsNeverGivenAway) {
  ASSERT_EQ(::mkdir(L("u/victim").c_str(), 0700), 0);  // root's, in the user's folder
  WriteBytes(L("u/victim/secret"), "root's");
  const std::string marker = dir_ / "pause";
  WriteBytes(marker, "");
  ASSERT_EQ(::setenv("TBFS_PAUSE", ("fixowner.made:" + marker).c_str(), 1), 0);
  Mount("--no-migrate -o allow_other");
  ::unsetenv("TBFS_PAUSE");
  const pid_t user = StartAsUser([&] { return ::mkdir(M("u/x").c_str(), 0755) == 0 ? 0 : 1; });
  const bool paused = WaitUntil([&] { return std::filesystem::exists(marker + ".reached"); },
                                std::chrono::milliseconds(10000));
  // The swap (the user may make it: the folder u is theirs).
  const int swapped = ::rename(L("u/victim").c_str(), L("u/x").c_str());
  std::filesystem::remove(marker);
  EXPECT_EQ(WaitForUser(user), 0);
  ASSERT_TRUE(paused) << "the mkdir never reached the point after it made the folder";
  ASSERT_EQ(swapped, 0) << std::strerror(errno);
  struct stat st;
  ASSERT_EQ(::stat(L("u/x").c_str(), &st), 0);
  EXPECT_EQ(st.st_uid, 0u) << "root's folder was given to the user";
  ASSERT_EQ(::stat(L("u/x/secret").c_str(), &st), 0);
  EXPECT_EQ(st.st_uid, 0u);
}

// A file that appears under a name in the moment between the kernel
// finding it missing and the daemon making it (written beside the mount)
// is opened only as the caller may open it, as open(2) of an existing
// file would: root's 0600 file, or a 0666 one whose ACL shuts the user
// out, is not truncated for the user; a 0666 one, or a 0660 one of a
// group the user is in (a supplementary group), is opened and truncated.
// The kernel checked the folder only.
TEST_F(HostileUser, AFileThatAppearsAsTheUserCreatesItIsOpenedOnlyAsTheUserMay) {
  const std::string marker = dir_ / "pause";
  ASSERT_EQ(::setenv("TBFS_PAUSE", ("create.looked_up:" + marker).c_str(), 1), 0);
  Mount("--no-migrate -o allow_other");
  ::unsetenv("TBFS_PAUSE");
  constexpr gid_t kGroup = 4242;
  struct Case {
    const char* name;
    mode_t mode;
    gid_t group;
    std::string acl;  // system.posix_acl_access, or none
    bool opens;
  };
  const Case cases[] = {
      {"root-0600", 0600, 0, "", false},
      {"everyone-0666", 0666, 0, "", true},
      {"acl-denies", 0666, 0, AccessAcl(0666, {{kUser, 0}}, 6), false},
      {"group-0660", 0660, kGroup, "", true},
  };
  for (const Case& c : cases) {
    const std::string rel = fmt::format("u/appears-{}", c.name);
    WriteBytes(marker, "");
    std::filesystem::remove(marker + ".reached");
    const pid_t user = StartAsUser(
        [&] {
          const int fd = ::open(M(rel).c_str(), O_CREAT | O_WRONLY | O_TRUNC | O_CLOEXEC, 0644);
          if (fd >= 0) {
            ::close(fd);
            return 0;
          }
          return errno == EACCES ? 1 : 2;
        },
        {kGroup});
    const bool paused = WaitUntil([&] { return std::filesystem::exists(marker + ".reached"); },
                                  std::chrono::milliseconds(10000));
    WriteBytes(L(rel), "root's");  // root's file, beside the mount
    ASSERT_EQ(::chown(L(rel).c_str(), 0, c.group), 0);
    ASSERT_EQ(::chmod(L(rel).c_str(), c.mode), 0);
    if (!c.acl.empty()) {
      ASSERT_EQ(
          ::setxattr(L(rel).c_str(), "system.posix_acl_access", c.acl.data(), c.acl.size(), 0), 0)
          << std::strerror(errno);
    }
    std::filesystem::remove(marker);
    const int opened = WaitForUser(user);
    ASSERT_TRUE(paused) << "the open never reached the daemon's create";
    struct stat st;
    ASSERT_EQ(::stat(L(rel).c_str(), &st), 0);
    EXPECT_EQ(st.st_uid, 0u) << rel;
    if (!c.opens) {
      EXPECT_EQ(opened, 1) << rel << " was opened for the user (0: opened, 2: other error)";
      EXPECT_EQ(ReadBytes(L(rel)), "root's") << rel << " was truncated for the user";
    } else {
      EXPECT_EQ(opened, 0) << rel << ": a file the user may write was not opened";
      EXPECT_EQ(st.st_size, 0) << rel << ": O_TRUNC left the file it opened as it was";
    }
  }
}

// A file removed beside the mount while the kernel still holds its entry:
// the user's open(O_CREAT) makes it again, as on any filesystem (red team:
// ENOENT for 8 s, the kernel's question for the ACL answered from
// /proc/self/fd/-1; root, who skips that check, got the file).
TEST_F(HostileUser, AFileRemovedBesideTheMountIsMadeAgainByTheUsersCreate) {
  Mount("--no-migrate -o allow_other");
  const std::string rel = "u/made-again";
  WriteBytes(L(rel), "old");
  ASSERT_EQ(::chmod(L(rel).c_str(), 0666), 0);
  for (int round = 0; round < 2; ++round) {
    if (round == 1) WriteBytes(L(rel), "old");
    EXPECT_EQ(AsUser([&] {
                struct stat st;
                return ::stat(M(rel).c_str(), &st) == 0 ? 0 : 1;
              }),
              0);
    ASSERT_EQ(::unlink(L(rel).c_str()), 0);
    const int made = AsUser([&] {
      const int fd = ::open(M(rel).c_str(), O_CREAT | O_WRONLY | O_CLOEXEC, 0644);
      if (fd < 0) return errno == ENOENT ? 1 : 2;
      const bool wrote = ::write(fd, "new", 3) == 3;
      ::close(fd);
      return wrote ? 0 : 3;
    });
    EXPECT_EQ(made, 0) << "round " << round << ": 1 is ENOENT";
    EXPECT_EQ(ReadBytes(L(rel)), "new");
    struct stat st;
    ASSERT_EQ(::stat(L(rel).c_str(), &st), 0);
    EXPECT_EQ(st.st_uid, kUser);
    ASSERT_EQ(::unlink(L(rel).c_str()), 0);
  }
}

// POSIX ACLs hold through the mount, hot and cold, and a cold file keeps
// its ACL and attributes (issue 21, finding 5): v's traces, root's, one
// with an ACL entry shutting the user out of a 0644 file, one granting the
// user read on a 0600 file. The kernel checked the mode bits only.
TEST_F(HostileUser, AclsHoldThroughTheMountHotAndColdAndComeBack) {
  std::vector<std::string> traces = Traces("v");
  ASSERT_GE(traces.size(), 3u);
  const std::string denied = traces[0], granted = traces[1], plain = traces[2];
  ASSERT_EQ(::chmod(L(plain).c_str(), 0600), 0);
  const std::string deny = AccessAcl(0644, {{kUser, 0}}, 4);
  const std::string grant = AccessAcl(0600, {{kUser, 4}}, 4);
  for (const auto& [rel, acl] : {std::pair{denied, deny}, std::pair{granted, grant}}) {
    ASSERT_EQ(::setxattr(L(rel).c_str(), "system.posix_acl_access", acl.data(), acl.size(), 0), 0)
        << std::strerror(errno);
    ASSERT_EQ(::setxattr(L(rel).c_str(), "user.note", "kept", 4, 0), 0) << std::strerror(errno);
  }
  // The user's view: 0 readable, 1 refused, 2 not even that (an error).
  auto user_reads = [&](const std::string& rel) {
    return AsUser([&] {
      const int fd = ::open(M(rel).c_str(), O_RDONLY);
      if (fd >= 0) {
        ::close(fd);
        return 0;
      }
      return errno == EACCES ? 1 : 2;
    });
  };
  auto xattr = [](const std::string& path, const char* name) {
    std::string v(4096, '\0');
    ssize_t n = ::getxattr(path.c_str(), name, v.data(), v.size());
    return n < 0 ? std::string("<") + std::strerror(errno) + ">" : v.substr(0, n);
  };
  Mount("--no-migrate --cold-after 0 -o allow_other");
  EXPECT_EQ(user_reads(denied), 1) << "hot: the ACL's deny entry was not enforced";
  EXPECT_EQ(user_reads(granted), 0) << "hot: the ACL's grant was not honoured";
  ASSERT_EQ(RunCommand(Tbfs("migrate --now " + mnt_ + " >/dev/null")).exit_code, 0);
  ASSERT_EQ(State(M(denied)), "cold");
  ASSERT_EQ(State(M(granted)), "cold");
  EXPECT_EQ(user_reads(denied), 1) << "cold: the ACL's deny entry was not enforced";
  EXPECT_EQ(user_reads(granted), 0) << "cold: the ACL's grant was not honoured";
  EXPECT_EQ(xattr(M(denied), "user.note"), "kept");
  EXPECT_EQ(xattr(M(denied), "system.posix_acl_access"), deny);
  std::string names(4096, '\0');
  ssize_t n = ::listxattr(M(denied).c_str(), names.data(), names.size());
  ASSERT_GT(n, 0);
  names.resize(static_cast<size_t>(n));
  EXPECT_NE(names.find("user.note"), std::string::npos);
  EXPECT_EQ(names.find("user.tbfs.state"), std::string::npos);
  // Attributes of a cold file change in place (it stays cold)...
  EXPECT_EQ(::setxattr(M(denied).c_str(), "user.more", "added", 5, 0), 0) << std::strerror(errno);
  EXPECT_EQ(xattr(M(denied), "user.more"), "added");
  EXPECT_EQ(::removexattr(M(denied).c_str(), "user.note"), 0) << std::strerror(errno);
  EXPECT_EQ(xattr(M(denied), "user.note"), "<" + std::string(std::strerror(ENODATA)) + ">");
  EXPECT_EQ(State(M(denied)), "cold");
  // ...and a chmod takes the ACL with it: group bits 0 mask the user's entry.
  ASSERT_EQ(::chmod(M(granted).c_str(), 0600), 0);
  EXPECT_EQ(State(M(granted)), "cold");
  EXPECT_EQ(user_reads(granted), 1) << "cold: chmod 0600 left the ACL's grant in force";
  ASSERT_EQ(::chmod(M(granted).c_str(), 0640), 0);
  EXPECT_EQ(user_reads(granted), 0);
  // No name a disk filesystem would refuse, and no more than it holds (a
  // cold file must always be able to go back): system.* but the ACL, or
  // a value too big for one attribute block.
  EXPECT_NE(::setxattr(M(denied).c_str(), "system.foo", "x", 1, 0), 0);
  EXPECT_EQ(errno, EOPNOTSUPP);
  const std::string big(60000, 'x');
  EXPECT_NE(::setxattr(M(denied).c_str(), "user.big", big.data(), big.size(), 0), 0);
  EXPECT_EQ(errno, ENOSPC);
  // A file without an ACL comes back without one, whatever default ACL
  // its folder got meanwhile (one granting the user everything here).
  ASSERT_EQ(State(M(plain)), "cold");
  const std::string folder = L(std::string(ParentPath(plain)));
  const std::string inherit = AccessAcl(0755, {{kUser, 7}}, 7);
  ASSERT_EQ(
      ::setxattr(folder.c_str(), "system.posix_acl_default", inherit.data(), inherit.size(), 0), 0)
      << std::strerror(errno);
  EXPECT_EQ(user_reads(plain), 1);
  {
    auto w = OpenFile(M(plain), O_WRONLY);  // rehydrates
    ASSERT_TRUE(w.ok()) << w.status().ToString();
  }
  EXPECT_EQ(State(M(plain)), "hot");
  EXPECT_EQ(user_reads(plain), 1) << "rehydrated: the folder's default ACL let the user in";
  // Back hot: the backing file has them all.
  {
    auto w = OpenFile(M(denied), O_WRONLY);  // rehydrates
    ASSERT_TRUE(w.ok()) << w.status().ToString();
  }
  EXPECT_EQ(State(M(denied)), "hot");
  EXPECT_EQ(xattr(L(denied), "system.posix_acl_access"), deny);
  EXPECT_EQ(xattr(L(denied), "user.more"), "added");
  EXPECT_EQ(user_reads(denied), 1) << "rehydrated: the ACL's deny entry was lost";
  Unmount();
}

// In a sticky shared folder, a user who writes a file straight into the
// logdir at another user's cold path (free in the backing folder) does not
// get it replaced (issue 21, finding 7): both contents stay, the conflict
// is shown, and the cold file is back once the other is gone.
// trusted.* attributes are root's, as on ext4: listed to root, not to
// other users, hot or cold (the kernel already refuses them the values).
TEST_F(HostileUser, TrustedAttributesAreListedToRootOnly) {
  std::vector<std::string> traces = Traces("v");
  ASSERT_GE(traces.size(), 2u);
  const std::string hot = "v/notes.txt";  // not a trace: stays hot
  WriteBytes(L(hot), "{}");
  for (const std::string& rel : {traces[0], hot}) {
    ASSERT_EQ(::setxattr(L(rel).c_str(), "trusted.admin", "secret", 6, 0), 0)
        << std::strerror(errno);
    ASSERT_EQ(::setxattr(L(rel).c_str(), "user.note", "open", 4, 0), 0) << std::strerror(errno);
  }
  Mount("--no-migrate --cold-after 0 -o allow_other");
  ASSERT_EQ(RunCommand(Tbfs("migrate --now " + mnt_ + " >/dev/null")).exit_code, 0);
  ASSERT_EQ(State(M(traces[0])), "cold");
  ASSERT_EQ(State(M(hot)), "hot");
  auto names = [](const std::string& path) {
    std::string out(4096, '\0');
    ssize_t n = ::listxattr(path.c_str(), out.data(), out.size());
    return n < 0 ? std::string("error") : out.substr(0, static_cast<size_t>(n));
  };
  for (const std::string& rel : {traces[0], hot}) {
    EXPECT_NE(names(M(rel)).find("trusted.admin"), std::string::npos) << rel;
    const int user = AsUser([&] {
      const std::string seen = names(M(rel));
      if (seen.find("user.note") == std::string::npos) return 2;
      return seen.find("trusted.") == std::string::npos ? 0 : 1;
    });
    EXPECT_EQ(user, 0) << rel << (user == 1 ? ": trusted.* listed to a user" : ": user.* missing");
  }
}

// A logdir on tmpfs, which keeps xattrs of any size (ext4 keeps one block).
class OnTmpfs : public MountTest {
 protected:
  void SetUp() override {
    MountTest::SetUp();
    logdir_ = shm_ / "logdir";
  }
  TempDir shm_{"/dev/shm"};
};

// A trace with more extended attributes than a cold file keeps (64 KiB)
// stays hot, said in status, the log and the metrics, and costs a pass no
// batch (each would write and flush a journal record for nothing).
TEST_F(OnTmpfs, ATraceWithXattrsOver64KiBStaysHotAndIsShown) {
  ASSERT_EQ(RunCommand(Tbfs("gen " + Quote(logdir_) +
                            " --runs 1 --steps 100 --trace-mb 1 "
                            ">/dev/null"))
                .exit_code,
            0);
  std::string big;
  for (const auto& e : std::filesystem::recursive_directory_iterator(logdir_)) {
    if (e.path().string().ends_with(".pt.trace.json")) big = e.path().string();
  }
  ASSERT_FALSE(big.empty());
  const std::string value(30000, 'x');
  for (const char* name : {"user.a", "user.b", "user.c"}) {
    ASSERT_EQ(::setxattr(big.c_str(), name, value.data(), value.size(), 0), 0)
        << std::strerror(errno);
  }
  const std::string rel = big.substr(logdir_.size() + 1);
  Mount("--no-migrate --cold-after 0");
  for (int pass = 0; pass < 3; ++pass) {
    ASSERT_EQ(RunCommand(Tbfs("migrate --now " + Quote(mnt_) + " >/dev/null")).exit_code, 0);
  }
  EXPECT_EQ(State(M(rel)), "hot");
  nlohmann::json s = Status();
  EXPECT_EQ(s["big_xattrs"]["files"].get<uint64_t>(), 1u) << s.dump();
  EXPECT_EQ(s["big_xattrs"]["examples"][0].get<std::string>(), rel);
  const uint64_t batches = s["migrations"]["batches"].get<uint64_t>();
  ASSERT_EQ(RunCommand(Tbfs("migrate --now " + Quote(mnt_) + " >/dev/null")).exit_code, 0);
  EXPECT_EQ(Status()["migrations"]["batches"].get<uint64_t>(), batches)
      << "a pass with nothing to move ran a batch";
  EXPECT_NE(RunCommand(Tbfs("status " + Quote(mnt_))).out.find("extended attributes over 64 KiB"),
            std::string::npos);
  const std::string log = ReadBytes(logdir_ + "/.tbfs/tbfs-mount.log");
  EXPECT_NE(log.find("extended attributes over 64 KiB"), std::string::npos) << log;
}

TEST_F(HostileUser, AFileAtAnotherOwnersColdPathInAStickyFolderReplacesNothing) {
  constexpr uid_t kAlice = 65533;
  ASSERT_EQ(::mkdir(L("shared").c_str(), 01777), 0);
  ASSERT_EQ(::chmod(L("shared").c_str(), 01777), 0);
  WriteBytes(L("shared/events.out.tfevents.1.host"), "");
  const std::string rel = "shared/alice.pt.trace.json";
  WriteBytes(L(rel), std::string(20000, 'a'));
  ASSERT_EQ(::chown(L(rel).c_str(), kAlice, kAlice), 0);
  Mount("--no-migrate --cold-after 0 -o allow_other");
  ASSERT_EQ(RunCommand(Tbfs("migrate --now " + mnt_ + " >/dev/null")).exit_code, 0);
  ASSERT_EQ(State(M(rel)), "cold");
  // The user writes at that name in the logdir itself, as a job would.
  ASSERT_EQ(AsUser([&] {
              const int fd = ::open(L(rel).c_str(), O_WRONLY | O_CREAT | O_EXCL, 0644);
              if (fd < 0) return 1;
              const std::string mine(30000, 'b');
              const bool ok = ::write(fd, mine.data(), mine.size()) == 30000;
              ::close(fd);
              return ok ? 0 : 2;
            }),
            0);
  auto r = RunCommand(Tbfs("migrate --now " + mnt_ + " 2>&1"));
  EXPECT_EQ(r.exit_code, 0) << r.out;
  EXPECT_EQ(ReadBytes(L(rel)), std::string(30000, 'b')) << "the user's file did not stay in place";
  nlohmann::json s = Status();
  EXPECT_EQ(s["conflicts"]["files"].get<uint64_t>(), 1u) << s.dump();
  auto plain = RunCommand(Tbfs("status " + mnt_));
  EXPECT_NE(plain.out.find("sticky folder"), std::string::npos) << plain.out;
  EXPECT_NE(MountLog().find("another owner's cold file"), std::string::npos);
  // The user removes their file through the mount: only theirs goes (the
  // sticky bit keeps them from removing the other's), and the cold file
  // shows again, as it was.
  // (The kernel may show the name as it was for up to 10 s: until then it
  // is the cold file, which the user may not remove.)
  struct stat seen {};
  WaitUntil([&] { return ::stat(M(rel).c_str(), &seen) == 0 && seen.st_size == 30000; },
            std::chrono::milliseconds(15000), std::chrono::milliseconds(100));
  ASSERT_EQ(seen.st_size, 30000) << "the mount never showed the user's file";
  EXPECT_EQ(AsUser([&] { return ::unlink(M(rel).c_str()) == 0 ? 0 : 1; }), 0);
  EXPECT_EQ(State(M(rel)), "cold");
  EXPECT_EQ(ReadBytes(M(rel)), std::string(20000, 'a')) << "the cold file was replaced";
  Unmount();
}

}  // namespace
}  // namespace tbfs::testing
