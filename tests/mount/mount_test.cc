// The mount, really mounted: what a training job, TensorBoard, cp and an
// editor do through it.
#include <arpa/inet.h>
#include <dirent.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/mount.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <sys/sysmacros.h>
#include <sys/wait.h>
#include <sys/xattr.h>
#include <yaml-cpp/yaml.h>

#include <future>
#include <iterator>
#include <map>
#include <random>
#include <regex>
#include <set>
#include <sstream>
#include <thread>

#include "base/fs_util.h"
#include "base/text.h"
#include "events/baseline.h"
#include "events/record.h"
#include "events/verifier.h"
#include "fmt/format.h"
#include "fs/inode_table.h"
#include "store/backend.h"
#include "store/cold_store.h"
#include "store/format.h"
#include "tests/mount/mount_fixture.h"
#include "tests/store/store_internals.h"
#include "tests/store/trace_json.h"

namespace tbfs::testing {
namespace {

class Mounted : public MountTest {
 protected:
  void SetUp() override {
    MountTest::SetUp();
    Gen();
    events_ = Files(logdir_, true);
    traces_ = Files(logdir_, false);
    for (const auto& f : traces_) originals_[f] = ReadBytes(L(f));
    ASSERT_FALSE(events_.empty());
    ASSERT_FALSE(traces_.empty());
  }
  // Migrates every trace now, through the mount.
  void MigrateNow() {
    auto r = RunCommand(Tbfs("migrate --now " + mnt_));
    ASSERT_EQ(r.exit_code, 0) << r.out;
  }
  std::string BigTrace() {
    std::string best;
    for (const auto& f : traces_) {
      if (best.empty() || originals_[f].size() > originals_[best].size()) best = f;
    }
    return best;
  }
  std::vector<std::string> events_, traces_;
  std::map<std::string, std::string> originals_;
};

// A test that ends in std::terminate (a thread left joinable by a failed
// ASSERT: Listing.ListingsWhileFilesMigrateAndRenameHoldEachNameOnce under
// TSan, its daemon stopped by a report) skips TearDown; its mount was left
// behind, "Transport endpoint is not connected", until someone took it
// down by hand.
TEST_F(Mounted, AMountOutlivesNoTestThatEndsInTerminate) {
  Mount();
  // The default death test style forks: the child has this test's mount.
  // (Mounted in the child, the daemon would hold the death test's pipe.)
  EXPECT_DEATH({ std::thread left_joinable([] {}); },  // destroyed joinable: std::terminate
               "terminate: taking down the mount on");
  EXPECT_FALSE(IsMounted(mnt_));
}

TEST_F(Mounted, TfeventsReadThroughTheMountAreByteIdentical) {
  Mount("--no-migrate --cold-after 0");
  for (const auto& f : events_) EXPECT_EQ(ReadBytes(M(f)), ReadBytes(L(f))) << f;
  MigrateNow();  // and after traces moved beside them
  for (const auto& f : events_) EXPECT_EQ(ReadBytes(M(f)), ReadBytes(L(f))) << f;
}

TEST_F(Mounted, APassWithNothingToMoveWalksTheLogdirOnce) {
  // Issue 23: the candidates' walk also counts the growth sample's hot
  // files; only a pass that moved something walks again for the sample.
  Mount("--no-migrate --cold-after 0");
  MigrateNow();  // moves every trace: two walks
  auto moved = Status()["migrations"];
  ASSERT_GT(moved["files_moved"].get<uint64_t>(), 0u);
  const uint64_t walks = moved["logdir_walks"].get<uint64_t>();
  const uint64_t passes = moved["passes"].get<uint64_t>();
  for (int i = 0; i < 3; ++i) MigrateNow();  // nothing left to move
  auto idle = Status()["migrations"];
  EXPECT_EQ(idle["passes"].get<uint64_t>(), passes + 3);
  EXPECT_EQ(idle["logdir_walks"].get<uint64_t>(), walks + 3);
  // And the one walk counted what the two did: every hot file, no cold one.
  auto before = Status();
  ASSERT_EQ(::mkdir(M("late").c_str(), 0755), 0);
  WriteBytes(M("late/notes.txt"), std::string(5000, 'n'));
  MigrateNow();
  auto after = Status();
  EXPECT_EQ(after["hot"]["files"].get<uint64_t>(), before["hot"]["files"].get<uint64_t>() + 1);
  EXPECT_EQ(after["cold"]["bytes"], before["cold"]["bytes"]);
}

TEST_F(Mounted, TfeventsWrittenThroughTheMountLandInTheLogdir) {
  Mount();
  std::string rel = "newrun/events.out.tfevents.1.host.1.0";
  ASSERT_EQ(::mkdir(M("newrun").c_str(), 0755), 0);
  std::string records;
  for (int i = 0; i < 1000; ++i)
    events::AppendFramedRecord(std::string(100 + i % 50, 'a' + i % 26), &records);
  {
    auto fd = OpenFile(M(rel), O_WRONLY | O_CREAT | O_APPEND, 0644);
    ASSERT_TRUE(fd.ok());
    for (size_t off = 0; off < records.size(); off += 777) {
      std::string_view part = std::string_view(records).substr(off, 777);
      ASSERT_TRUE(WriteAll(fd->get(), part.data(), part.size(), rel).ok());
    }
    // Seen in the logdir at once, before close.
    EXPECT_EQ(ReadBytes(L(rel)), records);
  }
  EXPECT_EQ(ReadBytes(L(rel)), records);
  EXPECT_EQ(ReadBytes(M(rel)), records);
}

TEST_F(Mounted, AppendInTheLogdirIsSeenThroughTheMountWithinOneSecond) {
  Mount();
  const std::string& rel = events_[0];
  auto fd = OpenFile(M(rel), O_RDONLY);  // TensorBoard keeps its file open
  ASSERT_TRUE(fd.ok());
  std::string seen(1 << 20, '\0');
  size_t got = 0;
  ASSERT_TRUE(PreadFull(fd->get(), seen.data(), seen.size(), 0, &got, rel).ok());
  std::string before = ReadBytes(L(rel));
  ASSERT_EQ(got, before.size());
  std::string extra;
  events::AppendFramedRecord("appended by a writer outside the mount", &extra);
  WriteBytes(L(rel), before + extra);

  ::tbfs::Status read;
  const bool visible = WaitUntil(
      [&] {
        size_t n = 0;
        read = PreadFull(fd->get(), seen.data(), seen.size(), before.size(), &n, rel);
        return read.ok() && n == extra.size() && seen.compare(0, n, extra) == 0;
      },
      std::chrono::milliseconds(1000), std::chrono::milliseconds(50));
  ASSERT_TRUE(read.ok()) << read.message();
  EXPECT_TRUE(visible) << "the append was not visible through the mount within 1 s";
}

std::set<std::string> List(const std::string& dir) {
  std::set<std::string> names;
  for (const auto& e : std::filesystem::directory_iterator(dir)) names.insert(e.path().filename());
  return names;
}

TEST_F(Mounted, NewFilesInTheLogdirAppearInListingsWithinOneSecond) {
  Mount("--no-migrate --cold-after 0");
  std::string run = ParentPath(events_[0]);
  EXPECT_FALSE(List(M(run)).count("events.out.tfevents.2.host.9.0"));
  WriteBytes(L(run + "/events.out.tfevents.2.host.9.0"), "");
  const bool listed =
      WaitUntil([&] { return List(M(run)).count("events.out.tfevents.2.host.9.0") > 0; },
                std::chrono::milliseconds(1000), std::chrono::milliseconds(50));
  EXPECT_TRUE(listed) << "a file created in the logdir was not listed through the mount within 1 s";
  // Changes made through the mount show at once, cold ones included.
  MigrateNow();
  std::string cold = BigTrace();
  std::string dir = ParentPath(cold);
  ASSERT_TRUE(List(M(dir)).count(std::string(BaseName(cold))));
  ASSERT_EQ(::rename(M(cold).c_str(), M(dir + "/moved.json").c_str()), 0);
  auto names = List(M(dir));
  EXPECT_FALSE(names.count(std::string(BaseName(cold))));
  EXPECT_TRUE(names.count("moved.json"));
  ASSERT_EQ(::unlink(M(dir + "/moved.json").c_str()), 0);
  EXPECT_FALSE(List(M(dir)).count("moved.json"));
}

TEST_F(Mounted, ColdTraceReadsBackExactlyFromFourThreadsAtRandomOffsets) {
  Mount("--no-migrate --cold-after 0 --cache 4M");
  MigrateNow();
  std::string big = BigTrace();
  ASSERT_EQ(State(M(big)), "cold");
  ASSERT_FALSE(std::filesystem::exists(L(big)));
  for (const auto& f : traces_) EXPECT_TRUE(ReadBytes(M(f)) == originals_[f]) << f;

  const std::string& want = originals_[big];
  std::atomic<int> bad{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&, t] {
      auto fd = OpenFile(M(big), O_RDONLY);
      if (!fd.ok()) {
        bad++;
        return;
      }
      std::mt19937_64 rng(t);
      std::string buf(3 << 20, '\0');
      for (int i = 0; i < 60; ++i) {
        // Offsets near chunk borders half of the time: the head chunk's
        // end, and every chunk's after it (store/manifest.h).
        const uint64_t chunk = store::kDefaultChunkBytes, head = store::kHeadChunkBytes;
        uint64_t off = (i % 2) ? head + (rng() % (want.size() / chunk + 1)) * chunk - rng() % 64
                               : rng() % want.size();
        off = std::min<uint64_t>(off, want.size() - 1);
        size_t len = 1 + rng() % buf.size();
        size_t got = 0;
        if (!PreadFull(fd->get(), buf.data(), len, off, &got, big).ok() ||
            got != std::min<uint64_t>(len, want.size() - off) ||
            std::memcmp(buf.data(), want.data() + off, got) != 0) {
          bad++;
        }
      }
    });
  }
  for (auto& t : threads) t.join();
  EXPECT_EQ(bad.load(), 0);
  auto status = Status();
  EXPECT_GT(status["cache"]["hits"].get<uint64_t>(), 0u);
  // Where the daemon's memory is, each holder within its bound.
  const auto& memory = status["memory"];
  EXPECT_GT(memory["rss_bytes"].get<uint64_t>(), 0u);
  EXPECT_GE(memory["peak_rss_bytes"].get<uint64_t>(), memory["rss_bytes"].get<uint64_t>());
  EXPECT_GT(memory["heap"]["in_use_bytes"].get<uint64_t>(), 0u);
#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
  EXPECT_EQ(memory["heap"]["allocator"], "sanitizer");
#else
  EXPECT_EQ(memory["heap"]["allocator"], "jemalloc");  // base/heap.h
#endif
  EXPECT_GT(memory["chunk_cache"]["bytes"].get<uint64_t>(), 0u);
  EXPECT_LE(memory["chunk_cache"]["bytes"].get<uint64_t>(),
            memory["chunk_cache"]["capacity_bytes"].get<uint64_t>());
  EXPECT_GT(memory["engine"]["table_readers_bytes"].get<uint64_t>(), 0u);
  EXPECT_EQ(memory["engine"]["block_cache_capacity_bytes"].get<uint64_t>(), 8u << 20);
  EXPECT_LE(memory["engine"]["block_cache_bytes"].get<uint64_t>(), 8u << 20);
}

// The generated gzip'd traces are written by zlib: stored by their content,
// made again on reads, the same bytes whichever way they are read.
// The generated ones hold random numbers that gain little (most stay as
// they are); a slice of the real Kineto trace gzip'd by Python, as
// PyTorch's use_gzip writes it, gains 1.4x and must be stored by content.
// A reader streaming through a cold file leaves in the chunk cache only
// the chunks around it: the kernel's page cache keeps what it read, so the
// chunks behind it go at once and their buffers serve the next ones (the
// cache neither fills with them nor maps fresh memory for each chunk).
// Before, 24 MiB read once held 24 MiB of the cache.
TEST_F(Mounted, AStreamThroughAColdFileLeavesOnlyTheChunksAroundTheReader) {
  const std::string rel = ParentPath(traces_[0]) + "/stream.pt.trace.json";
  const std::string want = store::TraceJson(24u << 20, 5);
  WriteBytes(L(rel), want);
  Mount("--no-migrate --cold-after 0");
  MigrateNow();
  ASSERT_EQ(State(M(rel)), "cold");
  auto fd = OpenFile(M(rel), O_RDONLY);
  ASSERT_TRUE(fd.ok()) << fd.status().message();
  std::string got, buf(128u << 10, '\0');
  for (ssize_t n; (n = ::read(fd->get(), buf.data(), buf.size())) > 0;) got.append(buf.data(), n);
  EXPECT_TRUE(got == want) << "read " << got.size() << " bytes of " << want.size();
  const auto cache = Status()["cache"];
  EXPECT_LE(cache["bytes"].get<uint64_t>(), 8u * store::kDefaultChunkBytes) << cache.dump();
  EXPECT_GE(cache["let_go"].get<uint64_t>(), 16u) << cache.dump();
  EXPECT_LE(cache["buffers_mapped_bytes"].get<uint64_t>(), 16u * store::kDefaultChunkBytes)
      << cache.dump();
  // Each of the reads' chunk lookups is counted by how it found the chunk
  // (a 24 MiB stream: about 24 chunks at least once each).
  const auto& r = cache["reads"];
  EXPECT_GE(r["ready"].get<uint64_t>() + r["waited"].get<uint64_t>() + r["loaded"].get<uint64_t>(),
            24u)
      << cache.dump();
  // Once it closes the file at its end, the chunks it left go too.
  fd->reset();
  EXPECT_TRUE(WaitUntil(
      [&] {
        const auto c = Status()["cache"];
        return c["bytes"].get<uint64_t>() == 0 && c["readahead"]["held_bytes"].get<uint64_t>() == 0;
      },
      std::chrono::seconds(5), std::chrono::milliseconds(20)))
      << Status()["cache"].dump();
  const std::string plain = RunCommand(Tbfs("status " + Quote(mnt_))).out;
  EXPECT_NE(plain.find(fmt::format("{} chunks let go by streams",
                                   Status()["cache"]["let_go"].get<uint64_t>())),
            std::string::npos)
      << plain;
  const auto reads = Status()["cache"]["reads"];
  EXPECT_NE(plain.find(fmt::format("cold chunks for reads: {} ready, {} waited for, {} loaded",
                                   reads["ready"].get<uint64_t>(), reads["waited"].get<uint64_t>(),
                                   reads["loaded"].get<uint64_t>())),
            std::string::npos)
      << plain;
  EXPECT_NE(plain.find(fmt::format("readahead: 0 B held for readers to come, {} chunks lost",
                                   Status()["cache"]["readahead"]["lost"].get<uint64_t>())),
            std::string::npos)
      << plain;

  // A reader that bypasses the page cache (O_DIRECT) leaves its chunks for
  // the next such reader: there is nothing else to read them again from.
  const uint64_t let_go = Status()["cache"]["let_go"].get<uint64_t>();
  auto direct = OpenFile(M(rel), O_RDONLY | O_DIRECT);
  ASSERT_TRUE(direct.ok()) << direct.status().message();
  std::unique_ptr<char, decltype(&std::free)> aligned(
      static_cast<char*>(std::aligned_alloc(4096, 1u << 20)), &std::free);
  got.clear();
  for (ssize_t n; (n = ::read(direct->get(), aligned.get(), 1u << 20)) > 0;) {
    got.append(aligned.get(), n);
  }
  EXPECT_TRUE(got == want) << "read " << got.size() << " bytes of " << want.size();
  direct->reset();
  // Every chunk readahead decoded for it was read.
  const uint64_t lost = Status()["cache"]["readahead"]["lost"].get<uint64_t>();
  EXPECT_TRUE(
      WaitUntil([&] { return Status()["cache"]["readahead"]["held_bytes"].get<uint64_t>() == 0; },
                std::chrono::seconds(5), std::chrono::milliseconds(20)))
      << Status()["cache"].dump();
  const auto after = Status()["cache"];
  EXPECT_EQ(after["readahead"]["lost"].get<uint64_t>(), lost) << after.dump();
  EXPECT_EQ(after["let_go"].get<uint64_t>(), let_go) << after.dump();
  EXPECT_GE(after["bytes"].get<uint64_t>(), want.size() / 2) << after.dump();
}

// A fresh daemon has the store open its blob files before any cold file is
// read: a cold file's first byte after a start waits for none of them.
TEST_F(Mounted, AFreshDaemonOpensTheStoresBlobFilesBeforeAnyColdRead) {
  Mount("--no-migrate --cold-after 0");
  MigrateNow();
  ASSERT_EQ(State(M(traces_[0])), "cold");
  Unmount();
  const std::string store = logdir_ + "/.tbfs";
  const std::set<std::string> blobs = FilesEndingIn(store, ".blob");
  ASSERT_FALSE(blobs.empty());
  Mount();
  auto open = [&] { return FilesOpenBy(std::to_string(pid_), store, ".blob"); };
  EXPECT_TRUE(WaitUntil([&] { return open() == blobs; }, std::chrono::seconds(10),
                        std::chrono::milliseconds(20)))
      << open().size() << " of " << blobs.size() << " blob files open";
}

TEST_F(Mounted, ColdGzipTracesStoredByContentReadBackBitForBit) {
  const std::string real = "run-real/worker0.1.pt.trace.json.gz";
  std::filesystem::create_directories(L("run-real"));
  const std::string py = fmt::format(
      "import gzip\n"
      "with gzip.open('{}', 'rb') as fin, gzip.open('{}', 'wb', compresslevel=6) as fout:\n"
      "    fout.write(fin.read(12 << 20))\n",
      SharedData("kineto-resnet50/worker0.1623143089861.pt.trace.json.gz"), L(real));
  ASSERT_EQ(RunCommand("python3 -c \"" + py + "\"").exit_code, 0) << "python3 is needed";
  traces_.push_back(real);
  originals_[real] = ReadBytes(L(real));
  Mount("--no-migrate --cold-after 0 --cache 4M");
  MigrateNow();
  std::vector<std::string> gz;
  for (const auto& f : traces_) {
    if (f.size() > 3 && f.substr(f.size() - 3) == ".gz") gz.push_back(f);
  }
  ASSERT_GT(gz.size(), 1u);
  auto ls = RunCommand(Tbfs("ls --json " + logdir_));
  ASSERT_EQ(ls.exit_code, 0) << ls.out;
  std::set<std::string> by_content;
  for (const auto& f : nlohmann::json::parse(ls.out)) {
    if (f["gzip_content"].get<bool>()) by_content.insert(f["path"].get<std::string>());
  }
  EXPECT_TRUE(by_content.count(real)) << real << " is stored as it is";
  for (const auto& f : gz) {
    EXPECT_EQ(State(M(f)), "cold") << f;
    EXPECT_TRUE(ReadBytes(M(f)) == originals_[f]) << f;
    // Backwards, in pieces that straddle the store's 1 MiB pieces; with
    // the kernel's cache dropped first, so the daemon makes them.
    ASSERT_EQ(RunCommand("echo 3 > /proc/sys/vm/drop_caches").exit_code, 0);
    const std::string& want = originals_[f];
    auto fd = OpenFile(M(f), O_RDONLY);
    ASSERT_TRUE(fd.ok());
    std::string buf(100003, '\0');
    for (uint64_t end = want.size(); end > 0;) {
      const uint64_t off = end > buf.size() ? end - buf.size() : 0;
      size_t got = 0;
      ASSERT_TRUE(PreadFull(fd->get(), buf.data(), end - off, off, &got, f).ok());
      ASSERT_EQ(got, end - off);
      ASSERT_EQ(std::memcmp(buf.data(), want.data() + off, got), 0) << f << " at " << off;
      end = off;
    }
  }
  // Opened for writing, each is rehydrated: the file it was, in the logdir.
  for (const auto& f : gz) {
    ASSERT_TRUE(OpenFile(M(f), O_WRONLY).ok()) << f;
    EXPECT_TRUE(ReadBytes(L(f)) == originals_[f]) << f;
  }
}

TEST_F(Mounted, OpeningAColdFileForWriteRehydratesIt) {
  Mount("--no-migrate --cold-after 0");
  MigrateNow();
  std::string f = BigTrace();
  struct stat cold_st;
  ASSERT_EQ(::stat(M(f).c_str(), &cold_st), 0);
  ASSERT_EQ(State(M(f)), "cold");
  {
    auto fd = OpenFile(M(f), O_WRONLY | O_APPEND);
    ASSERT_TRUE(fd.ok()) << fd.status().ToString();
    ASSERT_TRUE(WriteAll(fd->get(), "+tail", 5, f).ok());
  }
  EXPECT_EQ(State(M(f)), "hot");
  EXPECT_TRUE(ReadBytes(L(f)) == originals_[f] + "+tail");
  EXPECT_TRUE(ReadBytes(M(f)) == originals_[f] + "+tail");
  struct stat hot_st;
  ASSERT_EQ(::stat(M(f).c_str(), &hot_st), 0);
  struct stat backing;
  ASSERT_EQ(::stat(L(f).c_str(), &backing), 0);
  EXPECT_EQ(hot_st.st_ino, backing.st_ino);  // a hot file shows its own number again
  EXPECT_NE(hot_st.st_ino, cold_st.st_ino);
  EXPECT_EQ(Status()["rehydrations"].get<int>(), 1);

  // Truncation rehydrates too.
  std::string g;
  for (const auto& t : traces_) {
    if (t != f && State(M(t)) == "cold") g = t;
  }
  ASSERT_FALSE(g.empty());
  ASSERT_EQ(::truncate(M(g).c_str(), 10), 0);
  EXPECT_EQ(ReadBytes(L(g)), originals_[g].substr(0, 10));
}

// A reader opened while the file was cold reads the file a writer
// rehydrated, even once that file is unlinked and its writer closed, as a
// reader of a deleted file does on a disk (not ESTALE).
TEST_F(Mounted, AColdReaderKeepsTheRehydratedFileAfterItsUnlink) {
  Mount("--no-migrate --cold-after 0");
  MigrateNow();
  std::string f = BigTrace();
  ASSERT_EQ(State(M(f)), "cold");
  auto reader = OpenFile(M(f), O_RDONLY);
  ASSERT_TRUE(reader.ok()) << reader.status().ToString();
  {
    auto writer = OpenFile(M(f), O_RDWR);
    ASSERT_TRUE(writer.ok()) << writer.status().ToString();
    ASSERT_EQ(::pwrite(writer->get(), "X", 1, 0), 1);
    ASSERT_EQ(::unlink(M(f).c_str()), 0);
  }
  std::string expect = originals_[f];
  expect[0] = 'X';
  std::string got(expect.size() + 1, '\0');
  size_t done = 0;
  for (ssize_t n; (n = ::pread(reader->get(), got.data() + done, got.size() - done,
                               static_cast<off_t>(done))) != 0;) {
    ASSERT_GT(n, 0) << std::strerror(errno);
    done += static_cast<size_t>(n);
  }
  got.resize(done);
  EXPECT_TRUE(got == expect) << got.size() << " bytes read of " << expect.size();
  struct stat st;
  ASSERT_EQ(::fstat(reader->get(), &st), 0) << std::strerror(errno);
  EXPECT_EQ(st.st_nlink, 0u);
}

TEST_F(Mounted, RenameUnlinkRmdirAcrossHotAndCold) {
  Mount("--no-migrate --cold-after 0");
  MigrateNow();
  std::string cold = BigTrace();
  std::string dir = ParentPath(cold);
  // Rename a cold file, within and across folders.
  ASSERT_EQ(::rename(M(cold).c_str(), M(dir + "/renamed.pt.trace.json").c_str()), 0);
  EXPECT_FALSE(std::filesystem::exists(M(cold)));
  EXPECT_TRUE(ReadBytes(M(dir + "/renamed.pt.trace.json")) == originals_[cold]);
  ASSERT_EQ(::mkdir(M("elsewhere").c_str(), 0755), 0);
  ASSERT_EQ(::rename(M(dir + "/renamed.pt.trace.json").c_str(), M("elsewhere/t.json").c_str()), 0);
  EXPECT_EQ(State(M("elsewhere/t.json")), "cold");
  EXPECT_TRUE(ReadBytes(M("elsewhere/t.json")) == originals_[cold]);
  // RENAME_NOREPLACE onto a cold file fails; EXCHANGE with a cold one is EINVAL.
  WriteBytes(M("elsewhere/hot.txt"), "hot");
  EXPECT_NE(::renameat2(AT_FDCWD, M("elsewhere/hot.txt").c_str(), AT_FDCWD,
                        M("elsewhere/t.json").c_str(), RENAME_NOREPLACE),
            0);
  EXPECT_EQ(errno, EEXIST);
  EXPECT_NE(::renameat2(AT_FDCWD, M("elsewhere/hot.txt").c_str(), AT_FDCWD,
                        M("elsewhere/t.json").c_str(), RENAME_EXCHANGE),
            0);
  EXPECT_EQ(errno, EINVAL);
  // Folders holding cold files do not trade places: their cold entries
  // would stay or go to the wrong side. Nothing moves.
  ASSERT_EQ(::mkdir(M("hot_only").c_str(), 0755), 0);
  WriteBytes(M("hot_only/h.txt"), "h");
  EXPECT_NE(::renameat2(AT_FDCWD, M("hot_only").c_str(), AT_FDCWD, M("elsewhere").c_str(),
                        RENAME_EXCHANGE),
            0);
  EXPECT_EQ(errno, EINVAL);
  EXPECT_NE(::renameat2(AT_FDCWD, M("elsewhere").c_str(), AT_FDCWD, M("hot_only").c_str(),
                        RENAME_EXCHANGE),
            0);
  EXPECT_EQ(errno, EINVAL);
  EXPECT_TRUE(ReadBytes(M("elsewhere/t.json")) == originals_[cold]);
  EXPECT_EQ(ReadBytes(M("hot_only/h.txt")), "h");
  // A hot file renamed over a cold one replaces it.
  ASSERT_EQ(::rename(M("elsewhere/hot.txt").c_str(), M("elsewhere/t.json").c_str()), 0);
  EXPECT_EQ(ReadBytes(M("elsewhere/t.json")), "hot");
  EXPECT_EQ(State(M("elsewhere/t.json")), "hot");
  // rmdir refuses a folder that still holds cold files, then works.
  std::string profile_dir;
  for (const auto& t : traces_) {
    if (t.find("plugins/profile/") != std::string::npos) profile_dir = ParentPath(t);
  }
  ASSERT_FALSE(profile_dir.empty());
  EXPECT_NE(::rmdir(M(profile_dir).c_str()), 0);
  EXPECT_EQ(errno, ENOTEMPTY);
  for (const auto& e : std::filesystem::directory_iterator(M(profile_dir))) {
    ASSERT_EQ(::unlink(e.path().c_str()), 0) << e.path();
  }
  EXPECT_EQ(::rmdir(M(profile_dir).c_str()), 0);
  EXPECT_FALSE(std::filesystem::exists(M(profile_dir)));
  // Renaming a folder moves its cold contents with it.
  std::string run = traces_[0].substr(0, traces_[0].find('/'));
  ASSERT_EQ(::rename(M(run).c_str(), M(run + "_moved").c_str()), 0);
  for (const auto& t : traces_) {
    if (t.starts_with(run + "/") && t != cold && t.find(profile_dir) == std::string::npos) {
      std::string moved = run + "_moved" + t.substr(run.size());
      EXPECT_TRUE(ReadBytes(M(moved)) == originals_[t]) << moved;
    }
  }
  EXPECT_EQ(RunCommand(Tbfs("fsck " + logdir_ + " >/dev/null")).exit_code, 0);
}

// A folder whose files are all cold has an empty backing folder: renaming
// another folder over it must fail as rmdir does (ENOTEMPTY), or the cold
// files would end up inside the folder that replaced it, another user's
// (red team: nobody's empty folder renamed over root's, then root's cold
// file deleted by nobody). Whether the source is hot or only in the store.
TEST_F(Mounted, ARenameOverAFolderWhoseFilesAreColdIsRefusedAsNotEmpty) {
  ASSERT_EQ(::chmod(dir_.path().c_str(), 0755), 0);  // the other user reaches the mount
  Mount("--no-migrate --cold-after 0 -o allow_other");
  ASSERT_EQ(::mkdir(M("shared").c_str(), 0777), 0);
  ASSERT_EQ(::chmod(M("shared").c_str(), 0777), 0);
  ASSERT_EQ(::mkdir(M("shared/kept").c_str(), 0755), 0);
  WriteBytes(M("shared/kept/secret.pt.trace.json"), "{\"traceEvents\": []}");
  MigrateNow();
  ASSERT_EQ(State(M("shared/kept/secret.pt.trace.json")), "cold");
  ASSERT_TRUE(std::filesystem::is_empty(L("shared/kept"))) << "the backing folder is empty";
  // Another user's empty folder, renamed over it.
  auto mv = RunCommand("setpriv --reuid=65534 --regid=65534 --clear-groups sh -c 'mkdir " +
                       Quote(M("shared/mine")) + " && mv -T " + Quote(M("shared/mine")) + " " +
                       Quote(M("shared/kept")) + "' 2>&1");
  EXPECT_NE(mv.exit_code, 0) << mv.out;
  EXPECT_NE(mv.out.find("Directory not empty"), std::string::npos) << mv.out;
  // Root's too: the same answer.
  ASSERT_EQ(::mkdir(M("shared/other").c_str(), 0755), 0);
  EXPECT_EQ(::rename(M("shared/other").c_str(), M("shared/kept").c_str()), -1);
  EXPECT_EQ(errno, ENOTEMPTY);
  struct stat st;
  ASSERT_EQ(::stat(M("shared/kept").c_str(), &st), 0);
  EXPECT_EQ(st.st_uid, 0u) << "the folder is still root's";
  EXPECT_EQ(ReadBytes(M("shared/kept/secret.pt.trace.json")), "{\"traceEvents\": []}");
  // A folder only the store has (its backing folder removed in the logdir),
  // renamed over the same: refused, and the backing folder there stays.
  ASSERT_EQ(::mkdir(M("shared/gone").c_str(), 0755), 0);
  WriteBytes(M("shared/gone/t.pt.trace.json"), "{\"traceEvents\": [1]}");
  MigrateNow();
  ASSERT_EQ(::rmdir(L("shared/gone").c_str()), 0);
  EXPECT_EQ(::rename(M("shared/gone").c_str(), M("shared/kept").c_str()), -1);
  EXPECT_EQ(errno, ENOTEMPTY);
  EXPECT_TRUE(std::filesystem::is_directory(L("shared/kept"))) << "the backing folder was removed";
  EXPECT_EQ(ReadBytes(M("shared/kept/secret.pt.trace.json")), "{\"traceEvents\": []}");
  EXPECT_EQ(ReadBytes(M("shared/gone/t.pt.trace.json")), "{\"traceEvents\": [1]}");
  EXPECT_EQ(RunCommand(Tbfs("fsck " + logdir_ + " >/dev/null")).exit_code, 0);
}

TEST_F(Mounted, AFolderOnlyTheColdStoreHasIsListedAndCanBeEntered) {
  Mount("--no-migrate --cold-after 0");
  MigrateNow();
  std::string profile_dir;
  for (const auto& t : traces_) {
    if (t.find("plugins/profile/") != std::string::npos) profile_dir = ParentPath(t);
  }
  ASSERT_FALSE(profile_dir.empty());
  // Someone removes the emptied folders directly in the logdir.
  std::string plugins = ParentPath(ParentPath(profile_dir));
  ASSERT_EQ(std::filesystem::remove_all(L(plugins)), 3u) << "plugins/profile/<date> were empty";
  ASSERT_TRUE(List(M(ParentPath(plugins))).count("plugins"));
  std::set<std::string> names = List(M(profile_dir));
  EXPECT_FALSE(names.empty());
  for (const auto& t : traces_) {
    if (ParentPath(t) == profile_dir) {
      EXPECT_TRUE(ReadBytes(M(t)) == originals_[t]) << t;
    }
  }
  // Creating a file there brings the folders back into the logdir.
  WriteBytes(M(profile_dir + "/notes.txt"), "mine");
  EXPECT_EQ(ReadBytes(L(profile_dir + "/notes.txt")), "mine");
  EXPECT_TRUE(List(M(profile_dir)).count("notes.txt"));
}

TEST_F(Mounted, BackgroundMigratorMovesQuietTracesAndNeverTfevents) {
  Mount("--cold-after 0 -o migrate_interval=1s");
  nlohmann::json st;
  // The verifier's verdict is recorded just after the batch commits.
  WaitUntil(
      [&] {
        st = Status();
        return st["cold"]["files"].get<size_t>() == traces_.size() &&
               !st["last_verifier"].get<std::string>().empty();
      },
      std::chrono::milliseconds(10000), std::chrono::milliseconds(100));
  EXPECT_EQ(st["cold"]["files"].get<size_t>(), traces_.size());
  EXPECT_EQ(st["last_verifier"].get<std::string>(), "intact");
  for (const auto& f : events_) {
    EXPECT_EQ(State(M(f)), "hot") << f;
    EXPECT_TRUE(std::filesystem::exists(L(f))) << f;
  }
  for (const auto& f : traces_) EXPECT_TRUE(ReadBytes(M(f)) == originals_[f]) << f;
}

// A read-only mount changes nothing beneath it: its passes moved traces
// out of the logdir before. `migrate --now` says why (exit 2); remounted
// rw, the background passes go on.
TEST_F(Mounted, AReadOnlyMountMovesNothingUntilItIsWritable) {
  Mount("--cold-after 0 -o ro,migrate_interval=1s");
  auto now = RunCommand(Tbfs("migrate --now " + mnt_ + " 2>&1"));
  EXPECT_EQ(now.exit_code, 2) << now.out;
  EXPECT_NE(now.out.find("read-only"), std::string::npos) << now.out;
  // Nor is the store's garbage removed (a dry run says what there is).
  auto gc = RunCommand(Tbfs("gc " + mnt_ + " --garbage --apply 2>&1"));
  EXPECT_EQ(gc.exit_code, 2) << gc.out;
  EXPECT_NE(gc.out.find("read-only"), std::string::npos) << gc.out;
  EXPECT_EQ(RunCommand(Tbfs("gc " + mnt_ + " --garbage")).exit_code, 0);
  std::this_thread::sleep_for(std::chrono::seconds(3));  // three intervals: passes would have run
  auto st = Status();
  EXPECT_EQ(st["cold"]["files"].get<size_t>(), 0u) << st.dump();
  for (const auto& f : traces_) EXPECT_TRUE(ReadBytes(L(f)) == originals_[f]) << f;
  ASSERT_EQ(RunCommand("mount -o remount,rw " + mnt_).exit_code, 0);
  EXPECT_TRUE(WaitUntil([&] { return Status()["cold"]["files"].get<size_t>() == traces_.size(); },
                        std::chrono::seconds(20)))
      << Status().dump();
  for (const auto& f : traces_) EXPECT_TRUE(ReadBytes(M(f)) == originals_[f]) << f;
}

// A remount to ro in the middle of a pass stops it at the next file, as an
// unmount would: nothing more leaves the logdir, and `migrate --now` says
// why it stopped (the failpoint slows every file to 100 ms: 30 s of pass).
TEST_F(Mounted, ARemountToReadOnlyStopsAPassInFlight) {
  const auto files = WriteTinyTraces("slow", 300);
  MountFailing("migrate.slow_file", "--no-migrate --cold-after 0");
  auto pass = MigrateNowAsync();
  ASSERT_TRUE(WaitUntil([&] { return Status()["cold"]["files"].get<uint64_t>() >= 3; },
                        std::chrono::milliseconds(20000), std::chrono::milliseconds(50)))
      << "the pass did not start";
  ASSERT_EQ(RunCommand("mount -o remount,ro " + mnt_).exit_code, 0);
  auto r = pass.get();  // bounded, not timed: the pass had ~28 s to go
  EXPECT_NE(r.exit_code, 0) << "a stopped pass said it was done: " << r.out;
  EXPECT_NE(r.out.find("read-only"), std::string::npos) << r.out;
  int hot = 0;
  for (const auto& [rel, bytes] : files) hot += std::filesystem::exists(L(rel));
  EXPECT_GT(hot, 200) << "the pass went on after the mount turned read-only";
  for (const auto& [rel, bytes] : files) EXPECT_EQ(ReadBytes(M(rel)), bytes) << rel;
}

// A store that refuses a batch's journal record (its engine takes no
// writes: a failed compaction did that until 2026-12-06; a log it cannot
// write still does): the batch does not run, and the pass says so (red
// team: `migrate --now` exited 0 having moved nothing, and `tbfs status`
// showed no error). The failpoint fails the record's commit.
TEST_F(Mounted, ABatchWhoseJournalTheStoreRefusedFailsThePass) {
  const auto files = WriteTinyTraces("refused", 3);
  MountFailing("migrate.journal", "--no-migrate --cold-after 0");
  const CommandResult r = RunCommand(Tbfs("migrate --now " + Quote(mnt_) + " 2>&1"));
  EXPECT_NE(r.exit_code, 0) << "a pass that moved nothing said it was done: " << r.out;
  EXPECT_NE(r.out.find("journal record"), std::string::npos) << r.out;
  const auto status = Status();
  EXPECT_NE(status["migrations"]["last_error"].get<std::string>().find("journal record"),
            std::string::npos)
      << status.dump();
  EXPECT_EQ(status["cold"]["files"].get<uint64_t>(), 0u);
  for (const auto& [rel, bytes] : files) {
    EXPECT_TRUE(std::filesystem::exists(L(rel))) << rel;
    EXPECT_EQ(ReadBytes(M(rel)), bytes) << rel;
  }
}

// The same in a background pass: its error is the status's last error
// (red team: only the log said it, pass after pass).
TEST_F(Mounted, ABackgroundPassThatFailedSaysItInTheStatus) {
  WriteTinyTraces("refused", 3);
  MountFailing("migrate.journal", "--cold-after 0 -o migrate_interval=1s");
  EXPECT_TRUE(WaitUntil(
      [&] {
        return Status()["migrations"]["last_error"].get<std::string>().find("journal record") !=
               std::string::npos;
      },
      std::chrono::seconds(20)))
      << Status().dump();
}

// The same for the retention policy after a pass (red team: 581 cold files
// deleted after the remount); the failpoint slows each deletion to 100 ms.
TEST_F(Mounted, ARemountToReadOnlyStopsRetentionInFlight) {
  WriteTinyTraces("old", 200);
  Mount("--no-migrate --cold-after 0");
  MigrateNow();
  const uint64_t cold = Status()["cold"]["files"].get<uint64_t>();
  ASSERT_GE(cold, 200u);
  Unmount();
  std::this_thread::sleep_for(std::chrono::milliseconds(1200));  // migrated over 1 s ago
  const std::string config = dir_ / "retention.yaml";
  WriteBytes(config, "retention:\n  migrated_before: 1s\n");
  MountFailing("retention.slow_delete", "--no-migrate --cold-after 0 --config " + config);
  auto pass = MigrateNowAsync();
  ASSERT_TRUE(WaitUntil([&] { return Status()["cold"]["files"].get<uint64_t>() + 3 <= cold; },
                        std::chrono::milliseconds(20000), std::chrono::milliseconds(50)))
      << "retention did not start";
  ASSERT_EQ(RunCommand("mount -o remount,ro " + mnt_).exit_code, 0);
  auto r = pass.get();  // bounded, not timed: the deletions had ~20 s to go
  EXPECT_NE(r.exit_code, 0) << "a stopped pass said it was done: " << r.out;
  EXPECT_NE(r.out.find("read-only"), std::string::npos) << r.out;
  EXPECT_GT(Status()["cold"]["files"].get<uint64_t>(), cold / 2)
      << "retention went on after the mount turned read-only";
}

TEST_F(Mounted, MigratorLeavesFilesOpenForWritingAndReadersKeepReading) {
  Mount("--no-migrate --cold-after 0");
  std::string written = BigTrace(), read;
  for (const auto& t : traces_) {
    if (t != written && originals_[t].size() > 4096) read = t;
  }
  ASSERT_FALSE(read.empty());
  auto writer = OpenFile(M(written), O_WRONLY);
  auto reader = OpenFile(M(read), O_RDONLY);
  ASSERT_TRUE(writer.ok() && reader.ok());
  char first[16];
  ASSERT_EQ(::pread(reader->get(), first, sizeof(first), 0), 16);
  MigrateNow();
  EXPECT_EQ(State(M(written)), "hot");
  EXPECT_TRUE(std::filesystem::exists(L(written)));
  EXPECT_EQ(State(M(read)), "cold");  // it moved under its reader, who reads on
  std::string all(originals_[read].size(), '\0');
  size_t got = 0;
  ASSERT_TRUE(PreadFull(reader->get(), all.data(), all.size(), 0, &got, read).ok());
  EXPECT_TRUE(all == originals_[read]);
  writer->reset();
  MigrateNow();
  EXPECT_EQ(State(M(written)), "cold");
}

TEST_F(Mounted, StoreFolderIsInvisibleAndStateXattrIsEverywhere) {
  Mount("--no-migrate --cold-after 0");
  MigrateNow();
  ASSERT_TRUE(std::filesystem::exists(L(".tbfs")));
  EXPECT_FALSE(std::filesystem::exists(M(".tbfs")));
  for (const auto& e : std::filesystem::directory_iterator(mnt_)) {
    EXPECT_NE(e.path().filename(), ".tbfs");
  }
  EXPECT_NE(::mkdir(M(".tbfs").c_str(), 0755), 0);
  for (const auto& f : events_) EXPECT_EQ(State(M(f)), "hot");
  for (const auto& f : traces_) EXPECT_EQ(State(M(f)), "cold");
  // Read by name only: `rsync -aX` and `tar --xattrs` from the mount back
  // into it copied it, and failed to set it (issue 21).
  char names[1024];
  ssize_t n = ::listxattr(M(traces_[0]).c_str(), names, sizeof(names));
  ASSERT_GE(n, 0);
  EXPECT_EQ(std::string(names, n).find("user.tbfs."), std::string::npos);
}

// Names tbfs gives its own files for a moment (.NAME.tbfs-tmp-ID,
// .NAME.tbfs-mig-ID) are never shown, so none is made through the mount:
// EPERM, the same every time (red team: a file made under one could not
// be opened with O_CREAT again, ESTALE).
TEST_F(Mounted, NoFileIsMadeUnderANameTbfsHides) {
  Mount("--no-migrate");
  WriteBytes(M("plain"), "x");
  for (const std::string name : {".a.tbfs-tmp-1", ".b.tbfs-mig-7"}) {
    const std::string p = M(name);
    for (int attempt = 0; attempt < 2; ++attempt) {
      errno = 0;
      EXPECT_LT(::open(p.c_str(), O_CREAT | O_WRONLY | O_CLOEXEC, 0644), 0) << name;
      EXPECT_EQ(errno, EPERM) << name << ": " << std::strerror(errno);
    }
    EXPECT_NE(::mkdir(p.c_str(), 0755), 0) << name;
    EXPECT_NE(::mkfifo(p.c_str(), 0644), 0) << name;
    EXPECT_NE(::symlink("plain", p.c_str()), 0) << name;
    EXPECT_NE(::link(M("plain").c_str(), p.c_str()), 0) << name;
    EXPECT_NE(::rename(M("plain").c_str(), p.c_str()), 0) << name;
    EXPECT_EQ(errno, EPERM) << name << ": " << std::strerror(errno);
    EXPECT_FALSE(std::filesystem::exists(L(name))) << name;
  }
  EXPECT_EQ(ReadBytes(M("plain")), "x");
}

// A symlink's own attributes are listed, as the backing filesystem lists
// them, and never its target's (xfstests generic/062).
TEST_F(Mounted, ASymlinksOwnAttributesAreListedNeverItsTargets) {
  Mount("--no-migrate");
  WriteBytes(L("target.txt"), "x");
  ASSERT_EQ(::setxattr(L("target.txt").c_str(), "user.target", "t", 1, 0), 0)
      << std::strerror(errno);
  ASSERT_EQ(::symlink("target.txt", M("link").c_str()), 0);
  ASSERT_EQ(::lsetxattr(M("link").c_str(), "trusted.a", "\xba\xbe", 2, 0), 0)
      << std::strerror(errno);
  auto names = [](const std::string& path) {
    char buf[4096];
    const ssize_t n = ::llistxattr(path.c_str(), buf, sizeof(buf));
    return n < 0 ? std::string("llistxattr: ") + std::strerror(errno)
                 : std::string(buf, static_cast<size_t>(n));
  };
  EXPECT_NE(names(M("link")).find("trusted.a"), std::string::npos) << names(M("link"));
  EXPECT_EQ(names(M("link")), names(L("link")));
  EXPECT_EQ(names(M("link")).find("user.target"), std::string::npos);
  char value[8];
  EXPECT_EQ(::lgetxattr(M("link").c_str(), "trusted.a", value, sizeof(value)), 2);
  EXPECT_EQ(::lgetxattr(M("link").c_str(), "user.target", value, sizeof(value)), -1);
  // The target's, through the mount, as they are.
  EXPECT_NE(names(M("target.txt")).find("user.target"), std::string::npos);
}

// Reads through a -o noatime mount leave the access times of files and
// folders as they were, in the logdir and through the mount; without it
// they change as the backing filesystem's relatime says (here: an access
// time older than a day moves), which is how this test could fail
// (xfstests generic/120).
TEST_F(Mounted, NoatimeReadsLeaveAccessTimesAsTheyWere) {
  const struct timespec day_ago = {::time(nullptr) - 2 * 86400, 0};
  const struct timespec days_ago = {::time(nullptr) - 3 * 86400, 0};
  auto age = [&](const std::string& path) {
    const struct timespec times[2] = {day_ago, days_ago};  // atime, mtime
    ASSERT_EQ(::utimensat(AT_FDCWD, path.c_str(), times, AT_SYMLINK_NOFOLLOW), 0) << path;
  };
  auto atime = [](const std::string& path) {
    struct stat st;
    return ::stat(path.c_str(), &st) == 0 ? st.st_atim.tv_sec : -1;
  };
  for (const char* name : {"relatime.txt", "noatime.txt"}) WriteBytes(L(name), "some bytes");
  ASSERT_EQ(::mkdir(L("dir").c_str(), 0755), 0);
  WriteBytes(L("dir/f.txt"), "x");
  age(L("relatime.txt"));
  Mount("--no-migrate");
  EXPECT_EQ(ReadBytes(M("relatime.txt")), "some bytes");
  ASSERT_GT(atime(L("relatime.txt")), day_ago.tv_sec) << "the backing filesystem keeps atimes";
  Unmount();
  age(L("noatime.txt"));
  age(L("dir"));
  Mount("--no-migrate -o noatime");
  EXPECT_EQ(ReadBytes(M("noatime.txt")), "some bytes");
  EXPECT_EQ(List(M("dir")).size(), 1u);
  EXPECT_EQ(atime(L("noatime.txt")), day_ago.tv_sec);
  EXPECT_EQ(atime(L("dir")), day_ago.tv_sec);
  EXPECT_EQ(atime(M("noatime.txt")), day_ago.tv_sec);
  // nodiratime: folders as they were, files as the backing filesystem says.
  Unmount();
  age(L("noatime.txt"));
  Mount("--no-migrate -o nodiratime");
  EXPECT_EQ(ReadBytes(M("noatime.txt")), "some bytes");
  EXPECT_EQ(List(M("dir")).size(), 1u);
  EXPECT_GT(atime(L("noatime.txt")), day_ago.tv_sec);
  EXPECT_EQ(atime(L("dir")), day_ago.tv_sec);
  // Read-only, from the start or by a remount: no access time changes, as
  // on a disk filesystem mounted ro (xfstests generic/003's last step);
  // writable again, reads change them as before.
  Unmount();
  age(L("noatime.txt"));
  age(L("dir"));
  Mount("--no-migrate -o ro");
  EXPECT_EQ(ReadBytes(M("noatime.txt")), "some bytes");
  EXPECT_EQ(List(M("dir")).size(), 1u);
  EXPECT_EQ(atime(L("noatime.txt")), day_ago.tv_sec);
  EXPECT_EQ(atime(L("dir")), day_ago.tv_sec);
  EXPECT_TRUE(Status()["read_only"].get<bool>());
  // The daemon learns of a remount from the kernel's mount table, just
  // after mount(8) returns; `tbfs status` says when it has. The reads
  // below reach the daemon: the kernel's cached pages are dropped first.
  auto remount = [&](const std::string& how) {
    ASSERT_EQ(RunCommand("mount -o remount," + how + " " + mnt_).exit_code, 0);
    ASSERT_TRUE(WaitUntil([&] { return Status()["read_only"].get<bool>() == (how == "ro"); },
                          std::chrono::seconds(10)))
        << how;
    ASSERT_EQ(RunCommand("echo 3 > /proc/sys/vm/drop_caches").exit_code, 0);
  };
  remount("rw");
  EXPECT_EQ(ReadBytes(M("noatime.txt")), "some bytes");
  EXPECT_GT(atime(L("noatime.txt")), day_ago.tv_sec) << "writable: reads change them again";
  auto held = OpenFile(M("noatime.txt"), O_RDONLY);  // opened while writable
  ASSERT_TRUE(held.ok());
  age(L("noatime.txt"));
  remount("ro");
  EXPECT_EQ(ReadBytes(M("noatime.txt")), "some bytes");
  EXPECT_EQ(atime(L("noatime.txt")), day_ago.tv_sec);
  // A handle opened before the remount reads as the mount says now.
  auto read_held = [&] {
    char buf[16];
    ::posix_fadvise(held->get(), 0, 0, POSIX_FADV_DONTNEED);  // to the daemon, not the cache
    return ::pread(held->get(), buf, sizeof(buf), 0);
  };
  EXPECT_EQ(read_held(), 10);
  EXPECT_EQ(atime(L("noatime.txt")), day_ago.tv_sec) << "a handle from before the remount";
  // A mount stacked on the mount point later is another mount: the daemon
  // follows its own (by id), read-only still.
  ASSERT_EQ(::mount("tmpfs", mnt_.c_str(), "tmpfs", 0, "size=1m"), 0) << std::strerror(errno);
  struct Stacked {
    std::string path;
    bool on = true;
    ~Stacked() {
      if (on) ::umount2(path.c_str(), MNT_DETACH);
    }
  } stacked{mnt_};
  EXPECT_FALSE(
      WaitUntil([&] { return read_held() != 10 || atime(L("noatime.txt")) != day_ago.tv_sec; },
                std::chrono::milliseconds(500)))
      << "a read through the held handle changed the access time, with a writable mount on top";
  ASSERT_EQ(::umount2(mnt_.c_str(), 0), 0) << std::strerror(errno);
  stacked.on = false;
  EXPECT_TRUE(Status()["read_only"].get<bool>());
}

// -o strictatime: every read changes the access time, which only a
// logdir on a filesystem mounted strictatime can give (the daemon reads
// it); on any other the mount is refused in one line (xfstests
// generic/003 mounts strictatime).
TEST_F(Mounted, StrictatimeWhereTheLogdirsFilesystemKeepsIt) {
  auto refused = RunCommand(
      Tbfs("mount " + Quote(logdir_) + " " + Quote(mnt_) + " --no-migrate -o strictatime 2>&1"));
  EXPECT_EQ(refused.exit_code, 2) << refused.out;
  EXPECT_NE(refused.out.find("strictatime: the filesystem of LOGDIR"), std::string::npos)
      << refused.out;
  EXPECT_FALSE(IsMounted(mnt_));
  // A logdir on a tmpfs mounted strictatime (taken down lazily at the end,
  // after the tbfs mount above it, wherever the test stops).
  const std::string strict = dir_ / "strict";
  ASSERT_EQ(::mkdir(strict.c_str(), 0755), 0);
  ASSERT_EQ(::mount("tmpfs", strict.c_str(), "tmpfs", MS_STRICTATIME, "size=16m"), 0)
      << std::strerror(errno);
  struct Lazy {
    std::string path;
    ~Lazy() { ::umount2(path.c_str(), MNT_DETACH); }
  } lazy{strict};
  WriteBytes(strict + "/f.txt", "strict");
  // An access time after the modification and within a day: relatime
  // would keep it, strictatime moves it.
  const struct timespec times[2] = {{::time(nullptr) - 3600, 0}, {::time(nullptr) - 7200, 0}};
  ASSERT_EQ(::utimensat(AT_FDCWD, (strict + "/f.txt").c_str(), times, 0), 0);
  auto mounted = RunCommand(
      Tbfs("mount " + Quote(strict) + " " + Quote(mnt_) + " --no-migrate -o strictatime 2>&1"));
  ASSERT_EQ(mounted.exit_code, 0) << mounted.out;
  pid_ = Status()["pid"].get<int>();
  EXPECT_EQ(ReadBytes(M("f.txt")), "strict");
  struct stat st;
  ASSERT_EQ(::stat((strict + "/f.txt").c_str(), &st), 0);
  EXPECT_GT(st.st_atim.tv_sec, times[0].tv_sec + 3000);
}

TEST_F(Mounted, ColdFilesKeepSizeModeOwnerAndTimes) {
  std::map<std::string, struct stat> before;
  for (const auto& f : traces_) ::stat(L(f).c_str(), &before[f]);
  Mount("--no-migrate --cold-after 0");
  MigrateNow();
  for (const auto& f : traces_) {
    struct stat st;
    ASSERT_EQ(::stat(M(f).c_str(), &st), 0);
    EXPECT_EQ(st.st_size, before[f].st_size) << f;
    EXPECT_EQ(st.st_mode, before[f].st_mode) << f;
    EXPECT_EQ(st.st_uid, before[f].st_uid) << f;
    EXPECT_EQ(st.st_mtim.tv_sec, before[f].st_mtim.tv_sec) << f;
    EXPECT_EQ(st.st_mtim.tv_nsec, before[f].st_mtim.tv_nsec) << f;
    EXPECT_GE(st.st_ino, fs::kColdInoBase) << f;  // the cold range (docs/format.md)
  }
  // chmod and utimens on a cold file change it without rehydrating.
  std::string f = traces_[0];
  ASSERT_EQ(::chmod(M(f).c_str(), 0600), 0);
  struct timespec times[2] = {{0, UTIME_OMIT}, {1234567890, 5}};
  ASSERT_EQ(::utimensat(AT_FDCWD, M(f).c_str(), times, 0), 0);
  struct stat st;
  ASSERT_EQ(::stat(M(f).c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 07777, 0600u);
  EXPECT_EQ(st.st_mtim.tv_sec, 1234567890);
  EXPECT_EQ(st.st_atim.tv_sec, before[f].st_atim.tv_sec);  // UTIME_OMIT left it
  EXPECT_EQ(State(M(f)), "cold");
}

TEST_F(Mounted, PosixDetailsUsersRelyOn) {
  Mount();
  // Hard links: one inode, one link count, under every name.
  WriteBytes(M("a.txt"), "shared");
  ASSERT_EQ(::link(M("a.txt").c_str(), M("b.txt").c_str()), 0);
  ASSERT_EQ(::chmod(M("b.txt").c_str(), 0640), 0);
  struct stat a, b;
  ASSERT_EQ(::stat(M("a.txt").c_str(), &a), 0);
  ASSERT_EQ(::stat(M("b.txt").c_str(), &b), 0);
  EXPECT_EQ(a.st_ino, b.st_ino);
  EXPECT_EQ(a.st_nlink, 2u);
  EXPECT_EQ(b.st_nlink, 2u);
  EXPECT_EQ(a.st_mode & 07777, 0640u);
  // A deleted file still open reads and writes until closed.
  auto fd = OpenFile(M("a.txt"), O_RDWR);
  ASSERT_TRUE(fd.ok());
  ASSERT_EQ(::unlink(M("a.txt").c_str()), 0);
  ASSERT_EQ(::unlink(M("b.txt").c_str()), 0);
  ASSERT_EQ(::pwrite(fd->get(), "X", 1, 0), 1);
  char buf[8] = {};
  ASSERT_EQ(::pread(fd->get(), buf, 6, 0), 6);
  EXPECT_EQ(std::string(buf, 6), "Xhared");
  fd->reset();
  // utimensat: UTIME_OMIT leaves a field, UTIME_NOW sets it.
  WriteBytes(M("t.txt"), "t");
  struct timespec set[2] = {{100, 0}, {200, 0}};
  ASSERT_EQ(::utimensat(AT_FDCWD, M("t.txt").c_str(), set, 0), 0);
  struct timespec omit_now[2] = {{0, UTIME_OMIT}, {0, UTIME_NOW}};
  ASSERT_EQ(::utimensat(AT_FDCWD, M("t.txt").c_str(), omit_now, 0), 0);
  struct stat t;
  ASSERT_EQ(::stat(M("t.txt").c_str(), &t), 0);
  EXPECT_EQ(t.st_atim.tv_sec, 100);
  EXPECT_GT(t.st_mtim.tv_sec, 200);
  // O_DIRECT opens work.
  int direct = ::open(M("t.txt").c_str(), O_RDONLY | O_DIRECT);
  EXPECT_GE(direct, 0) << std::strerror(errno);
  if (direct >= 0) ::close(direct);
  // Paths of full PATH_MAX length work: operations are relative to fds.
  std::string deep = mnt_;
  std::string rel;
  while (deep.size() < PATH_MAX - 300) {
    std::string part(200, 'd');
    ASSERT_EQ(::mkdir((deep + "/" + part).c_str(), 0755), 0) << std::strerror(errno);
    deep += "/" + part;
  }
  int dfd = ::open(deep.c_str(), O_RDONLY | O_DIRECTORY);
  ASSERT_GE(dfd, 0);
  std::string leaf(250, 'f');
  int f = ::openat(dfd, leaf.c_str(), O_CREAT | O_WRONLY, 0644);
  ASSERT_GE(f, 0) << std::strerror(errno);
  EXPECT_EQ(::write(f, "deep", 4), 4);
  ::close(f);
  ::close(dfd);
  // Symlinks, statfs, mkdir/rmdir, O_TRUNC.
  ASSERT_EQ(::symlink("t.txt", M("link").c_str()), 0);
  EXPECT_EQ(ReadBytes(M("link")), "t");
  struct statvfs vfs;
  EXPECT_EQ(::statvfs(mnt_.c_str(), &vfs), 0);
  WriteBytes(M("t.txt"), "new");
  EXPECT_EQ(ReadBytes(L("t.txt")), "new");
}

TEST_F(Mounted, AllowOtherCreatesFilesOwnedByTheCaller) {
  Mount("--no-migrate -o allow_other");
  ASSERT_EQ(::chmod(dir_.path().c_str(), 0755), 0);  // let nobody reach the mount point
  ASSERT_EQ(::chmod(L("").c_str(), 0777), 0);
  auto r = RunCommand("setpriv --reuid=65534 --regid=65534 --clear-groups sh -c 'echo x > " +
                      M("by_nobody.txt") + " && mkdir " + M("dir_by_nobody") + "' 2>&1");
  ASSERT_EQ(r.exit_code, 0) << r.out;
  struct stat st;
  ASSERT_EQ(::stat(L("by_nobody.txt").c_str(), &st), 0);
  EXPECT_EQ(st.st_uid, 65534u);
  EXPECT_EQ(st.st_gid, 65534u);
  ASSERT_EQ(::stat(L("dir_by_nobody").c_str(), &st), 0);
  EXPECT_EQ(st.st_uid, 65534u);
}

// The logdir's name is one value of fsname=: a comma in it starts no
// option of its own (",ro,allow_other" would make the mount read-only and
// open to every user), and a backslash stays in it.
TEST_F(Mounted, ALogdirNamedLikeOptionsAddsNone) {
  const std::string odd = logdir_ + ",ro,allow_other\\x";
  ASSERT_EQ(::rename(logdir_.c_str(), odd.c_str()), 0);
  logdir_ = odd;
  Mount();
  auto Split = [](const std::string& text, char sep) {
    std::vector<std::string> out;
    std::istringstream in(text);
    for (std::string part; std::getline(in, part, sep);) out.push_back(part);
    return out;
  };
  std::string line;
  for (const std::string& l : Split(ReadBytes("/proc/self/mountinfo"), '\n')) {
    std::vector<std::string> f = Split(l, ' ');
    if (f.size() > 4 && f[4] == mnt_) line = l;
  }
  ASSERT_NE(line, "") << "no mount on " << mnt_;
  const size_t dash = line.find(" - ");
  ASSERT_NE(dash, std::string::npos) << line;
  std::vector<std::string> mine = Split(line.substr(0, dash), ' ');
  std::vector<std::string> fs = Split(line.substr(dash + 3), ' ');
  ASSERT_EQ(fs.size(), 3u) << line;
  EXPECT_EQ(mine[5].rfind("rw", 0), 0u) << line;
  EXPECT_EQ(fs[2].find("allow_other"), std::string::npos) << line;
  // mountinfo writes a backslash as \134.
  EXPECT_EQ(fs[1], "tbfs:" + logdir_.substr(0, logdir_.size() - 2) + "\\134x") << line;
  WriteBytes(M("written.txt"), "rw");
  EXPECT_EQ(ReadBytes(L("written.txt")), "rw");
}

// `tbfs mount` says ok only once the kernel has started the mount: an INIT
// libfuse refuses (max_read=1 is not what the session asked for) is a
// failure, with libfuse's own words, and nothing stays mounted.
TEST_F(Mounted, AMountTheKernelNeverStartsFails) {
  auto r = RunCommand(
      Tbfs("mount " + Quote(logdir_) + " " + Quote(mnt_) + " --no-migrate -o max_read=1 2>&1"));
  EXPECT_EQ(r.exit_code, 2) << r.out;
  EXPECT_NE(r.out.find("ended before it served"), std::string::npos) << r.out;
  EXPECT_FALSE(IsMounted(mnt_));
}

// libfuse runs fusermount3 for auto_unmount: it must not inherit the pipe
// `tbfs mount` waits on, or the command waits until the unmount.
TEST_F(Mounted, AutoUnmountReturnsOnceMounted) {
  auto r = RunCommand("timeout 30 " + Tbfs("mount " + Quote(logdir_) + " " + Quote(mnt_) +
                                           " --no-migrate -o auto_unmount 2>&1"));
  EXPECT_EQ(r.exit_code, 0) << r.out;
  ASSERT_TRUE(IsMounted(mnt_));
  pid_ = Status()["pid"].get<int>();
  EXPECT_TRUE(ReadBytes(M(events_[0])) == ReadBytes(L(events_[0])));
}

// A caller's descriptor beyond stderr (a CI runner's log pipe, a shell's
// `3>&1`) is closed by the daemon: whoever reads that pipe hears its end
// once `tbfs mount` returns, not when the mount ends.
TEST_F(Mounted, TheDaemonKeepsNoDescriptorItsCallerLeftOpen) {
  int p[2];
  ASSERT_EQ(::pipe2(p, 0), 0);
  ASSERT_EQ(::fcntl(p[0], F_SETFD, FD_CLOEXEC), 0);  // the command gets the write end only
  const std::string at = std::to_string(p[1]);
  auto r = RunCommand(Tbfs("mount " + Quote(logdir_) + " " + Quote(mnt_) + " --no-migrate 2>&1"));
  ::close(p[1]);
  ASSERT_EQ(r.exit_code, 0) << r.out;
  ASSERT_TRUE(IsMounted(mnt_));
  pid_ = Status()["pid"].get<int>();
  struct pollfd pfd = {p[0], POLLIN, 0};
  const int ready = ::poll(&pfd, 1, 20'000);  // a bound on a hang, not a timing
  char c;
  const ssize_t n = ready == 1 ? ::read(p[0], &c, 1) : -1;
  ::close(p[0]);
  EXPECT_EQ(n, 0) << "the daemon (pid " << pid_ << ") still holds fd " << at
                  << " it inherited, 20 s after `tbfs mount` returned";
}

TEST_F(Mounted, VerifyThroughTheMountSeesTheSameCurves) {
  auto base = RunCommand(
      Tbfs("verify " + logdir_ + " --save-baseline " + (dir_ / "b.json") + " >/dev/null"));
  ASSERT_EQ(base.exit_code, 0);
  Mount("--no-migrate --cold-after 0");
  MigrateNow();
  auto r = RunCommand(Tbfs("verify " + mnt_ + " --baseline " + (dir_ / "b.json")));
  EXPECT_EQ(r.exit_code, 0) << r.out;
}

TEST_F(Mounted, UnmountWithFilesOpen) {
  Mount();
  auto fd = OpenFile(M(events_[0]), O_RDONLY);
  ASSERT_TRUE(fd.ok());
  // A plain unmount refuses while a file is open, and the mount keeps serving.
  EXPECT_NE(RunCommand("fusermount3 -u " + mnt_ + " 2>/dev/null").exit_code, 0);
  ASSERT_TRUE(IsMounted(mnt_));
  EXPECT_EQ(ReadBytes(M(events_[0])), ReadBytes(L(events_[0])));
  // A lazy unmount detaches at once; the open file still reads.
  EXPECT_EQ(RunCommand("fusermount3 -u -z " + mnt_).exit_code, 0);
  EXPECT_FALSE(IsMounted(mnt_));
  char buf[16];
  EXPECT_EQ(::pread(fd->get(), buf, sizeof(buf), 0), static_cast<ssize_t>(sizeof(buf)));
  fd->reset();
  WaitForExit();
}

TEST_F(Mounted, SigtermAndSigintUnmountCleanly) {
  for (int sig : {SIGTERM, SIGINT}) {
    Mount();
    ASSERT_TRUE(std::filesystem::exists(L(".tbfs/MOUNTED_BY")));
    ASSERT_EQ(::kill(pid_, sig), 0);
    WaitUntil([&] { return !IsMounted(mnt_); }, std::chrono::milliseconds(5000));
    EXPECT_FALSE(IsMounted(mnt_)) << "signal " << sig;
    WaitForExit();
    EXPECT_FALSE(std::filesystem::exists(L(".tbfs/MOUNTED_BY"))) << "signal " << sig;
  }
}

// `tbfs mount --foreground` (what a systemd unit runs) stopped by SIGTERM
// or SIGINT exits 0 after it unmounts: `systemctl stop` leaves the unit
// inactive, not failed (and Restart=on-failure does not start it again).
TEST_F(Mounted, AForegroundMountStoppedBySigtermOrSigintExitsZero) {
  for (int sig : {SIGTERM, SIGINT}) {
    const pid_t child = ::fork();
    if (child == 0) {
      ::execl(TBFS_BINARY, TBFS_BINARY, "mount", logdir_.c_str(), mnt_.c_str(), "--foreground",
              "--no-migrate", static_cast<char*>(nullptr));
      ::_exit(127);
    }
    ASSERT_GT(child, 0);
    WaitUntil([&] { return IsMounted(mnt_); }, std::chrono::milliseconds(10000));
    ASSERT_TRUE(IsMounted(mnt_)) << "signal " << sig;
    ASSERT_EQ(::kill(child, sig), 0);
    int status = 0;
    ASSERT_EQ(::waitpid(child, &status, 0), child);
    EXPECT_TRUE(WIFEXITED(status)) << "signal " << sig;
    EXPECT_EQ(WEXITSTATUS(status), 0) << "signal " << sig;
    EXPECT_FALSE(IsMounted(mnt_)) << "signal " << sig;
  }
}

// gc --garbage on a mount point: the daemon (the store's writer) finds and
// removes chunks no record names between its passes, while it serves.
TEST_F(Mounted, GarbageIsCollectedThroughTheMountWhileItServes) {
  Mount("--no-migrate --cold-after 0");
  MigrateNow();
  Unmount();
  {
    store::OpenOptions o;
    o.holder = "the test";
    auto opened = store::ColdStore::Open(logdir_ + "/.tbfs", o);
    ASSERT_TRUE(opened.ok()) << opened.status().ToString();
    const uint64_t lost = (*opened)->NewFileId();
    store::WriteBatch raw;
    raw.Put(store::Space::kChunks, store::ChunkKey(lost, 0), "left by a crash");
    raw.Put(store::Space::kChunks, store::ChunkKey(lost, 3), "left by a crash");
    ASSERT_TRUE(store::StoreInternals::Of(**opened).Commit(raw, true).ok());
  }
  Mount("--no-migrate");
  auto r = RunCommand(Tbfs("gc " + mnt_ + " --garbage 2>&1"));
  EXPECT_EQ(r.exit_code, 0) << r.out;
  EXPECT_NE(r.out.find("would remove 2 unreachable chunk(s) of 1 file id(s)"), std::string::npos)
      << r.out;
  r = RunCommand(Tbfs("gc " + mnt_ + " --garbage --apply --json"));
  EXPECT_EQ(r.exit_code, 0) << r.out;
  EXPECT_EQ(nlohmann::json::parse(r.out)["garbage"]["chunks"], 2) << r.out;
  r = RunCommand(Tbfs("gc " + mnt_ + " --garbage --json"));
  EXPECT_EQ(nlohmann::json::parse(r.out)["garbage"]["chunks"], 0) << r.out;
  for (const auto& f : traces_) {
    EXPECT_EQ(State(M(f)), "cold") << f;
    EXPECT_TRUE(ReadBytes(M(f)) == originals_[f]) << f;
  }
  r = RunCommand(Tbfs("gc " + mnt_ + " --older-than 1d 2>&1"));
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.out.find("takes --garbage only"), std::string::npos) << r.out;
}

// Through the mount cold files look hot: watch is told to watch the logdir.
TEST_F(Mounted, WatchOfAMountPointNamesTheLogdirToWatch) {
  Mount();
  auto r = RunCommand(Tbfs("watch " + mnt_ + " 2>&1"));
  EXPECT_EQ(r.exit_code, 2) << r.out;
  EXPECT_NE(r.out.find("is a tbfs mount point: watch the logdir it serves (" + logdir_ + ")"),
            std::string::npos)
      << r.out;
}

// Through a mount the store is hidden and cold files look hot: a store
// command given the mount point, or a folder in it, would find "no cold
// files" and exit 0. It names the logdir instead.
TEST_F(Mounted, StoreCommandsOnAMountNameTheLogdirItServes) {
  Mount();
  std::filesystem::create_directories(mnt_ + "/run9");
  for (const std::string cmd : {"ls", "du", "fsck"}) {
    for (const std::string& at : {mnt_, mnt_ + "/run9"}) {
      auto r = RunCommand(Tbfs(cmd + " " + at + " 2>&1"));
      EXPECT_EQ(r.exit_code, 2) << cmd << " " << at << ": " << r.out;
      EXPECT_NE(
          r.out.find("the tbfs mount on " + mnt_ + ": give the logdir it serves (" + logdir_ + ")"),
          std::string::npos)
          << r.out;
    }
  }
  EXPECT_EQ(RunCommand(Tbfs("ls " + logdir_ + " >/dev/null")).exit_code, 0);
}

TEST_F(Mounted, OfflineWritersAreRefusedNamingTheMount) {
  Mount();
  auto r = RunCommand(Tbfs("migrate " + logdir_ + " --older-than 0 --apply 2>&1"));
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.out.find(mnt_), std::string::npos) << r.out;
  EXPECT_EQ(RunCommand(Tbfs("ls " + logdir_ + " >/dev/null")).exit_code, 0);  // readers may look
}

TEST_F(Mounted, FstabFormMountsThroughMountFuse3) {
  // mount(8) runs helpers with a standard PATH: the fstab form needs tbfs
  // installed (scripts/test.sh runs cmake --install first).
  auto which = RunCommand("command -v tbfs");
  ASSERT_EQ(which.exit_code, 0) << "tbfs is not installed in PATH; run cmake --install build";
  std::string installed = which.out.substr(0, which.out.find('\n'));
  ASSERT_TRUE(ReadBytes(installed) == ReadBytes(TBFS_BINARY))
      << installed << " is not this build's tbfs; run cmake --install build";
  std::string store = dir_ / "store";
  auto r = RunCommand("mount -t fuse.tbfs " + logdir_ + " " + mnt_ + " -o store=" + store +
                      ",cold_after=5m,no_migrate 2>&1");
  ASSERT_EQ(r.exit_code, 0) << r.out;
  ASSERT_TRUE(IsMounted(mnt_));
  pid_ = Status()["pid"].get<int>();
  EXPECT_EQ(Status()["store"].get<std::string>(), store);
  EXPECT_EQ(ReadBytes(M(events_[0])), ReadBytes(L(events_[0])));
  // mount -o remount,ro and rw (mount(8), mount.fuse3, tbfs) change the
  // running mount and keep its other flags; one that would change them is
  // refused and changes nothing.
  auto flags = [&] { return RunCommand("findmnt -n -o VFS-OPTIONS -M " + mnt_).out; };
  const std::string was = flags();
  ASSERT_EQ(was.rfind("rw,", 0), 0u) << was;
  auto ro = RunCommand("mount -o remount,ro " + mnt_ + " 2>&1");
  ASSERT_EQ(ro.exit_code, 0) << ro.out;
  EXPECT_EQ(flags(), "ro," + was.substr(3));
  EXPECT_EQ(::open(M("new.txt").c_str(), O_CREAT | O_WRONLY | O_CLOEXEC, 0644), -1);
  EXPECT_EQ(errno, EROFS);
  EXPECT_EQ(ReadBytes(M(events_[0])), ReadBytes(L(events_[0])));
  // By hand too, -o first.
  auto by_hand = RunCommand(Tbfs("mount -o remount,rw " + mnt_ + " 2>&1"));
  ASSERT_EQ(by_hand.exit_code, 0) << by_hand.out;
  EXPECT_EQ(flags(), was);
  ASSERT_EQ(RunCommand("mount -o remount,ro " + mnt_).exit_code, 0);
  auto rw = RunCommand("mount -o remount,rw " + mnt_ + " 2>&1");
  ASSERT_EQ(rw.exit_code, 0) << rw.out;
  EXPECT_EQ(flags(), was);
  WriteBytes(M("new.txt"), "x");
  EXPECT_EQ(ReadBytes(L("new.txt")), "x");
  EXPECT_EQ(Status()["pid"].get<int>(), pid_) << "the same daemon serves it";
  auto noatime = RunCommand("mount -o remount,noatime " + mnt_ + " 2>&1");
  EXPECT_NE(noatime.exit_code, 0) << noatime.out;
  EXPECT_NE(noatime.out.find("needs a new mount"), std::string::npos) << noatime.out;
  EXPECT_EQ(flags(), was);
  // An option the mount does not have, kernel's or FUSE's: refused, nothing changed.
  for (const char* other : {"ro,bogus_option", "ro,allow_other", "ro,sync"}) {
    auto refused = RunCommand(Tbfs("mount " + mnt_ + " -o remount," + other + " 2>&1"));
    EXPECT_EQ(refused.exit_code, 2) << other << ": " << refused.out;
    EXPECT_EQ(flags(), was) << other;
  }
}

// The source a mount shows (/proc/mounts, findmnt -S) is tbfs:LOGDIR; that
// name mounts the logdir again, as mount(8) users and xfstests (which finds
// its devices by source) expect. Only an absolute path follows tbfs:.
TEST_F(Mounted, TheSourceAMountShowsMountsItsLogdir) {
  const std::string source = "tbfs:" + logdir_;
  auto r =
      RunCommand("mount -t fuse.tbfs " + Quote(source) + " " + Quote(mnt_) + " -o no_migrate 2>&1");
  ASSERT_EQ(r.exit_code, 0) << r.out;
  ASSERT_TRUE(IsMounted(mnt_));
  pid_ = Status()["pid"].get<int>();
  EXPECT_EQ(Status()["logdir"].get<std::string>(), logdir_);
  auto found = RunCommand("findmnt -rn -S " + Quote(source) + " -o TARGET");
  EXPECT_EQ(found.out, mnt_ + "\n");
  EXPECT_EQ(ReadBytes(M(events_[0])), ReadBytes(L(events_[0])));
  Unmount();
  r = RunCommand(Tbfs("mount " + Quote(source) + " " + Quote(mnt_) + " --no-migrate 2>&1"));
  ASSERT_EQ(r.exit_code, 0) << r.out;
  pid_ = Status()["pid"].get<int>();
  EXPECT_EQ(Status()["logdir"].get<std::string>(), logdir_);
  Unmount();
  // tbfs: and a relative path is a relative path, whatever is beside it.
  r = RunCommand("cd " + Quote(logdir_) + "/.. && " +
                 Tbfs("mount tbfs:logdir " + Quote(mnt_) + " 2>&1"));
  EXPECT_EQ(r.exit_code, 2) << r.out;
  EXPECT_NE(r.out.find("LOGDIR tbfs:logdir is not a directory"), std::string::npos) << r.out;
  EXPECT_FALSE(IsMounted(mnt_));
}

TEST_F(Mounted, KillNineDuringAMigrationLosesNothing) {
  auto base = RunCommand(
      Tbfs("verify " + logdir_ + " --save-baseline " + (dir_ / "b.json") + " >/dev/null"));
  ASSERT_EQ(base.exit_code, 0);
  for (const char* point : {"migrate.stored", "migrate.unlinked", "migrate.all_unlinked"}) {
    // The failpoint ends the daemon at that instant, as kill -9 would, and
    // leaves `reached` behind as it does.
    const std::string reached = dir_ / (std::string("reached-") + point);
    auto r = RunCommand(
        std::string("TBFS_FAILPOINT=") + point + " TBFS_FAILPOINT_REACHED=" + reached + " " +
        Tbfs("mount " + logdir_ + " " + mnt_ + " --no-migrate --cold-after 0 2>&1"));
    ASSERT_EQ(r.exit_code, 0) << r.out;
    pid_ = Status()["pid"].get<int>();
    // The daemon dies; the command says so.
    auto died = RunCommand(Tbfs("migrate --now " + mnt_ + " 2>&1"));
    EXPECT_EQ(died.exit_code, 2) << died.out;
    EXPECT_NE(died.out.find("without an answer"), std::string::npos) << died.out;
    WaitForExit();
    EXPECT_TRUE(std::filesystem::exists(reached)) << "the daemon did not die at " << point;
    Unmount();
    RunCommand("fusermount3 -u -z " + mnt_ + " 2>/dev/null");
    ASSERT_FALSE(IsMounted(mnt_)) << point;
    Mount();  // recovery runs first
    for (const auto& f : traces_)
      EXPECT_TRUE(ReadBytes(M(f)) == originals_[f]) << point << " " << f;
    auto v = RunCommand(Tbfs("verify " + mnt_ + " --baseline " + (dir_ / "b.json")));
    EXPECT_EQ(v.exit_code, 0) << point << v.out;
    Unmount();
  }
  // A literal kill -9 in the middle of a pass: the daemon is held inside a
  // batch (a file copied, journaled and moved aside, not yet unlinked) and
  // killed there.
  const std::string hold = dir_ / "hold";
  WriteBytes(hold, "");
  auto r = RunCommand("TBFS_PAUSE=migrate.staged:" + hold + " " +
                      Tbfs("mount " + logdir_ + " " + mnt_ + " --no-migrate --cold-after 0 2>&1"));
  ASSERT_EQ(r.exit_code, 0) << r.out;
  pid_ = Status()["pid"].get<int>();
  std::thread migrate([&] { RunCommand(Tbfs("migrate --now " + mnt_ + " >/dev/null 2>&1")); });
  WaitUntil([&] { return std::filesystem::exists(hold + ".reached"); },
            std::chrono::milliseconds(60000));  // until the pass is there
  const bool held = std::filesystem::exists(hold + ".reached");
  ASSERT_EQ(::kill(pid_, SIGKILL), 0);
  migrate.join();
  WaitForExit();
  ASSERT_TRUE(held) << "the pass never reached a staged file";
  // The kill landed mid-batch: a file waits aside in the logdir.
  int aside = 0;
  for (const auto& e : std::filesystem::recursive_directory_iterator(logdir_)) {
    aside += e.path().filename().string().find(".tbfs-mig-") != std::string::npos;
  }
  EXPECT_GE(aside, 1);
  RunCommand("fusermount3 -u -z " + mnt_ + " 2>/dev/null");
  Mount();
  for (const auto& f : traces_) EXPECT_TRUE(ReadBytes(M(f)) == originals_[f]) << f;
  EXPECT_EQ(RunCommand(Tbfs("verify " + mnt_ + " --baseline " + (dir_ / "b.json") + " >/dev/null"))
                .exit_code,
            0);
}

// The mount table writes a space as \040; read through libmount, a mount
// point with one is found like any other, and its readahead is raised to a
// chunk (the kernel's default for FUSE is 128 KiB).
TEST_F(MountTest, AMountPointWithASpaceGetsItsReadaheadRaised) {
  mnt_ = dir_ / "mnt with\ta space";
  std::filesystem::create_directories(mnt_);
  Gen("--runs 1 --steps 10 --trace-mb 1");
  Mount();
  struct stat st;
  ASSERT_EQ(::stat(mnt_.c_str(), &st), 0);
  const std::string knob = "/sys/class/bdi/" + std::to_string(major(st.st_dev)) + ":" +
                           std::to_string(minor(st.st_dev)) + "/read_ahead_kb";
  ASSERT_TRUE(std::filesystem::exists(knob)) << knob;
  const std::string want = std::to_string(store::kDefaultChunkBytes / 1024) + "\n";
  std::string got;
  WaitUntil([&] { return (got = ReadBytes(knob)) == want; }, std::chrono::milliseconds(5000),
            std::chrono::milliseconds(50));  // raised once INIT is answered
  EXPECT_EQ(got, want);
  EXPECT_EQ(Status()["mountpoint"], mnt_);
}

TEST_F(MountTest, BadArgumentsAreOneLineErrors) {
  for (const std::string& args :
       {std::string("mount /nonexistent/logdir ") + mnt_,
        "mount " + dir_.path() + " /nonexistent/mnt", "mount " + dir_.path() + " " + dir_.path(),
        "mount " + dir_.path() + " " + mnt_ + " --cold-after soon",
        "mount " + dir_.path() + " " + mnt_ + " -o cache=lots", "status " + dir_.path()}) {
    auto r = RunCommand(Tbfs(args + " 2>&1"));
    EXPECT_EQ(r.exit_code, 2) << args << ": " << r.out;
    EXPECT_EQ(std::count(r.out.begin(), r.out.end(), '\n'), 1) << args << ": " << r.out;
    EXPECT_FALSE(IsMounted(mnt_));
  }
}

// Red team: a cold file whose path is longer than PATH_MAX vanished from the
// mount (its folder listed empty, a lookup was ENAMETOOLONG): the kernel
// names no such path for a hot folder's fd.
TEST_F(Mounted, AColdFileDeeperThanPathMaxIsServed) {
  std::filesystem::create_directories(L("run"));
  UniqueFd dir(::open(L("run").c_str(), O_PATH | O_DIRECTORY));
  std::vector<std::string> parts;
  for (size_t len = 4; len < PATH_MAX + 300; len += 201) {
    parts.push_back(std::string(200, static_cast<char>('a' + parts.size() % 26)));
    ASSERT_EQ(::mkdirat(dir.get(), parts.back().c_str(), 0755), 0);
    dir.reset(::openat(dir.get(), parts.back().c_str(), O_PATH | O_DIRECTORY));
    ASSERT_TRUE(dir.valid());
  }
  const std::string content = "{\"traceEvents\": []}";
  {
    UniqueFd leaf(::openat(dir.get(), "deep.pt.trace.json", O_WRONLY | O_CREAT, 0644));
    ASSERT_TRUE(leaf.valid());
    ASSERT_EQ(::write(leaf.get(), content.data(), content.size()),
              static_cast<ssize_t>(content.size()));
  }
  dir.reset();
  auto r = RunCommand(
      Tbfs("migrate " + logdir_ + " --older-than 0 --apply --allow-no-events >/dev/null 2>&1"));
  ASSERT_EQ(r.exit_code, 0) << r.out;
  Mount();
  UniqueFd m(::open(M("run").c_str(), O_RDONLY | O_DIRECTORY));
  ASSERT_TRUE(m.valid());
  for (const auto& part : parts) {
    m.reset(::openat(m.get(), part.c_str(), O_RDONLY | O_DIRECTORY));
    ASSERT_TRUE(m.valid()) << std::strerror(errno);
  }
  std::unique_ptr<DIR, int (*)(DIR*)> d(::fdopendir(::dup(m.get())), ::closedir);
  ASSERT_TRUE(d);
  std::vector<std::string> names;
  while (struct dirent* e = ::readdir(d.get())) names.push_back(e->d_name);
  EXPECT_NE(std::find(names.begin(), names.end(), "deep.pt.trace.json"), names.end());
  UniqueFd f(::openat(m.get(), "deep.pt.trace.json", O_RDONLY));
  ASSERT_TRUE(f.valid()) << std::strerror(errno);
  std::string got(content.size(), '\0');
  EXPECT_EQ(::pread(f.get(), got.data(), got.size(), 0), static_cast<ssize_t>(content.size()));
  EXPECT_EQ(got, content);
  char xattr[32] = {};
  ssize_t n = ::fgetxattr(f.get(), "user.tbfs.state", xattr, sizeof(xattr));
  EXPECT_EQ(std::string(xattr, n > 0 ? n : 0), "cold");
}

// What the systemd unit runs: everything from the config file's mount:
// section (tbfs@NAME.service: tbfs mount --foreground --config FILE).
TEST_F(Mounted, AConfigFileAloneMountsWithItsSettings) {
  const std::string config = dir_ / "logs.yaml";
  WriteBytes(config, "logdir: " + logdir_ + "\nmount:\n  mountpoint: " + mnt_ +
                         "\n  cold_after: 0s\n  migrate_interval: 1s\n  cache: 32M\n"
                         "  options: [allow_other]\n");
  auto r = RunCommand(Tbfs("mount --config " + config + " 2>&1"));
  ASSERT_EQ(r.exit_code, 0) << r.out;
  ASSERT_TRUE(IsMounted(mnt_));
  pid_ = Status()["pid"].get<int>();
  EXPECT_NE(ReadBytes("/proc/mounts")
                .find(mnt_ + " fuse.tbfs rw,nosuid,nodev,relatime,user_id=0,group_id=0,"
                             "default_permissions,allow_other"),
            std::string::npos);
  EXPECT_EQ(Status()["cache"]["capacity_bytes"].get<uint64_t>(), 32u << 20);
  // Migrated within a few passes of 1 s.
  EXPECT_TRUE(WaitUntil([&] { return State(M(traces_[0])) == "cold"; },
                        std::chrono::milliseconds(10000), std::chrono::milliseconds(100)));
  Unmount();
  // The command line wins over the file.
  r = RunCommand(Tbfs("mount --config " + config + " --no-migrate --cache 64M 2>&1"));
  ASSERT_EQ(r.exit_code, 0) << r.out;
  pid_ = Status()["pid"].get<int>();
  EXPECT_EQ(Status()["cache"]["capacity_bytes"].get<uint64_t>(), 64u << 20);
}

// The daemon's own retention (retention: in the config file): after a pass
// it deletes what `tbfs gc` would with the same policy, and nothing else;
// each deletion is logged and counted, a reader that has the file open
// reads it to the end, and the kernel forgets the names at once.
TEST_F(Mounted, TheRetentionPolicyDeletesWhatGcWouldAndNothingElse) {
  Mount("--no-migrate --cold-after 0");
  MigrateNow();
  Unmount();
  auto dry = RunCommand(Tbfs("gc " + logdir_ + " --keep-last 1 --json"));
  ASSERT_EQ(dry.exit_code, 0) << dry.out;
  std::set<std::string> doomed;
  const nlohmann::json report = nlohmann::json::parse(dry.out);
  for (const auto& p : report["paths"]) doomed.insert(p.get<std::string>());
  ASSERT_GE(doomed.size(), 2u) << dry.out;

  const std::string config = dir_ / "retention.yaml";
  WriteBytes(config, "retention:\n  keep_last: 1\n");
  Mount("--no-migrate --cold-after 0 --config " + config);
  EXPECT_EQ(Status()["retention"]["deleted_files"].get<uint64_t>(), 0u) << "nothing before a pass";
  const std::string held = *doomed.begin();
  UniqueFd fd(::open(M(held).c_str(), O_RDONLY | O_CLOEXEC));
  ASSERT_TRUE(fd.valid());
  std::map<std::string, std::set<std::string>> listed;  // the kernel caches names and listings
  for (const auto& t : traces_) {
    struct stat st;
    ASSERT_EQ(::stat(M(t).c_str(), &st), 0) << t;
    listed[ParentPath(t)] = List(M(ParentPath(t)));
  }
  MigrateNow();  // the pass, then the retention policy

  for (const auto& t : traces_) {
    struct stat st;
    if (doomed.count(t)) {
      EXPECT_NE(::stat(M(t).c_str(), &st), 0) << t << " is still there";
      EXPECT_EQ(List(M(ParentPath(t))).count(std::string(BaseName(t))), 0u)
          << t << " is still listed";
    } else {
      EXPECT_TRUE(ReadBytes(M(t)) == originals_[t]) << t;
    }
  }
  for (const auto& e : events_) EXPECT_EQ(ReadBytes(M(e)), ReadBytes(L(e))) << e;
  std::string got(originals_[held].size() + 1, '\0');
  size_t n = 0;
  for (ssize_t r; (r = ::read(fd.get(), got.data() + n, got.size() - n)) > 0;)
    n += static_cast<size_t>(r);
  got.resize(n);
  EXPECT_TRUE(got == originals_[held]) << "a reader that had it open reads it whole";
  fd.reset();
  nlohmann::json st = Status();
  EXPECT_EQ(st["retention"]["deleted_files"].get<uint64_t>(), doomed.size());
  EXPECT_EQ(st["cold"]["files"].get<uint64_t>(), traces_.size() - doomed.size());
  const std::string log = ReadBytes(L(".tbfs/tbfs-mount.log"));
  for (const auto& d : doomed) {
    const size_t deleting = log.find("retention: deleting " + d + " (");
    EXPECT_NE(deleting, std::string::npos) << d;
    EXPECT_NE(log.find("retention: deleted " + d + "\n", deleting), std::string::npos) << d;
  }
  // A second pass finds nothing more to delete.
  MigrateNow();
  EXPECT_EQ(Status()["retention"]["deleted_files"].get<uint64_t>(), doomed.size());
}

// CPU seconds a process has run (user + system).
double CpuSeconds(int pid) {
  std::ifstream in(fmt::format("/proc/{}/stat", pid));
  std::string stat;
  std::getline(in, stat);
  std::istringstream fields(stat.substr(stat.rfind(')') + 2));
  std::vector<std::string> f{std::istream_iterator<std::string>(fields), {}};
  return (std::stod(f.at(11)) + std::stod(f.at(12))) / static_cast<double>(::sysconf(_SC_CLK_TCK));
}

// A daemon out of file descriptors answers `tbfs status` that it is, at
// once, and does not spin (red team: accept failed, the connection stayed
// queued, a core spun on it and the client waited out its timeout).
TEST_F(Mounted, StatusAskedOfADaemonOutOfDescriptorsSaysSoAndNothingSpins) {
  const auto files = WriteTinyTraces("fds", 8);
  Mount();
  int highest = 0;
  for (const auto& e : std::filesystem::directory_iterator(fmt::format("/proc/{}/fd", pid_)))
    highest = std::max(highest, std::stoi(e.path().filename()));
  const std::string limit =
      RunCommand(fmt::format("prlimit --pid {} --nofile --output SOFT,HARD --noheadings", pid_))
          .out;
  // The soft limit only: a hard one lowered cannot be raised again here.
  std::istringstream soft_hard(limit);
  std::string soft, hard;
  soft_hard >> soft >> hard;
  ASSERT_EQ(RunCommand(fmt::format("prlimit --pid {} --nofile={}:{}", pid_, highest + 17, hard))
                .exit_code,
            0);
  // Files opened through the mount until the daemon can open no more:
  // every descriptor number below its limit is taken.
  std::vector<UniqueFd> held;
  int err = 0;
  for (int i = 0; i < 400 && err == 0; ++i) {
    auto fd = OpenFile(M(std::next(files.begin(), i % 8)->first), O_RDONLY);
    if (fd.ok()) {
      held.push_back(std::move(fd).value());
    } else {
      err = fd.status().sys_errno();
    }
  }
  ASSERT_EQ(err, EMFILE) << held.size() << " opened";
  // A failed open may have let one go: the limit comes down to the lowest
  // number free, below which every one is taken.
  std::set<int> taken;
  for (const auto& e : std::filesystem::directory_iterator(fmt::format("/proc/{}/fd", pid_)))
    taken.insert(std::stoi(e.path().filename()));
  int lowest_free = 0;
  while (taken.count(lowest_free)) ++lowest_free;
  ASSERT_EQ(
      RunCommand(fmt::format("prlimit --pid {} --nofile={}:{}", pid_, lowest_free, hard)).exit_code,
      0);
  const double cpu0 = CpuSeconds(pid_);
  const auto t0 = std::chrono::steady_clock::now();
  auto r = RunCommand("timeout 10 " + Tbfs("status --json " + Quote(mnt_) + " 2>&1"));
  const double waited =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  EXPECT_NE(r.exit_code, 0);
  EXPECT_NE(r.out.find("no file descriptor left"), std::string::npos) << r.out;
  EXPECT_LT(waited, 3.0) << r.out;
  std::this_thread::sleep_for(std::chrono::seconds(1));
  EXPECT_LT(CpuSeconds(pid_) - cpu0, 0.5) << "the daemon spun";
  held.clear();
  ASSERT_EQ(RunCommand(fmt::format("prlimit --pid {} --nofile={}:{}", pid_, soft, hard)).exit_code,
            0);
  EXPECT_TRUE(WaitUntil(
      [&] {
        return RunCommand(Tbfs("status --json " + Quote(mnt_) + " >/dev/null")).exit_code == 0;
      },
      std::chrono::seconds(5), std::chrono::milliseconds(50)));
}

TEST_F(Mounted, StatusReportsHowFastTheLogdirGrowsAndWhichRunGrowsFastest) {
  Mount("--no-migrate --cold-after 1h");  // passes sample; nothing moves
  MigrateNow();
  ASSERT_EQ(::mkdir(M("growing").c_str(), 0755), 0);
  WriteBytes(M("growing/checkpoint.bin"), std::string(8 << 20, 'x'));
  ::usleep(1'500'000);
  MigrateNow();
  nlohmann::json g = Status()["growth"];
  ASSERT_TRUE(g.is_object()) << Status().dump();
  EXPECT_GE(g["samples"].get<int>(), 2);
  EXPECT_GT(g["logdir_bytes_per_hour"].get<double>(), 0);
  EXPECT_GT(g["filesystem"]["size"].get<uint64_t>(), 0u);
  EXPECT_GT(g["bytes"]["tfevents"].get<uint64_t>(), 0u);
  ASSERT_FALSE(g["top_runs"].empty());
  EXPECT_EQ(g["top_runs"][0]["run"], "growing");
  auto text = RunCommand(Tbfs("status " + mnt_));
  EXPECT_NE(text.out.find("growth over"), std::string::npos) << text.out;
  EXPECT_NE(text.out.find("  growing"), std::string::npos) << text.out;
  // The first sample is kept in the store, private, for `tbfs watch` too.
  struct stat st;
  ASSERT_EQ(::stat(L(".tbfs/growth.jsonl").c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0600u);
  EXPECT_FALSE(ReadBytes(L(".tbfs/growth.jsonl")).empty());
}

// systemd's Restart=on-failure (tbfs@.service): a daemon killed leaves its
// mount dead (ENOTCONN); the next `tbfs mount` takes its place.
TEST_F(Mounted, ADaemonThatDiedIsMountedAgainInPlace) {
  Mount("--no-migrate");
  ASSERT_EQ(::kill(pid_, SIGKILL), 0);
  WaitForExit();
  // The kernel ends what was in flight with EIO or ECONNABORTED; what
  // comes after finds no connection (ENOTCONN). Seen once in CI: EIO.
  struct statvfs vfs;
  ASSERT_NE(::statvfs(mnt_.c_str(), &vfs), 0);
  ASSERT_TRUE(errno == ENOTCONN || errno == ECONNABORTED || errno == EIO) << std::strerror(errno);
  ASSERT_TRUE(IsMounted(mnt_));  // dead, still in the mount table
  Mount("--no-migrate");
  for (const auto& f : traces_) EXPECT_TRUE(ReadBytes(M(f)) == originals_[f]) << f;
}

// A daemon ended by an exception nothing catches (red team: std::bad_alloc
// under `ulimit -v`) says so in its log before it aborts; it said nothing.
TEST_F(Mounted, ADaemonEndedByAnUncaughtExceptionSaysWhyInItsLog) {
  MountFailing("open.throws", "--no-migrate");
  EXPECT_FALSE(OpenFile(M(events_[0]), O_RDONLY).ok());  // the open that throws gets no answer
  WaitForExit();
  const std::string log = ReadBytes(L(".tbfs/tbfs-mount.log"));
  EXPECT_NE(log.find("the daemon ends: uncaught exception: std::bad_alloc"), std::string::npos)
      << log;
}

// What the store's open says (an engine file set aside, here a crash's
// leftover blob file) is in the daemon's log too: it went only to the
// terminal that started the mount, before the log file was open.
TEST_F(Mounted, WhatTheStoresOpenSaysIsInTheDaemonsLog) {
  Mount("--no-migrate --cold-after 0");
  MigrateNow();
  Unmount();
  std::string newest;
  for (const auto& e : std::filesystem::directory_iterator(L(".tbfs"))) {
    if (e.path().extension() == ".blob") newest = std::max(newest, e.path().string());
  }
  ASSERT_FALSE(newest.empty());
  std::filesystem::copy_file(newest, L(".tbfs/000001.blob"));
  Mount("--no-migrate");
  const std::string log = ReadBytes(L(".tbfs/tbfs-mount.log"));
  EXPECT_NE(log.find("000001.blob is not in the engine's MANIFEST; set aside"), std::string::npos)
      << log;
  for (const auto& f : traces_) EXPECT_TRUE(ReadBytes(M(f)) == originals_[f]) << f;
}

// A loop of reads of a damaged cold file: each read fails (EIO) and is
// counted, but the daemon's log takes a few lines a second, not one a read
// (red team: 970,000 lines in 40 s from a loop of chmods on a full store),
// and the next line let through says how many were held back.
TEST_F(Mounted, ALoopOfFailingReadsDoesNotFloodTheLog) {
  Mount("--no-migrate --cold-after 0");
  MigrateNow();
  // A byte flipped in the middle of every blob file damages some chunk of
  // some trace (nothing was read through the mount yet: nothing is cached).
  for (const auto& e : std::filesystem::directory_iterator(L(".tbfs"))) {
    if (e.path().extension() != ".blob") continue;
    const auto middle = static_cast<std::streamoff>(e.file_size() / 2);
    std::fstream f(e.path(), std::ios::in | std::ios::out | std::ios::binary);
    char c = 0;
    f.seekg(middle);
    f.get(c);
    f.seekp(middle);
    f.put(static_cast<char>(c ^ 0x5a));
  }
  std::string damaged;
  off_t at = 0;
  for (const std::string& rel : traces_) {
    UniqueFd fd(::open(M(rel).c_str(), O_RDONLY));
    ASSERT_TRUE(fd.valid()) << rel << ": " << std::strerror(errno);
    char buf[65536];
    for (off_t off = 0;; off += sizeof(buf)) {
      const ssize_t n = ::pread(fd.get(), buf, sizeof(buf), off);
      if (n < 0 && errno == EIO && damaged.empty()) {
        damaged = rel;
        at = off;
      }
      if (n <= 0) break;
    }
  }
  ASSERT_FALSE(damaged.empty()) << "no flipped byte reached a chunk";
  const uint64_t eio_before = Status()["eio"]["cold_chunk"].get<uint64_t>();
  const auto start = std::chrono::steady_clock::now();
  int failed = 0;
  for (int i = 0; i < 2000; ++i) {
    UniqueFd fd(::open(M(damaged).c_str(), O_RDONLY));
    char buf[4096];
    if (fd.valid() && ::pread(fd.get(), buf, sizeof(buf), at) < 0 && errno == EIO) failed++;
  }
  const auto seconds =
      std::chrono::duration_cast<std::chrono::seconds>(std::chrono::steady_clock::now() - start)
          .count();
  EXPECT_EQ(failed, 2000);
  EXPECT_GE(Status()["eio"]["cold_chunk"].get<uint64_t>(), eio_before + 2000)
      << "a read that failed was not counted";
  const std::string log = ReadBytes(L(".tbfs/tbfs-mount.log"));
  size_t lines = 0;
  for (size_t i = log.find("[EIO:"); i != std::string::npos; i = log.find("[EIO:", i + 1)) lines++;
  EXPECT_GE(lines, 1u);
  // At most 10 a second for each kind of line (a read's, its chunk's).
  EXPECT_LE(lines, static_cast<size_t>(2 * 10 * (seconds + 2))) << seconds << " s";
}

TEST_F(Mounted, MetricsMoveWithAMigrationAndAColdRead) {
  const int port = FreePort();
  ASSERT_GT(port, 0);
  Mount("--no-migrate --cold-after 0 -o metrics=" + std::to_string(port));  // loopback by default
  std::string before = Scrape(port);
  ASSERT_NE(before.find("200 OK"), std::string::npos) << before;
  EXPECT_EQ(Sample(before, "tbfs_migrated_files_total", mnt_), 0);
  EXPECT_EQ(Sample(before, "tbfs_verifier_ok", mnt_), 1);
  EXPECT_NE(before.find("# TYPE tbfs_eio_total counter"), std::string::npos);
  EXPECT_NE(before.find("# TYPE tbfs_chunk_cache_let_go_total counter"), std::string::npos);
  EXPECT_NE(before.find("# TYPE tbfs_cold_chunk_reads_total counter"), std::string::npos);
  EXPECT_EQ(Sample(before, "tbfs_chunk_cache_readahead_lost_total", mnt_), 0);
  EXPECT_EQ(Sample(before, "tbfs_chunk_cache_readahead_bytes", mnt_), 0);
  EXPECT_GT(Sample(before, "process_resident_memory_bytes", mnt_), 0);
  EXPECT_GT(Sample(before, "process_cpu_seconds_total", mnt_), 0);
  EXPECT_GT(Sample(before, "process_open_fds", mnt_), 0);
  EXPECT_NEAR(Sample(before, "process_start_time_seconds", mnt_),
              static_cast<double>(::time(nullptr)), 600);
  EXPECT_EQ(Sample(before, "tbfs_build_info", mnt_, ",version=\"" TBFS_VERSION "\""), 1);
  EXPECT_EQ(Sample(before, "tbfs_store_role", mnt_, ",role=\"writer\",shared=\"false\""), 1);
  EXPECT_EQ(Sample(before, "tbfs_store_role", mnt_, ",role=\"reader\",shared=\"false\""), 0);
  // Every series is tbfs_'s or the standard process collector's: nothing
  // of the HTTP server's own (prometheus-cpp's unprefixed exposer_*).
  {
    std::istringstream lines(before.substr(before.find("\r\n\r\n") + 4));
    int series = 0;
    for (std::string line; std::getline(lines, line);) {
      if (line.empty() || line[0] == '#') continue;
      ++series;
      EXPECT_TRUE(line.starts_with("tbfs_") || line.starts_with("process_")) << line;
    }
    EXPECT_GT(series, 50);
  }
  MigrateNow();
  EXPECT_TRUE(ReadBytes(M(traces_[0])) == originals_[traces_[0]]);
  std::string after = Scrape(port);
  EXPECT_EQ(Sample(after, "tbfs_migrated_files_total", mnt_), static_cast<double>(traces_.size()));
  EXPECT_EQ(Sample(after, "tbfs_files", mnt_, ",state=\"cold\""),
            static_cast<double>(traces_.size()));
  EXPECT_GT(Sample(after, "tbfs_cold_reads_total", mnt_), 0);
  EXPECT_GT(Sample(after, "tbfs_cold_chunk_reads_total", mnt_, ",found=\"ready\"") +
                Sample(after, "tbfs_cold_chunk_reads_total", mnt_, ",found=\"waited\"") +
                Sample(after, "tbfs_cold_chunk_reads_total", mnt_, ",found=\"loaded\""),
            0);
  EXPECT_GT(Sample(after, "tbfs_saved_bytes", mnt_), 0);
  EXPECT_EQ(Sample(after, "tbfs_eio_total", mnt_, ",cause=\"cold_chunk\""), 0);
  EXPECT_GT(Sample(after, "tbfs_fs_avail_bytes", mnt_), 0);
  EXPECT_GE(Sample(after, "tbfs_fs_free_bytes", mnt_), Sample(after, "tbfs_fs_avail_bytes", mnt_));
  EXPECT_GE(Sample(after, "tbfs_logdir_growth_bytes_per_second", mnt_), 0);
  EXPECT_GT(Sample(after, "tbfs_logdir_bytes", mnt_, ",class=\"tfevents\""), 0);
  EXPECT_GT(Sample(after, "tbfs_logdir_bytes", mnt_, ",class=\"cold\""), 0);
  EXPECT_EQ(Sample(after, "tbfs_retention_deleted_files_total", mnt_), 0);
  // The reads above were timed: counted, summed, and their buckets rise to the count.
  const std::string read = ",op=\"read\"";
  const double reads = Sample(after, "tbfs_fuse_operation_duration_seconds_count", mnt_, read);
  EXPECT_GT(reads, Sample(before, "tbfs_fuse_operation_duration_seconds_count", mnt_, read));
  EXPECT_GT(Sample(after, "tbfs_fuse_operation_duration_seconds_sum", mnt_, read), 0);
  EXPECT_EQ(
      Sample(after, "tbfs_fuse_operation_duration_seconds_bucket", mnt_, read + ",le=\"+Inf\""),
      reads);
  EXPECT_LE(
      Sample(after, "tbfs_fuse_operation_duration_seconds_bucket", mnt_, read + ",le=\"0.001\""),
      reads);
  EXPECT_GT(Sample(after, "tbfs_fuse_operation_duration_seconds_count", mnt_, ",op=\"lookup\""), 0);
  // Every metric the shipped alerting rules use is one the mount serves.
  YAML::Node rules = YAML::LoadFile(std::string(TBFS_SOURCE_DIR) + "/packaging/tbfs-alerts.yml");
  int checked = 0;
  for (const auto& rule : rules["groups"][0]["rules"]) {
    const std::string expr = rule["expr"].as<std::string>();
    static const std::regex metric(R"(tbfs_[a-z_]+)");
    for (std::sregex_iterator it(expr.begin(), expr.end(), metric), end; it != end;
         ++it, ++checked) {
      if (it->str().starts_with("tbfs_exporter_")) continue;  // the exporter's (Exporter.*)
      EXPECT_NE(after.find("\n" + it->str() + "{"), std::string::npos)
          << rule["alert"].as<std::string>() << " uses " << it->str()
          << ", which the mount does not serve";
    }
  }
  EXPECT_GE(checked, 5);
}

TEST_F(Mounted, ClientsThatNeverFinishARequestDoNotBlindTheMetrics) {
  const int port = FreePort();
  ASSERT_GT(port, 0);
  Mount("--no-migrate -o metrics=" + std::to_string(port));
  // More idle clients than the server has threads: some send nothing, some
  // half a request line, and all stay connected.
  std::vector<UniqueFd> idle;
  for (int i = 0; i < 12; ++i) {
    UniqueFd s = ConnectLoopback(port);
    ASSERT_TRUE(s.valid());
    if (i % 2 == 1) {
      ASSERT_EQ(::write(s.get(), "GET /metr", 9), 9);
    }
    idle.push_back(std::move(s));
  }
  const std::string scrape = Scrape(port);
  EXPECT_NE(scrape.find("200 OK"), std::string::npos) << scrape;
  EXPECT_GT(Sample(scrape, "process_resident_memory_bytes", mnt_), 0);
}

TEST_F(Mounted, AMetricsPortInUseIsSaidSoAndNothingIsMounted) {
  const int port = FreePort();
  ASSERT_GT(port, 0);
  UniqueFd taken(::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0));
  sockaddr_in addr = Loopback(port);
  ASSERT_EQ(::bind(taken.get(), reinterpret_cast<sockaddr*>(&addr), sizeof(addr)), 0);
  ASSERT_EQ(::listen(taken.get(), 1), 0);
  auto r = RunCommand(
      Tbfs("mount " + logdir_ + " " + mnt_ + " -o metrics=" + std::to_string(port) + " 2>&1"));
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_EQ(r.out, "tbfs mount: metrics: cannot listen on 127.0.0.1:" + std::to_string(port) +
                       ": Address already in use\n");
  EXPECT_FALSE(IsMounted(mnt_));
}

// An unmounted daemon takes a moment to close (its metrics server up to
// 2 s); mounting the logdir again at once waits for it rather than failing.
TEST_F(Mounted, MountingAgainRightAfterAnUnmountWorks) {
  const int port = FreePort();
  ASSERT_GT(port, 0);
  for (int i = 0; i < 2; ++i) {
    Mount("--no-migrate -o metrics=" + std::to_string(port));
    ASSERT_EQ(RunCommand("fusermount3 -u " + mnt_).exit_code, 0);
  }
  Mount("--no-migrate -o metrics=" + std::to_string(port));
  EXPECT_NE(Scrape(port).find("200 OK"), std::string::npos);
}

TEST_F(Mounted, AMountPointThatIsNotUtf8IsAValidLabel) {
  mnt_ = dir_.path() + "/mnt-\xff";
  std::filesystem::create_directories(mnt_);
  const int port = FreePort();
  ASSERT_GT(port, 0);
  Mount("--no-migrate -o metrics=" + std::to_string(port));
  const std::string scrape = Scrape(port);
  ASSERT_NE(scrape.find("200 OK"), std::string::npos) << scrape;
  EXPECT_TRUE(ValidUtf8(scrape) == scrape)
      << "a scrape with bytes that are not UTF-8 is rejected whole";
  const std::string label = mnt_.substr(0, mnt_.size() - 1) + "\xEF\xBF\xBD";
  EXPECT_GT(Sample(scrape, "process_resident_memory_bytes", label), 0);
}

TEST_F(MountTest, AMetricsAddressThatIsNotOneIsAOneLineError) {
  for (const char* bad : {"metrics=", "metrics=port", "metrics=1.2.3.4:99999", "metrics=:80x",
                          "metrics=[::1]:9464", "metrics=localhost:9464"}) {
    auto r = RunCommand(Tbfs("mount " + dir_.path() + " " + mnt_ + " -o " + bad + " 2>&1"));
    EXPECT_EQ(r.exit_code, 2) << bad;
    EXPECT_NE(r.out.find("metrics: use [ADDR:]PORT with an IPv4 ADDR"), std::string::npos) << r.out;
    EXPECT_FALSE(IsMounted(mnt_));
  }
}

// Red team: a daemon leaves its working folder (chdir "/"); a store given
// by a relative path was then read from the wrong place: every cold read
// was EIO, and a pass said the store was full. The path is made absolute
// before the daemon starts.
TEST_F(MountTest, ARelativeStorePathServesColdFilesFromTheDaemon) {
  Gen();
  auto before = RunCommand("cd " + Quote(logdir_) + " && find . -name '*.pt.trace.json' | head -1");
  const std::string rel = before.out.substr(2, before.out.find('\n') - 2);
  ASSERT_FALSE(rel.empty());
  const std::string bytes = ReadBytes(L(rel));
  ASSERT_EQ(RunCommand("cd " + Quote(dir_.path()) + " && " +
                       Tbfs("migrate logdir --apply --older-than 0 --store rst >/dev/null 2>&1"))
                .exit_code,
            0);
  auto r = RunCommand("cd " + Quote(dir_.path()) + " && " +
                      Tbfs("mount logdir mnt --store rst --no-migrate 2>&1"));
  ASSERT_EQ(r.exit_code, 0) << r.out;
  pid_ = Status()["pid"].get<int>();
  EXPECT_EQ(State(M(rel)), "cold");
  EXPECT_TRUE(ReadBytes(M(rel)) == bytes) << rel;
  EXPECT_EQ(Status()["store"], dir_ / "rst");
}

}  // namespace

}  // namespace tbfs::testing
