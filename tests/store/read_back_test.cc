// A file's copy is read back (I2) on a thread of its own while the batch
// copies the next file (store/batch_runner.cc, MoveFiles).
#include <fcntl.h>
#include <gtest/gtest.h>

#include <atomic>
#include <future>
#include <string>
#include <thread>
#include <vector>

#include "base/failpoint.h"
#include "store/migrate.h"
#include "tests/store/migrate_fixture.h"
#include "tests/test_util.h"

namespace tbfs::store {
namespace {

using testing::ReadBytes;
using testing::WaitUntil;

// A writer that opens a file whose copy is read back beside the next copy
// gets it once the read-back is done, not after the next copy (which may
// take minutes for a large trace), and the file stays in place.
TEST_F(MigrateTest, AWriterOfAFileReadBackBesideTheNextCopyIsLetInAtOnce) {
  auto candidates = Candidates();
  ASSERT_GE(candidates.size(), 2u);
  std::vector<std::string> copied;  // the batch's order
  std::string victim;
  std::atomic<bool> opened{false};
  bool let_in = false;
  std::promise<void> migrated;
  std::shared_future<void> migrated_f = migrated.get_future().share();
  std::thread writer;
  ScopedFailpoint hook("ingest.commit", [&](const std::string& path) {
    copied.push_back(path);
    if (!victim.empty() || copied.size() < 2) return;
    // The file before this one is read back meanwhile when it has more
    // than one chunk; this copy cannot end until the hook returns.
    const std::string before = copied[copied.size() - 2];
    if (before_[before.substr(logdir_.size() + 1)].bytes.size() <= Options().chunk_bytes) return;
    victim = before;
    writer = std::thread([&, migrated_f] {
      auto fd = OpenFile(victim, O_WRONLY | O_APPEND);  // waits while the file is leased
      opened = true;
      if (!fd.ok()) return;
      migrated_f.wait();
      (void)WriteAll(fd->get(), "+late", 5, victim);
    });
    let_in = WaitUntil([&] { return opened.load(); }, std::chrono::milliseconds(10000));
  });
  auto result = Migrate(*store_, logdir_, candidates, Options());
  migrated.set_value();
  if (writer.joinable()) writer.join();
  ASSERT_TRUE(result.ok()) << result.status().ToString();
  ASSERT_FALSE(victim.empty());
  EXPECT_TRUE(let_in) << "the writer of " << victim << " waited for the next file's copy";
  const std::string rel = victim.substr(logdir_.size() + 1);
  ASSERT_GT(before_[rel].bytes.size(), Options().chunk_bytes) << "read back on the batch thread";
  EXPECT_TRUE(ReadBytes(victim) == before_[rel].bytes + "+late");
  EXPECT_TRUE(store_->Lookup(rel).status().IsNotFound());
  EXPECT_EQ(result->files_moved, candidates.size() - 1);
  for (const auto& b : result->batches) {
    for (const auto& f : b.files) {
      if (f.path == rel) {
        EXPECT_EQ(f.outcome, Outcome::kChanged) << f.reason;
      }
    }
  }
}

// A copy that reads back wrong, on the read-back thread or on the batch
// thread (the last file), leaves its file in place and the store without
// it; the batch goes on.
TEST_F(MigrateTest, AFileWhoseCopyReadsBackWrongStaysInPlace) {
  auto candidates = Candidates();
  ASSERT_GE(candidates.size(), 2u);
  ScopedFailpoint fail("migrate.read_back");
  auto result = Migrate(*store_, logdir_, candidates, Options());
  ASSERT_TRUE(result.ok()) << result.status().ToString();
  EXPECT_EQ(result->files_moved, 0u);
  size_t failed = 0;
  for (const auto& b : result->batches) {
    for (const auto& f : b.files) {
      EXPECT_EQ(f.outcome, Outcome::kFailed) << f.path << ": " << f.reason;
      EXPECT_NE(f.reason.find("read back"), std::string::npos) << f.reason;
      failed += f.outcome == Outcome::kFailed;
    }
  }
  EXPECT_EQ(failed, candidates.size());
  for (const Candidate& c : candidates) {
    EXPECT_TRUE(ReadBytes(JoinPath(logdir_, c.path)) == before_[c.path].bytes) << c.path;
    EXPECT_TRUE(store_->Lookup(c.path).status().IsNotFound()) << c.path;
  }
}

}  // namespace
}  // namespace tbfs::store
