// Full disks (issue 9): a store filesystem that fills up stops a migration
// cleanly and never takes the process (or the mount) down; a full logdir
// filesystem makes a rehydration fail with ENOSPC, as a write would.
#include <fcntl.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <random>
#include <thread>

#include "base/failpoint.h"
#include "base/fs_util.h"
#include "fmt/format.h"
#include "store/backend.h"
#include "tests/mount/mount_fixture.h"

namespace tbfs::testing {
namespace {

std::string RandomBytes(size_t n, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::string s(n, '\0');
  for (size_t i = 0; i < n; i += 8) {
    uint64_t x = rng();
    std::memcpy(s.data() + i, &x, std::min<size_t>(8, n - i));
  }
  return s;
}

// A small tmpfs at dir_/small, unmounted in teardown.
class NoRoom : public MountTest {
 protected:
  void SmallFs(const std::string& size) {
    small_ = dir_ / "small";
    std::filesystem::create_directories(small_);
    ASSERT_EQ(::mount("tmpfs", small_.c_str(), "tmpfs", 0, ("size=" + size).c_str()), 0)
        << "this test needs to mount a tmpfs (root): " << std::strerror(errno);
  }
  void TearDown() override {
    Unmount();
    if (!small_.empty()) ::umount2(small_.c_str(), MNT_DETACH);
  }
  // Four traces moved by a pass whose final commit the store refuses
  // (failpoint migrate.commit), then one of them deleted through the
  // mount: its path.
  std::string RefuseABatchThenDeleteAFileOfIt() {
    WriteTraces(logdir_, 4, 256 << 10);
    MountFailing("migrate.commit", "--no-migrate --cold-after 0");
    EXPECT_NE(RunCommand(Tbfs("migrate --now " + mnt_ + " >/dev/null 2>&1")).exit_code, 0);
    const std::string gone = traces_.begin()->first;
    EXPECT_EQ(State(M(gone)), "cold");
    EXPECT_EQ(Status()["migrations"]["files_moved"].get<int>(), 0)
        << "an uncommitted batch counted";
    EXPECT_EQ(::unlink(M(gone).c_str()), 0);
    traces_.erase(gone);
    return gone;
  }
  // After a restart: the batch stands (the rest cold, intact), `gone` is
  // gone and not lost.
  void ExpectTheBatchCommittedAfterARestart(const std::string& gone) {
    Unmount();
    Mount("--no-migrate --cold-after 0");
    auto st = Status();
    EXPECT_EQ(st["lost"]["files"].get<int>(), 0) << st.dump();
    EXPECT_FALSE(std::filesystem::exists(M(gone)));
    EXPECT_FALSE(std::filesystem::exists(L(gone)));
    for (const auto& [rel, bytes] : traces_) {
      EXPECT_EQ(State(M(rel)), "cold") << rel << ": the batch was undone";
      EXPECT_TRUE(ReadBytes(M(rel)) == bytes) << rel;
    }
  }
  // Incompressible traces, so that they fill a store.
  void WriteTraces(const std::string& logdir, int count, size_t bytes) {
    WriteBytes(logdir + "/r/events.out.tfevents.1.host", "");
    for (int i = 0; i < count; ++i) {
      std::string rel = fmt::format("r/plugins/profile/t{}.pt.trace.json", i);
      traces_[rel] = RandomBytes(bytes, static_cast<uint64_t>(i));
      WriteBytes(logdir + "/" + rel, traces_[rel]);
    }
  }
  // Every trace is in exactly one place, with its bytes.
  void ExpectEveryTraceOnce(const std::string& logdir, const std::string& store) {
    auto ls = RunCommand(Tbfs("ls " + logdir + " --store " + store + " 2>&1"));
    for (const auto& [rel, bytes] : traces_) {
      bool hot = std::filesystem::exists(logdir + "/" + rel);
      bool cold = ls.out.find(rel) != std::string::npos;
      EXPECT_NE(hot, cold) << rel << (hot ? " in both places" : " lost");
      if (hot) {
        EXPECT_TRUE(ReadBytes(logdir + "/" + rel) == bytes) << rel;
      }
    }
  }
  // Writes a file into the small filesystem until it is full: its path.
  std::string FillSmallFs() {
    const std::string filler = small_ + "/filler";
    const std::string block(1 << 16, 'f');
    std::FILE* f = std::fopen(filler.c_str(), "w");
    EXPECT_NE(f, nullptr) << filler << ": " << std::strerror(errno);
    if (f == nullptr) return filler;
    while (std::fwrite(block.data(), 1, block.size(), f) == block.size() && std::fflush(f) == 0) {
    }
    std::fclose(f);
    return filler;
  }
  // A store at `db` holding one flushed chunk ("k0", the value of *first).
  std::unique_ptr<store::Backend> StoreWithAFlushedChunk(const std::string& db,
                                                         store::WriteBatch* first) {
    auto backend = store::OpenRocksBackend(db, {.create_if_missing = true});
    EXPECT_TRUE(backend.ok()) << backend.status().ToString();
    if (!backend.ok()) return nullptr;
    first->Put(store::Space::kChunks, "k0", RandomBytes(256 << 10, 1));
    EXPECT_TRUE((*backend)->Commit(*first, true).ok());
    EXPECT_TRUE((*backend)->Flush().ok());
    return std::move(backend).value();
  }
  // Commits `batch` while another process fills the small filesystem
  // between the store's check for room and its write: the write's status;
  // *filler is the filling file.
  tbfs::Status CommitAsTheDiskFills(store::Backend& b, const store::WriteBatch& batch,
                                    std::string* filler) {
    ScopedFailpoint race("store.room_checked", [&](const std::string&) {
      if (filler->empty()) *filler = FillSmallFs();
    });
    return b.Commit(batch, true);
  }
  // Commits `batch` until it lands, for 30 s at most (RocksDB's own
  // recovery polls for room; a failed reopen is tried again after 1 s).
  tbfs::Status CommitUntilItLands(store::Backend& b, const store::WriteBatch& batch) {
    tbfs::Status st = b.Commit(batch, true);
    for (int i = 0; i < 150 && !st.ok(); ++i) {
      std::this_thread::sleep_for(std::chrono::milliseconds(200));
      st = b.Commit(batch, true);
    }
    return st;
  }
  std::string small_;
  std::map<std::string, std::string> traces_;
};

TEST_F(NoRoom, AFullStoreStopsTheMigrationCleanly) {
  SmallFs("12m");
  WriteTraces(logdir_, 10, 3 << 20);  // 30 MB that will not compress
  const std::string store = small_ + "/store";
  auto r =
      RunCommand(Tbfs("migrate " + logdir_ + " --older-than 0 --apply --store " + store + " 2>&1"));
  EXPECT_EQ(r.exit_code, 2) << r.out;  // an error, not an abort (134)
  EXPECT_NE(r.out.find("no room"), std::string::npos) << r.out;
  ExpectEveryTraceOnce(logdir_, store);
  // The store works on: it checks clean, and gives back what it holds.
  auto fsck = RunCommand(Tbfs("fsck --store " + store + " 2>&1"));
  EXPECT_EQ(fsck.exit_code, 0) << fsck.out;
  auto restore =
      RunCommand(Tbfs("restore " + logdir_ + " --all --apply --store " + store + " 2>&1"));
  EXPECT_EQ(restore.exit_code, 0) << restore.out;
  for (const auto& [rel, bytes] : traces_) EXPECT_TRUE(ReadBytes(L(rel)) == bytes) << rel;
}

TEST_F(NoRoom, TheMountKeepsServingWhenTheStoreIsFull) {
  SmallFs("12m");
  WriteTraces(logdir_, 10, 3 << 20);
  Mount("--no-migrate --cold-after 0 --store " + small_ + "/store");
  auto r = RunCommand(Tbfs("migrate --now " + mnt_ + " 2>&1"));
  // A pass the full store stopped is no success: said, with the reason.
  EXPECT_EQ(r.exit_code, 2) << r.out;
  EXPECT_NE(r.out.find("the store is full"), std::string::npos) << r.out;
  auto st = Status();
  ASSERT_TRUE(st.contains("migrations")) << "the daemon died";
  EXPECT_GE(st["migrations"]["stopped_store_full"].get<int>(), 1) << st.dump();
  auto plain = RunCommand(Tbfs("status " + mnt_));
  EXPECT_NE(plain.out.find("passes stopped by a full store: "), std::string::npos) << plain.out;
  EXPECT_NE(plain.out.find("last pass: "), std::string::npos) << plain.out;
  EXPECT_NE(plain.out.find("the store is full"), std::string::npos) << plain.out;
  for (const auto& [rel, bytes] : traces_) EXPECT_TRUE(ReadBytes(M(rel)) == bytes) << rel;
  EXPECT_EQ(ReadBytes(M("r/events.out.tfevents.1.host")), "");
  WriteBytes(M("r/new.txt"), "still writable");
  EXPECT_EQ(ReadBytes(L("r/new.txt")), "still writable");
}

// A folder renamed while the store cannot take the move of its cold files
// (its disk full): the rename fails and the folder stays where it was,
// hot and cold files together (red team: the backing folder moved, its
// cold files stayed at the old name, and the run was split for good).
TEST_F(NoRoom, AFolderRenameTheStoreRefusesLeavesTheFolderWhole) {
  SmallFs("40m");
  WriteTraces(logdir_, 3, 1 << 20);
  Mount("--no-migrate --cold-after 0 --store " + small_ + "/store");
  ASSERT_EQ(RunCommand(Tbfs("migrate --now " + mnt_ + " >/dev/null 2>&1")).exit_code, 0);
  for (const auto& [rel, bytes] : traces_) ASSERT_EQ(State(M(rel)), "cold") << rel;
  RunCommand("dd if=/dev/zero of=" + small_ + "/filler bs=64K 2>/dev/null");
  EXPECT_NE(::rename(M("r").c_str(), M("moved").c_str()), 0) << "the store took it";
  EXPECT_FALSE(std::filesystem::exists(L("moved")));
  EXPECT_TRUE(std::filesystem::exists(M("r/events.out.tfevents.1.host")));
  for (const auto& [rel, bytes] : traces_) EXPECT_TRUE(ReadBytes(M(rel)) == bytes) << rel;
  ASSERT_EQ(::unlink((small_ + "/filler").c_str()), 0);
  ASSERT_EQ(::rename(M("r").c_str(), M("moved").c_str()), 0) << std::strerror(errno);
  EXPECT_TRUE(std::filesystem::exists(M("moved/events.out.tfevents.1.host")));
  for (const auto& [rel, bytes] : traces_) {
    EXPECT_TRUE(ReadBytes(M("moved" + rel.substr(1))) == bytes) << rel;
  }
}

// A mount (re)started on a full disk: the engine cannot write as it opens,
// so the store is served read-only (hot files, cold reads), migration
// waits and says why, and once there is room the mount writes again.
TEST_F(NoRoom, AMountStartsOnAFullDiskAndWritesWhenRoomComes) {
  SmallFs("40m");
  WriteTraces(logdir_, 3, 3 << 20);
  const std::string store = small_ + "/store";
  ASSERT_EQ(RunCommand(Tbfs("migrate " + logdir_ + " --older-than 0 --apply --store " + store +
                            " >/dev/null 2>&1"))
                .exit_code,
            0);
  // More traces, still hot; then the store's filesystem fills up.
  const auto cold = traces_;
  traces_.clear();
  for (int i = 0; i < 6; ++i) {
    std::string rel = fmt::format("r/plugins/profile/u{}.pt.trace.json", i);
    traces_[rel] = RandomBytes(1 << 20, static_cast<uint64_t>(100 + i));
    WriteBytes(L(rel), traces_[rel]);
  }
  RunCommand("dd if=/dev/zero of=" + small_ + "/filler bs=64K 2>/dev/null");
  Mount("--no-migrate --cold-after 0 --store " + store);
  auto st = Status();
  ASSERT_TRUE(st.contains("store_role")) << st.dump();
  EXPECT_NE(st["store_role"].get<std::string>().find("read-only"), std::string::npos) << st.dump();
  // Every file reads: the hot ones, and the cold ones from the store.
  for (const auto& [rel, bytes] : cold) {
    EXPECT_EQ(State(M(rel)), "cold") << rel;
    EXPECT_TRUE(ReadBytes(M(rel)) == bytes) << rel;
  }
  for (const auto& [rel, bytes] : traces_) EXPECT_TRUE(ReadBytes(M(rel)) == bytes) << rel;
  WriteBytes(M("r/new.txt"), "still writable");
  EXPECT_EQ(ReadBytes(L("r/new.txt")), "still writable");
  auto r = RunCommand(Tbfs("migrate --now " + mnt_ + " 2>&1"));
  EXPECT_EQ(r.exit_code, 2) << r.out;
  EXPECT_NE(r.out.find("no room"), std::string::npos) << r.out;
  // Scripts get the reason as JSON on stdout, and the same exit code.
  r = RunCommand(Tbfs("migrate --now --json " + mnt_ + " 2>/dev/null"));
  EXPECT_EQ(r.exit_code, 2) << r.out;
  auto failed = nlohmann::json::parse(r.out, nullptr, false);
  ASSERT_FALSE(failed.is_discarded()) << "not JSON: " << r.out;
  EXPECT_EQ(failed.value("ok", true), false) << r.out;
  EXPECT_NE(failed.value("error", "").find("no room"), std::string::npos) << r.out;
  // Room again: the next pass makes the mount the writer, and migrates.
  ASSERT_EQ(::unlink((small_ + "/filler").c_str()), 0);
  r = RunCommand(Tbfs("migrate --now " + mnt_ + " 2>&1"));
  EXPECT_EQ(r.exit_code, 0) << r.out;
  st = Status();
  EXPECT_EQ(st["store_role"], "writer") << st.dump();
  for (const auto& [rel, bytes] : traces_) {
    EXPECT_EQ(State(M(rel)), "cold") << rel;
    EXPECT_TRUE(ReadBytes(M(rel)) == bytes) << rel;
  }
}

// A pass whose batch the engine would not commit (a failing disk under the
// store) is a failed pass: said by `migrate --now` and in the status, never
// "done". The files stay readable; the next start's recovery puts them back.
TEST_F(NoRoom, ACommitTheStoreRefusesFailsThePassAndTheNextStartRecovers) {
  WriteTraces(logdir_, 4, 256 << 10);
  MountFailing("migrate.commit", "--no-migrate --cold-after 0");
  auto r = RunCommand(Tbfs("migrate --now " + mnt_ + " 2>&1"));
  EXPECT_NE(r.exit_code, 0) << "a pass the store did not commit said it was done: " << r.out;
  EXPECT_NE(r.out.find("not committed"), std::string::npos) << r.out;
  auto st = Status();
  ASSERT_TRUE(st.contains("migrations")) << "the daemon died";
  EXPECT_NE(st["migrations"]["last_error"].get<std::string>().find("not committed"),
            std::string::npos)
      << st.dump();
  for (const auto& [rel, bytes] : traces_) EXPECT_TRUE(ReadBytes(M(rel)) == bytes) << rel;
  Unmount();
  Mount("--no-migrate --cold-after 0");
  for (const auto& [rel, bytes] : traces_) {
    EXPECT_EQ(State(M(rel)), "hot") << rel << ": recovery did not put it back";
    EXPECT_TRUE(ReadBytes(M(rel)) == bytes) << rel;
  }
  ASSERT_EQ(RunCommand(Tbfs("migrate --now " + mnt_ + " >/dev/null")).exit_code, 0);
  for (const auto& [rel, bytes] : traces_) {
    EXPECT_EQ(State(M(rel)), "cold") << rel;
    EXPECT_TRUE(ReadBytes(M(rel)) == bytes) << rel;
  }
}

// The next pass commits what the store refused: the batch is done, and a
// file deleted through the mount meanwhile is not called lost at the next
// start (red team: recovery recorded it LOST, fsck exited 1).
TEST_F(NoRoom, TheNextPassCommitsARefusedBatchAndADeletedFileIsNotLost) {
  const std::string gone = RefuseABatchThenDeleteAFileOfIt();
  auto r = RunCommand(Tbfs("migrate --now " + mnt_ + " 2>&1"));
  EXPECT_EQ(r.exit_code, 0) << r.out;
  EXPECT_EQ(Status()["migrations"]["last_error"].get<std::string>(), "");
  ExpectTheBatchCommittedAfterARestart(gone);
}

// A change the store takes after it refused a batch's final commit
// commits that batch with it: a cold file of the batch deleted through the
// mount, then a restart before any pass, leaves no file lost and the rest
// cold (before: the restart's recovery undid the batch and recorded the
// deleted file LOST).
TEST_F(NoRoom, AChangeAfterARefusedCommitCommitsTheBatchWithIt) {
  const std::string gone = RefuseABatchThenDeleteAFileOfIt();
  // Said at once: the batch is committed, its files moved.
  auto st = Status();
  EXPECT_EQ(st["migrations"]["last_error"].get<std::string>(), "") << st.dump();
  EXPECT_EQ(st["migrations"]["files_moved"].get<size_t>(), traces_.size() + 1) << st.dump();
  ExpectTheBatchCommittedAfterARestart(gone);
  auto fsck = RunCommand(Tbfs("fsck " + logdir_ + " 2>&1"));
  EXPECT_EQ(fsck.exit_code, 0) << fsck.out;
}

TEST_F(NoRoom, ARehydrationOnAFullLogdirIsENOSPC) {
  SmallFs("24m");
  logdir_ = small_ + "/logdir";
  WriteTraces(logdir_, 2, 6 << 20);
  Mount("--no-migrate --cold-after 0 --store " + (dir_ / "store"));
  ASSERT_EQ(RunCommand(Tbfs("migrate --now " + mnt_ + " >/dev/null")).exit_code, 0);
  const std::string rel = traces_.begin()->first;
  ASSERT_EQ(State(M(rel)), "cold");
  // Fill the logdir's filesystem.
  RunCommand("dd if=/dev/zero of=" + logdir_ + "/filler bs=1M 2>/dev/null");
  int fd = ::open(M(rel).c_str(), O_RDWR | O_CLOEXEC);
  int err = errno;
  if (fd >= 0) ::close(fd);
  EXPECT_LT(fd, 0);
  EXPECT_EQ(err, ENOSPC) << std::strerror(err);
  EXPECT_EQ(State(M(rel)), "cold");
  EXPECT_TRUE(ReadBytes(M(rel)) == traces_[rel]);
  EXPECT_EQ(Status()["eio"]["rehydrate"].get<int>(), 0);
}

TEST_F(NoRoom, AWriteThatFailsForSpaceLeavesTheStoreUsable) {
  SmallFs("4m");
  auto backend = store::OpenRocksBackend(small_ + "/db", {.create_if_missing = true});
  ASSERT_TRUE(backend.ok()) << backend.status().ToString();
  std::string value = RandomBytes(512 << 10, 1);
  tbfs::Status first;
  for (int i = 0; i < 40 && first.ok(); ++i) {
    store::WriteBatch b;
    b.Put(store::Space::kChunks, fmt::format("k{}", i), value);
    first = (*backend)->Commit(b, true);
  }
  ASSERT_FALSE(first.ok()) << "the filesystem never filled";
  EXPECT_EQ(first.sys_errno(), ENOSPC) << first.ToString();
  // Refused before the engine's log met the full disk (RoomForLog): a
  // smaller write lands if it fits, or is refused the same way (before,
  // it was an error whatever its size: the engine would have aborted on
  // it); reads go on.
  store::WriteBatch again;
  again.Put(store::Space::kMeta, "x", "y");
  const tbfs::Status second = (*backend)->Commit(again, true);
  EXPECT_TRUE(second.ok() || second.sys_errno() == ENOSPC) << second.ToString();
  std::string got;
  EXPECT_TRUE((*backend)->Get(store::Space::kChunks, "k0", &got).ok());
  EXPECT_TRUE(got == value);
}

// The disk fills after a flush (the log then holds nothing: as after a
// migration's batch), a small write fails, the room comes back: the next
// write lands (red team: the daemon aborted on it, an assertion of
// RocksDB's log writer, which the failed write had left broken and the
// engine's own recovery did not replace; the mount went "Transport
// endpoint is not connected"). ctest runs each test in a process of its
// own: an abort fails this one.
TEST_F(NoRoom, AStoreWhoseDiskFilledTakesWritesWhenRoomComesBack) {
  SmallFs("16m");
  store::WriteBatch first;
  auto backend = StoreWithAFlushedChunk(small_ + "/db", &first);
  ASSERT_NE(backend, nullptr);
  const std::string filler = FillSmallFs();
  store::WriteBatch small;
  small.Put(store::Space::kMeta, "x", std::string(8 << 10, 'y'));
  tbfs::Status refused = tbfs::Status::OK();
  for (int i = 0; i < 8 && refused.ok(); ++i) refused = backend->Commit(small, true);
  ASSERT_FALSE(refused.ok()) << "the disk never filled";
  EXPECT_EQ(refused.sys_errno(), ENOSPC) << refused.ToString();
  ASSERT_EQ(::unlink(filler.c_str()), 0);
  // RocksDB recovers from a full disk on its own, polling for room (every
  // few seconds): the writes may wait for that, but no longer.
  const tbfs::Status again = CommitUntilItLands(*backend, small);
  ASSERT_TRUE(again.ok()) << again.ToString();
  std::string got;
  EXPECT_TRUE(backend->Get(store::Space::kMeta, "x", &got).ok());
  EXPECT_TRUE(got == small.ops()[0].value);
}

// Another process fills the disk between the store's check for room and
// its write (red team: a grabber of huge pages on the tmpfs): the write
// into the engine's log fails and leaves the log's writer broken. Once room
// comes back, writes land, on a log that works (before, the first one
// aborted the process: RocksDB's own recovery had kept the broken writer),
// and what was written stays written after the store is reopened.
TEST_F(NoRoom, AStoreWhoseLogWriteFailedTakesWritesWhenRoomComesBack) {
  SmallFs("16m");
  const std::string db = small_ + "/db";
  store::WriteBatch first;
  auto backend = StoreWithAFlushedChunk(db, &first);
  ASSERT_NE(backend, nullptr);
  store::WriteBatch unflushed;  // only in the engine's log when its write fails
  unflushed.Put(store::Space::kMeta, "unflushed", std::string(4 << 10, 'u'));
  ASSERT_TRUE(backend->Commit(unflushed, true).ok());
  std::string filler;
  store::WriteBatch big;  // more than the reserve, so that the log cannot take it
  big.Put(store::Space::kMeta, "big", RandomBytes(2 << 20, 2));
  const tbfs::Status refused = CommitAsTheDiskFills(*backend, big, &filler);
  ASSERT_FALSE(refused.ok()) << "the disk never filled";
  EXPECT_EQ(refused.sys_errno(), ENOSPC) << refused.ToString();
  store::WriteBatch small;
  small.Put(store::Space::kMeta, "x", std::string(8 << 10, 'y'));
  EXPECT_FALSE(backend->Commit(small, true).ok()) << "a write with no room landed";
  std::string got;
  EXPECT_TRUE(backend->Get(store::Space::kChunks, "k0", &got).ok()) << "reads stopped";
  ASSERT_EQ(::unlink(filler.c_str()), 0);
  const tbfs::Status again = CommitUntilItLands(*backend, small);
  ASSERT_TRUE(again.ok()) << again.ToString();
  EXPECT_TRUE(backend->Get(store::Space::kMeta, "unflushed", &got).ok())
      << "the reopened engine lost what its log held";
  ASSERT_TRUE(backend->Commit(big, true).ok());
  EXPECT_TRUE(backend->Get(store::Space::kMeta, "x", &got).ok());
  EXPECT_TRUE(got == small.ops()[0].value);
  backend.reset();
  auto reopened = store::OpenRocksBackend(db, {});
  ASSERT_TRUE(reopened.ok()) << reopened.status().ToString();
  for (const store::WriteBatch* b : {&small, &big, &first, &unflushed}) {
    const auto& op = b->ops()[0];
    EXPECT_TRUE((*reopened)->Get(op.space, op.key, &got).ok()) << op.key;
    EXPECT_TRUE(got == op.value) << op.key;
  }
}

// After the failed write the disk has bytes again but no inodes: the
// engine's reopen gets as far as the reader in the writer's place (the
// engine's own lock then held by no one), and no further until inodes come
// back. Meanwhile no other writer takes the store (red team: a second
// mount did, and its recovery called the first one's files lost), writes
// fail with the first write's error, reads go on; then writes land, and no
// reopen left its cut-short files set aside as a crash's.
TEST_F(NoRoom, AStoreWhoseEngineIsReopeningIsNoOtherWritersToTake) {
  SmallFs("16m,nr_inodes=64");
  const std::string db = small_ + "/db";
  store::WriteBatch first;
  auto backend = StoreWithAFlushedChunk(db, &first);
  ASSERT_NE(backend, nullptr);
  std::string filler;
  store::WriteBatch big;
  big.Put(store::Space::kMeta, "big", RandomBytes(2 << 20, 2));
  ASSERT_FALSE(CommitAsTheDiskFills(*backend, big, &filler).ok()) << "the disk never filled";
  ASSERT_EQ(::unlink(filler.c_str()), 0);
  std::vector<std::string> inodes;
  for (int i = 0; i < 1000; ++i) {
    const std::string name = fmt::format("{}/inode{}", small_, i);
    const int fd = ::open(name.c_str(), O_CREAT | O_WRONLY, 0600);
    if (fd < 0) break;
    ::close(fd);
    inodes.push_back(name);
  }
  store::WriteBatch small;
  small.Put(store::Space::kMeta, "x", "y");
  EXPECT_FALSE(backend->Commit(small, true).ok()) << "a write with no inode landed";
  const auto second = store::OpenRocksBackend(db, {});
  ASSERT_FALSE(second.ok()) << "a second writer took the store while its engine reopened";
  EXPECT_EQ(second.status().code(), Code::kBusy) << second.status().ToString();
  std::string got;
  EXPECT_TRUE(backend->Get(store::Space::kChunks, "k0", &got).ok()) << "reads stopped";
  for (const std::string& name : inodes) ::unlink(name.c_str());
  // What a flush the failed engine cut short leaves: a table file its
  // MANIFEST does not list.
  WriteBytes(db + "/000999.sst", std::string(4096, 's'));
  const tbfs::Status again = CommitUntilItLands(*backend, small);
  ASSERT_TRUE(again.ok()) << again.ToString();
  EXPECT_TRUE(backend->Get(store::Space::kMeta, "x", &got).ok());
  EXPECT_FALSE(std::filesystem::exists(db + "/lost+found") &&
               !std::filesystem::is_empty(db + "/lost+found"))
      << "a reopen set its own cut-short files aside";
  EXPECT_FALSE(std::filesystem::exists(db + "/000999.sst"));
}

// The same race in a mount (the room check armed to pass whatever the
// room, as when another process takes it after the check): chmods of a cold
// file on the full store fail, reads go on, and once room comes back the
// next chmod lands with the mount alive (before: the daemon aborted on it)
// and stays after a remount.
TEST_F(NoRoom, AMountWhoseStoreLogWriteFailedWritesWhenRoomComesBack) {
  SmallFs("24m");
  WriteTraces(logdir_, 3, 1 << 20);
  const std::string store = small_ + "/store";
  ASSERT_EQ(RunCommand(Tbfs("migrate " + logdir_ + " --older-than 0 --apply --store " + store +
                            " >/dev/null 2>&1"))
                .exit_code,
            0);
  MountFailing("store.room_checked", "--no-migrate --cold-after 0 --store " + store);
  const std::string rel = traces_.begin()->first;
  ASSERT_EQ(State(M(rel)), "cold");
  RunCommand("dd if=/dev/zero of=" + small_ + "/filler bs=64K 2>/dev/null");
  // A small record fits the log's last page until it does not.
  int err = 0;
  for (int i = 0; i < 400 && err == 0; ++i) {
    if (::chmod(M(rel).c_str(), i % 2 == 0 ? 0600 : 0640) != 0) err = errno;
  }
  ASSERT_NE(err, 0) << "the store's log never met the full disk";
  EXPECT_TRUE(err == ENOSPC || err == EIO) << std::strerror(err);
  for (const auto& [r, bytes] : traces_) EXPECT_TRUE(ReadBytes(M(r)) == bytes) << r;
  ASSERT_EQ(::unlink((small_ + "/filler").c_str()), 0);
  ASSERT_EQ(::chmod(M(rel).c_str(), 0604), 0) << std::strerror(errno);
  struct stat st;
  ASSERT_EQ(::stat(M(rel).c_str(), &st), 0) << "the mount is gone: " << std::strerror(errno);
  EXPECT_EQ(st.st_mode & 07777, 0604u);
  for (const auto& [r, bytes] : traces_) EXPECT_TRUE(ReadBytes(M(r)) == bytes) << r;
  Unmount();
  Mount("--no-migrate --cold-after 0 --store " + store);
  ASSERT_EQ(::stat(M(rel).c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 07777, 0604u);
  EXPECT_EQ(State(M(rel)), "cold");
  EXPECT_EQ(Status()["lost"]["files"].get<int>(), 0);
}

}  // namespace
}  // namespace tbfs::testing
