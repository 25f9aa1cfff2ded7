#include "fs/chunk_buffers.h"

#include <gtest/gtest.h>

#include <cstring>
#include <deque>
#include <thread>
#include <vector>

namespace tbfs::fs {
namespace {

constexpr size_t kMiB = 1u << 20;

TEST(ChunkBuffers, AReleasedBufferIsHandedOutAgain) {
  auto buffers = ChunkBuffers::Create(8 * kMiB);
  char* first;
  {
    auto b = buffers->Take(kMiB);
    first = b.get();
    std::memset(b.get(), 1, kMiB);
  }
  auto again = buffers->Take(kMiB);
  EXPECT_EQ(again.get(), first);
  EXPECT_EQ(buffers->stats().slabs_mapped, 1u);
  EXPECT_EQ(buffers->stats().mapped_bytes, ChunkBuffers::kSlabBytes);
}

TEST(ChunkBuffers, BuffersAreDistinctAndAlignedInTheirSlab) {
  auto buffers = ChunkBuffers::Create(0);
  std::vector<std::shared_ptr<char>> held;
  for (int i = 0; i < 8; ++i) held.push_back(buffers->Take(256u << 10));
  for (size_t i = 0; i < held.size(); ++i) {
    std::memset(held[i].get(), static_cast<int>(i), 256u << 10);
    EXPECT_EQ(reinterpret_cast<uintptr_t>(held[i].get()) % (256u << 10), 0u);
  }
  for (size_t i = 0; i < held.size(); ++i) EXPECT_EQ(held[i].get()[(256u << 10) - 1], char(i));
  EXPECT_EQ(buffers->stats().slabs_mapped, 1u);  // 8 x 256 KiB in one 2 MiB slab
}

TEST(ChunkBuffers, FreeSlabsBeyondTwiceTheKeptAmountAreUnmapped) {
  auto buffers = ChunkBuffers::Create(kMiB);
  {
    std::vector<std::shared_ptr<char>> held;
    for (int i = 0; i < 16; ++i) held.push_back(buffers->Take(kMiB));
    EXPECT_EQ(buffers->stats().mapped_bytes, 16 * kMiB);
  }
  // Everything released: at most twice the kept 1 MiB (one slab) stays
  // mapped.
  EXPECT_LE(buffers->stats().mapped_bytes, 2 * kMiB);
  EXPECT_LE(buffers->stats().free_bytes, 2 * kMiB);
}

TEST(ChunkBuffers, SmallAndBigRequests) {
  auto buffers = ChunkBuffers::Create(0);
  auto small = buffers->Take(100);  // from the heap
  EXPECT_EQ(buffers->stats().mapped_bytes, 0u);
  {
    auto big = buffers->Take(5 * kMiB);  // a mapping of its own, 6 MiB
    std::memset(big.get(), 7, 5 * kMiB);
    EXPECT_EQ(buffers->stats().mapped_bytes, 6 * kMiB);
  }
  EXPECT_EQ(buffers->stats().mapped_bytes, 0u);
  EXPECT_EQ(ChunkBuffers::ClassBytes(600u << 10), kMiB);
  EXPECT_EQ(ChunkBuffers::ClassBytes(64u << 10), 64u << 10);
  EXPECT_EQ(ChunkBuffers::ClassBytes(1000), 0u);
}

TEST(ChunkBuffers, TheAllocatorOutlivesItsOwnerWhileABufferIsHeld) {
  std::shared_ptr<char> held;
  {
    auto buffers = ChunkBuffers::Create(kMiB);
    held = buffers->Take(kMiB);
  }
  std::memset(held.get(), 3, kMiB);  // still mapped; ASan would see otherwise
  held.reset();
}

TEST(ChunkBuffers, ManyThreadsTakeAndReleaseWithoutSharingABuffer) {
  auto buffers = ChunkBuffers::Create(4 * kMiB);
  std::vector<std::thread> threads;
  std::atomic<int> wrong{0};
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&, t] {
      for (int i = 0; i < 200; ++i) {
        auto b = buffers->Take(kMiB >> (i % 3));
        std::memset(b.get(), t, 4096);
        std::this_thread::yield();
        for (int k = 0; k < 4096; k += 512) wrong += b.get()[k] != char(t);
      }
    });
  }
  for (auto& t : threads) t.join();
  EXPECT_EQ(wrong.load(), 0);
  EXPECT_LE(buffers->stats().mapped_bytes, 4 * kMiB + 3 * ChunkBuffers::kSlabBytes);
}

TEST(ChunkBuffers, AnEmptySlabKeptEarlierIsUnmappedOnceMoreIsFree) {
  // Slab A empties while little is free (it is kept); then slab B's
  // buffers come back and the free total passes twice the kept amount: A
  // goes.
  auto buffers = ChunkBuffers::Create(kMiB);
  auto a1 = buffers->Take(kMiB), a2 = buffers->Take(kMiB);
  auto b1 = buffers->Take(kMiB), b2 = buffers->Take(kMiB);
  a1.reset();
  a2.reset();  // A empty, 2 MiB free: kept
  EXPECT_EQ(buffers->stats().mapped_bytes, 4 * kMiB);
  b1.reset();  // 3 MiB free: the empty slab goes
  EXPECT_EQ(buffers->stats().mapped_bytes, 2 * kMiB);
  EXPECT_EQ(buffers->StrandedBytes(), 0u);  // 1 MiB free: within the allowance
}

TEST(ChunkBuffers, TheReserveIsMappedAheadAndTakenWithoutMappingMore) {
  auto buffers = ChunkBuffers::Create(4 * kMiB);
  EXPECT_TRUE(buffers->FillReserve());
  EXPECT_TRUE(buffers->FillReserve());
  EXPECT_FALSE(buffers->FillReserve());  // 4 MiB free: the kept amount
  EXPECT_EQ(buffers->stats().mapped_bytes, 4 * kMiB);
  EXPECT_EQ(buffers->stats().free_bytes, 4 * kMiB);
  std::vector<std::shared_ptr<char>> held;
  held.push_back(buffers->Take(kMiB));
  held.push_back(buffers->Take(256u << 10));
  held.push_back(buffers->Take(kMiB));
  for (auto& b : held) std::memset(b.get(), 5, 256u << 10);
  EXPECT_EQ(buffers->stats().slabs_mapped, 2u);  // both from the reserve
  EXPECT_TRUE(buffers->FillReserve());           // 1.75 MiB free: one more
  EXPECT_FALSE(buffers->FillReserve());
  EXPECT_EQ(buffers->stats().slabs_mapped, 3u);
}

TEST(ChunkBuffers, AWholeFreeSlabIsCarvedAgainForAnotherSize) {
  auto buffers = ChunkBuffers::Create(2 * kMiB);
  { auto a = buffers->Take(kMiB), b = buffers->Take(kMiB); }
  EXPECT_EQ(buffers->stats().mapped_bytes, 2 * kMiB);  // kept, empty
  std::vector<std::shared_ptr<char>> held;
  for (int i = 0; i < 8; ++i) held.push_back(buffers->Take(256u << 10));
  EXPECT_EQ(buffers->stats().slabs_mapped, 1u);
  EXPECT_EQ(buffers->stats().free_bytes, 0u);
  for (size_t i = 0; i < held.size(); ++i) std::memset(held[i].get(), int(i), 256u << 10);
  for (size_t i = 0; i < held.size(); ++i) EXPECT_EQ(held[i].get()[100], char(i));
}

// A reader streaming through many files, as the cache sees it: a short
// first chunk, full ones, a short last one; each chunk let go a few after
// it loads; the readahead threads refilling the reserve whenever it runs
// low. Once the first file has been read, the buffers are the same ones
// over and over: no slab is mapped (and zeroed by the kernel) again.
TEST(ChunkBuffers, AStreamThroughManyFilesMapsNoSlabAfterTheFirstFile) {
  auto buffers = ChunkBuffers::Create(8 * kMiB);
  while (buffers->FillReserve()) {
  }
  std::deque<std::shared_ptr<char>> window;
  uint64_t after_first_file = 0;
  for (int file = 0; file < 16; ++file) {
    std::vector<size_t> chunks = {128u << 10};
    for (int i = 0; i < 40; ++i) chunks.push_back(kMiB);
    chunks.push_back((300u + 37u * static_cast<size_t>(file)) << 10);
    for (size_t size : chunks) {
      window.push_back(buffers->Take(size));
      std::memset(window.back().get(), 1, size);
      if (window.size() > 6) window.pop_front();
      while (buffers->ReserveLow() && buffers->FillReserve()) {
      }
    }
    if (file == 0) after_first_file = buffers->stats().slabs_mapped;
  }
  EXPECT_EQ(buffers->stats().slabs_mapped, after_first_file);
  EXPECT_LE(buffers->stats().mapped_bytes, 6 * 2 * kMiB + 8 * kMiB + 4 * ChunkBuffers::kSlabBytes);
}

}  // namespace
}  // namespace tbfs::fs
