#include "fs/chunk_cache.h"

#include <fcntl.h>
#include <gtest/gtest.h>

#include <thread>

#include "base/fs_util.h"
#include "base/work_pool.h"
#include "store/file_io.h"
#include "store/format.h"
#include "tests/store/store_internals.h"
#include "tests/test_util.h"

namespace tbfs::fs {
namespace {

using testing::TempDir;
using testing::WriteBytes;

class ChunkCacheTest : public ::testing::Test {
 protected:
  void SetUp() override {
    store::OpenOptions o;
    o.create_if_missing = true;
    store_ = std::move(store::ColdStore::Open(dir_ / "store", o)).value();
    for (size_t i = 0; i < 10 * kChunk; ++i)
      content_.push_back(static_cast<char>('a' + (i * 7) % 23));
    WriteBytes(dir_ / "f", content_);
    auto fd = OpenFile(dir_ / "f", O_RDONLY);
    struct stat st;
    ::fstat(fd->get(), &st);
    WorkPool pool(2);
    store::IngestOptions io;
    io.chunk_bytes = kChunk;
    io.pool = &pool;
    manifest_ = std::make_shared<const storepb::Manifest>(
        store::IngestFile(*store_, dir_.path(), "f", fd->get(), st, 1, io).value());
  }

  static constexpr uint32_t kChunk = 64 << 10;
  TempDir dir_;
  std::unique_ptr<store::ColdStore> store_;
  std::string content_;
  std::shared_ptr<const storepb::Manifest> manifest_;
};

TEST_F(ChunkCacheTest, ServesExactChunksAndStaysWithinCapacity) {
  ChunkCache cache(store_.get(), 3 * kChunk, 0);
  for (int pass = 0; pass < 2; ++pass) {
    for (uint64_t i = 0; i < 10; ++i) {
      auto c = cache.Get(manifest_, i);
      ASSERT_TRUE(c.ok());
      EXPECT_EQ(std::string_view((*c)->data.get(), (*c)->size),
                content_.substr(i * kChunk, kChunk));
      EXPECT_LE(cache.stats().bytes, 3 * kChunk);
    }
  }
  auto again = cache.Get(manifest_, 9);
  ASSERT_TRUE(again.ok());
  EXPECT_GT(cache.stats().hits, 0u);
}

TEST_F(ChunkCacheTest, ConcurrentMissesDecompressOnce) {
  ChunkCache cache(store_.get(), 64 * kChunk, 0);
  std::vector<std::thread> threads;
  for (int t = 0; t < 8; ++t) {
    threads.emplace_back([&] {
      for (uint64_t i = 0; i < 10; ++i) EXPECT_TRUE(cache.Get(manifest_, i).ok());
    });
  }
  for (auto& t : threads) t.join();
  EXPECT_EQ(cache.stats().misses, 10u);  // one load per chunk
  EXPECT_EQ(cache.stats().hits, 70u);
}

TEST_F(ChunkCacheTest, DamagedChunkIsAnErrorEveryTimeAndNotCached) {
  std::string value;
  ASSERT_TRUE(tbfs::store::StoreInternals::Of(*store_)
                  .Get(store::Space::kChunks, store::ChunkKey(1, 4), &value)
                  .ok());
  value[value.size() - 3] ^= 0x40;
  store::WriteBatch b;
  b.Put(store::Space::kChunks, store::ChunkKey(1, 4), value);
  ASSERT_TRUE(store_->Commit(b, true).ok());
  ChunkCache cache(store_.get(), 64 * kChunk, 0);
  for (int i = 0; i < 3; ++i) {
    auto c = cache.Get(manifest_, 4);
    ASSERT_FALSE(c.ok());
    EXPECT_TRUE(c.status().IsCorruption());
  }
  EXPECT_EQ(cache.stats().errors, 3u);
  EXPECT_TRUE(cache.Get(manifest_, 3).ok());
}

TEST_F(ChunkCacheTest, PrefetchLoadsAhead) {
  ChunkCache cache(store_.get(), 64 * kChunk, 2);
  cache.Prefetch(manifest_, 5);
  cache.WaitForPrefetches();
  auto before = cache.stats();
  EXPECT_EQ(before.misses, 1u);  // the prefetch's own load
  EXPECT_EQ(before.bytes, static_cast<uint64_t>(kChunk));
  ASSERT_TRUE(cache.Get(manifest_, 5).ok());
  EXPECT_EQ(cache.stats().hits, before.hits + 1);
  EXPECT_EQ(cache.stats().misses, 1u);
  // Chunks already cached, or past the file's end, are not loaded again.
  cache.Prefetch(manifest_, 5);
  cache.Prefetch(manifest_, manifest_->chunks());
  cache.WaitForPrefetches();
  EXPECT_EQ(cache.stats().misses, 1u);
}

}  // namespace
}  // namespace tbfs::fs
