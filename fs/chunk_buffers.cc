#include "fs/chunk_buffers.h"

#include <sys/mman.h>

#include <algorithm>
#include <bit>

namespace tbfs::fs {

namespace {

// `bytes` (a multiple of the slab size) of fresh memory aligned to a slab,
// advised to be backed by huge pages; nullptr when the kernel refuses.
char* MapAligned(size_t bytes) {
  const size_t align = ChunkBuffers::kSlabBytes;
  void* raw =
      ::mmap(nullptr, bytes + align, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (raw == MAP_FAILED) return nullptr;
  auto start = reinterpret_cast<uintptr_t>(raw);
  uintptr_t aligned = (start + align - 1) & ~(uintptr_t{align} - 1);
  if (aligned > start) ::munmap(raw, aligned - start);
  size_t tail = start + bytes + align - (aligned + bytes);
  if (tail > 0) ::munmap(reinterpret_cast<void*>(aligned + bytes), tail);
  // Only advice: without huge pages the memory works the same, faulting
  // 4 KiB at a time.
  ::madvise(reinterpret_cast<void*>(aligned), bytes, MADV_HUGEPAGE);
  return reinterpret_cast<char*>(aligned);
}

std::shared_ptr<char> FromHeap(size_t bytes) {
  return std::shared_ptr<char>(new char[bytes], std::default_delete<char[]>());
}

}  // namespace

std::shared_ptr<ChunkBuffers> ChunkBuffers::Create(uint64_t keep_free_bytes) {
  return std::shared_ptr<ChunkBuffers>(new ChunkBuffers(keep_free_bytes));
}

ChunkBuffers::ChunkBuffers(uint64_t keep_free_bytes)
    : keep_free_(keep_free_bytes), unmap_above_(2 * keep_free_bytes) {}

ChunkBuffers::~ChunkBuffers() {
  // Every buffer holds this allocator: none is in use any more.
  for (const auto& s : slabs_) ::munmap(s->base, kSlabBytes);
}

size_t ChunkBuffers::ClassBytes(size_t bytes) {
  if (bytes < kMinPooled) return 0;
  return std::bit_ceil(bytes);  // above the slab size: a mapping of its own
}

std::shared_ptr<char> ChunkBuffers::Take(size_t bytes) {
  const size_t cls = ClassBytes(bytes);
  if (cls == 0) return FromHeap(bytes);
  auto self = shared_from_this();
  if (cls > kSlabBytes) {
    const size_t len = (bytes + kSlabBytes - 1) / kSlabBytes * kSlabBytes;
    char* p = MapAligned(len);
    if (p == nullptr) return FromHeap(bytes);
    {
      MutexLock lock(mu_);
      big_bytes_ += len;
    }
    return std::shared_ptr<char>(p, [self, len](char* q) {
      ::munmap(q, len);
      MutexLock lock(self->mu_);
      self->big_bytes_ -= len;
    });
  }
  Slab* slab = nullptr;
  char* p = nullptr;
  {
    MutexLock lock(mu_);
    // A buffer of this size in a slab already carved for it; else a slab
    // with nothing in use (the reserve, or one emptied), carved again.
    Slab* empty = nullptr;
    for (const auto& s : slabs_) {
      if (s->buffer_bytes == cls && !s->free.empty()) {
        slab = s.get();
        break;
      }
      if (empty == nullptr && s->in_use == 0) empty = s.get();
    }
    if (slab == nullptr && empty != nullptr) {
      slab = empty;
      Carve(slab, cls);
    }
    if (slab != nullptr) {
      p = slab->free.back();
      slab->free.pop_back();
      slab->in_use++;
      free_bytes_ -= cls;
    }
  }
  if (slab == nullptr) {
    char* base = MapAligned(kSlabBytes);
    if (base == nullptr) return FromHeap(bytes);
    auto s = std::make_unique<Slab>(Slab{base, 0, {}, 0});
    slab = s.get();
    MutexLock lock(mu_);
    Carve(slab, cls);
    p = slab->free.back();
    slab->free.pop_back();
    slab->in_use = 1;
    free_bytes_ += kSlabBytes - cls;
    slabs_.push_back(std::move(s));
    slabs_mapped_++;
  }
  return std::shared_ptr<char>(p, [self, slab](char* q) { self->Give(slab, q); });
}

void ChunkBuffers::Carve(Slab* slab, size_t cls) {
  slab->buffer_bytes = cls;
  slab->free.clear();
  // Handed out from the back: the first buffer is the slab's start.
  for (size_t off = kSlabBytes; off > 0; off -= cls) slab->free.push_back(slab->base + off - cls);
}

bool ChunkBuffers::FillReserve() {
  {
    MutexLock lock(mu_);
    if (filling_ || free_bytes_ + kSlabBytes > keep_free_) return false;
    filling_ = true;
  }
  char* base = MapAligned(kSlabBytes);
  if (base != nullptr) {
    // The first touch is what costs (the kernel zeroes the pages): pay it
    // here, not under a read that waits.
    for (size_t off = 0; off < kSlabBytes; off += 4096) static_cast<volatile char*>(base)[off] = 0;
  }
  MutexLock lock(mu_);
  filling_ = false;
  if (base == nullptr) return false;
  slabs_.push_back(std::make_unique<Slab>(Slab{base, 0, {}, 0}));
  Carve(slabs_.back().get(), kSlabBytes);
  free_bytes_ += kSlabBytes;
  slabs_mapped_++;
  return true;
}

bool ChunkBuffers::ReserveLow() {
  MutexLock lock(mu_);
  return free_bytes_ + kSlabBytes <= keep_free_;
}

void ChunkBuffers::Give(Slab* slab, char* p) {
  std::vector<char*> unmap;
  {
    MutexLock lock(mu_);
    slab->free.push_back(p);
    slab->in_use--;
    free_bytes_ += slab->buffer_bytes;
    // Slabs with no buffer in use beyond twice the kept amount: this one, or
    // one that emptied while the free total was below it. (Beyond the kept
    // amount only, a stream's chunks coming and going would unmap a slab
    // and the reserve map a fresh one, every other chunk.)
    for (auto it = slabs_.begin(); free_bytes_ > unmap_above_ && it != slabs_.end();) {
      if ((*it)->in_use == 0) {
        free_bytes_ -= kSlabBytes;
        unmap.push_back((*it)->base);
        it = slabs_.erase(it);
      } else {
        ++it;
      }
    }
  }
  for (char* base : unmap) ::munmap(base, kSlabBytes);
}

uint64_t ChunkBuffers::StrandedBytes() {
  // One slab's worth is the granule of mapping: a slab being filled or
  // emptied by one size is not waste.
  MutexLock lock(mu_);
  const uint64_t allowed = unmap_above_ + kSlabBytes;
  return free_bytes_ > allowed ? free_bytes_ - allowed : 0;
}

ChunkBuffers::Stats ChunkBuffers::stats() {
  MutexLock lock(mu_);
  return {slabs_.size() * kSlabBytes + big_bytes_, free_bytes_, slabs_mapped_};
}

}  // namespace tbfs::fs
