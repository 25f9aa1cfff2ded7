// Memory for decompressed cold chunks.
//
// Why not new[]: a cold read decodes a whole chunk (1 MiB by default) into
// memory nobody has touched, and on the virtual machines tbfs runs on the
// first touch of each 4 KiB page costs a fault: 2.5 ms per MiB measured on
// the development VM, more than the zstd decode itself (0.4 ms). Memory
// mapped in 2 MiB transparent huge pages costs 0.09 ms per MiB the first
// time, and memory used again costs nothing. So buffers of 64 KiB to 2 MiB
// are carved from 2 MiB slabs advised MADV_HUGEPAGE, kept and handed out
// again when released; a buffer bigger than a slab gets a huge-page mapping
// of its own, unmapped on release. Smaller ones come from the heap.
//
// Fresh memory is slow even in huge pages (the kernel zeroes a page at its
// first touch: milliseconds for a 2 MiB one on the development VM by a
// probe not in the repository; README, "A first byte without fresh
// memory"), so up to keep_free_bytes of slabs are mapped and touched ahead of need by
// FillReserve, which the cache's readahead threads call (at a low
// priority) when ReserveLow; a read then takes a buffer already touched. A
// slab with no buffer in use is carved again for whatever size is asked.
//
// Limits: a buffer's capacity is its size rounded up to a power of two
// (64 KiB to 2 MiB), so a chunk of 600 KiB holds 1 MiB. Slabs with no
// buffer in use are unmapped while more than twice keep_free_bytes of
// buffers are free; up to that much stays mapped for the next reads (the
// gap between what is refilled and what is unmapped keeps a stream from
// mapping fresh slabs as its chunks come and go). Free buffers
// in slabs that also hold buffers in use cannot be unmapped (StrandedBytes:
// the cache evicts for them). Thread-safe.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <vector>

#include "base/thread_annotations.h"

namespace tbfs::fs {

class ChunkBuffers : public std::enable_shared_from_this<ChunkBuffers> {
 public:
  static std::shared_ptr<ChunkBuffers> Create(uint64_t keep_free_bytes);
  ~ChunkBuffers();

  // A buffer of at least `bytes`, not zeroed. Released to this allocator
  // when the last copy of the pointer is dropped (the allocator stays
  // alive as long as a buffer does).
  std::shared_ptr<char> Take(size_t bytes);

  struct Stats {
    uint64_t mapped_bytes = 0;  // slabs and big buffers mapped now
    uint64_t free_bytes = 0;    // of which in no buffer in use
    uint64_t slabs_mapped = 0;  // slabs mapped since the start
  };
  Stats stats();
  // Maps one slab and touches every page of it, when fewer than
  // keep_free_bytes minus a slab of buffers are free and no other thread is
  // filling. True when it mapped one. Slow (the pages' first touch): not on
  // a path a reader waits on.
  bool FillReserve();
  // Whether FillReserve would map a slab.
  bool ReserveLow();
  // Free buffer bytes beyond twice keep_free_bytes and one slab: buffers of slabs
  // that also hold buffers in use, which only a request of the same size
  // can take. The cache counts them against its capacity.
  uint64_t StrandedBytes();

  static constexpr size_t kSlabBytes = 2u << 20;
  static constexpr size_t kMinPooled = 64u << 10;
  // The capacity a request of `bytes` is given (0: from the heap).
  static size_t ClassBytes(size_t bytes);

 private:
  struct Slab {
    char* base;
    size_t buffer_bytes;
    std::vector<char*> free;  // buffers of this slab not in use
    size_t in_use = 0;
  };
  explicit ChunkBuffers(uint64_t keep_free_bytes);
  void Give(Slab* slab, char* p);
  // Cuts the slab (none of it in use) into free buffers of `cls` bytes.
  void Carve(Slab* slab, size_t cls) TBFS_REQUIRES(mu_);

  const uint64_t keep_free_;    // the reserve FillReserve keeps
  const uint64_t unmap_above_;  // free slabs go beyond this (twice the above)
  Mutex mu_;                    // a leaf
  std::vector<std::unique_ptr<Slab>> slabs_ TBFS_GUARDED_BY(mu_);
  uint64_t free_bytes_ TBFS_GUARDED_BY(mu_) = 0;
  uint64_t big_bytes_ TBFS_GUARDED_BY(mu_) = 0;
  uint64_t slabs_mapped_ TBFS_GUARDED_BY(mu_) = 0;
  bool filling_ TBFS_GUARDED_BY(mu_) = false;
};

}  // namespace tbfs::fs
