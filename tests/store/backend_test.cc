// The contract of store/backend.h, run on every engine: RocksDB in a
// folder, and Ceph RADOS on a throwaway one-OSD cluster
// (scripts/ceph-cluster.sh; skipped, with the reason, when Ceph is not
// installed).
#include "store/backend.h"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <map>
#include <thread>

#include "base/failpoint.h"
#include "base/work_pool.h"
#include "store/cold_store.h"
#include "store/file_io.h"
#include "store/format.h"
#include "store/maintenance.h"
#include "store/rados_backend.h"
#include "tests/ceph_cluster.h"
#include "tests/store/store_internals.h"
#include "tests/test_util.h"

namespace tbfs::store {
namespace {

using testing::CephCluster;

class BackendContract : public ::testing::TestWithParam<std::string> {
 protected:
  void SetUp() override {
    if (GetParam() == "rados") {
      TBFS_NEED_CEPH();
      static std::atomic<int> n{0};
      rados_.pool = "tbfs";
      rados_.conf = CephCluster::Get().conf();
      rados_.prefix = "test" + std::to_string(::getpid()) + "-" + std::to_string(n++) + "/";
      rados_.timeout_s = 10;
    }
    auto b = Open(true);
    ASSERT_TRUE(b.ok()) << b.status().ToString();
    backend_ = std::move(b).value();
  }
  Result<std::unique_ptr<Backend>> Open(bool create) {
    BackendOptions o;
    o.create_if_missing = create;
    if (GetParam() == "rados") return OpenRadosBackend(rados_, o);
    return OpenRocksBackend(dir_.path() + "/" + db_name_, o);
  }
  std::string Value(Space space, const std::string& key) {
    std::string v;
    Status st = backend_->Get(space, key, &v);
    return st.ok() ? v : st.IsNotFound() ? "<none>" : "<error: " + st.message() + ">";
  }
  testing::TempDir dir_;
  std::string db_name_ = "db";
  RadosLocation rados_;
  std::unique_ptr<Backend> backend_;
};

TEST_P(BackendContract, ABatchIsAppliedWholeAndReadBack) {
  WriteBatch b;
  b.Put(Space::kNamespace, std::string("run\0a", 5), "entry-a");  // keys are bytes, NUL too
  b.Put(Space::kManifests, "m1", "manifest-1");
  b.Put(Space::kChunks, ChunkKey(1, 0), std::string(1 << 20, 'x'));  // a full chunk
  b.Put(Space::kMeta, "info", "v2");
  ASSERT_TRUE(backend_->Commit(b, true).ok());
  EXPECT_EQ(Value(Space::kNamespace, std::string("run\0a", 5)), "entry-a");
  EXPECT_EQ(Value(Space::kNamespace, "run"), "<none>");
  EXPECT_EQ(Value(Space::kManifests, "m1"), "manifest-1");
  EXPECT_EQ(Value(Space::kChunks, ChunkKey(1, 0)), std::string(1 << 20, 'x'));
  EXPECT_EQ(Value(Space::kJournal, "m1"), "<none>") << "spaces are apart";
  WriteBatch d;
  d.Delete(Space::kManifests, "m1");
  d.Put(Space::kManifests, "m2", "manifest-2");
  d.Delete(Space::kChunks, ChunkKey(1, 0));
  ASSERT_TRUE(backend_->Commit(d, true).ok());
  EXPECT_EQ(Value(Space::kManifests, "m1"), "<none>");
  EXPECT_EQ(Value(Space::kManifests, "m2"), "manifest-2");
  EXPECT_EQ(Value(Space::kChunks, ChunkKey(1, 0)), "<none>");
  // A put and a delete of one key in one batch: the later wins.
  WriteBatch e;
  e.Put(Space::kMeta, "k", "1");
  e.Delete(Space::kMeta, "k");
  e.Delete(Space::kMeta, "j");
  e.Put(Space::kMeta, "j", "2");
  ASSERT_TRUE(backend_->Commit(e, true).ok());
  EXPECT_EQ(Value(Space::kMeta, "k"), "<none>");
  EXPECT_EQ(Value(Space::kMeta, "j"), "2");
}

TEST_P(BackendContract, ScansGoInKeyOrderWithinAPrefixAndStopWhenAsked) {
  WriteBatch b;
  for (const std::string& k : {std::string("b/2"), std::string("a/1"), std::string("b/1"),
                               std::string("b/10"), std::string("c"), std::string("b\xff")})
    b.Put(Space::kJournal, k, k);
  b.Put(Space::kBaselines, "b/0", "other space");
  for (uint64_t i : {3, 1, 2}) b.Put(Space::kChunks, ChunkKey(7, i), "chunk" + std::to_string(i));
  b.Put(Space::kChunks, ChunkKey(8, 0), "other file");
  ASSERT_TRUE(backend_->Commit(b, true).ok());
  std::vector<std::string> seen;
  ASSERT_TRUE(backend_
                  ->Scan(Space::kJournal, "b/",
                         [&](std::string_view k, std::string_view v) {
                           EXPECT_EQ(k, v);
                           seen.emplace_back(k);
                           return true;
                         })
                  .ok());
  EXPECT_EQ(seen, (std::vector<std::string>{"b/1", "b/10", "b/2"}));
  seen.clear();
  ASSERT_TRUE(backend_
                  ->Scan(Space::kJournal, "",
                         [&](std::string_view k, std::string_view) {
                           seen.emplace_back(k);
                           return seen.size() < 2;
                         })
                  .ok());
  EXPECT_EQ(seen, (std::vector<std::string>{"a/1", "b/1"}));
  seen.clear();
  ASSERT_TRUE(backend_
                  ->Scan(Space::kChunks, ChunkKey(7, 0).substr(0, 8),
                         [&](std::string_view, std::string_view v) {
                           seen.emplace_back(v);
                           return true;
                         })
                  .ok());
  EXPECT_EQ(seen, (std::vector<std::string>{"chunk1", "chunk2", "chunk3"}));
  std::string last;
  ASSERT_TRUE(backend_->LastKey(Space::kJournal, &last).ok());
  EXPECT_EQ(last, "c");
  EXPECT_TRUE(backend_->LastKey(Space::kManifests, &last).IsNotFound());
}

TEST_P(BackendContract, DeletingAFilesChunksLeavesEveryOtherFilesChunks) {
  WriteBatch b;
  for (uint64_t i = 0; i < 5; ++i) b.Put(Space::kChunks, ChunkKey(9, i), "nine");
  b.Put(Space::kChunks, ChunkKey(9, kManifestCopyIndex), "nine's manifest copy");
  b.Put(Space::kChunks, ChunkKey(10, 0), "ten");
  b.Put(Space::kChunks, ChunkKey(8, kManifestCopyIndex), "eight's manifest copy");
  ASSERT_TRUE(backend_->Commit(b, true).ok());
  WriteBatch d;
  for (uint64_t i :
       {uint64_t{0}, uint64_t{1}, uint64_t{2}, uint64_t{3}, uint64_t{4}, kManifestCopyIndex}) {
    d.Delete(Space::kChunks, ChunkKey(9, i));
  }
  ASSERT_TRUE(backend_->Commit(d, true).ok());
  for (uint64_t i : {uint64_t{0}, uint64_t{4}, kManifestCopyIndex})
    EXPECT_EQ(Value(Space::kChunks, ChunkKey(9, i)), "<none>");
  EXPECT_EQ(Value(Space::kChunks, ChunkKey(10, 0)), "ten");
  EXPECT_EQ(Value(Space::kChunks, ChunkKey(8, kManifestCopyIndex)), "eight's manifest copy");
}

TEST_P(BackendContract, ManyChunkDeletesSomeAlreadyGoneAllGo) {
  // 300 chunk deletes of which 40 name no chunk (a crash can leave gaps):
  // every chunk goes, in parallel waves on RADOS, and a missing one is no
  // error.
  WriteBatch b;
  for (uint64_t i = 0; i < 300; ++i) {
    if (i < 150 || i >= 190) b.Put(Space::kChunks, ChunkKey(21, i), "c");
  }
  b.Put(Space::kChunks, ChunkKey(22, 0), "next file");
  ASSERT_TRUE(backend_->Commit(b, true).ok());
  WriteBatch d;
  for (uint64_t i = 0; i < 300; ++i) d.Delete(Space::kChunks, ChunkKey(21, i));
  ASSERT_TRUE(backend_->Commit(d, true).ok());
  for (uint64_t i : {uint64_t{0}, uint64_t{63}, uint64_t{64}, uint64_t{149}, uint64_t{190},
                     uint64_t{255}, uint64_t{299}}) {
    EXPECT_EQ(Value(Space::kChunks, ChunkKey(21, i)), "<none>") << i;
  }
  EXPECT_EQ(Value(Space::kChunks, ChunkKey(22, 0)), "next file");
}

TEST_P(BackendContract, ABigChunkValueReadsBackWhole) {
  // A 64 MiB chunk stored raw is the largest value (RADOS reads a chunk in
  // one request sized for it); 3 MiB and one byte stand in for it here.
  std::string big(3 * 1024 * 1024 + 1, '\0');
  for (size_t i = 0; i < big.size(); ++i) big[i] = static_cast<char>(i * 131 % 251);
  WriteBatch b;
  b.Put(Space::kChunks, ChunkKey(30, 0), big);
  b.Put(Space::kChunks, ChunkKey(30, 1), "");
  ASSERT_TRUE(backend_->Commit(b, true).ok());
  EXPECT_EQ(Value(Space::kChunks, ChunkKey(30, 0)), big);
  EXPECT_EQ(Value(Space::kChunks, ChunkKey(30, 1)), "");
}

TEST_P(BackendContract, WhatWasCommittedIsThereAfterAReopen) {
  WriteBatch b;
  b.Put(Space::kManifests, "m", "kept");
  b.Put(Space::kChunks, ChunkKey(3, 0), "chunk");
  ASSERT_TRUE(backend_->Commit(b, true).ok());
  backend_.reset();
  auto again = Open(false);
  ASSERT_TRUE(again.ok()) << again.status().ToString();
  backend_ = std::move(again).value();
  EXPECT_EQ(Value(Space::kManifests, "m"), "kept");
  EXPECT_EQ(Value(Space::kChunks, ChunkKey(3, 0)), "chunk");
  uint64_t free = 0, size = 0;
  Status room = backend_->FreeBytes(&free, &size);
  if (room.code() != Code::kNotSupported) {  // a cluster without ceph-mgr cannot tell
    ASSERT_TRUE(room.ok()) << room.ToString();
    EXPECT_GT(size, 0u);
    EXPECT_LE(free, size);
  }
}

TEST_P(BackendContract, AStoreThatIsNotThereIsNotFoundUnlessCreated) {
  backend_.reset();
  if (GetParam() == "rados") {
    rados_.prefix += "elsewhere/";
  } else {
    db_name_ = "elsewhere";
  }
  auto missing = Open(false);
  ASSERT_FALSE(missing.ok());
  EXPECT_TRUE(missing.status().IsNotFound()) << missing.status().ToString();
}

INSTANTIATE_TEST_SUITE_P(Engines, BackendContract, ::testing::Values("rocks", "rados"),
                         [](const auto& info) { return info.param; });

// A crash at either side of a commit's one atomic step leaves the old state
// or the new one, plus chunk objects nothing names (garbage), never a
// record whose chunks are gone. The crash is a failpoint in a child
// process (a death test, run afresh so that it reads TBFS_FAILPOINT); the
// child does only the crashing commit, on the store the parent set up.
void CrashAt(const std::string& point, bool new_state_expected) {
  TBFS_NEED_CEPH();
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  const bool child = std::getenv("TBFS_FAILPOINT") != nullptr;
  if (!child) {
    ::setenv("TBFS_CEPH_DIR", CephCluster::Get().dir().c_str(), 1);
    ::setenv("TBFS_CRASH_PREFIX",
             ("crash-" + point + "-" + std::to_string(::getpid()) + "/").c_str(), 1);
  }
  RadosLocation where{.pool = "tbfs",
                      .prefix = std::getenv("TBFS_CRASH_PREFIX"),
                      .conf = CephCluster::Get().conf(),
                      .user = "",
                      .timeout_s = 10};
  std::unique_ptr<Backend> b;
  if (!child) {
    auto opened = OpenRadosBackend(where, {.create_if_missing = true});
    ASSERT_TRUE(opened.ok()) << opened.status().ToString();
    b = std::move(opened).value();
    WriteBatch old_state;
    old_state.Put(Space::kManifests, "m1", "file 1");
    old_state.Put(Space::kChunks, ChunkKey(1, 0), "chunk of file 1");
    ASSERT_TRUE(b->Commit(old_state, true).ok());
    ::setenv("TBFS_FAILPOINT", point.c_str(), 1);
  }
  // Replace file 1 by file 2 in one batch, crashing at the point.
  EXPECT_EXIT(
      {
        auto opened = OpenRadosBackend(where, {});
        if (!opened.ok()) std::_Exit(3);
        WriteBatch next;
        next.Put(Space::kChunks, ChunkKey(2, 0), "chunk of file 2");
        next.Put(Space::kManifests, "m2", "file 2");
        next.Delete(Space::kManifests, "m1");
        next.Delete(Space::kChunks, ChunkKey(1, 0));
        (void)(*opened)->Commit(next, true);
        std::_Exit(0);
      },
      ::testing::ExitedWithCode(kFailpointExitCode), "");
  ::unsetenv("TBFS_FAILPOINT");
  auto get = [&](Space space, const std::string& key) {
    std::string v;
    Status st = b->Get(space, key, &v);
    return st.ok() ? v : st.IsNotFound() ? "<none>" : "<error: " + st.message() + ">";
  };
  EXPECT_EQ(get(Space::kChunks, ChunkKey(2, 0)), "chunk of file 2")
      << "written before the commit point";
  if (new_state_expected) {  // whole; file 1's chunk is garbage now
    EXPECT_EQ(get(Space::kManifests, "m1"), "<none>");
    EXPECT_EQ(get(Space::kManifests, "m2"), "file 2");
  } else {  // the old state, whole; file 2's chunk is garbage
    EXPECT_EQ(get(Space::kManifests, "m1"), "file 1");
    EXPECT_EQ(get(Space::kChunks, ChunkKey(1, 0)), "chunk of file 1");
    EXPECT_EQ(get(Space::kManifests, "m2"), "<none>");
  }
}

TEST(RadosBackend, ACrashBeforeTheCommitPointLeavesTheOldState) {
  CrashAt("rados.before_commit_point", false);
}

TEST(RadosBackend, ACrashAfterTheCommitPointLeavesTheNewState) {
  CrashAt("rados.after_commit_point", true);
}

RadosLocation LeaseStore(const std::string& name) {
  return RadosLocation{.pool = "tbfs",
                       .prefix = name + std::to_string(::getpid()) + "/",
                       .conf = CephCluster::Get().conf(),
                       .user = "",
                       .timeout_s = 10};
}

TEST(RadosLease, OneWriterAtATimeKeptByRenewalsAndTheRefusedOneIsToldWho) {
  TBFS_NEED_CEPH();
  const RadosLocation where = LeaseStore("lease-");
  ASSERT_TRUE(OpenRadosBackend(where, {.create_if_missing = true}).ok());
  auto a = RadosLease::Acquire(where, "the tbfs mount on host-a:/mnt/logs (pid 1)", 3);
  ASSERT_TRUE(a.ok()) << a.status().ToString();
  // Held past its 3 s lease: it is renewed.
  std::this_thread::sleep_for(std::chrono::seconds(5));
  EXPECT_TRUE((*a)->held());
  auto b = RadosLease::Acquire(where, "host-b", 3);
  ASSERT_FALSE(b.ok());
  EXPECT_EQ(b.status().code(), Code::kBusy);
  EXPECT_NE(b.status().message().find("the tbfs mount on host-a:/mnt/logs (pid 1)"),
            std::string::npos)
      << b.status().message();
  a->reset();  // given back: the next writer need not wait for the lease
  auto c = RadosLease::Acquire(where, "host-b", 3);
  EXPECT_TRUE(c.ok()) << c.status().ToString();
}

// A holder that dies without giving the lease back (kill -9, a host gone)
// holds up the next writer for at most the lease.
TEST(RadosLease, AHolderThatDiedLosesItWhenTheLeaseRunsOut) {
  TBFS_NEED_CEPH();
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  const bool child =
      std::getenv("TBFS_LEASE_PREFIX") != nullptr && std::getenv("TBFS_LEASE_CHILD") != nullptr;
  if (!child) {
    ::setenv("TBFS_CEPH_DIR", CephCluster::Get().dir().c_str(), 1);
    ::setenv("TBFS_LEASE_PREFIX", LeaseStore("dead-").prefix.c_str(), 1);
  }
  RadosLocation where = LeaseStore("");
  where.prefix = std::getenv("TBFS_LEASE_PREFIX");
  if (!child) {
    ASSERT_TRUE(OpenRadosBackend(where, {.create_if_missing = true}).ok());
    ::setenv("TBFS_LEASE_CHILD", "1", 1);
  }
  EXPECT_EXIT(
      {
        auto held = RadosLease::Acquire(where, "a holder about to die", 3);
        std::_Exit(held.ok() ? 0 : 3);  // no destructor: the lock is not given back
      },
      ::testing::ExitedWithCode(0), "");
  ::unsetenv("TBFS_LEASE_CHILD");
  auto refused = RadosLease::Acquire(where, "the next writer", 3);
  ASSERT_FALSE(refused.ok()) << "the dead holder's lease still runs";
  EXPECT_NE(refused.status().message().find("a holder about to die"), std::string::npos);
  Result<std::unique_ptr<RadosLease>> taken = Status::Busy("");
  testing::WaitUntil(
      [&] {
        taken = RadosLease::Acquire(where, "the next writer", 3);
        return taken.ok();
      },
      std::chrono::milliseconds(15000), std::chrono::milliseconds(200));
  EXPECT_TRUE(taken.ok()) << taken.status().ToString();
}

// A writer is fenced by its lease: without one it writes nothing, and once
// the lease is someone else's (taken over after it ran out while the old
// holder was paused, here broken by hand) its commit is refused whole by
// the cluster, whatever the old holder believes.
TEST(RadosFence, OnlyTheLeaseHolderCommitsAndALostLeaseWritesNothing) {
  TBFS_NEED_CEPH();
  const RadosLocation where = LeaseStore("fence-");
  auto fence = std::make_shared<RadosFence>();
  auto backend = OpenRadosBackend(where, {.create_if_missing = true}, fence);
  ASSERT_TRUE(backend.ok()) << backend.status().ToString();
  WriteBatch batch;
  batch.Put(Space::kMeta, "k", "v1");
  Status st = (*backend)->Commit(batch, true);
  EXPECT_EQ(st.sys_errno(), EROFS) << st.ToString();

  auto lease = RadosLease::Acquire(where, "the writer", 30);
  ASSERT_TRUE(lease.ok()) << lease.status().ToString();
  std::shared_ptr<RadosLease> held = std::move(lease).value();
  fence->Set(held);
  ASSERT_TRUE((*backend)->Commit(batch, true).ok());

  // Another process breaks the lock and takes the lease.
  auto r = testing::RunCommand("rados -c " + where.conf + " -p tbfs lock info " + where.prefix +
                               "head tbfs.writer --format json");
  ASSERT_EQ(r.exit_code, 0) << r.out;
  const size_t at = r.out.find("\"name\":\"client.");
  ASSERT_NE(at, std::string::npos) << r.out;
  const std::string locker = r.out.substr(at + 8, r.out.find('"', at + 8) - at - 8);
  r = testing::RunCommand("rados -c " + where.conf + " -p tbfs lock break " + where.prefix +
                          "head tbfs.writer " + locker + " --lock-cookie '" + held->cookie() +
                          "' 2>&1");
  ASSERT_EQ(r.exit_code, 0) << r.out;
  auto other = RadosLease::Acquire(where, "the next writer", 30);
  ASSERT_TRUE(other.ok()) << other.status().ToString();
  ASSERT_TRUE(held->held()) << "the old holder has not noticed yet: the fence is what stops it";

  WriteBatch late;
  late.Put(Space::kMeta, "k", "v2");
  late.Put(Space::kChunks, ChunkKey(7, 0), "a chunk");
  st = (*backend)->Commit(late, true);
  EXPECT_EQ(st.sys_errno(), EROFS) << st.ToString();
  std::string v;
  ASSERT_TRUE((*backend)->Get(Space::kMeta, "k", &v).ok());
  EXPECT_EQ(v, "v1") << "a writer that lost its lease changed a record";
}

std::string SharedUrl(const std::string& name) {
  const RadosLocation where = LeaseStore(name);
  return "rados://" + where.pool + "/" + where.prefix + "?conf=" + where.conf +
         "&lease=5s&timeout=10s";
}

OpenOptions Writer(const std::string& holder, bool create) {
  OpenOptions o;
  o.create_if_missing = create;
  o.holder = holder;
  return o;
}

// A cold store on RADOS opened by two processes (two hosts): the first is
// the writer; the second is refused naming it, or opens as a reader whose
// commits write nothing, and becomes the writer once the first lets go.
TEST(SharedColdStore, OneWriterAndReadersThatTakeOverWhenItIsGone) {
  TBFS_NEED_CEPH();
  const std::string url = SharedUrl("shared-");
  auto a = ColdStore::Open(url, Writer("host-a", true));
  ASSERT_TRUE(a.ok()) << a.status().ToString();
  EXPECT_TRUE((*a)->shared());
  EXPECT_TRUE((*a)->writer());

  OpenOptions second = Writer("host-b", true);
  auto refused = ColdStore::Open(url, second);
  ASSERT_FALSE(refused.ok());
  EXPECT_EQ(refused.status().code(), Code::kBusy);
  EXPECT_NE(refused.status().message().find("host-a"), std::string::npos)
      << refused.status().message();

  second.reader_if_busy = true;
  auto b = ColdStore::Open(url, second);
  ASSERT_TRUE(b.ok()) << b.status().ToString();
  EXPECT_FALSE((*b)->writer());
  EXPECT_NE((*b)->refusal().find("host-a"), std::string::npos) << (*b)->refusal();
  Status st = (*b)->PutJournal(storepb::JournalRecord());
  EXPECT_EQ(st.sys_errno(), EROFS) << st.ToString();
  EXPECT_EQ((*b)->TakeWriterRole(second).code(), Code::kBusy);

  a->reset();  // gives the lease back
  ASSERT_TRUE((*b)->TakeWriterRole(second).ok());
  EXPECT_TRUE((*b)->writer());
  storepb::JournalRecord record;
  record.set_batch_id((*b)->NewBatchId());
  EXPECT_TRUE((*b)->PutJournal(record).ok());
}

// Another host's reader may have seen a file id (and cached its chunks)
// whose batch was undone since: the next writer never hands it out again.
TEST(SharedColdStore, AFileIdOnceCommittedIsNeverHandedOutAgain) {
  TBFS_NEED_CEPH();
  const std::string url = SharedUrl("ids-");
  testing::TempDir logdir;
  testing::WriteBytes(logdir / "t.pt.trace.json", std::string(100000, 'x'));
  WorkPool pool(1);
  uint64_t used = 0;
  {
    auto a = ColdStore::Open(url, Writer("host-a", true));
    ASSERT_TRUE(a.ok()) << a.status().ToString();
    auto fd = OpenFile(logdir / "t.pt.trace.json", O_RDONLY);
    ASSERT_TRUE(fd.ok());
    struct stat st;
    ASSERT_EQ(::fstat(fd->get(), &st), 0);
    used = (*a)->NewFileId();
    IngestOptions io;
    io.pool = &pool;
    auto m = IngestFile(**a, logdir.path(), "t.pt.trace.json", fd->get(), st, used, io);
    ASSERT_TRUE(m.ok()) << m.status().ToString();
    // Undone, as recovery undoes an unfinished batch: no record names it.
    WriteBatch undo;
    ASSERT_TRUE((*a)->RemoveFile(&undo, *m).ok());
    ASSERT_TRUE((*a)->Commit(undo, true).ok());
  }
  auto b = ColdStore::Open(url, Writer("host-b", false));
  ASSERT_TRUE(b.ok()) << b.status().ToString();
  EXPECT_GT((*b)->NewFileId(), used);
}

// A journaled id may get chunks written under it by a writer that is about
// to lose its lease (chunk writes are not fenced): no later writer hands it
// out, also once recovery has dropped the journal record.
TEST(SharedColdStore, AJournaledFileIdIsNeverHandedOutAgain) {
  TBFS_NEED_CEPH();
  const std::string url = SharedUrl("journal-ids-");
  uint64_t used = 0;
  {
    auto a = ColdStore::Open(url, Writer("host-a", true));
    ASSERT_TRUE(a.ok()) << a.status().ToString();
    storepb::JournalRecord record;
    record.set_batch_id((*a)->NewBatchId());
    for (int i = 0; i < 5; ++i) record.add_entries()->set_file_id(used = (*a)->NewFileId());
    ASSERT_TRUE((*a)->PutJournal(record).ok());
    ASSERT_TRUE((*a)->DeleteJournal(record.batch_id()).ok());  // as recovery would
  }
  auto b = ColdStore::Open(url, Writer("host-b", false));
  ASSERT_TRUE(b.ok()) << b.status().ToString();
  EXPECT_GT((*b)->NewFileId(), used);
}

// gc --garbage: chunks no record names go; a stored file's, a retired
// file's and an unfinished batch's stay.
class GarbageTest : public ::testing::TestWithParam<std::string> {};

TEST_P(GarbageTest, ChunksNoRecordNamesAreFoundAndRemovedAndNothingElse) {
  if (GetParam() == "rados") TBFS_NEED_CEPH();
  testing::TempDir dir;
  auto opened = ColdStore::Open(GetParam() == "rados" ? SharedUrl("garbage-") : dir / "store",
                                Writer("gc", true));
  ASSERT_TRUE(opened.ok()) << opened.status().ToString();
  ColdStore& store = **opened;
  testing::WriteBytes(dir / "t.pt.trace.json", std::string(300000, 'y'));
  auto fd = OpenFile(dir / "t.pt.trace.json", O_RDONLY);
  ASSERT_TRUE(fd.ok());
  struct stat st;
  ASSERT_EQ(::fstat(fd->get(), &st), 0);
  WorkPool pool(1);
  IngestOptions io;
  io.pool = &pool;
  io.chunk_bytes = 64 << 10;
  auto m = IngestFile(store, dir.path(), "t.pt.trace.json", fd->get(), st, store.NewFileId(), io);
  ASSERT_TRUE(m.ok()) << m.status().ToString();

  const uint64_t lost = store.NewFileId(), journaled = store.NewFileId();
  WriteBatch raw;
  raw.Put(Space::kChunks, ChunkKey(lost, 0), "left by a crash");
  raw.Put(Space::kChunks, ChunkKey(lost, 5), "left by a crash");
  raw.Put(Space::kChunks, ChunkKey(journaled, 0), "a batch recovery has not seen yet");
  ASSERT_TRUE(StoreInternals::Of(store).Commit(raw, true).ok());
  storepb::JournalRecord record;
  record.set_batch_id(store.NewBatchId());
  record.add_entries()->set_file_id(journaled);
  ASSERT_TRUE(store.PutJournal(record).ok());

  Garbage garbage;
  ASSERT_TRUE(FindGarbage(store, &garbage).ok());
  EXPECT_EQ(garbage.files, 1u);
  ASSERT_EQ(garbage.chunks.size(), 2u);
  EXPECT_EQ(garbage.chunks[0].first, lost);
  ASSERT_TRUE(RemoveGarbage(store, garbage).ok());
  ASSERT_TRUE(FindGarbage(store, &garbage).ok());
  EXPECT_TRUE(garbage.chunks.empty());
  std::string value;
  EXPECT_TRUE(StoreInternals::Of(store).Get(Space::kChunks, ChunkKey(journaled, 0), &value).ok());
  std::string back(m->size(), '\0');
  size_t got = 0;
  ChunkCodec codec;
  ASSERT_TRUE(store.ReadRange(*m, 0, back.size(), back.data(), &got, &codec).ok());
  EXPECT_EQ(back, std::string(300000, 'y'));
}

INSTANTIATE_TEST_SUITE_P(Engines, GarbageTest, ::testing::Values("rocks", "rados"),
                         [](const auto& info) { return info.param; });

TEST(RadosUrl, ReadsPoolPrefixAndParameters) {
  auto a = ParseRadosUrl("rados://tbfs/team%20a/logs?conf=/etc/ceph/ceph.conf&id=tbfs&timeout=10s");
  ASSERT_TRUE(a.ok()) << a.status().ToString();
  EXPECT_EQ(a->pool, "tbfs");
  EXPECT_EQ(a->prefix, "team a/logs/");
  EXPECT_EQ(a->conf, "/etc/ceph/ceph.conf");
  EXPECT_EQ(a->user, "tbfs");
  EXPECT_EQ(a->timeout_s, 10);
  auto b = ParseRadosUrl("rados://pool");
  ASSERT_TRUE(b.ok());
  EXPECT_EQ(b->prefix, "");
  EXPECT_EQ(b->timeout_s, 30);
  EXPECT_TRUE(IsRadosUrl("rados://x"));
  EXPECT_FALSE(IsRadosUrl("/data/store"));
  // A relative conf= is the current folder's: a daemon changes to /.
  auto c = ParseRadosUrl("rados://pool?conf=ceph.conf&lease=10s");
  ASSERT_TRUE(c.ok());
  EXPECT_EQ(c->conf[0], '/');
  EXPECT_TRUE(c->conf.ends_with("/ceph.conf"));
  EXPECT_EQ(c->lease_s, 10);
  // Mistyped addresses are never taken for a folder to create.
  for (const char* typo : {"RADOS://tbfs/p", "Rados://tbfs", "rados:/tbfs", "s3://bucket",
                           "rados:tbfs", " rados://tbfs/p", "rados://tbfs/p "}) {
    EXPECT_TRUE(LooksLikeAddress(typo) || IsRadosUrl(typo)) << typo;
    auto opened = ColdStore::Open(typo, Writer("typo", true));
    ASSERT_FALSE(opened.ok()) << typo;
    EXPECT_EQ(opened.status().code(), Code::kInvalidArgument) << typo;
    const std::string made = std::string(typo).substr(0, std::string(typo).find(':') + 1);
    EXPECT_FALSE(std::filesystem::exists(made)) << typo;
  }
  for (const char* folder : {"/data/store", "store", "./a:b", "1a:/x"})
    EXPECT_FALSE(LooksLikeAddress(folder)) << folder;
  for (const char* url : {"rados://", "rados:///prefix", "rados://p?conf", "rados://p?conf=",
                          "rados://p?user=x", "rados://p?timeout=0s", "rados://p?timeout=soon",
                          "rados://p?lease=1s", "rados://p/%zz", "rados://p/%4", "/tmp/x"}) {
    auto r = ParseRadosUrl(url);
    ASSERT_FALSE(r.ok()) << url;
    EXPECT_EQ(r.status().code(), Code::kInvalidArgument) << url;
    EXPECT_EQ(r.status().message().find('\n'), std::string::npos);
    EXPECT_EQ(r.status().message().rfind(url, 0), 0u) << r.status().message();
  }
}

TEST(RadosBackend, AnUnreachableClusterFailsWithinItsTimeout) {
  testing::TempDir dir;
  const std::string conf = dir.path() + "/ceph.conf";
  testing::WriteBytes(conf, "[global]\nmon host = v2:127.0.0.1:9\nauth client required = none\n");
  RadosLocation where{.pool = "tbfs", .prefix = "x/", .conf = conf, .user = "", .timeout_s = 2};
  const auto start = std::chrono::steady_clock::now();
  auto b = OpenRadosBackend(where, {.create_if_missing = true});
  const double took =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  ASSERT_FALSE(b.ok());
  EXPECT_NE(b.status().message().find("rados connect"), std::string::npos) << b.status().message();
  EXPECT_LT(took, 30) << "bounded by the timeout, not hung";
}

}  // namespace
}  // namespace tbfs::store
