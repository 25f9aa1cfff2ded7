#include "base/heap.h"

#include <malloc.h>

#include <cstddef>

#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
// The sanitizers' runtimes export these (their allocator's statistics).
extern "C" size_t __sanitizer_get_current_allocated_bytes();
extern "C" size_t __sanitizer_get_free_bytes();
#define TBFS_SANITIZER_HEAP 1
#endif

// jemalloc's control call, when the program links it; null otherwise.
extern "C" int mallctl(const char* name, void* oldp, size_t* oldlenp, void* newp, size_t newlen)
    __attribute__((weak));

namespace tbfs {
#ifndef TBFS_SANITIZER_HEAP
namespace {

bool Jemalloc() { return mallctl != nullptr; }

uint64_t JemallocStat(const char* name) {
  size_t value = 0, len = sizeof(value);
  return mallctl(name, &value, &len, nullptr, 0) == 0 ? value : 0;
}

}  // namespace
#endif

std::string HeapAllocator() {
#ifdef TBFS_SANITIZER_HEAP
  return "sanitizer";
#else
  return Jemalloc() ? "jemalloc" : "glibc";
#endif
}

HeapStats GetHeapStats() {
#ifdef TBFS_SANITIZER_HEAP
  return {__sanitizer_get_current_allocated_bytes(), __sanitizer_get_free_bytes()};
#else
  if (Jemalloc()) {
    uint64_t epoch = 1;  // refreshes the statistics
    size_t len = sizeof(epoch);
    mallctl("epoch", &epoch, &len, &epoch, len);
    const uint64_t allocated = JemallocStat("stats.allocated");
    const uint64_t resident = JemallocStat("stats.resident");
    return {allocated, resident > allocated ? resident - allocated : 0};
  }
  const struct mallinfo2 heap = ::mallinfo2();
  return {heap.uordblks + heap.hblkhd, heap.fordblks};
#endif
}

void ReleaseFreeHeap() {
#ifndef TBFS_SANITIZER_HEAP
  if (Jemalloc()) {
    // Every arena (MALLCTL_ARENAS_ALL) drops its dirty pages now.
    mallctl("arena.4096.purge", nullptr, nullptr, nullptr, 0);
    return;
  }
  ::malloc_trim(0);
#endif
}

void TuneHeap() {
#ifndef TBFS_SANITIZER_HEAP
  if (Jemalloc()) return;
  // Blocks of up to 4 MiB (chunk values, migration buffers) come and go
  // all the time: keep them in the heap rather than mmap'ing (and
  // page-faulting) each one afresh, in few arenas so that freed blocks are
  // reused instead of piling up per thread.
  ::mallopt(M_ARENA_MAX, 2);
  ::mallopt(M_MMAP_THRESHOLD, 4 << 20);
  ::mallopt(M_TRIM_THRESHOLD, 16 << 20);
#endif
}

}  // namespace tbfs
