// Files in transition, through a real mount: identity (no two files share an
// inode number), continuity (a file being migrated or rehydrated stays
// visible and readable), open handles across hot/cold, writers outside the
// mount, the control channel, and the POSIX details external suites check.
#include <grp.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>

#include <algorithm>
#include <atomic>
#include <functional>
#include <future>
#include <map>
#include <random>
#include <set>
#include <thread>

#include "base/fs_util.h"
#include "fmt/format.h"
#include "fs/inode_table.h"
#include "tests/mount/mount_fixture.h"

namespace tbfs::testing {
namespace {

// Trace-like text (it compresses, as real traces do), different for every name.
std::string TraceText(const std::string& name, size_t bytes) {
  std::mt19937_64 rng(std::hash<std::string>()(name));
  std::string s = "{\"traceEvents\": [\n";
  while (s.size() < bytes) {
    s += fmt::format(
        "{{\"ph\": \"X\", \"name\": \"op{}\", \"ts\": {}, \"dur\": {}, \"tid\": {}}},\n",
        rng() % 500, rng() % 100000000, rng() % 10000, rng() % 16);
  }
  s.resize(bytes);
  return s;
}

// Writes `count` traces under `logdir/run` and one tfevents file; returns
// their contents by relative path.
std::map<std::string, std::string> WriteTraces(const std::string& logdir, int count, size_t bytes) {
  std::map<std::string, std::string> traces;
  for (int i = 0; i < count; ++i) {
    std::string rel = fmt::format("run/plugins/profile/t{:02}.pt.trace.json", i);
    traces[rel] = TraceText(rel, bytes);
    WriteBytes(logdir + "/" + rel, traces[rel]);
  }
  WriteBytes(logdir + "/run/events.out.tfevents.1.host", "");
  return traces;
}

// Every regular file under the mount by (st_dev, st_ino); fails the test
// when two paths share one.
void ExpectUniqueIdentities(const std::string& mnt) {
  std::map<std::pair<dev_t, ino_t>, std::string> seen;
  for (const auto& e : std::filesystem::recursive_directory_iterator(mnt)) {
    struct stat st;
    ASSERT_EQ(::lstat(e.path().c_str(), &st), 0) << e.path();
    auto [it, fresh] = seen.emplace(std::make_pair(st.st_dev, st.st_ino), e.path().string());
    EXPECT_TRUE(fresh) << e.path() << " and " << it->second << " share st_ino " << st.st_ino;
  }
}

// A handler that does nothing for `sig`, without SA_RESTART (a system call
// it interrupts returns EINTR), for the scope's length.
class QuietSignal {
 public:
  explicit QuietSignal(int sig) : sig_(sig) {
    struct sigaction quiet {};
    quiet.sa_handler = [](int) {};
    sigemptyset(&quiet.sa_mask);
    EXPECT_EQ(::sigaction(sig, &quiet, &old_), 0);
  }
  ~QuietSignal() { ::sigaction(sig_, &old_, nullptr); }

 private:
  int sig_;
  struct sigaction old_ {};
};

// The value of extended attribute `name` of `path`, or "" when it has none.
std::string XattrOf(const std::string& path, const char* name) {
  char value[256];
  const ssize_t n = ::getxattr(path.c_str(), name, value, sizeof(value));
  return n < 0 ? "" : std::string(value, static_cast<size_t>(n));
}

class Transitions : public MountTest {
 protected:
  void MigrateNow() {
    auto r = RunCommand(Tbfs("migrate --now " + mnt_ + " 2>&1"));
    ASSERT_EQ(r.exit_code, 0) << r.out;
  }
  void ExpectTracesIntact() {
    for (const auto& [rel, bytes] : traces_) EXPECT_TRUE(ReadBytes(M(rel)) == bytes) << rel;
  }
  std::map<std::string, std::string> traces_;
};

// The logdir on a fresh, small ext4 filesystem of its own, where a freed
// inode number is handed to the next file created: number reuse is certain.
class SmallFsTransitions : public Transitions {
 protected:
  void SetUp() override {
    Transitions::SetUp();
    if (HasFatalFailure()) return;
    std::string img = dir_ / "fs.img", fs = dir_ / "fs";
    std::filesystem::create_directories(fs);
    auto r = RunCommand("truncate -s 64M " + img + " && mkfs.ext4 -q -F " + img +
                        " && mount -o loop " + img + " " + fs + " 2>&1");
    ASSERT_EQ(r.exit_code, 0) << "this test needs a loop-mounted ext4 (root, a loop device): "
                              << r.out;
    loop_ = fs;
    logdir_ = fs + "/logdir";
    std::filesystem::create_directories(logdir_);
  }
  void TearDown() override {
    Unmount();
    if (!loop_.empty()) RunCommand("umount " + loop_ + " 2>/dev/null || umount -l " + loop_);
  }
  std::string loop_;
};

// A trace whose name is NAME_MAX bytes long moves, reads back, and comes
// back hot when written (red team: it could never move, its name aside
// longer than NAME_MAX, and said nothing).
TEST_F(Transitions, ATraceWithANameOfNameMaxBytesMovesAndComesBack) {
  const std::string rel = "run/" + std::string(255 - 14, 'x') + ".pt.trace.json";
  ASSERT_EQ(BaseName(rel).size(), 255u);
  traces_[rel] = TraceText(rel, 256 << 10);
  WriteBytes(L(rel), traces_[rel]);
  WriteBytes(L("run/events.out.tfevents.1.host"), "");
  Mount("--no-migrate --cold-after 0");
  MigrateNow();
  EXPECT_EQ(State(M(rel)), "cold");
  EXPECT_TRUE(ReadBytes(M(rel)) == traces_[rel]);
  {
    auto fd = OpenFile(M(rel), O_WRONLY | O_APPEND);  // rehydrates
    ASSERT_TRUE(fd.ok()) << fd.status().ToString();
    ASSERT_TRUE(WriteAll(fd->get(), "+W", 2, M(rel)).ok());
  }
  EXPECT_EQ(State(M(rel)), "hot");
  EXPECT_TRUE(ReadBytes(L(rel)) == traces_[rel] + "+W");
  for (const auto& e : std::filesystem::directory_iterator(L("run")))
    EXPECT_EQ(e.path().filename().string().find(".tbfs-"), std::string::npos) << e.path();
}

TEST_F(SmallFsTransitions, ReusedInodeNumbersNeverGiveTwoFilesOneIdentity) {
  traces_ = WriteTraces(logdir_, 20, 256 << 10);
  Mount("--no-migrate --cold-after 0");
  MigrateNow();
  for (const auto& [rel, bytes] : traces_) ASSERT_EQ(State(M(rel)), "cold") << rel;
  // New files take the inode numbers the migrated traces freed.
  std::map<std::string, std::string> fresh;
  for (int i = 0; i < 40; ++i) {
    std::string rel = fmt::format("run/new{:02}.bin", i);  // never a trace
    fresh[rel] = TraceText(rel, 4096);
    WriteBytes(M(rel), fresh[rel]);
  }
  for (int mount = 0; mount < 2; ++mount) {
    ExpectUniqueIdentities(mnt_);
    ExpectTracesIntact();
    for (const auto& [rel, bytes] : fresh) {
      EXPECT_EQ(State(M(rel)), "hot") << rel;
      EXPECT_TRUE(ReadBytes(M(rel)) == bytes) << rel;
    }
    Unmount();
    Mount("--no-migrate --cold-after 0");  // and the same after a remount
  }
}

TEST_F(SmallFsTransitions, FilesCreatedDuringAMigrationKeepTheirOwnBytes) {
  traces_ = WriteTraces(logdir_, 20, 512 << 10);
  Mount("--no-migrate --cold-after 0");
  std::thread migrate([&] { MigrateNow(); });
  std::map<std::string, std::string> fresh;
  for (int i = 0; i < 60; ++i) {
    std::string rel = fmt::format("run/new{:02}.bin", i);  // never a trace
    fresh[rel] = TraceText(rel, 8192);
    WriteBytes(M(rel), fresh[rel]);
  }
  migrate.join();
  for (const auto& [rel, bytes] : fresh) {
    EXPECT_EQ(State(M(rel)), "hot") << rel;
    EXPECT_TRUE(ReadBytes(M(rel)) == bytes) << rel;
  }
  ExpectTracesIntact();
  ExpectUniqueIdentities(mnt_);
}

TEST_F(Transitions, AFileBeingMigratedStaysVisibleAndReadable) {
  traces_ = WriteTraces(logdir_, 24, 1 << 20);
  Mount("--no-migrate --cold-after 0");
  std::atomic<bool> done{false};
  std::atomic<int> rounds{0};
  std::mutex mu;
  std::map<std::string, int> errors;  // what failed, by operation and errno
  auto fail = [&](const std::string& what) {
    std::lock_guard<std::mutex> lock(mu);
    errors[what + ": " + std::strerror(errno)]++;
  };
  std::vector<std::thread> readers;
  for (int t = 0; t < 2; ++t) {
    readers.emplace_back([&, t] {
      while (!done) {
        for (const auto& [rel, bytes] : traces_) {
          struct stat st;
          if (::stat(M(rel).c_str(), &st) != 0) fail("stat");
          std::string state = State(M(rel));
          if (state != "hot" && state != "cold") fail("getxattr");
          auto fd = OpenFile(M(rel), O_RDONLY);
          if (!fd.ok()) {
            fail("open");
            continue;
          }
          std::string buf(bytes.size() + 1, '\0');
          size_t got = 0;
          if (!PreadFull(fd->get(), buf.data(), buf.size(), 0, &got, rel).ok()) fail("read");
          if (got != bytes.size() || std::memcmp(buf.data(), bytes.data(), got) != 0) {
            errno = 0;
            fail("wrong bytes");
          }
        }
        if (t == 0) rounds++;
      }
    });
  }
  MigrateNow();
  done = true;
  for (auto& r : readers) r.join();
  for (const auto& [what, n] : errors) ADD_FAILURE() << n << " x " << what;
  EXPECT_GT(rounds.load(), 0);
  for (const auto& [rel, bytes] : traces_) EXPECT_EQ(State(M(rel)), "cold") << rel;
}

TEST_F(Transitions, AColdReaderKeepsReadingWhenTheFileIsRehydrated) {
  traces_ = WriteTraces(logdir_, 2, 4 << 20);
  Mount("--no-migrate --cold-after 0");
  MigrateNow();
  const std::string rel = traces_.begin()->first;
  const std::string& want = traces_.begin()->second;
  ASSERT_EQ(State(M(rel)), "cold");
  auto reader = OpenFile(M(rel), O_RDONLY);
  ASSERT_TRUE(reader.ok());
  std::string buf(want.size(), '\0');
  size_t got = 0;
  ASSERT_TRUE(PreadFull(reader->get(), buf.data(), 1 << 20, 0, &got, rel).ok());
  ASSERT_EQ(got, 1u << 20);
  // Another process opens it for writing: it is rehydrated under the reader.
  auto writer = OpenFile(M(rel), O_RDWR);
  ASSERT_TRUE(writer.ok()) << writer.status().ToString();
  EXPECT_EQ(State(M(rel)), "hot");
  auto rest = PreadFull(reader->get(), buf.data() + got, want.size() - got, got, &got, rel);
  ASSERT_TRUE(rest.ok()) << rest.ToString();
  got += 1 << 20;
  EXPECT_EQ(got, want.size());
  EXPECT_TRUE(buf == want);
  // The reader sees what a reader of the same file on a disk would: the
  // writer's bytes.
  ASSERT_EQ(::pwrite(writer->get(), "XYZ", 3, 2 << 20), 3);
  char three[3];
  ASSERT_EQ(::pread(reader->get(), three, 3, 2 << 20), 3);
  EXPECT_EQ(std::string(three, 3), "XYZ");
}

TEST_F(Transitions, EightReadersRaceARehydration) {
  traces_ = WriteTraces(logdir_, 1, 8 << 20);
  Mount("--no-migrate --cold-after 0 --cache 2M");
  MigrateNow();
  const std::string rel = traces_.begin()->first;
  const std::string& want = traces_.begin()->second;
  std::atomic<bool> go{false}, stop{false};
  std::atomic<int> reads{0}, bad{0};
  std::vector<std::thread> readers;
  for (int t = 0; t < 8; ++t) {
    readers.emplace_back([&, t] {
      auto fd = OpenFile(M(rel), O_RDONLY);
      if (!fd.ok()) {
        bad++;
        return;
      }
      std::mt19937_64 rng(t);
      std::string buf(256 << 10, '\0');
      while (!go) std::this_thread::yield();
      while (!stop) {
        uint64_t off = rng() % want.size();
        size_t got = 0;
        if (!PreadFull(fd->get(), buf.data(), buf.size(), off, &got, rel).ok() ||
            got != std::min<uint64_t>(buf.size(), want.size() - off) ||
            std::memcmp(buf.data(), want.data() + off, got) != 0) {
          bad++;
        }
        reads++;
      }
    });
  }
  go = true;
  while (reads < 200) std::this_thread::yield();
  auto touch = OpenFile(M(rel), O_RDWR);  // rehydrates, changes nothing
  ASSERT_TRUE(touch.ok());
  touch->reset();
  int until = reads + 400;
  while (reads < until) std::this_thread::yield();
  stop = true;
  for (auto& r : readers) r.join();
  EXPECT_EQ(bad.load(), 0) << "of " << reads.load() << " reads";
  EXPECT_EQ(State(M(rel)), "hot");
}

TEST_F(Transitions, AColdReaderKeepsReadingAfterUnlinkAndRename) {
  traces_ = WriteTraces(logdir_, 2, 3 << 20);
  Mount("--no-migrate --cold-after 0 --cache 1M");
  MigrateNow();
  auto first = traces_.begin(), second = std::next(first);
  auto a = OpenFile(M(first->first), O_RDONLY);
  auto b = OpenFile(M(second->first), O_RDONLY);
  ASSERT_TRUE(a.ok() && b.ok());
  ASSERT_EQ(::unlink(M(first->first).c_str()), 0);
  ASSERT_EQ(::rename(M(second->first).c_str(), M("run/renamed.json").c_str()), 0);
  for (auto [fd, want] :
       {std::pair{a->get(), &first->second}, std::pair{b->get(), &second->second}}) {
    std::string buf(want->size(), '\0');
    size_t got = 0;
    ASSERT_TRUE(PreadFull(fd, buf.data(), buf.size(), 0, &got, "cold").ok());
    EXPECT_TRUE(buf == *want);
  }
  EXPECT_TRUE(ReadBytes(M("run/renamed.json")) == second->second);
}

TEST_F(Transitions, AWriterInTheLogdirKeepsItsFile) {
  traces_ = WriteTraces(logdir_, 3, 256 << 10);
  const std::string rel = traces_.begin()->first;
  // A profiler that keeps its trace open and appends now and then, writing
  // in the logdir directly, not through the mount.
  auto writer = OpenFile(L(rel), O_WRONLY | O_APPEND);
  ASSERT_TRUE(writer.ok());
  Mount("--no-migrate --cold-after 0");
  MigrateNow();
  ASSERT_TRUE(WriteAll(writer->get(), "+late", 5, rel).ok());
  writer->reset();
  EXPECT_EQ(State(M(rel)), "hot");
  EXPECT_TRUE(ReadBytes(L(rel)) == traces_[rel] + "+late");
  EXPECT_TRUE(ReadBytes(M(rel)) == traces_[rel] + "+late");
  for (const auto& [other, bytes] : traces_) {
    if (other != rel) {
      EXPECT_EQ(State(M(other)), "cold") << other;
    }
  }
}

TEST_F(Transitions, MigrateNowLeavesTheTreeUsable) {
  traces_ = WriteTraces(logdir_, 4, 256 << 10);
  std::string marker = dir_ / "pause";
  WriteBytes(marker, "");
  auto r = RunCommand("TBFS_PAUSE=migrate.batch:" + marker + " " +
                      Tbfs("mount " + logdir_ + " " + mnt_ + " --no-migrate --cold-after 0 2>&1"));
  ASSERT_EQ(r.exit_code, 0) << r.out;
  pid_ = Status()["pid"].get<int>();
  std::thread migrate([&] { MigrateNow(); });
  // However the test ends, the pass is let go and waited for.
  std::shared_ptr<void> release(nullptr, [&](void*) {
    std::filesystem::remove(marker);
    migrate.join();
  });
  WaitUntil([&] { return std::filesystem::exists(marker + ".reached"); },
            std::chrono::milliseconds(30000));
  ASSERT_TRUE(std::filesystem::exists(marker + ".reached")) << "the migration never started";
  // While the pass is held in the middle of a batch, the tree works.
  auto during = std::async(std::launch::async, [&] {
    bool ok = ::mkdir(M("made_during").c_str(), 0755) == 0;
    ok = ok && std::filesystem::exists(M("made_during"));
    ok = ok && std::distance(std::filesystem::directory_iterator(mnt_),
                             std::filesystem::directory_iterator()) >= 2;
    WriteBytes(M("new_during.txt"), "x");
    ok = ok && ReadBytes(M("new_during.txt")) == "x";
    ok = ok && Status()["migrations"]["passes"].get<int>() >= 0;
    return ok;
  });
  bool finished = during.wait_for(std::chrono::seconds(20)) == std::future_status::ready;
  release.reset();
  ASSERT_TRUE(finished) << "the mount's root was frozen by a migration in progress";
  EXPECT_TRUE(during.get());
  for (const auto& [rel, bytes] : traces_) EXPECT_EQ(State(M(rel)), "cold") << rel;
}

TEST_F(Transitions, StatusIsForRootAndTheMountsOwnerOnly) {
  traces_ = WriteTraces(logdir_, 1, 4096);
  Mount("--no-migrate -o allow_other");
  ASSERT_EQ(::chmod(dir_.path().c_str(), 0755), 0);
  auto as_nobody = RunCommand("setpriv --reuid=65534 --regid=65534 --clear-groups " +
                              Tbfs("status --json " + mnt_ + " 2>&1"));
  EXPECT_EQ(as_nobody.exit_code, 2) << as_nobody.out;
  EXPECT_EQ(as_nobody.out.find(logdir_), std::string::npos) << as_nobody.out;
  auto migrate = RunCommand("setpriv --reuid=65534 --regid=65534 --clear-groups " +
                            Tbfs("migrate --now " + mnt_ + " 2>&1"));
  EXPECT_EQ(migrate.exit_code, 2) << migrate.out;
  EXPECT_EQ(RunCommand(Tbfs("status " + mnt_ + " >/dev/null")).exit_code, 0);
}

TEST_F(Transitions, ODirectWritesWork) {
  traces_ = WriteTraces(logdir_, 1, 4096);
  Mount();
  void* raw = nullptr;
  ASSERT_EQ(::posix_memalign(&raw, 4096, 8192), 0);
  std::unique_ptr<char, decltype(&std::free)> buf(static_cast<char*>(raw), &std::free);
  for (int i = 0; i < 8192; ++i) buf.get()[i] = static_cast<char>('a' + i % 26);
  int fd = ::open(M("direct.bin").c_str(), O_CREAT | O_WRONLY | O_DIRECT | O_CLOEXEC, 0644);
  ASSERT_GE(fd, 0) << std::strerror(errno);
  EXPECT_EQ(::write(fd, buf.get(), 8192), 8192) << std::strerror(errno);
  EXPECT_EQ(::pwrite(fd, buf.get(), 4096, 8192), 4096) << std::strerror(errno);
  ::close(fd);
  std::string want(buf.get(), 8192);
  want.append(buf.get(), 4096);
  EXPECT_TRUE(ReadBytes(L("direct.bin")) == want);
  auto dd = RunCommand("dd if=/dev/zero of=" + M("dd.bin") +
                       " bs=4096 count=4 oflag=direct status=none 2>&1");
  EXPECT_EQ(dd.exit_code, 0) << dd.out;
  EXPECT_EQ(std::filesystem::file_size(L("dd.bin")), 16384u);
}

// What an O_DIRECT handle writes is what every other handle reads next,
// buffered (its pages cached by an earlier read) or mapped, and the O_DIRECT
// handle itself can be mapped shared (xfstests generic/091, 263, 451).
TEST_F(Transitions, ODirectWritesAreSeenByCachedReadersAndTheHandleCanBeMapped) {
  traces_ = WriteTraces(logdir_, 1, 4096);
  WriteBytes(L("f.bin"), std::string(8192, 'o'));
  Mount("--no-migrate");
  UniqueFd reader(::open(M("f.bin").c_str(), O_RDONLY | O_CLOEXEC));
  ASSERT_TRUE(reader.valid()) << std::strerror(errno);
  std::string got(8192, '\0');
  ASSERT_EQ(::pread(reader.get(), got.data(), got.size(), 0), 8192);  // now in the page cache
  ASSERT_EQ(got, std::string(8192, 'o'));
  void* raw = nullptr;
  ASSERT_EQ(::posix_memalign(&raw, 4096, 4096), 0);
  std::unique_ptr<char, decltype(&std::free)> block(static_cast<char*>(raw), &std::free);
  std::memset(block.get(), 'n', 4096);
  UniqueFd direct(::open(M("f.bin").c_str(), O_RDWR | O_DIRECT | O_CLOEXEC));
  ASSERT_TRUE(direct.valid()) << std::strerror(errno);
  ASSERT_EQ(::pwrite(direct.get(), block.get(), 4096, 0), 4096) << std::strerror(errno);
  const std::string want = std::string(4096, 'n') + std::string(4096, 'o');
  ASSERT_EQ(::pread(reader.get(), got.data(), got.size(), 0), 8192);
  EXPECT_TRUE(got == want) << "a cached reader read stale bytes after an O_DIRECT write";
  EXPECT_TRUE(ReadBytes(M("f.bin")) == want);
  void* map = ::mmap(nullptr, 8192, PROT_READ | PROT_WRITE, MAP_SHARED, direct.get(), 0);
  ASSERT_NE(map, MAP_FAILED) << "a shared mmap of an O_DIRECT handle: " << std::strerror(errno);
  EXPECT_EQ(std::string(static_cast<const char*>(map), 8192), want);
  static_cast<char*>(map)[8191] = 'm';
  ASSERT_EQ(::msync(map, 8192, MS_SYNC), 0) << std::strerror(errno);
  ::munmap(map, 8192);
  EXPECT_EQ(ReadBytes(L("f.bin")).back(), 'm');
}

TEST_F(Transitions, ModesAreExactlyWhatTheCallerAsked) {
  traces_ = WriteTraces(logdir_, 1, 4096);
  Mount("--no-migrate -o allow_other");
  mode_t old = ::umask(0);
  int fd = ::open(M("m.txt").c_str(), O_CREAT | O_WRONLY | O_CLOEXEC, 0666);
  EXPECT_GE(fd, 0);
  if (fd >= 0) ::close(fd);
  EXPECT_EQ(::mkdir(M("d").c_str(), 0777), 0);
  ::umask(old);
  struct stat st;
  ASSERT_EQ(::stat(L("m.txt").c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 07777, 0666u);
  ASSERT_EQ(::stat(L("d").c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 07777, 0777u);

  // Another user creates files with set-id bits: they keep them.
  ASSERT_EQ(::chmod(dir_.path().c_str(), 0755), 0);
  ASSERT_EQ(::chmod(L("").c_str(), 0777), 0);
  for (mode_t mode : {mode_t{04755}, mode_t{02755}, mode_t{0640}}) {
    std::string name = fmt::format("by_nobody_{:o}", mode);
    std::string path = M(name);
    pid_t child = ::fork();
    if (child == 0) {
      if (::setgroups(0, nullptr) != 0 || ::setgid(65534) != 0 || ::setuid(65534) != 0) _exit(3);
      ::umask(0);
      int f = ::open(path.c_str(), O_CREAT | O_WRONLY | O_CLOEXEC, mode);
      _exit(f >= 0 ? 0 : 1);
    }
    int status = 0;
    ASSERT_EQ(::waitpid(child, &status, 0), child);
    ASSERT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << name;
    ASSERT_EQ(::stat(L(name).c_str(), &st), 0);
    EXPECT_EQ(st.st_mode & 07777, mode) << name;
    EXPECT_EQ(st.st_uid, 65534u) << name;
  }
}

}  // namespace
}  // namespace tbfs::testing

namespace tbfs::testing {
namespace {

// Mounts with the migration held at `point` while a marker file exists
// (base/failpoint.h); the returned guard lets it go and waits for the pass.
class PausedTransitions : public Transitions {
 protected:
  // `dies`: the test kills the daemon, or it dies at `crash_at`
  // (TBFS_FAILPOINT); the pass it was asked for fails with it.
  void MountPausedAt(const std::string& point, bool dies = false,
                     const std::string& crash_at = "") {
    marker_ = dir_ / "pause";
    WriteBytes(marker_, "");
    const std::string crash = crash_at.empty() ? "" : "TBFS_FAILPOINT=" + crash_at + " ";
    auto r = RunCommand(
        crash + "TBFS_PAUSE=" + point + ":" + marker_ + " " +
        Tbfs("mount " + logdir_ + " " + mnt_ + " --no-migrate --cold-after 0 -o allow_other 2>&1"));
    ASSERT_EQ(r.exit_code, 0) << r.out;
    pid_ = Status()["pid"].get<int>();
    if (!dies) {
      migrate_ = std::thread([this] { MigrateNow(); });
    } else {
      migrate_ = std::thread([this] { RunCommand(Tbfs("migrate --now " + mnt_ + " 2>&1")); });
    }
    WaitUntil([&] { return std::filesystem::exists(marker_ + ".reached"); },
              std::chrono::milliseconds(30000));
    ASSERT_TRUE(std::filesystem::exists(marker_ + ".reached")) << point << " never reached";
  }
  void Release() {
    std::filesystem::remove(marker_);
    if (migrate_.joinable()) migrate_.join();
  }
  void TearDown() override {
    Release();
    Transitions::TearDown();
  }
  // The name the file `rel` has while it waits aside in its folder.
  std::string AsideOf(const std::string& rel) {
    std::string dir = ParentPath(rel), base = std::string(BaseName(rel));
    for (const auto& e : std::filesystem::directory_iterator(L(dir))) {
      std::string n = e.path().filename();
      if (n.starts_with("." + base + ".tbfs-mig-")) return JoinPath(dir, n);
    }
    return "";
  }
  // The daemon gone (killed, or dead at its failpoint): the mount goes, a
  // new one recovers what the batch left.
  // (`meanwhile` runs between the two.)
  void RemountAfterItsDeath(const std::function<void()>& meanwhile = nullptr) {
    WaitUntil([&] { return !Alive(pid_); }, std::chrono::milliseconds(10000));
    ASSERT_FALSE(Alive(pid_)) << "the daemon did not die";
    Release();
    RunCommand("fusermount3 -u -z " + mnt_ + " 2>/dev/null");
    WaitForExit();
    if (meanwhile) meanwhile();
    Mount("--no-migrate");
  }
  // What a migration or a recovery left under the logdir's run/.
  std::vector<std::string> Leftovers() {
    std::vector<std::string> left;
    for (const auto& e : std::filesystem::recursive_directory_iterator(L("run")))
      if (e.path().filename().string().find("tbfs-") != std::string::npos) left.push_back(e.path());
    return left;
  }
  // The traces migrated, then a mount that stops the rehydrations it
  // makes at `point` (the first to reach it waits there until Release).
  void MigrateThenMountPausedAt(const std::string& point) {
    Mount("--no-migrate --cold-after 0");
    MigrateNow();
    Unmount();
    marker_ = dir_ / "pause";
    WriteBytes(marker_, "");
    auto r = RunCommand("TBFS_PAUSE=" + point + ":" + marker_ + " " +
                        Tbfs("mount " + logdir_ + " " + mnt_ + " --no-migrate 2>&1"));
    ASSERT_EQ(r.exit_code, 0) << r.out;
    pid_ = Status()["pid"].get<int>();
  }
  // After RemountAfterItsDeath: `rel`, deleted through the mount while it
  // waited aside, stays deleted, and nothing is called lost.
  void ExpectDeletedNotLostAfterTheRestart(const std::string& rel) {
    RemountAfterItsDeath();
    EXPECT_FALSE(std::filesystem::exists(M(rel))) << "a file deleted through the mount came back";
    EXPECT_FALSE(std::filesystem::exists(L(rel)));
    EXPECT_TRUE(Leftovers().empty()) << ::testing::PrintToString(Leftovers());
    auto status = RunCommand(Tbfs("status " + mnt_ + " 2>&1"));
    EXPECT_EQ(status.exit_code, 0) << status.out;
    EXPECT_EQ(Status()["lost"].value("files", uint64_t{1}), 0u) << Status().dump();
    Unmount();
    auto fsck = RunCommand(Tbfs("fsck " + logdir_ + " 2>&1"));
    EXPECT_EQ(fsck.exit_code, 0) << fsck.out;
  }
  std::string marker_;
  std::thread migrate_;
};

TEST_F(PausedTransitions, ChangesMadeWhileAFileWaitsAsideSurviveAWriterComing) {
  traces_ = WriteTraces(logdir_, 1, 256 << 10);
  const std::string rel = traces_.begin()->first, renamed = "run/renamed.pt.trace.json";
  MountPausedAt("migrate.staged");
  std::string aside = AsideOf(rel);
  ASSERT_FALSE(aside.empty());
  EXPECT_EQ(State(M(rel)), "cold");  // served from the store meanwhile
  // Through the mount: a rename and a chmod, done to the store's copy.
  ASSERT_EQ(::rename(M(rel).c_str(), M(renamed).c_str()), 0);
  ASSERT_EQ(::chmod(M(renamed).c_str(), 0640), 0);
  ASSERT_EQ(::setxattr(M(renamed).c_str(), "user.t", "7", 1, 0), 0) << std::strerror(errno);
  // A writer that had found the file before it moved opens it now.
  std::thread writer([&] {
    auto fd = OpenFile(L(aside), O_WRONLY | O_APPEND);  // waits for the lease
    if (fd.ok()) (void)WriteAll(fd->get(), "+W", 2, aside);
  });
  WaitUntil([&] { return ReadBytes("/proc/locks").find("BREAKING") != std::string::npos; },
            std::chrono::milliseconds(5000));
  Release();
  writer.join();
  EXPECT_FALSE(std::filesystem::exists(M(rel)));
  EXPECT_EQ(State(M(renamed)), "hot");
  EXPECT_TRUE(ReadBytes(M(renamed)) == traces_[rel] + "+W");
  struct stat st;
  ASSERT_EQ(::stat(L(renamed).c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 07777, 0640u);
  EXPECT_EQ(XattrOf(L(renamed), "user.t"), "7");  // it was lost
  ExpectUniqueIdentities(mnt_);
}

TEST_F(PausedTransitions, AFileDeletedWhileItWaitsAsideStaysDeleted) {
  traces_ = WriteTraces(logdir_, 1, 64 << 10);
  const std::string rel = traces_.begin()->first;
  MountPausedAt("migrate.staged");
  ASSERT_EQ(::unlink(M(rel).c_str()), 0);
  Release();
  EXPECT_FALSE(std::filesystem::exists(M(rel)));
  EXPECT_FALSE(std::filesystem::exists(L(rel)));
  EXPECT_TRUE(AsideOf(rel).empty());
  auto ls = RunCommand(Tbfs("fsck " + logdir_ + " 2>&1"));
  EXPECT_EQ(ls.exit_code, 0) << ls.out;
}

// Killed (kill -9) while the file waits aside, after its delete through
// the mount: the file aside is not put back.
TEST_F(PausedTransitions, AFileDeletedWhileItWaitsAsideStaysDeletedWhenTheDaemonIsKilledThere) {
  traces_ = WriteTraces(logdir_, 1, 64 << 10);
  const std::string rel = traces_.begin()->first;
  MountPausedAt("migrate.staged", true);
  ASSERT_FALSE(AsideOf(rel).empty());
  ASSERT_EQ(::unlink(M(rel).c_str()), 0);
  ASSERT_EQ(::kill(pid_, SIGKILL), 0);
  ExpectDeletedNotLostAfterTheRestart(rel);
}

// Dead after the batch removed the file aside (the delete through the
// mount done to it), before the batch's commit: deleted, not lost.
TEST_F(PausedTransitions, AFileDeletedWhileItWaitsAsideIsNotLostWhenTheDaemonDiesBeforeTheCommit) {
  traces_ = WriteTraces(logdir_, 1, 64 << 10);
  const std::string rel = traces_.begin()->first;
  MountPausedAt("migrate.staged", true, "migrate.all_unlinked");
  ASSERT_EQ(::unlink(M(rel).c_str()), 0);
  Release();
  ExpectDeletedNotLostAfterTheRestart(rel);
}

// A file the batch journaled and left in place (a writer had it open),
// deleted through the mount before the batch commits, then killed: not
// lost (red team: recorded LOST).
TEST_F(PausedTransitions, AFileTheBatchLeftInPlaceAndDeletedSinceIsNotLostAfterAKill) {
  traces_ = WriteTraces(logdir_, 2, 64 << 10);
  const std::string moving = traces_.begin()->first, left = std::next(traces_.begin())->first;
  auto writer = OpenFile(L(left), O_WRONLY | O_APPEND);  // no lease: left in place
  ASSERT_TRUE(writer.ok()) << writer.status().ToString();
  MountPausedAt("migrate.staged", true);
  ASSERT_FALSE(AsideOf(moving).empty());
  ASSERT_TRUE(AsideOf(left).empty()) << "the test tests nothing: it moved";
  writer->reset();
  ASSERT_EQ(::unlink(M(left).c_str()), 0);
  ASSERT_EQ(::kill(pid_, SIGKILL), 0);
  ExpectDeletedNotLostAfterTheRestart(left);
  EXPECT_TRUE(ReadBytes(L(moving)) == traces_[moving]);
}

// Renamed and chmod-ed through the mount while it waits aside, then killed:
// the file is at its new name with its new mode, once.
TEST_F(PausedTransitions, AFileRenamedWhileItWaitsAsideKeepsItsNewNameAfterAKillThere) {
  traces_ = WriteTraces(logdir_, 1, 64 << 10);
  const std::string rel = traces_.begin()->first, renamed = "run/renamed.pt.trace.json";
  MountPausedAt("migrate.staged", true);
  ASSERT_EQ(::rename(M(rel).c_str(), M(renamed).c_str()), 0);
  ASSERT_EQ(::chmod(M(renamed).c_str(), 0640), 0);
  ASSERT_EQ(::setxattr(M(renamed).c_str(), "user.t", "7", 1, 0), 0) << std::strerror(errno);
  ASSERT_EQ(::kill(pid_, SIGKILL), 0);
  RemountAfterItsDeath();
  EXPECT_FALSE(std::filesystem::exists(M(rel))) << "the rename was undone";
  EXPECT_EQ(XattrOf(M(renamed), "user.t"), "7");  // it was lost
  EXPECT_TRUE(ReadBytes(M(renamed)) == traces_[rel]);
  struct stat st;
  ASSERT_EQ(::stat(M(renamed).c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 07777, 0640u);
  EXPECT_TRUE(Leftovers().empty()) << ::testing::PrintToString(Leftovers());
  EXPECT_EQ(Status()["lost"].value("files", uint64_t{1}), 0u);
}

// Its folder renamed through the mount while it waits aside (the file
// aside goes along), then killed: the file is in the renamed folder, once.
TEST_F(PausedTransitions, AFileWhoseFolderWasRenamedWhileItWaitsAsideIsThereAfterAKill) {
  traces_ = WriteTraces(logdir_, 1, 64 << 10);
  const std::string rel = traces_.begin()->first;
  const std::string moved = "run/moved/" + std::string(BaseName(rel));
  MountPausedAt("migrate.staged", true);
  ASSERT_EQ(::rename(M(ParentPath(rel)).c_str(), M("run/moved").c_str()), 0);
  ASSERT_EQ(::kill(pid_, SIGKILL), 0);
  RemountAfterItsDeath();
  EXPECT_TRUE(ReadBytes(M(moved)) == traces_[rel]);
  EXPECT_TRUE(Leftovers().empty()) << ::testing::PrintToString(Leftovers());
  EXPECT_EQ(Status()["lost"].value("files", uint64_t{1}), 0u);
}

// Its folder renamed while two files wait aside in it, then one deleted
// in the renamed folder and the other moved out of it, then killed: the
// one deleted stays so, the other is where it was moved, once; nothing
// stays aside, hidden (red team: both aside files stayed for good).
TEST_F(PausedTransitions, FilesAsideInARenamedFolderDeletedOrMovedOutLeaveNothingAfterAKill) {
  traces_ = WriteTraces(logdir_, 2, 64 << 10);
  const std::string gone = traces_.begin()->first, out = std::next(traces_.begin())->first;
  const std::string folder = ParentPath(gone), moved = "run/plugins/moved";
  const std::string now_out = "run/" + std::string(BaseName(out));
  MountPausedAt("migrate.staged", true);
  ASSERT_FALSE(AsideOf(gone).empty());
  ASSERT_FALSE(AsideOf(out).empty());
  ASSERT_EQ(::rename(M(folder).c_str(), M(moved).c_str()), 0);
  ASSERT_EQ(::unlink(M(moved + "/" + std::string(BaseName(gone))).c_str()), 0);
  ASSERT_EQ(::rename(M(moved + "/" + std::string(BaseName(out))).c_str(), M(now_out).c_str()), 0);
  ASSERT_EQ(::kill(pid_, SIGKILL), 0);
  RemountAfterItsDeath();
  EXPECT_TRUE(ReadBytes(M(now_out)) == traces_[out]);
  EXPECT_TRUE(std::filesystem::is_empty(L(moved))) << "something stayed in the renamed folder";
  EXPECT_TRUE(Leftovers().empty()) << ::testing::PrintToString(Leftovers());
  EXPECT_EQ(Status()["lost"].value("files", uint64_t{1}), 0u);
}

// A copy of a file aside, by its name aside, made in another folder after
// the crash: recovery takes the file the batch journaled, in the folder a
// rename took it to, and neither brings the copy to light nor leaves the
// file aside (red team: the copy became a visible trace, the file stayed).
TEST_F(PausedTransitions, ACopyOfAFileAsideElsewhereIsNotTakenForIt) {
  traces_ = WriteTraces(logdir_, 1, 64 << 10);
  const std::string rel = traces_.begin()->first, name = std::string(BaseName(rel));
  MountPausedAt("migrate.staged", true);
  const std::string aside = AsideOf(rel);
  ASSERT_FALSE(aside.empty());
  const std::string moved = "run/plugins/moved", aside_name = std::string(BaseName(aside));
  ASSERT_EQ(::rename(M(ParentPath(rel)).c_str(), M(moved).c_str()), 0);
  ASSERT_EQ(::kill(pid_, SIGKILL), 0);
  RemountAfterItsDeath([&] {
    std::filesystem::create_directories(L("run/other"));
    std::filesystem::copy_file(L(moved + "/" + aside_name), L("run/other/" + aside_name));
  });
  EXPECT_TRUE(ReadBytes(M(moved + "/" + name)) == traces_[rel]);
  EXPECT_FALSE(std::filesystem::exists(L(moved + "/" + aside_name))) << "the file stayed aside";
  EXPECT_FALSE(std::filesystem::exists(L("run/other/" + name))) << "the copy came to light";
  EXPECT_EQ(Status()["lost"].value("files", uint64_t{1}), 0u);
}

// Whether thread `tid` of this process is inside system call `nr` now.
bool InSyscall(pid_t tid, long nr) {
  return ReadBytes(fmt::format("/proc/self/task/{}/syscall", tid))
      .starts_with(fmt::format("{} ", nr));
}

// rm -rf through the mount while a batch holds the folder's files aside:
// the files go at once, and so does the folder, with their backing files
// aside. Its rmdir said "Directory not empty": the files aside are names
// the mount hides.
TEST_F(PausedTransitions, AFolderEmptiedWhileItsFilesWaitAsideIsRemoved) {
  traces_ = WriteTraces(logdir_, 3, 64 << 10);
  const std::string folder = "run/plugins/profile";
  MountPausedAt("migrate.staged");
  ASSERT_FALSE(AsideOf(traces_.begin()->first).empty());
  for (const auto& [rel, bytes] : traces_) ASSERT_EQ(::unlink(M(rel).c_str()), 0) << rel;
  EXPECT_EQ(::rmdir(M(folder).c_str()), 0) << std::strerror(errno);
  EXPECT_FALSE(std::filesystem::exists(L(folder)));
  EXPECT_EQ(::rmdir(M("run/plugins").c_str()), 0) << std::strerror(errno);
  Release();  // the batch finds them gone
  EXPECT_FALSE(std::filesystem::exists(M("run/plugins")));
  EXPECT_TRUE(Leftovers().empty()) << ::testing::PrintToString(Leftovers());
  EXPECT_EQ(Status()["lost"].value("files", uint64_t{1}), 0u) << Status().dump();
  const std::string log = ReadBytes(logdir_ + "/.tbfs/tbfs-mount.log");
  EXPECT_EQ(log.find("stays as"), std::string::npos) << log;
  Unmount();
  auto fsck = RunCommand(Tbfs("fsck " + logdir_ + " 2>&1"));
  EXPECT_EQ(fsck.exit_code, 0) << fsck.out;
  Mount("--no-migrate");
  for (const auto& [rel, bytes] : traces_) EXPECT_FALSE(std::filesystem::exists(M(rel))) << rel;
}

// The same, and the daemon killed (kill -9) before the batch goes on: the
// files stay deleted, nothing is called lost.
TEST_F(PausedTransitions, AFolderEmptiedWhileItsFilesWaitAsideStaysGoneAfterAKill) {
  traces_ = WriteTraces(logdir_, 3, 64 << 10);
  MountPausedAt("migrate.staged", true);
  ASSERT_FALSE(AsideOf(traces_.begin()->first).empty());
  for (const auto& [rel, bytes] : traces_) ASSERT_EQ(::unlink(M(rel).c_str()), 0) << rel;
  ASSERT_EQ(::rmdir(M("run/plugins/profile").c_str()), 0) << std::strerror(errno);
  ASSERT_EQ(::kill(pid_, SIGKILL), 0);
  ExpectDeletedNotLostAfterTheRestart(traces_.begin()->first);
  Mount("--no-migrate");
  for (const auto& [rel, bytes] : traces_) EXPECT_FALSE(std::filesystem::exists(M(rel))) << rel;
  EXPECT_FALSE(std::filesystem::exists(M("run/plugins/profile")));
}

// Names aside an rmdir freed, given to a FIFO and a symlink in the logdir
// before a kill -9: recovery takes neither for the files that had them (it
// put them back under the traces' names).
TEST_F(PausedTransitions, ThingsPutAtFreedAsideNamesAreNotTakenForTheFiles) {
  traces_ = WriteTraces(logdir_, 2, 64 << 10);
  const std::string folder = "run/plugins/profile";
  MountPausedAt("migrate.staged", true);
  std::vector<std::string> aside;
  for (const auto& [rel, bytes] : traces_) aside.push_back(AsideOf(rel));
  ASSERT_FALSE(aside[0].empty());
  ASSERT_FALSE(aside[1].empty());
  for (const auto& [rel, bytes] : traces_) ASSERT_EQ(::unlink(M(rel).c_str()), 0) << rel;
  ASSERT_EQ(::rmdir(M(folder).c_str()), 0) << std::strerror(errno);
  ASSERT_EQ(::mkdir(M(folder).c_str(), 0755), 0) << std::strerror(errno);
  ASSERT_EQ(::mkfifo(L(aside[0]).c_str(), 0644), 0) << std::strerror(errno);
  ASSERT_EQ(::symlink("/etc/hostname", L(aside[1]).c_str()), 0) << std::strerror(errno);
  ASSERT_EQ(::kill(pid_, SIGKILL), 0);
  RemountAfterItsDeath();
  for (const auto& [rel, bytes] : traces_) {
    struct stat st;
    EXPECT_NE(::lstat(L(rel).c_str(), &st), 0)
        << rel << " is back, as mode " << std::oct << st.st_mode;
  }
  struct stat st;
  ASSERT_EQ(::lstat(L(aside[0]).c_str(), &st), 0);
  EXPECT_TRUE(S_ISFIFO(st.st_mode));
  ASSERT_EQ(::lstat(L(aside[1]).c_str(), &st), 0);
  EXPECT_TRUE(S_ISLNK(st.st_mode));
  EXPECT_EQ(Status()["lost"].value("files", uint64_t{1}), 0u) << Status().dump();
}

// A regular file put at a file's name aside, the file moved off it, before
// a kill -9 is not taken for it: recovery put it back under the trace's
// name (the trace beside it as "recovered"); a user with write access to
// the folder could so give another user's trace their own bytes.
TEST_F(PausedTransitions, AFileSwappedInAtANameAsideIsNotTakenForTheTrace) {
  traces_ = WriteTraces(logdir_, 1, 64 << 10);
  const std::string rel = traces_.begin()->first;
  MountPausedAt("migrate.staged", true);
  const std::string aside = AsideOf(rel);
  ASSERT_FALSE(aside.empty());
  ASSERT_EQ(::rename(L(aside).c_str(), L(aside + ".moved").c_str()), 0);
  WriteBytes(L(aside), "forged");
  ASSERT_EQ(::kill(pid_, SIGKILL), 0);
  RemountAfterItsDeath();
  EXPECT_TRUE(ReadBytes(M(rel)) == traces_[rel]);
  EXPECT_EQ(ReadBytes(L(aside)), "forged");  // left where it was put
  EXPECT_EQ(Status()["lost"].value("files", uint64_t{1}), 0u) << Status().dump();
}

// A truncate or a hard link of a file aside is answered EAGAIN at once:
// the kernel holds the file's lock through a truncate, the new name's
// folder's through a link, and a wait for the move held other users'
// lookups in those folders, unkillable, until the batch went on.
TEST_F(PausedTransitions, ATruncateOrALinkOfAFileAsideIsRefusedAtOnce) {
  traces_ = WriteTraces(logdir_, 1, 64 << 10);
  const std::string rel = traces_.begin()->first;
  MountPausedAt("migrate.staged");
  ASSERT_FALSE(AsideOf(rel).empty());
  auto truncated = std::async(std::launch::async,
                              [&] { return ::truncate(M(rel).c_str(), 10) == 0 ? 0 : errno; });
  auto linked = std::async(std::launch::async, [&] {
    return ::link(M(rel).c_str(), M("run/linked.pt.trace.json").c_str()) == 0 ? 0 : errno;
  });
  const bool answered = truncated.wait_for(std::chrono::seconds(5)) == std::future_status::ready &&
                        linked.wait_for(std::chrono::seconds(5)) == std::future_status::ready;
  Release();
  EXPECT_TRUE(answered) << "waited for the batch";
  EXPECT_EQ(truncated.get(), EAGAIN);
  EXPECT_EQ(linked.get(), EAGAIN);
  EXPECT_TRUE(ReadBytes(M(rel)) == traces_[rel]);
  EXPECT_FALSE(std::filesystem::exists(M("run/linked.pt.trace.json")));
}

// A file aside renamed out of the folder through the mount is the batch's
// to put in its new place: the folder is not empty until it has.
TEST_F(PausedTransitions, AFolderWhoseFileAsideWasRenamedOutIsRemovedOnceItMoved) {
  traces_ = WriteTraces(logdir_, 2, 64 << 10);
  const std::string folder = "run/plugins/profile";
  const std::string kept = traces_.begin()->first, moved_to = "run/kept.pt.trace.json";
  MountPausedAt("migrate.staged");
  ASSERT_FALSE(AsideOf(kept).empty());
  ASSERT_EQ(::rename(M(kept).c_str(), M(moved_to).c_str()), 0);
  for (const auto& [rel, bytes] : traces_) {
    if (rel != kept) {
      ASSERT_EQ(::unlink(M(rel).c_str()), 0) << rel;
    }
  }
  EXPECT_EQ(::rmdir(M(folder).c_str()), -1);
  EXPECT_EQ(errno, ENOTEMPTY) << std::strerror(errno);
  Release();
  EXPECT_TRUE(ReadBytes(M(moved_to)) == traces_[kept]);
  EXPECT_EQ(::rmdir(M(folder).c_str()), 0) << std::strerror(errno);
  EXPECT_TRUE(ReadBytes(M(moved_to)) == traces_[kept]);
  EXPECT_EQ(Status()["lost"].value("files", uint64_t{1}), 0u) << Status().dump();
}

// An rmdir of a folder that holds another file too is refused at once,
// batch or not.
TEST_F(PausedTransitions, AFolderWithAFileBesideItsFilesAsideIsNotEmpty) {
  traces_ = WriteTraces(logdir_, 2, 64 << 10);
  const std::string folder = "run/plugins/profile";
  MountPausedAt("migrate.staged");
  ASSERT_FALSE(AsideOf(traces_.begin()->first).empty());
  for (const auto& [rel, bytes] : traces_) ASSERT_EQ(::unlink(M(rel).c_str()), 0) << rel;
  WriteBytes(M(folder + "/notes.txt"), "kept");
  EXPECT_EQ(::rmdir(M(folder).c_str()), -1);
  EXPECT_EQ(errno, ENOTEMPTY) << std::strerror(errno);
  // A folder whose only file has an aside name no move in flight has (put
  // there in the logdir by a user, or left by a crash), or the id of a
  // file in flight elsewhere (another user's, read from their folder), is
  // not removed, nor waited for while the kernel holds the parent folder's
  // lock (the bound only catches a wait).
  const std::string aside = AsideOf(traces_.begin()->first);
  const std::string id = aside.substr(aside.rfind('-') + 1);
  WriteBytes(L("run/other/.t.pt.trace.json.tbfs-mig-987654"), "planted");
  WriteBytes(L("run/evil/.t.pt.trace.json.tbfs-mig-" + id), "planted with an id in flight");
  for (const char* planted : {"run/other", "run/evil"}) {
    const auto start = std::chrono::steady_clock::now();
    EXPECT_EQ(::rmdir(M(planted).c_str()), -1);
    EXPECT_EQ(errno, ENOTEMPTY) << planted << ": " << std::strerror(errno);
    EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(3)) << planted;
  }
  EXPECT_EQ(ReadBytes(L("run/evil/.t.pt.trace.json.tbfs-mig-" + id)),
            "planted with an id in flight");
  Release();
  EXPECT_EQ(ReadBytes(M(folder + "/notes.txt")), "kept");
}

// Writers that open a file aside for writing wait in the daemon, one FUSE
// thread each: past kMaxWaiting (8) the next ones are answered EAGAIN at
// once, so threads are left to serve everyone else and to read the
// interrupts that end the waits. With 16 waiting, nothing else was served
// and SIGKILL left the writers in D state until the batch went on.
TEST_F(PausedTransitions, WritersWaitingForAFileAsideLeaveTheMountServing) {
  traces_ = WriteTraces(logdir_, 1, 64 << 10);
  const std::string rel = traces_.begin()->first;
  WriteBytes(L("run/other.txt"), "served");
  MountPausedAt("migrate.staged");
  ASSERT_FALSE(AsideOf(rel).empty());
  QuietSignal usr1(SIGUSR1);
  constexpr int kWriters = 20;
  std::vector<std::atomic<int>> result(kWriters);  // -1 while the open runs
  std::vector<std::thread> writers;
  for (int i = 0; i < kWriters; ++i) {
    result[i] = -1;
    writers.emplace_back([&, i] {
      const int fd = ::open(M(rel).c_str(), O_WRONLY | O_APPEND);
      result[i] = fd >= 0 ? 0 : errno;
      if (fd >= 0) ::close(fd);
    });
  }
  auto count = [&](int value) {
    return std::count_if(result.begin(), result.end(), [&](const auto& r) { return r == value; });
  };
  WaitUntil([&] { return count(EAGAIN) + count(-1) == kWriters && count(EAGAIN) >= 12; },
            std::chrono::milliseconds(10000));
  // Another file is served meanwhile (bounded: it hung for good).
  auto other = std::async(std::launch::async, [&] { return ReadBytes(M("run/other.txt")); });
  const bool served = other.wait_for(std::chrono::seconds(10)) == std::future_status::ready;
  const auto waiting = count(-1), refused = count(EAGAIN);
  for (auto& w : writers) ::pthread_kill(w.native_handle(), SIGUSR1);
  WaitUntil([&] { return count(-1) == 0; }, std::chrono::milliseconds(10000));
  const auto interrupted = count(EINTR);
  Release();
  for (auto& w : writers) w.join();
  EXPECT_TRUE(served) << "a read of another file was not answered while writers waited";
  if (served) {
    EXPECT_EQ(other.get(), "served");
  }
  EXPECT_EQ(waiting, 8);
  EXPECT_EQ(refused, kWriters - 8);
  EXPECT_EQ(interrupted, 8) << "the waits a signal ends";
  EXPECT_TRUE(ReadBytes(M(rel)) == traces_[rel]);
}

// A trace of a 255-byte name whose path a new file takes while it waits
// aside goes back beside that file, under a name that fits NAME_MAX: it
// stayed hidden as `.tbfs-mig-ID` for good (its name plus
// ".tbfs-recovered-ID" was too long), its bytes out of sight.
TEST_F(PausedTransitions, ALongNamedTraceWhosePathWasTakenGoesBackBesideIt) {
  const std::string rel = "run/" + std::string(255 - 14, 'y') + ".pt.trace.json";
  traces_[rel] = TraceText(rel, 64 << 10);
  WriteBytes(L(rel), traces_[rel]);
  WriteBytes(L("run/events.out.tfevents.1.host"), "");
  MountPausedAt("migrate.staged");
  ASSERT_FALSE(std::filesystem::exists(L(rel))) << "not aside";
  WriteBytes(L(rel), "a new file under the old name");  // in the logdir, meanwhile
  Release();
  EXPECT_EQ(ReadBytes(M(rel)), "a new file under the old name");
  std::string beside;
  for (const auto& e : std::filesystem::directory_iterator(M("run"))) {
    const std::string n = e.path().filename();
    if (n.find(".tbfs-recovered-") != std::string::npos) beside = n;
  }
  ASSERT_FALSE(beside.empty()) << "the trace did not come back beside the new file";
  EXPECT_LE(beside.size(), 255u);
  EXPECT_TRUE(beside.starts_with(std::string(100, 'y'))) << beside;
  EXPECT_TRUE(ReadBytes(M("run/" + beside)) == traces_[rel]);
  for (const std::string& left : Leftovers())  // nothing hidden
    EXPECT_EQ(std::string(BaseName(left)), beside) << left;
}

// A writer that opens a file through the mount while it waits aside waits
// for its move to end; a signal ends that wait (EINTR). It waited on
// whatever came, SIGKILL too (D state), until the batch went on.
TEST_F(PausedTransitions, AWriterWaitingForAFileAsideIsInterruptedByASignal) {
  traces_ = WriteTraces(logdir_, 1, 64 << 10);
  const std::string rel = traces_.begin()->first;
  MountPausedAt("migrate.staged");
  ASSERT_FALSE(AsideOf(rel).empty());
  QuietSignal usr1(SIGUSR1);
  std::atomic<int> result{-1};  // -1 while the open runs
  std::atomic<pid_t> tid{0};
  std::thread writer([&] {
    tid = ::gettid();
    const int fd = ::open(M(rel).c_str(), O_WRONLY | O_APPEND);
    result = fd >= 0 ? 0 : errno;
    if (fd >= 0) ::close(fd);
  });
  WaitUntil([&] { return result != -1 || (tid != 0 && InSyscall(tid, SYS_openat)); },
            std::chrono::milliseconds(10000));
  // A second for the OPEN to reach the daemon's wait (a signal before that
  // ends it in the kernel).
  WaitUntil([&] { return result != -1; }, std::chrono::milliseconds(1000));
  const int early = result;
  ::pthread_kill(writer.native_handle(), SIGUSR1);
  WaitUntil([&] { return result != -1; }, std::chrono::milliseconds(5000));
  const int interrupted = result;
  Release();
  writer.join();
  EXPECT_EQ(early, -1) << "the open did not wait for the move: " << std::strerror(early);
  EXPECT_EQ(interrupted, EINTR) << (interrupted == -1 ? "still waiting"
                                                      : std::strerror(interrupted));
  EXPECT_TRUE(ReadBytes(M(rel)) == traces_[rel]);
  EXPECT_EQ(State(M(rel)), "cold");
}

// A chmod, chown, touch and extended attribute through the mount while the
// file is being rehydrated (copied out of the store, not yet in place) are
// the file's after: they went to the store's copy and were undone (a chmod
// 600 said done, the file back at 644; red team).
TEST_F(PausedTransitions, MetadataChangedDuringARehydrationIsKept) {
  traces_ = WriteTraces(logdir_, 1, 256 << 10);
  const std::string rel = traces_.begin()->first;
  MigrateThenMountPausedAt("rehydrate.placing");
  std::thread writer([&] { (void)OpenFile(M(rel), O_RDWR); });  // rehydrates
  WaitUntil([&] { return std::filesystem::exists(marker_ + ".reached"); },
            std::chrono::milliseconds(30000));
  ASSERT_TRUE(std::filesystem::exists(marker_ + ".reached"));
  ASSERT_EQ(::chmod(M(rel).c_str(), 0600), 0) << std::strerror(errno);
  ASSERT_EQ(::chown(M(rel).c_str(), 1234, 5678), 0) << std::strerror(errno);
  ASSERT_EQ(::chmod(M(rel).c_str(), 0640), 0) << std::strerror(errno);  // after the chown
  ASSERT_EQ(::setxattr(M(rel).c_str(), "user.z", "3", 1, 0), 0) << std::strerror(errno);
  struct timespec times[2] = {{1000000000, 0}, {1000000000, 0}};
  ASSERT_EQ(::utimensat(AT_FDCWD, M(rel).c_str(), times, 0), 0) << std::strerror(errno);
  Release();
  writer.join();
  EXPECT_EQ(State(M(rel)), "hot");
  struct stat st;
  ASSERT_EQ(::stat(L(rel).c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 07777, 0640u);
  EXPECT_EQ(st.st_uid, 1234u);
  EXPECT_EQ(st.st_gid, 5678u);
  EXPECT_EQ(st.st_mtim.tv_sec, 1000000000);
  EXPECT_EQ(XattrOf(L(rel), "user.z"), "3");
  EXPECT_TRUE(ReadBytes(M(rel)) == traces_[rel]);
}

TEST_F(PausedTransitions, ALookupDuringARehydrationFindsTheSameInode) {
  traces_ = WriteTraces(logdir_, 2, 256 << 10);
  const std::string rel = traces_.begin()->first;
  // Migrate first (no pause there), then hold the rehydration of `rel` the
  // moment its file is back in the logdir under its name.
  MigrateThenMountPausedAt("restore.in_place");
  std::atomic<bool> appended{false};
  std::thread writer([&] {
    auto fd = OpenFile(M(rel), O_RDWR);  // rehydrates; held at the pause point
    if (!fd.ok()) return;
    appended = ::pwrite(fd->get(), "TAIL", 4, static_cast<off_t>(traces_[rel].size())) == 4;
  });
  WaitUntil([&] { return std::filesystem::exists(marker_ + ".reached"); },
            std::chrono::milliseconds(30000));
  ASSERT_TRUE(std::filesystem::exists(marker_ + ".reached"));
  // A listing with attributes (readdirplus) and a stat, while the file is
  // back under its name but the rehydration is not finished.
  for (const auto& e : std::filesystem::directory_iterator(M(ParentPath(rel)))) (void)e.file_size();
  struct stat during;
  ASSERT_EQ(::stat(M(rel).c_str(), &during), 0);
  Release();
  writer.join();
  ASSERT_TRUE(appended);
  EXPECT_TRUE(ReadBytes(M(rel)) == traces_[rel] + "TAIL");
  struct stat after;
  ASSERT_EQ(::stat(M(rel).c_str(), &after), 0);
  EXPECT_EQ(static_cast<size_t>(after.st_size), traces_[rel].size() + 4);
}

TEST_F(Transitions, AHandleOpenedHotFollowsItsFileOutAndBack) {
  traces_ = WriteTraces(logdir_, 1, 1 << 20);
  const std::string rel = traces_.begin()->first;
  Mount("--no-migrate --cold-after 0");
  auto reader = OpenFile(M(rel), O_RDONLY);  // opened hot
  ASSERT_TRUE(reader.ok());
  MigrateNow();
  ASSERT_EQ(State(M(rel)), "cold");
  {
    auto writer = OpenFile(M(rel), O_RDWR);  // back in the logdir
    ASSERT_TRUE(writer.ok());
    ASSERT_EQ(::pwrite(writer->get(), "XXXX", 4, 0), 4);
    ASSERT_EQ(::pwrite(writer->get(), "APPENDED", 8, static_cast<off_t>(traces_[rel].size())), 8);
  }
  std::string want = "XXXX" + traces_[rel].substr(4) + "APPENDED";
  std::string got(want.size() + 16, '\0');
  size_t n = 0;
  ASSERT_TRUE(PreadFull(reader->get(), got.data(), got.size(), 0, &n, rel).ok());
  got.resize(n);
  EXPECT_TRUE(got == want) << got.size() << " bytes read, " << want.size() << " expected";
  EXPECT_TRUE(ReadBytes(M(rel)) == want);  // and a new reader too
  struct stat st;
  ASSERT_EQ(::stat(M(rel).c_str(), &st), 0);
  EXPECT_EQ(static_cast<size_t>(st.st_size), want.size());
}

TEST_F(SmallFsTransitions, AFileTurningColdShowsItsNewNumberAtOnce) {
  traces_ = WriteTraces(logdir_, 4, 64 << 10);
  const std::string rel = traces_.begin()->first;
  // The store elsewhere: only new files in the logdir can take freed numbers.
  Mount("--no-migrate --cold-after 0 --store " + (dir_ / "store"));
  struct stat before;
  ASSERT_EQ(::stat(M(rel).c_str(), &before), 0);  // cached by the kernel, hot
  MigrateNow();
  for (int i = 0; i < 8; ++i) WriteBytes(L(fmt::format("run/plugins/profile/new{}.txt", i)), "n");
  struct stat after;
  ASSERT_EQ(::stat(M(rel).c_str(), &after), 0);
  EXPECT_NE(after.st_ino, before.st_ino);
  EXPECT_GE(after.st_ino, fs::kColdInoBase);
  ExpectUniqueIdentities(mnt_);
}

TEST_F(Transitions, AFolderNamedLikeADeletedOneIsAnOrdinaryFolder) {
  const std::string rel = "run/plugins/profile/x (deleted)/t.pt.trace.json";
  WriteBytes(L(rel), TraceText(rel, 100000));
  WriteBytes(L("run/events.out.tfevents.1.host"), "");
  Mount("--no-migrate --cold-after 0");
  MigrateNow();
  EXPECT_EQ(State(M(rel)), "cold");
  EXPECT_TRUE(ReadBytes(M(rel)) == TraceText(rel, 100000));
  EXPECT_EQ(::mkdir(M(rel).c_str(), 0755), -1);  // the name is taken
  EXPECT_EQ(errno, EEXIST);
}

TEST_F(Transitions, ANameThatIsNotUtf8MigratesAndComesBack) {
  const std::string rel = "run/plugins/profile/bad-\xff\xfe.pt.trace.json";
  WriteBytes(L(rel), TraceText("bad", 50000));
  WriteBytes(L("run/events.out.tfevents.1.host"), "");
  Mount("--no-migrate --cold-after 0");
  MigrateNow();
  EXPECT_EQ(State(M(rel)), "cold");
  EXPECT_TRUE(ReadBytes(M(rel)) == TraceText("bad", 50000));
  EXPECT_EQ(RunCommand(Tbfs("status --json " + mnt_ + " >/dev/null")).exit_code, 0);
  Unmount();
  for (const std::string& cmd :
       {"ls " + logdir_, "ls --json " + logdir_, "du " + logdir_, "fsck " + logdir_,
        "export " + logdir_ + " --to " + (dir_ / "out")}) {
    auto r = RunCommand(Tbfs(cmd + " 2>&1"));
    EXPECT_EQ(r.exit_code, 0) << cmd << ": " << r.out;
  }
  EXPECT_TRUE(ReadBytes(dir_ / ("out/" + rel)) == TraceText("bad", 50000));
  ASSERT_EQ(RunCommand(Tbfs("restore " + logdir_ + " --all --apply 2>&1")).exit_code, 0);
  EXPECT_TRUE(ReadBytes(L(rel)) == TraceText("bad", 50000));
}

}  // namespace
}  // namespace tbfs::testing
