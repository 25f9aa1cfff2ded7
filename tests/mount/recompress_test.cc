// `tbfs recompress MOUNTPOINT`: the daemon compresses its cold files again
// while it serves them (store/recompress.h, fs/migrator.h): readers never
// see other bytes, and what the mount does to a file meanwhile (a chmod,
// an unlink) keeps its effect.
#include <sys/stat.h>

#include <atomic>
#include <filesystem>
#include <functional>
#include <future>
#include <map>
#include <thread>

#include "fmt/format.h"
#include "tests/mount/mount_fixture.h"
#include "tests/store/trace_json.h"

namespace tbfs::testing {
namespace {

class MountedRecompress : public MountTest {
 protected:
  // `count` traces of `bytes` moved into the store offline at level 3 (what
  // a fast migration, or an older tbfs, leaves).
  void MakeCold(int count, size_t bytes = 2 << 20) {
    for (int i = 0; i < count; ++i) {
      const std::string rel = fmt::format("run/t{}.pt.trace.json", i);
      files_[rel] = store::TraceJson(bytes, static_cast<uint32_t>(90 + i));
      std::filesystem::create_directories(L("run"));
      WriteBytes(L(rel), files_[rel]);
    }
    auto r = RunCommand(Tbfs("migrate " + Quote(logdir_) +
                             " --apply --older-than 0s --allow-no-events --level 3 2>&1"));
    ASSERT_EQ(r.exit_code, 0) << r.out;
    for (const auto& [rel, bytes] : files_) ASSERT_FALSE(std::filesystem::exists(L(rel))) << rel;
  }

  // `tbfs ls --json` of the logdir (read-only beside the mount): path -> entry.
  std::map<std::string, nlohmann::json> Cold() {
    auto r = RunCommand(Tbfs("ls " + Quote(logdir_) + " --json"));
    EXPECT_EQ(r.exit_code, 0) << r.out;
    std::map<std::string, nlohmann::json> out;
    for (const auto& e : nlohmann::json::parse(r.out, nullptr, false)) out[e["path"]] = e;
    return out;
  }

  nlohmann::json Recompress(int* exit_code, const std::string& extra = "") {
    auto r = RunCommand(Tbfs("recompress " + Quote(mnt_) + " --json " + extra));
    *exit_code = r.exit_code;
    auto j = nlohmann::json::parse(r.out, nullptr, false);
    EXPECT_FALSE(j.is_discarded()) << r.out;
    return j;
  }

  // Pauses the daemon's recompress at its first file's last step
  // (failpoint recompress.before_record): the mount starts with it armed.
  void MountPausing() {
    marker_ = dir_ / "pause";
    WriteBytes(marker_, "");
    ASSERT_EQ(::setenv("TBFS_PAUSE", ("recompress.before_record:" + marker_).c_str(), 1), 0);
    Mount("--no-migrate");
    ::unsetenv("TBFS_PAUSE");
  }
  // `tbfs recompress MOUNTPOINT --json` on a mount made by MountPausing:
  // `meanwhile` runs while the daemon is paused (when it got there), then
  // the daemon goes on.
  struct PausedRun {
    bool reached = false;
    int exit_code = -1;
    nlohmann::json report;
  };
  PausedRun RecompressPausedFor(const std::function<void()>& meanwhile) {
    PausedRun out;
    auto run = std::async(std::launch::async, [&] { return Recompress(&out.exit_code); });
    out.reached = WaitUntil([&] { return std::filesystem::exists(marker_ + ".reached"); },
                            std::chrono::milliseconds(20000));
    if (out.reached) meanwhile();
    std::filesystem::remove(marker_);
    out.report = run.get();
    return out;
  }

  std::map<std::string, std::string> files_;
  std::string marker_;
};

TEST_F(MountedRecompress, ReadersSeeTheSameBytesWhileTheMountRecompresses) {
  MakeCold(4);
  if (HasFatalFailure()) return;
  Mount("--no-migrate");
  std::atomic<bool> done{false};
  std::atomic<int> reads{0}, wrong{0};
  std::thread reader([&] {
    while (!done) {
      for (const auto& [rel, bytes] : files_) {
        // A fresh open each time: the kernel keeps what a cold file's
        // handle read, so drop it to reach the store again.
        std::string got = ReadBytes(M(rel));
        if (got != bytes) wrong++;
        reads++;
        RunCommand("echo 1 > /proc/sys/vm/drop_caches");
      }
    }
  });
  int rc = -1;
  nlohmann::json r = Recompress(&rc);
  done = true;
  reader.join();
  EXPECT_EQ(rc, 0) << r.dump();
  EXPECT_EQ(r["files"], 4) << r.dump();
  EXPECT_EQ(r["level"], 15);
  EXPECT_TRUE(r["failed"].empty()) << r.dump();
  EXPECT_LT(r["stored_after"].get<uint64_t>(), r["stored_before"].get<uint64_t>());
  EXPECT_GT(reads.load(), 0);
  EXPECT_EQ(wrong.load(), 0) << "of " << reads.load() << " whole-file reads";
  for (const auto& [rel, e] : Cold()) EXPECT_EQ(e["level"], 15) << rel;
  for (const auto& [rel, bytes] : files_) EXPECT_EQ(ReadBytes(M(rel)), bytes) << rel;

  // Done is done; and the offline command says where to ask instead.
  r = Recompress(&rc);
  EXPECT_EQ(rc, 0);
  EXPECT_EQ(r["files"], 0);
  EXPECT_EQ(r["unchanged"], 4);
  auto offline = RunCommand(Tbfs("recompress " + Quote(logdir_) + " 2>&1"));
  EXPECT_EQ(offline.exit_code, 2) << offline.out;
  EXPECT_NE(offline.out.find("recompress " + mnt_), std::string::npos) << offline.out;
}

// A chmod through the mount while the daemon compresses the file: the mode
// stays (it wrote the manifest it had read before, which undid the chmod).
TEST_F(MountedRecompress, AChmodMeanwhileStaysAndTheFileGetsItsLevel) {
  MakeCold(1);
  if (HasFatalFailure()) return;
  MountPausing();
  if (HasFatalFailure()) return;
  const std::string rel = files_.begin()->first;
  int chmodded = -1;
  PausedRun p = RecompressPausedFor([&] { chmodded = ::chmod(M(rel).c_str(), 0640); });
  ASSERT_TRUE(p.reached) << "the recompress never reached its file's last step";
  const int rc = p.exit_code;
  const nlohmann::json& r = p.report;
  ASSERT_EQ(chmodded, 0) << std::strerror(errno);
  EXPECT_EQ(rc, 0) << r.dump();
  EXPECT_EQ(r["files"], 1) << r.dump();
  struct stat st;
  ASSERT_EQ(::stat(M(rel).c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 07777, 0640u);
  auto cold = Cold();
  EXPECT_EQ(cold[rel]["mode"], 0640);
  EXPECT_EQ(cold[rel]["level"], 15);
  EXPECT_EQ(ReadBytes(M(rel)), files_[rel]);
}

// Its memory comes out of the chunk cache's: the cache lends 48 MiB of its
// capacity while it runs (the daemon's heap grew by 40-45 MiB), and has it
// back after.
TEST_F(MountedRecompress, ItBorrowsItsMemoryFromTheChunkCacheWhileItRuns) {
  MakeCold(1);
  if (HasFatalFailure()) return;
  MountPausing();
  if (HasFatalFailure()) return;
  EXPECT_EQ(Status()["memory"]["chunk_cache"]["lent_bytes"], 0);
  nlohmann::json during;
  PausedRun p = RecompressPausedFor([&] { during = Status(); });
  ASSERT_TRUE(p.reached) << "the recompress never reached its file's last step";
  EXPECT_EQ(p.exit_code, 0) << p.report.dump();
  EXPECT_EQ(during["memory"]["chunk_cache"]["lent_bytes"], 48 << 20) << during.dump();
  EXPECT_EQ(Status()["memory"]["chunk_cache"]["lent_bytes"], 0);
}

// An unlink through the mount while the daemon compresses the file: it stays
// gone, and the chunks written for it leave with it (no garbage).
TEST_F(MountedRecompress, AFileUnlinkedMeanwhileStaysGoneAndLeavesNoChunks) {
  MakeCold(1);
  if (HasFatalFailure()) return;
  MountPausing();
  if (HasFatalFailure()) return;
  const std::string rel = files_.begin()->first;
  int unlinked = -1;
  PausedRun p = RecompressPausedFor([&] { unlinked = ::unlink(M(rel).c_str()); });
  ASSERT_TRUE(p.reached) << "the recompress never reached its file's last step";
  const int rc = p.exit_code;
  const nlohmann::json& r = p.report;
  ASSERT_EQ(unlinked, 0) << std::strerror(errno);
  EXPECT_EQ(rc, 0) << r.dump();
  EXPECT_EQ(r["gone"], 1) << r.dump();
  EXPECT_EQ(r["files"], 0) << r.dump();
  struct stat st;
  EXPECT_NE(::lstat(M(rel).c_str(), &st), 0);
  EXPECT_TRUE(Cold().empty());
  auto gc = RunCommand(Tbfs("gc " + Quote(mnt_) + " --garbage 2>&1"));
  EXPECT_EQ(gc.exit_code, 0) << gc.out;
  EXPECT_NE(gc.out.find("would remove 0 unreachable chunk(s)"), std::string::npos) << gc.out;
}

// The chunks a recompress replaced leave the disk at its end while readers
// read: the engine deleted the files its compaction replaced only at its
// next flush or compaction when a read held them as the compaction ended
// (a mount with nothing to move kept them for hours: 100 MB of a 31 MB
// store in the run that found it).
TEST_F(MountedRecompress, TheChunksItReplacedLeaveTheDiskWhileReadersRead) {
  MakeCold(6, 6 << 20);
  if (HasFatalFailure()) return;
  // A cache of one chunk: every read reaches the engine.
  Mount("--no-migrate --cache 1M");
  std::atomic<bool> done{false};
  std::vector<std::thread> readers;
  for (int t = 0; t < 4; ++t) {
    readers.emplace_back([&] {
      while (!done) {
        for (const auto& [rel, bytes] : files_) ReadBytes(M(rel));
        RunCommand("echo 1 > /proc/sys/vm/drop_caches");
      }
    });
  }
  int rc = -1;
  nlohmann::json r = Recompress(&rc, "--level 9");
  done = true;
  for (auto& t : readers) t.join();
  ASSERT_EQ(rc, 0) << r.dump();
  ASSERT_EQ(r["files"], 6) << r.dump();
  const uint64_t stored = r["stored_after"];
  const uint64_t margin = stored / 4 + (512 << 10);  // as ColdStore::Compact's callers allow
  uint64_t on_disk = 0;
  for (const auto& e : std::filesystem::directory_iterator(L(".tbfs"))) {
    if (e.is_regular_file()) on_disk += e.file_size();
  }
  EXPECT_LT(r["disk_after"].get<uint64_t>(), stored + margin) << r.dump();
  EXPECT_LT(on_disk, stored + margin) << r.dump();
}

// Red team: a second request waited for the pass lock that a running
// recompress takes again after each file, and one ran a whole recompress
// at its own level once the first was done. It is refused at once.
TEST_F(MountedRecompress, ASecondRequestIsRefusedAtOnceWhileOneRuns) {
  MakeCold(1);
  if (HasFatalFailure()) return;
  MountPausing();
  if (HasFatalFailure()) return;
  bool answered = false;
  std::future<CommandResult> second;
  PausedRun p = RecompressPausedFor([&] {
    second = std::async(std::launch::async, [&] {
      return RunCommand(Tbfs("recompress " + Quote(mnt_) + " --level 5 2>&1"));
    });
    answered = second.wait_for(std::chrono::seconds(20)) == std::future_status::ready;
  });
  ASSERT_TRUE(p.reached) << "the recompress never reached its file's last step";
  const int rc = p.exit_code;
  const nlohmann::json& r = p.report;
  ASSERT_TRUE(answered) << "the second request waited for the first";
  CommandResult refused = second.get();
  EXPECT_EQ(refused.exit_code, 2) << refused.out;
  EXPECT_NE(refused.out.find("another tbfs recompress is running"), std::string::npos)
      << refused.out;
  EXPECT_EQ(rc, 0) << r.dump();
  for (const auto& [rel, e] : Cold()) EXPECT_EQ(e["level"], 15) << rel;
}

// Red team: a mount remounted read-only went on recompressing (and trained
// and stored a dictionary) and said it was done. It stops at the next file
// and says so; the files not reached are as they were.
TEST_F(MountedRecompress, ARemountToReadOnlyStopsItAtTheNextFile) {
  MakeCold(3);
  if (HasFatalFailure()) return;
  MountPausing();
  if (HasFatalFailure()) return;
  int remounted = -1;
  bool seen = false;
  PausedRun p = RecompressPausedFor([&] {
    remounted = RunCommand("mount -o remount,ro " + Quote(mnt_)).exit_code;
    seen = WaitUntil([&] { return Status()["read_only"] == true; },
                     std::chrono::milliseconds(20000), std::chrono::milliseconds(50));
  });
  ASSERT_TRUE(p.reached) << "the recompress never reached its file's last step";
  const int rc = p.exit_code;
  const nlohmann::json& r = p.report;
  ASSERT_EQ(remounted, 0);
  ASSERT_TRUE(seen) << "the daemon never saw the remount";
  EXPECT_EQ(rc, 1) << r.dump();
  EXPECT_EQ(r["stopped"], true) << r.dump();
  EXPECT_LE(r["files"].get<int>(), 1) << r.dump();
  int at15 = 0;
  for (const auto& [rel, e] : Cold()) at15 += e["level"] == 15;
  EXPECT_LE(at15, 1);
  for (const auto& [rel, bytes] : files_) EXPECT_EQ(ReadBytes(M(rel)), bytes) << rel;
}

// Red team: files removed before their turn were counted nowhere. They are
// `gone`, as those removed while their chunks were compressed.
TEST_F(MountedRecompress, FilesRemovedBeforeTheirTurnAreCountedGone) {
  MakeCold(3);
  if (HasFatalFailure()) return;
  MountPausing();
  if (HasFatalFailure()) return;
  int unlinked = -1;
  PausedRun p = RecompressPausedFor([&] {
    unlinked = 0;
    for (const auto& [rel, bytes] : files_) unlinked += ::unlink(M(rel).c_str()) == 0;
  });
  ASSERT_TRUE(p.reached) << "the recompress never reached its file's last step";
  const int rc = p.exit_code;
  const nlohmann::json& r = p.report;
  ASSERT_EQ(unlinked, 3);
  EXPECT_EQ(rc, 0) << r.dump();
  EXPECT_EQ(r["gone"], 3) << r.dump();
  EXPECT_EQ(r["files"], 0) << r.dump();
}

}  // namespace
}  // namespace tbfs::testing
