#include "fs/chunk_cache.h"

#include <fcntl.h>
#include <gtest/gtest.h>

#include <thread>

#include "base/failpoint.h"
#include "base/fs_util.h"
#include "base/work_pool.h"
#include "store/file_io.h"
#include "store/format.h"
#include "tests/store/store_internals.h"
#include "tests/test_util.h"

namespace tbfs::fs {
namespace {

using testing::TempDir;
using testing::WaitUntil;
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
    manifest_ = Ingest("f", kChunk, 1);
  }

  // The file dir_/name, into the store as file `id` in chunks of `chunk`.
  std::shared_ptr<const storepb::Manifest> Ingest(const std::string& name, uint32_t chunk,
                                                  uint64_t id) {
    auto fd = OpenFile(dir_ / name, O_RDONLY);
    struct stat st;
    ::fstat(fd->get(), &st);
    WorkPool pool(2);
    store::IngestOptions io;
    io.chunk_bytes = chunk;
    io.pool = &pool;
    return std::make_shared<const storepb::Manifest>(
        store::IngestFile(*store_, dir_.path(), name, fd->get(), st, id, io).value());
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

// Chunks a sequential reader is past leave at once, only those asked,
// and read again, exactly, when asked for again.
TEST_F(ChunkCacheTest, ChunksLetGoLeaveAtOnceAndAreReadAgainWhenAskedFor) {
  ChunkCache cache(store_.get(), 20 * kChunk, 0);
  for (uint64_t i = 0; i < 10; ++i) ASSERT_TRUE(cache.Get(manifest_, i).ok());
  const uint64_t full = cache.stats().bytes;
  cache.LetGo(manifest_->file_id(), 2, 7);
  EXPECT_EQ(cache.stats().let_go, 5u);
  EXPECT_EQ(cache.stats().bytes, full / 2);
  cache.LetGo(manifest_->file_id() + 1, 0, 10);  // another file's: none of these
  EXPECT_EQ(cache.stats().bytes, full / 2);
  cache.LetGo(manifest_->file_id(), 0, 100);  // past the file's end, some gone already
  EXPECT_EQ(cache.stats().let_go, 10u);
  EXPECT_EQ(cache.stats().bytes, 0u);
  const uint64_t misses = cache.stats().misses;
  auto c = cache.Get(manifest_, 3);
  ASSERT_TRUE(c.ok());
  EXPECT_EQ(std::string_view((*c)->data.get(), (*c)->size), content_.substr(3 * kChunk, kChunk));
  EXPECT_EQ(cache.stats().misses, misses + 1);
}

// On a loaded machine a reader passes chunks its readahead is still
// loading, or has not begun: the one loading goes once loaded, the one
// queued is never loaded (red team: chunks stayed cached after a stream's
// close, and some were loaded twice).
TEST_F(ChunkCacheTest, AChunkLetGoWhileLoadingGoesOnceLoadedAndAQueuedOneIsCalledOff) {
  ChunkCache cache(store_.get(), 20 * kChunk, 1);
  {
    ScopedFailpoint slow("cache.slow_chunk");  // each load takes 2 s
    cache.Prefetch(manifest_, 1);
    ASSERT_TRUE(WaitUntil([&] { return cache.stats().misses == 1; }, std::chrono::seconds(5),
                          std::chrono::milliseconds(5)));
    cache.Prefetch(manifest_, 2);  // queued behind it (one readahead thread)
    cache.LetGo(manifest_->file_id(), 0, 3);
  }
  cache.WaitForPrefetches();
  const auto s = cache.stats();
  EXPECT_EQ(s.bytes, 0u);
  EXPECT_EQ(s.let_go, 1u);
  EXPECT_EQ(s.misses, 1u);                    // chunk 2 was never loaded
  ASSERT_TRUE(cache.Get(manifest_, 1).ok());  // and 1 loads again when asked
  EXPECT_EQ(cache.stats().misses, 2u);
}

// A chunk asked for ahead by several reads before a readahead thread is
// free is queued once (the queue is short: copies of one chunk would
// crowd out the next ones), and the reads' lookups say how they found
// their chunk: decoded, being loaded (they waited), or not at all.
TEST_F(ChunkCacheTest, AChunkAskedAheadTwiceIsQueuedOnceAndReadsSayHowTheyFoundIt) {
  ChunkCache cache(store_.get(), 20 * kChunk, 1);
  {
    ScopedFailpoint slow("cache.slow_chunk");  // each load takes 2 s
    cache.Prefetch(manifest_, 1);
    ASSERT_TRUE(WaitUntil([&] { return cache.stats().misses == 1; }, std::chrono::seconds(5),
                          std::chrono::milliseconds(5)));
    for (int i = 0; i < 3; ++i) cache.Prefetch(manifest_, 2);  // behind chunk 1
    ASSERT_TRUE(cache.Get(manifest_, 1).ok());                 // waits for the readahead
  }
  cache.WaitForPrefetches();
  auto s = cache.stats();
  EXPECT_EQ(s.misses, 2u);  // chunks 1 and 2, each loaded once
  EXPECT_EQ(s.hits, 1u);    // the read of chunk 1; no second readahead of chunk 2
  EXPECT_EQ(s.reads_waited, 1u);
  EXPECT_EQ(s.reads_ready + s.reads_loaded, 0u);
  EXPECT_GT(s.reads_waiting_ns, 500'000'000u);  // most of the 2 s load
  ASSERT_TRUE(cache.Get(manifest_, 2).ok());
  ASSERT_TRUE(cache.Get(manifest_, 7).ok());
  s = cache.stats();
  EXPECT_EQ(s.reads_ready, 1u);
  EXPECT_EQ(s.reads_loaded, 1u);
  EXPECT_EQ(s.reads_waited, 1u);
}

// More readers streaming at once than a small cache holds chunks ahead
// for: what readahead decodes waits in the cache for its reader, so each
// chunk is decoded once, and readahead holds at most half the capacity
// (red team: at --cache 16M, 8 O_DIRECT streams had each chunk decoded
// about 2.5 times, readahead's chunks evicted before their readers came).
TEST_F(ChunkCacheTest, ChunksReadAheadWaitForTheirReadersInACacheTooSmallForAllStreams) {
  constexpr int kStreams = 8;
  constexpr uint64_t kChunks = 16;
  std::vector<std::string> data(kStreams);
  std::vector<std::shared_ptr<const storepb::Manifest>> files;
  for (int s = 0; s < kStreams; ++s) {
    for (size_t i = 0; i < kChunks * kChunk; ++i)
      data[s].push_back(static_cast<char>('a' + (i * 7 + static_cast<size_t>(s)) % 23));
    WriteBytes(dir_ / ("s" + std::to_string(s)), data[s]);
    files.push_back(Ingest("s" + std::to_string(s), kChunk, 100 + static_cast<uint64_t>(s)));
  }
  const uint64_t capacity = 2 * kStreams * kChunk;
  ChunkCache cache(store_.get(), capacity, 2);
  for (uint64_t i = 0; i < kChunks; ++i) {
    for (int s = 0; s < kStreams; ++s) {
      auto c = cache.Get(files[s], i);
      ASSERT_TRUE(c.ok());
      ASSERT_EQ(std::string_view((*c)->data.get(), (*c)->size),
                std::string_view(data[s]).substr(i * kChunk, kChunk));
      for (uint64_t ahead = 1; ahead <= 4; ++ahead) cache.Prefetch(files[s], i + ahead);
      cache.WaitForPrefetches();
      ASSERT_LE(cache.stats().ahead_bytes, capacity / 2);
      ASSERT_LE(cache.stats().bytes, capacity);
    }
  }
  const auto st = cache.stats();
  EXPECT_EQ(st.misses, kStreams * kChunks);  // every chunk decoded once
  EXPECT_EQ(st.ahead_unread, 0u);
  EXPECT_GE(st.reads_ready, kChunks);  // readahead served reads
  EXPECT_EQ(st.ahead_bytes, 0u);       // and nothing is left waiting
}

// Chunks read ahead for a reader that never comes keep readahead's share
// for a while only (2 s): then readahead goes on for others, and the
// chunks that left unread are counted as its work lost.
TEST_F(ChunkCacheTest, ChunksReadAheadForNoReaderGiveUpTheirShareAndCountAsLost) {
  ChunkCache cache(store_.get(), 8 * kChunk, 1);  // readahead's share: 4 chunks
  for (uint64_t i = 1; i <= 5; ++i) cache.Prefetch(manifest_, i);
  cache.WaitForPrefetches();
  auto s = cache.stats();
  EXPECT_EQ(s.misses, 4u);  // chunk 5 was over the share
  EXPECT_EQ(s.ahead_bytes, 4 * kChunk);
  std::this_thread::sleep_for(std::chrono::milliseconds(2100));
  cache.Prefetch(manifest_, 5);
  cache.WaitForPrefetches();
  s = cache.stats();
  EXPECT_EQ(s.misses, 5u);
  EXPECT_EQ(s.ahead_bytes, static_cast<uint64_t>(kChunk));  // chunk 5's; 1-4 aged out
  ASSERT_TRUE(cache.Get(manifest_, 5).ok());
  EXPECT_EQ(cache.stats().ahead_bytes, 0u);
  // Chunks 1-4, never read, now go as any chunk would, the oldest first
  // (6-9 and 0 read: two over the capacity), each readahead's work lost.
  for (uint64_t i : {6, 7, 8, 9, 0}) ASSERT_TRUE(cache.Get(manifest_, i).ok());
  EXPECT_EQ(cache.stats().ahead_unread, 2u);
  cache.LetGo(manifest_->file_id(), 0, 10);
  EXPECT_EQ(cache.stats().ahead_unread, 4u);
  EXPECT_EQ(cache.stats().bytes, 0u);
}

// Chunks read ahead for readers that went away without a word (an
// O_DIRECT reader that stopped halfway, random reads) keep no place once
// 2 s old even if readahead asks for nothing more, and a reader closing a
// file gives up at once what readahead holds of it (red team: such chunks
// stayed held for good and a working set of 12 chunks in a cache of 16
// was decoded again in every round).
TEST_F(ChunkCacheTest, ChunksReadAheadForReadersGoneLeaveRoomForTheOthers) {
  std::string other(8 * kChunk, 'o');
  WriteBytes(dir_ / "other", other);
  auto m = Ingest("other", kChunk, 2);
  ChunkCache cache(store_.get(), 12 * kChunk, 1);  // readahead's share: 6 chunks
  for (uint64_t i = 1; i <= 6; ++i) cache.Prefetch(m, i);
  cache.WaitForPrefetches();
  std::this_thread::sleep_for(std::chrono::milliseconds(2100));
  // A working set of 10 chunks fits beside them once they are old.
  for (int round = 0; round < 3; ++round) {
    for (uint64_t i = 0; i < 10; ++i) ASSERT_TRUE(cache.Get(manifest_, i).ok());
  }
  auto s = cache.stats();
  EXPECT_EQ(s.misses, 16u);  // the 6 read ahead, the 10 of the working set once each
  EXPECT_EQ(s.ahead_bytes, 0u);
  EXPECT_EQ(s.ahead_unread, 4u);  // the oldest 4 made room
  // A reader closing the file: what readahead queued, is loading and
  // holds of it no longer waits for a reader.
  {
    ScopedFailpoint slow("cache.slow_chunk");  // each load takes 2 s
    for (uint64_t i = 1; i <= 4; ++i) cache.Prefetch(m, i);
    ASSERT_TRUE(WaitUntil([&] { return cache.stats().misses == 17; }, std::chrono::seconds(5),
                          std::chrono::milliseconds(5)));
    cache.ReaderGone(m->file_id());
    EXPECT_EQ(cache.stats().ahead_bytes, 0u);
  }
  cache.WaitForPrefetches();
  EXPECT_EQ(cache.stats().misses, 17u);  // the queued ones were called off
}

// A reader that finds its chunk not ready has caught up with readahead:
// what readahead has queued of that file up to the reader's chunk is
// called off, and what it loaded before it is no longer held for a reader
// (on a busy machine readahead decoded chunks its reader had already
// decoded itself, and held them, unread, until they aged out).
TEST_F(ChunkCacheTest, AReaderThatOvertakesReadaheadCallsOffWhatIsBehindIt) {
  ChunkCache cache(store_.get(), 20 * kChunk, 1);
  {
    ScopedFailpoint slow("cache.slow_chunk");  // each load takes 2 s
    cache.Prefetch(manifest_, 1);
    ASSERT_TRUE(WaitUntil([&] { return cache.stats().misses == 1; }, std::chrono::seconds(5),
                          std::chrono::milliseconds(5)));
    cache.Prefetch(manifest_, 2);  // queued behind chunk 1 (one readahead thread)
    cache.Prefetch(manifest_, 3);
    cache.Prefetch(manifest_, 4);
    ASSERT_TRUE(cache.Get(manifest_, 3).ok());  // loads it itself
  }
  cache.WaitForPrefetches();
  const auto s = cache.stats();
  EXPECT_EQ(s.misses, 3u);  // chunk 1 by readahead, 3 by the read, 4 ahead of it; never 2
  EXPECT_EQ(s.reads_loaded, 1u);
  EXPECT_EQ(s.ahead_bytes, static_cast<uint64_t>(kChunk));  // chunk 4's alone
}

// Capacity lent to other work of the daemon (a recompress through the
// mount) is given up at once and kept out of use until it comes back; no
// more than half of it is ever lent.
TEST_F(ChunkCacheTest, LentCapacityIsGivenUpAtOnceAndComesBack) {
  ChunkCache cache(store_.get(), 8 * kChunk, 0);
  auto fill = [&] {
    for (uint64_t i = 0; i < 10; ++i) ASSERT_TRUE(cache.Get(manifest_, i).ok());
  };
  fill();
  EXPECT_GT(cache.stats().bytes, 4 * kChunk);
  EXPECT_EQ(cache.Lend(3 * kChunk), 3 * kChunk);
  EXPECT_LE(cache.stats().bytes, 5 * kChunk) << "not given up at once";
  EXPECT_EQ(cache.Lend(3 * kChunk), kChunk) << "more than half lent";
  EXPECT_EQ(cache.stats().lent, 4 * kChunk);
  fill();
  EXPECT_LE(cache.stats().bytes, 4 * kChunk);
  cache.Return(kChunk);
  cache.Return(3 * kChunk);
  EXPECT_EQ(cache.stats().lent, 0u);
  fill();
  EXPECT_GT(cache.stats().bytes, 5 * kChunk) << "the capacity did not come back";
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

TEST_F(ChunkCacheTest, ReadsTakeBuffersTheReadaheadThreadsTouchedAhead) {
  // 64 MiB: 8 MiB of buffers kept free, mapped and touched by the readahead
  // threads from the start; loads take them and map nothing themselves.
  ChunkCache cache(store_.get(), 64u << 20, 2);
  ASSERT_TRUE(testing::WaitUntil([&] { return cache.stats().buffers.free_bytes == (8u << 20); },
                                 std::chrono::seconds(10)));
  const uint64_t mapped = cache.stats().buffers.slabs_mapped;
  EXPECT_EQ(mapped, 4u);
  for (uint64_t i = 0; i < 10; ++i) ASSERT_TRUE(cache.Get(manifest_, i).ok());
  EXPECT_EQ(cache.stats().buffers.slabs_mapped, mapped);  // 640 KiB of 64 KiB chunks
  // Below the kept amount by more than a slab: the threads map another.
  WriteBytes(dir_ / "g", std::string(4u << 20, 'g'));
  auto big = Ingest("g", 1u << 20, 2);
  std::vector<std::shared_ptr<const Chunk>> held;  // 4 MiB in use: 4 MiB free
  for (uint64_t i = 0; i < big->chunks(); ++i) {
    auto c = cache.Get(big, i);
    ASSERT_TRUE(c.ok());
    held.push_back(*c);
  }
  // Free then: 1.375 MiB beside the 64 KiB chunks, 2 MiB never carved; two
  // more slabs bring it within a slab of the kept 8 MiB.
  EXPECT_TRUE(testing::WaitUntil([&] { return cache.stats().buffers.slabs_mapped == mapped + 2; },
                                 std::chrono::seconds(10)));
  EXPECT_GT(cache.stats().buffers.free_bytes, 6u << 20);
}

TEST_F(ChunkCacheTest, LoadsAtOnceAndTheBuffersTheirCodecsKeepAreBounded) {
  // 16 readers of incompressible 4 MiB chunks (and a 128 KiB head; stored
  // raw: a 4 MiB value each) at once. Each codec kept a buffer of the
  // largest value it ever read, one per thread that read: 64 MiB here, for
  // good (a red team's daemon held 79 MiB of heap idle after 16 `cat`s of
  // such files).
  std::string noise(32u << 20, '\0');
  uint64_t x = 88172645463325252ull;
  for (char& c : noise) x ^= x << 13, x ^= x >> 7, x ^= x << 17, c = static_cast<char>(x);
  WriteBytes(dir_ / "noise", noise);
  auto m = Ingest("noise", 4u << 20, 3);
  const store::ChunkGeometry g = store::GeometryOf(*m);  // a 128 KiB head, then 4 MiB chunks
  ASSERT_EQ(g.head, store::kHeadChunkBytes);
  ChunkCache cache(store_.get(), 4u << 20, 2);
  std::atomic<int> wrong{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < 16; ++t) {
    threads.emplace_back([&, t] {
      for (uint64_t i = 0; i < m->chunks(); ++i) {
        const uint64_t index = (i + static_cast<uint64_t>(t)) % m->chunks();
        auto c = cache.Get(m, index);
        if (!c.ok() || std::string_view((*c)->data.get(), (*c)->size) !=
                           std::string_view(noise).substr(g.Start(index), g.Length(index))) {
          wrong++;
        }
      }
    });
  }
  for (auto& t : threads) t.join();
  EXPECT_EQ(wrong.load(), 0);
  const auto s = cache.stats();
  EXPECT_LE(s.codecs, static_cast<uint64_t>(cache.max_loads()));
  EXPECT_LE(s.codec_value_bytes, s.codecs * ((1u << 20) + 4096));
}

TEST_F(ChunkCacheTest, AReaderStormStaysWithinTheMemoryCaps) {
  // Capacity for 4 chunks, 8 readers at random chunks: the cache holds at
  // most its capacity, and the buffers mapped at most that plus one chunk
  // per reader in flight plus what ChunkBuffers keeps free.
  const uint64_t capacity = 4 * kChunk;
  ChunkCache cache(store_.get(), capacity, 2);
  std::atomic<bool> over{false};
  std::atomic<int> wrong{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < 8; ++t) {
    threads.emplace_back([&, t] {
      uint64_t x = 88172645463325252ull + static_cast<uint64_t>(t);
      for (int i = 0; i < 300; ++i) {
        x ^= x << 13, x ^= x >> 7, x ^= x << 17;
        uint64_t index = x % 10;
        auto c = cache.Get(manifest_, index);
        if (!c.ok() || std::string_view((*c)->data.get(), (*c)->size) !=
                           std::string_view(content_).substr(index * kChunk, kChunk)) {
          wrong++;
        }
        cache.Prefetch(manifest_, (index + 1) % 10);
        auto s = cache.stats();
        if (s.bytes > capacity ||
            s.buffers.mapped_bytes > capacity + 10 * kChunk + (8u << 20) + (2u << 20)) {
          over = true;
        }
      }
    });
  }
  for (auto& t : threads) t.join();
  cache.WaitForPrefetches();
  EXPECT_EQ(wrong.load(), 0);
  EXPECT_FALSE(over.load());
  EXPECT_LE(cache.stats().bytes, capacity);
}

TEST_F(ChunkCacheTest, AHoleReadsAsZerosAndTakesNoBuffer) {
  // A sparse file: its first chunk written, the other nine a hole.
  auto fd = OpenFile(dir_ / "sparse", O_RDWR | O_CREAT);
  ASSERT_TRUE(fd.ok());
  std::string head(kChunk, 'x');
  ASSERT_EQ(::pwrite(fd->get(), head.data(), head.size(), 0), static_cast<ssize_t>(kChunk));
  ASSERT_EQ(::ftruncate(fd->get(), 10 * kChunk), 0);
  auto m = Ingest("sparse", kChunk, 2);
  ASSERT_TRUE(store::IsHoleChunk(*m, 5));
  ChunkCache cache(store_.get(), 64 * kChunk, 0);
  for (uint64_t i = 1; i < 10; ++i) {
    auto c = cache.Get(m, i);
    ASSERT_TRUE(c.ok());
    ASSERT_EQ((*c)->size, kChunk);
    EXPECT_EQ(std::string_view((*c)->data.get(), (*c)->size), std::string(kChunk, '\0'));
  }
  EXPECT_EQ(cache.stats().buffers.mapped_bytes, 0u);
  EXPECT_EQ(cache.stats().bytes, 0u);
}

TEST_F(ChunkCacheTest, MixedChunkSizesStayWithinTheCapacity) {
  // A file of 96 chunks of 64 KiB (three slabs of that size) and one of 12
  // chunks of 1 MiB. Keeping one small chunk of each slab recent while big
  // ones come through would strand the rest of those slabs, uncounted: the
  // cache counts stranded buffers and evicts for them.
  auto ingest = [&](const std::string& name, size_t bytes, uint32_t chunk, uint64_t id) {
    std::string data;
    for (size_t i = 0; i < bytes; ++i) data.push_back(static_cast<char>('a' + (i * 13) % 19));
    WriteBytes(dir_ / name, data);
    return Ingest(name, chunk, id);
  };
  auto small = ingest("small", 96 * kChunk, kChunk, 11);
  auto big = ingest("big", 12u << 20, 1u << 20, 12);
  const uint64_t capacity = 4u << 20;
  ChunkCache cache(store_.get(), capacity, 0);
  uint64_t most = 0;
  for (uint64_t i = 0; i < 96; ++i) ASSERT_TRUE(cache.Get(small, i).ok());
  for (int round = 0; round < 6; ++round) {
    for (uint64_t i : {0, 32, 64}) ASSERT_TRUE(cache.Get(small, i).ok());
    for (uint64_t i = 0; i < 4; ++i) {
      ASSERT_TRUE(cache.Get(big, (round * 4 + i) % 12).ok());
      most = std::max(most, cache.stats().buffers.mapped_bytes);
    }
  }
  // The capacity, the free buffers kept (capacity / 8), one slab and one
  // chunk in the hands of the caller.
  EXPECT_LE(most, capacity + capacity / 8 + (2u << 20) + (1u << 20));
  EXPECT_LE(cache.stats().bytes, capacity);
}

}  // namespace
}  // namespace tbfs::fs
