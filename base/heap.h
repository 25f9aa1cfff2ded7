// The process's heap, whichever allocator serves it.
//
// The tbfs command links jemalloc (tools/cli/main.cc has its settings;
// README, "Cold reads, memory and migration against references", the
// figures): freed pages go back to the system after a second unused,
// where glibc's arenas kept freed blocks in their middle resident until
// malloc_trim. Libraries and tests that do not link it run on glibc;
// sanitizer builds on the sanitizer's allocator. These calls ask
// whichever one is there.
#pragma once

#include <cstdint>
#include <string>

namespace tbfs {

struct HeapStats {
  uint64_t in_use = 0;  // bytes the program holds
  uint64_t free = 0;    // held by the allocator, free, still resident or mapped
};

// "jemalloc", "glibc" or "sanitizer".
std::string HeapAllocator();
HeapStats GetHeapStats();
// Hands the pages of free blocks back to the system (after a burst of
// work: a migration pass).
void ReleaseFreeHeap();
// glibc only: few arenas, big blocks kept in the heap rather than
// mmap'd afresh (jemalloc is set by the program's malloc_conf).
void TuneHeap();

}  // namespace tbfs
