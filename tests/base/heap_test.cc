#include "base/heap.h"

#include <gtest/gtest.h>

#include <cstring>
#include <memory>

namespace tbfs {
namespace {

#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
constexpr const char* kAllocator = "sanitizer";
#else
constexpr const char* kAllocator = "glibc";  // this test does not link jemalloc; tbfs does
#endif

TEST(Heap, NamesTheAllocatorServingIt) { EXPECT_EQ(HeapAllocator(), kAllocator); }

TEST(Heap, CountsWhatIsHeldAndNoLongerWhatIsFreed) {
  constexpr size_t kBlock = 64 << 20;
  const HeapStats before = GetHeapStats();
  auto block = std::make_unique<char[]>(kBlock);
  std::memset(block.get(), 1, kBlock);
  const HeapStats held = GetHeapStats();
  EXPECT_GE(held.in_use, before.in_use + kBlock);
  block.reset();
  ReleaseFreeHeap();
  const HeapStats after = GetHeapStats();
  EXPECT_LT(after.in_use, held.in_use - kBlock / 2);
}

}  // namespace
}  // namespace tbfs
