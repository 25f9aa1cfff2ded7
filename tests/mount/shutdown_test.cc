// Stopping a mount in the middle of a migration pass: the pass stops at its
// next file, the daemon exits, and nothing is lost or left in two places.
#include <fcntl.h>
#include <signal.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <future>
#include <map>
#include <thread>

#include "fmt/format.h"
#include "tests/mount/mount_fixture.h"

namespace tbfs::testing {
namespace {

class Shutdown : public MountTest, public ::testing::WithParamInterface<bool> {
 protected:
  // SIGTERM (true) or an unmount (false), then up to `limit_s` for the
  // daemon to be gone.
  void StopAndWait(bool sigterm, int limit_s) {
    const int pid = pid_;
    if (sigterm) {
      ASSERT_EQ(::kill(pid, SIGTERM), 0);
    } else {
      ASSERT_EQ(RunCommand("fusermount3 -u " + Quote(mnt_) + " 2>&1").exit_code, 0);
    }
    WaitUntil([&] { return !Alive(pid); }, std::chrono::seconds(limit_s));
    EXPECT_FALSE(Alive(pid)) << "the daemon still runs " << limit_s
                             << " s after it was asked to stop";
  }
};

// Unmount (false) or SIGTERM (true) while `tbfs migrate MNT --now` runs a
// pass that would take 30 s (the failpoint slows every file to 100 ms).
TEST_P(Shutdown, DuringAPassStopsItAtTheNextFile) {
  const bool sigterm = GetParam();
  const auto files = WriteTinyTraces("run", 300);
  MountFailing("migrate.slow_file", "--no-migrate --cold-after 0");
  auto pass = MigrateNowAsync();
  ASSERT_TRUE(WaitUntil([&] { return Status()["cold"]["files"].get<uint64_t>() >= 3; },
                        std::chrono::milliseconds(20000), std::chrono::milliseconds(50)))
      << "the pass did not start";
  // Bounded, not timed: the pass had ~28 s to go.
  StopAndWait(sigterm, 15);
  auto r = pass.get();
  EXPECT_NE(r.exit_code, 0) << "a stopped pass said it was done: " << r.out;
  EXPECT_NE(r.out.find("stopping"), std::string::npos) << r.out;
  Unmount();
  ASSERT_FALSE(IsMounted(mnt_));

  // Every file, once, with its bytes: the ones that moved are cold.
  Mount("--no-migrate --cold-after 0");
  int cold = 0, hot = 0;
  for (const auto& [rel, bytes] : files) {
    EXPECT_EQ(ReadBytes(M(rel)), bytes) << rel;
    std::string state = State(M(rel));
    cold += state == "cold";
    hot += state == "hot";
  }
  EXPECT_GE(cold, 3);
  EXPECT_GT(hot, 0) << "the whole pass ran: nothing stopped it";
  EXPECT_EQ(cold + hot, 300);
  EXPECT_EQ(Status()["cold"]["files"].get<uint64_t>(), static_cast<uint64_t>(cold));
}

// A worker that never comes back (held inside a batch, a file moved aside,
// as a call blocked on a user's file or a store that does not answer would
// hold it) does not keep the daemon: it exits within its grace (10 s) of
// the unmount or the signal, the mount and the logdir's lock go with it,
// and the next start's recovery puts the file back.
TEST_P(Shutdown, AWorkerThatNeverReturnsDoesNotKeepTheDaemon) {
  const bool sigterm = GetParam();
  const auto files = WriteTinyTraces("run", 5);
  const std::string hold = dir_ / "hold";  // never removed: the worker is stuck
  WriteBytes(hold, "");
  ASSERT_EQ(::setenv("TBFS_PAUSE", ("migrate.staged:" + hold).c_str(), 1), 0);
  Mount("--no-migrate --cold-after 0");
  ::unsetenv("TBFS_PAUSE");
  auto pass = MigrateNowAsync();
  WaitUntil([&] { return std::filesystem::exists(hold + ".reached"); },
            std::chrono::milliseconds(60000));
  ASSERT_TRUE(std::filesystem::exists(hold + ".reached")) << "the pass never reached a file";
  StopAndWait(sigterm, 30);
  pass.get();
  EXPECT_FALSE(IsMounted(mnt_));
  EXPECT_NE(ReadBytes(L(".tbfs/tbfs-mount.log")).find("exiting without it"), std::string::npos);
  pid_ = -1;

  // The lock went with the daemon; recovery puts the staged file back.
  RunCommand("fusermount3 -u -z " + Quote(mnt_) + " 2>/dev/null");
  Mount("--no-migrate --cold-after 0");
  for (const auto& [rel, bytes] : files) EXPECT_EQ(ReadBytes(M(rel)), bytes) << rel;
}

// Readahead queued behind a slow store (every chunk load takes 2 s) is
// dropped when the mount stops: the daemon does not load what nobody
// waits for (10 chunks queued would take 10 s on its two threads).
TEST_P(Shutdown, ReadaheadQueuedAtTheStopIsDropped) {
  const bool sigterm = GetParam();
  std::string content;
  for (int i = 0; content.size() < (24u << 20); ++i)
    content += fmt::format("{{\"name\": \"op{}\", \"ts\": {}}},\n", i % 977, i * 7);
  const std::string rel = "run/big.pt.trace.json";
  WriteBytes(L(rel), content);
  MountFailing("cache.slow_chunk", "--no-migrate --cold-after 0");
  ASSERT_EQ(RunCommand(Tbfs("migrate --now " + Quote(mnt_) + " >/dev/null")).exit_code, 0);
  ASSERT_EQ(State(M(rel)), "cold");
  {
    // Three sequential reads: each queues the next four chunks.
    auto fd = OpenFile(M(rel), O_RDONLY);
    ASSERT_TRUE(fd.ok());
    std::string buf(1u << 20, '\0');
    for (int i = 0; i < 3; ++i) {
      ASSERT_EQ(::read(fd->get(), buf.data(), buf.size()), static_cast<ssize_t>(buf.size()));
      EXPECT_EQ(buf, content.substr(static_cast<size_t>(i) << 20, 1u << 20));
    }
  }
  // Bounded, not timed: the queue held up to 10 s of loads.
  StopAndWait(sigterm, 6);
  pid_ = -1;
  EXPECT_EQ(ReadBytes(L(".tbfs/tbfs-mount.log")).find("exiting without it"), std::string::npos)
      << "the daemon waited for its grace, not for the readahead to stop";
}

// One read of many chunks (64 KiB chunks, a 1 MiB request: 16 loads of 2 s
// each behind a slow store) stops at the next chunk when the daemon is told
// to go: the session loop waits for its workers, so a read that loaded all
// its chunks would keep the daemon half a minute.
class ShutdownDuringARead : public MountTest {};

TEST_F(ShutdownDuringARead, AReadOfManyChunksStopsAtTheNextChunk) {
  std::string content;
  for (int i = 0; content.size() < (4u << 20); ++i)
    content += fmt::format("{{\"name\": \"op{}\", \"ts\": {}}},\n", i % 977, i * 7);
  const std::string rel = "run/big.pt.trace.json";
  WriteBytes(L(rel), content);
  auto migrated = RunCommand(Tbfs("migrate " + Quote(logdir_) +
                                  " --apply --older-than 0s --allow-no-events --chunk-size 64K"));
  ASSERT_EQ(migrated.exit_code, 0) << migrated.out;
  MountFailing("cache.slow_chunk", "--no-migrate");
  const int pid = pid_;
  auto reader = std::async(std::launch::async, [&] {
    auto fd = OpenFile(M(rel), O_RDONLY);
    if (!fd.ok()) return -1;
    std::string buf(1u << 20, '\0');
    return static_cast<int>(::pread(fd->get(), buf.data(), buf.size(), 0));
  });
  // The reader is inside its request once the first chunk's load began
  // (the cache counts a miss as the load starts).
  ASSERT_TRUE(WaitUntil(
      [&] {
        nlohmann::json s = Status();
        return s.is_object() && s["cache"]["misses"].get<uint64_t>() > 0;
      },
      std::chrono::milliseconds(10000), std::chrono::milliseconds(50)))
      << "no chunk load began";
  ASSERT_EQ(::kill(pid, SIGTERM), 0);
  WaitUntil([&] { return !Alive(pid); }, std::chrono::milliseconds(8000));
  EXPECT_FALSE(Alive(pid)) << "the daemon still runs 8 s after SIGTERM: the read went on";
  reader.wait();
  pid_ = -1;
  EXPECT_EQ(ReadBytes(L(".tbfs/tbfs-mount.log")).find("exiting without it"), std::string::npos);
}

INSTANTIATE_TEST_SUITE_P(UnmountOrSigterm, Shutdown, ::testing::Bool(),
                         [](const auto& info) { return info.param ? "Sigterm" : "Unmount"; });

}  // namespace
}  // namespace tbfs::testing
