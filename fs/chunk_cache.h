// The cache of decompressed cold chunks, shared by every open cold file.
//
// Limits, honestly: it holds at most capacity_bytes of chunk buffers in
// the LRU (a chunk counts its buffer's capacity, ChunkBuffers, and free
// buffers stranded beside buffers in use count too); chunks being read by
// a caller at the moment of eviction stay alive until that caller drops
// them, so the true peak is capacity plus one chunk per concurrent reader,
// plus the free buffers ChunkBuffers keeps (8 MiB at most) and one 2 MiB
// slab, plus what loads hold: at most max_loads() run at once (more wait),
// each with a zstd context and the stored value it decodes, and the
// contexts kept between loads keep at most 1 MiB of buffer each. A hole
// reads as the kernel's zero page and is neither cached nor allocated.
// Concurrent misses on one chunk read and decompress it once; the other
// callers wait for that result. Prefetch queues asynchronous loads
// (sequential readahead) on a few threads and drops requests when more
// than a small number are pending; those threads run at a lower priority
// (nice 10) than the callers of Get, so readahead never takes a core from
// a read that is waiting. What readahead holds for readers that have not
// come yet is at most half the capacity and is evicted last, for 2 s after
// it is loaded at most, and no longer once a reader of its file closes it:
// with more streams than a small cache holds, a chunk read ahead waits for
// its reader instead of being decoded again. A read that finds
// its chunk not ready calls off readahead's queued chunks of the file up
// to it (readahead fell behind its reader). Those threads also keep ChunkBuffers' reserve of
// touched buffers filled, so a read seldom waits for the kernel to zero
// fresh memory.
//
// Every chunk is checksum-checked when loaded (I5): a damaged chunk is an
// error for every caller and is not cached. Thread-safe.
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <future>
#include <list>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <unordered_map>
#include <vector>

#include "base/log.h"
#include "base/status.h"
#include "base/thread_annotations.h"
#include "fs/chunk_buffers.h"
#include "store/cold_store.h"

namespace tbfs::fs {

// One decompressed chunk: `size` bytes at data.get(), which owns them
// (a buffer of the cache's ChunkBuffers, or for a hole the kernel's zero
// page mapped read-only).
struct Chunk {
  std::shared_ptr<char> data;
  size_t size = 0;
};

// Why a cold chunk could not be read, as status and metrics count it.
enum class StoreFault { kCorrupt, kMissing, kUnreachable, kOther };
inline constexpr int kNumStoreFaults = 4;
inline constexpr const char* kStoreFaultNames[kNumStoreFaults] = {"corrupt", "missing",
                                                                  "unreachable", "other"};
// corrupt: its checksum or framing is wrong (I5); missing: the store has no
// such chunk (a file deleted by another host, damage); unreachable: the
// store did not answer in time or the connection is gone (a RADOS cluster
// down or cut off); other: any other I/O error.
StoreFault ClassifyStoreFault(const Status& st);

class ChunkCache {
 public:
  ChunkCache(store::ColdStore* store, uint64_t capacity_bytes, int prefetch_threads);
  ~ChunkCache();

  // Chunk `index` of the file, decompressed and checked.
  Result<std::shared_ptr<const Chunk>> Get(const std::shared_ptr<const storepb::Manifest>& m,
                                           uint64_t index);
  // Loads the chunk in the background if it is not cached.
  void Prefetch(const std::shared_ptr<const storepb::Manifest>& m, uint64_t index);
  // Returns once no prefetch is queued or loading (what was asked for is
  // cached, or failed and counted in stats().errors).
  void WaitForPrefetches();
  // Drops every cached chunk of a file (it left the store).
  void Drop(uint64_t file_id);
  // A sequential reader is past chunks [from, to) of the file. The kernel's
  // page cache holds what it read of them (a cold file's pages are kept),
  // so these go at once, and their buffers serve the next chunks, instead
  // of waiting to be the oldest: a stream through a big file does not fill
  // the cache (nor map its memory) with chunks nobody reads again. A chunk
  // still loading goes once loaded; a readahead of one not begun is
  // called off.
  void LetGo(uint64_t file_id, uint64_t from, uint64_t to);
  // A reader closed the file: readahead's chunks of it queued are called
  // off, and those loading or loaded no longer wait for a reader (another
  // reader finds them; they are evicted as any others).
  void ReaderGone(uint64_t file_id);
  // Lends up to `bytes` of the capacity (at most half of it in all) to
  // other work of the daemon until Return() of what it lent: the cache
  // evicts down to what is left at once, so that the daemon's memory stays
  // within the capacity's budget while that work runs (tbfs recompress
  // through a mount: a level-15 context, its buffers and the memtables it
  // fills). Returns what it lent.
  uint64_t Lend(uint64_t bytes);
  void Return(uint64_t bytes);

  struct Stats {
    uint64_t hits = 0;
    uint64_t misses = 0;
    uint64_t bytes = 0;
    uint64_t lent = 0;  // of the capacity, to other work (Lend)
    uint64_t errors = 0;
    uint64_t let_go = 0;  // chunks a sequential reader was past (LetGo)
    // Of the reads' Gets (not readahead's): the chunk was there, decoded;
    // it was being loaded (by readahead or another read) and the read
    // waited; or the read loaded it. And the time the last two took.
    uint64_t reads_ready = 0;
    uint64_t reads_waited = 0;
    uint64_t reads_loaded = 0;
    uint64_t reads_waiting_ns = 0;
    // Readahead: the chunks it decoded that no read has asked for yet (at
    // most half the capacity), and how many of its chunks left the cache
    // before any read asked for them (its work lost).
    uint64_t ahead_bytes = 0;
    uint64_t ahead_unread = 0;
    ChunkBuffers::Stats buffers;
    uint64_t codecs = 0;             // zstd contexts made (at most max_loads())
    uint64_t codec_value_bytes = 0;  // the buffers of those not in use
  };
  Stats stats();
  // How many chunk loads run at once, at most.
  int max_loads() const { return max_loads_; }

 private:
  struct Key {
    uint64_t file_id;
    uint64_t index;
    bool operator==(const Key&) const = default;
  };
  struct KeyHash {
    size_t operator()(const Key& k) const {
      return std::hash<uint64_t>()(k.file_id * 0x9e3779b97f4a7c15ull ^ k.index);
    }
  };
  struct Loaded {
    Status status;
    std::shared_ptr<const Chunk> data;
  };
  struct Slot {
    std::shared_future<Loaded> future;
    std::list<Key>::iterator lru;
    uint64_t bytes = 0;   // 0 while loading
    bool let_go = false;  // LetGo while loading: not kept once loaded
    // Loaded by readahead and not read yet; while `ahead` (its share of
    // ahead_bytes_) is not 0, evicted only when nothing else can go.
    bool unread = false;
    uint64_t ahead = 0;
    std::chrono::steady_clock::time_point ahead_since;  // loaded (or began to)
  };

  Result<std::shared_ptr<const Chunk>> GetFor(const std::shared_ptr<const storepb::Manifest>& m,
                                              uint64_t index, bool readahead);
  void EvictLocked() TBFS_REQUIRES(mu_);
  // A slot leaves the cache: what it held of readahead's share goes, and
  // one never read counts as readahead's work lost when `lost`.
  void ForgetAheadLocked(Slot* slot, bool lost) TBFS_REQUIRES(mu_);
  // Readahead's chunks not read within kAheadKept lose their place in its
  // share (their reader went elsewhere): evicted as any other from then on.
  void AgeAheadLocked(std::chrono::steady_clock::time_point now) TBFS_REQUIRES(mu_);
  // The slot's chunk, unread, is evicted as any other from now on.
  void UnprotectLocked(Slot* slot) TBFS_REQUIRES(mu_);
  // The same for every chunk of the file below index `below` that
  // readahead loaded and no read has taken yet.
  void UnprotectFileLocked(uint64_t file_id, uint64_t below) TBFS_REQUIRES(mu_);
  // Readahead's queued chunks [from, to) of the file are called off.
  void CallOffLocked(uint64_t file_id, uint64_t from, uint64_t to) TBFS_REQUIRES(mu_);
  // A read of `key` found it not ready: it is at or past where readahead
  // got to in its file. Readahead's queued chunks of the file up to it are
  // called off, and its chunks before it give up their share.
  void OvertakeLocked(const Key& key) TBFS_REQUIRES(mu_);
  uint64_t AheadBudgetLocked() const TBFS_REQUIRES(mu_) { return (capacity_ - lent_) / 2; }
  std::unique_ptr<store::ChunkCodec> TakeCodec();
  void GiveCodec(std::unique_ptr<store::ChunkCodec> codec);
  void PrefetchLoop();

  store::ColdStore* store_;
  const uint64_t capacity_;
  const std::shared_ptr<ChunkBuffers> buffers_;
  LogLimiter error_log_;  // the lines of chunks that failed to load
  // Nothing but ChunkBuffers' own lock (a chunk dropped here returns its
  // buffer) is taken while it is held.
  Mutex mu_;
  std::unordered_map<Key, Slot, KeyHash> slots_ TBFS_GUARDED_BY(mu_);
  std::list<Key> lru_ TBFS_GUARDED_BY(mu_);  // front = newest
  uint64_t bytes_ TBFS_GUARDED_BY(mu_) = 0;
  uint64_t lent_ TBFS_GUARDED_BY(mu_) = 0;  // of capacity_, at most half
  // Readahead's share: the chunks it queued, is loading, or loaded that no
  // read has asked for yet (Slot::ahead), at most AheadBudgetLocked(); and
  // the chunks it began loading, oldest first (some gone or read since).
  uint64_t ahead_bytes_ TBFS_GUARDED_BY(mu_) = 0;
  std::deque<Key> ahead_order_ TBFS_GUARDED_BY(mu_);
  Stats stats_ TBFS_GUARDED_BY(mu_);

  std::condition_variable_any prefetch_cv_;
  std::condition_variable_any idle_cv_;  // a prefetch finished
  int prefetching_ TBFS_GUARDED_BY(mu_) = 0;
  std::deque<std::pair<std::shared_ptr<const storepb::Manifest>, uint64_t>> queue_
      TBFS_GUARDED_BY(mu_);
  bool stop_ TBFS_GUARDED_BY(mu_) = false;
  // The buffers' reserve wants a slab (ChunkBuffers::FillReserve), which a
  // readahead thread maps when no readahead is queued.
  bool refill_ TBFS_GUARDED_BY(mu_) = false;
  std::vector<std::thread> prefetchers_;
  // Codecs between loads, each with its value buffer: at most max_loads_
  // are made, and a load waits for one (what loads hold is bounded by it,
  // not by how many threads read). A leaf lock.
  const int max_loads_;
  Mutex codecs_mu_;
  std::condition_variable_any codec_given_;
  std::vector<std::unique_ptr<store::ChunkCodec>> codecs_ TBFS_GUARDED_BY(codecs_mu_);
  int codecs_made_ TBFS_GUARDED_BY(codecs_mu_) = 0;
};

}  // namespace tbfs::fs
