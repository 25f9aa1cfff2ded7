// The store's running totals (store/totals.cc) against a scan of every
// manifest, through every kind of commit that writes or deletes one.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/stat.h>

#include <thread>

#include "base/work_pool.h"
#include "store/cold_store.h"
#include "store/file_io.h"
#include "tests/store/store_fixture.h"
#include "tests/test_util.h"

namespace tbfs::store {
namespace {

using testing::TempDir;
using testing::WriteBytes;

class TotalsTest : public NewStoreTest {
 protected:
  storepb::Manifest Ingest(const std::string& rel, size_t bytes) {
    WriteBytes(dir_ / rel, std::string(bytes, 'x'));
    auto fd = OpenFile(dir_ / rel, O_RDONLY);
    EXPECT_TRUE(fd.ok());
    struct stat st;
    ::fstat(fd->get(), &st);
    IngestOptions io;
    io.pool = &pool_;
    auto m = IngestFile(*store_, dir_.path(), rel, fd->get(), st, store_->NewFileId(), io);
    EXPECT_TRUE(m.ok()) << m.status().ToString();
    return m.value();
  }
  // The kept totals equal a fresh scan.
  void ExpectInStep(const std::string& when) {
    auto kept = store_->GetTotals();
    auto scanned = store_->ComputeTotals();
    ASSERT_TRUE(kept.ok() && scanned.ok()) << when;
    EXPECT_EQ(kept->files, scanned->files) << when;
    EXPECT_EQ(kept->logical_bytes, scanned->logical_bytes) << when;
    EXPECT_EQ(kept->stored_bytes, scanned->stored_bytes) << when;
    EXPECT_EQ(kept->top_folder_bytes, scanned->top_folder_bytes) << when;
  }
  WorkPool pool_{2};
};

TEST_F(TotalsTest, EveryCommitKeepsThemEqualToAScan) {
  ASSERT_EQ(store_->GetTotals()->files, 0u);  // counted (empty), then kept
  auto a = Ingest("a/t1.pt.trace.json", 1000);
  auto b = Ingest("a/t2.pt.trace.json", 3000);
  auto c = Ingest("b/t3.pt.trace.json", 5000);
  ExpectInStep("after three files");
  EXPECT_EQ(store_->GetTotals()->files, 3u);
  EXPECT_EQ(store_->GetTotals()->top_folder_bytes.at("a"), 4000u);

  // A newer version of a path replaces the older one.
  Ingest("a/t1.pt.trace.json", 1500);
  ExpectInStep("after a file replaced its older version");

  // A manifest rewritten (chmod): the same file.
  auto now = store_->GetManifest(b.file_id());
  ASSERT_TRUE(now.ok());
  now->set_mode(0600 | S_IFREG);
  WriteBatch update;
  store_->UpdateManifest(&update, *now);
  ASSERT_TRUE(store_->Commit(update, true).ok());
  ExpectInStep("after a chmod");

  // A folder renamed: its bytes move to another top folder.
  WriteBatch rename;
  ASSERT_TRUE(
      store_->Rename(&rename, "a", "c/a", [](const std::string&, struct stat*) { return false; })
          .ok());
  ASSERT_TRUE(store_->Commit(rename, true).ok());
  ExpectInStep("after a folder rename");
  EXPECT_EQ(store_->GetTotals()->top_folder_bytes.count("a"), 0u);

  // Removed and retired files leave them.
  auto moved_c = store_->GetManifest(c.file_id());
  ASSERT_TRUE(moved_c.ok());
  WriteBatch drop;
  ASSERT_TRUE(store_->Drop(&drop, *moved_c, /*retire=*/true).ok());
  ASSERT_TRUE(store_->Commit(drop, true).ok());
  ExpectInStep("after a retirement");
  auto moved_b = store_->GetManifest(b.file_id());
  ASSERT_TRUE(moved_b.ok());
  WriteBatch remove;
  ASSERT_TRUE(store_->RemoveFile(&remove, *moved_b).ok());
  ASSERT_TRUE(store_->Commit(remove, true).ok());
  // Removing a file twice (a stale manifest) takes nothing more off.
  WriteBatch again;
  ASSERT_TRUE(store_->RemoveFile(&again, *moved_b).ok());
  ASSERT_TRUE(store_->Commit(again, true).ok());
  ExpectInStep("after a removal, twice");
  EXPECT_EQ(store_->GetTotals()->files, 1u);
}

TEST_F(TotalsTest, ConcurrentCommitsKeepThemEqualToAScan) {
  ASSERT_TRUE(store_->GetTotals().ok());
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&, t] {
      for (int i = 0; i < 25; ++i) {
        auto m =
            Ingest("r" + std::to_string(t) + "/f" + std::to_string(i) + ".pt.trace.json", 100 + i);
        if (i % 3 == 0) {
          WriteBatch drop;
          if (store_->RemoveFile(&drop, m).ok()) (void)store_->Commit(drop, true);
        }
        (void)store_->GetTotals();
      }
    });
  }
  for (auto& th : threads) th.join();
  ExpectInStep("after concurrent writers");
}

}  // namespace
}  // namespace tbfs::store
