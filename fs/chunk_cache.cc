#include "fs/chunk_cache.h"

#include <sys/mman.h>
#include <sys/resource.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <thread>

#include "base/failpoint.h"
#include "spdlog/spdlog.h"

namespace tbfs::fs {

StoreFault ClassifyStoreFault(const Status& st) {
  switch (st.code()) {
    case Code::kCorruption:
      return StoreFault::kCorrupt;
    case Code::kNotFound:
      return StoreFault::kMissing;
    default:
      break;
  }
  switch (st.sys_errno()) {
    case ETIMEDOUT:
    case ENOTCONN:
    case ESHUTDOWN:
    case ECONNREFUSED:
    case ECONNRESET:
    case EHOSTUNREACH:
    case ENETUNREACH:
      return StoreFault::kUnreachable;
    default:
      return StoreFault::kOther;
  }
}

namespace {

constexpr size_t kMaxQueuedPrefetches = 8;
constexpr uint64_t kKeepFreeBuffers = 8u << 20;
// Codecs made and warmed at the start beyond one per readahead thread: for
// the first reads that wait (more are made when more load at once).
constexpr int kWarmCodecs = 2;
// A codec kept between loads keeps a value buffer of a default chunk
// stored raw (1 MiB and its header) at most; a bigger one is freed.
constexpr size_t kKeepValueBytes = (1u << 20) + 4096;
// How long a chunk read ahead keeps its place in readahead's share of the
// cache waiting for its reader (a stream reads a chunk in milliseconds).
constexpr auto kAheadKept = std::chrono::seconds(2);

// Loads at once: one per core (decoding is what they do), 4 to 16, and
// room for a read beside every readahead thread.
int MaxLoads(int prefetch_threads) {
  const int cores = static_cast<int>(std::thread::hardware_concurrency());
  return std::max(std::clamp(cores, 4, 16), prefetch_threads + kWarmCodecs);
}

// What a chunk of `size` bytes holds of memory (ChunkBuffers' classes).
uint64_t Footprint(size_t size) {
  size_t cls = ChunkBuffers::ClassBytes(size);
  if (cls == 0) return size;
  if (cls <= ChunkBuffers::kSlabBytes) return cls;
  return (size + ChunkBuffers::kSlabBytes - 1) / ChunkBuffers::kSlabBytes *
         ChunkBuffers::kSlabBytes;
}

// What readahead reserves of its share for chunk `index`.
uint64_t AheadFootprint(const storepb::Manifest& m, uint64_t index) {
  return Footprint(store::ChunkLength(m, index));
}

// `size` zeros: the kernel's zero page mapped read-only, so reading through
// the holes of a huge sparse file allocates nothing.
std::shared_ptr<const Chunk> ZeroChunk(size_t size) {
  auto zeros = std::make_shared<Chunk>();
  zeros->size = size;
  void* p = ::mmap(nullptr, size, PROT_READ, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (p == MAP_FAILED) {
    zeros->data.reset(new char[size](), std::default_delete<char[]>());
  } else {
    zeros->data.reset(static_cast<char*>(p), [size](char* q) { ::munmap(q, size); });
  }
  return zeros;
}

}  // namespace

ChunkCache::ChunkCache(store::ColdStore* store, uint64_t capacity_bytes, int prefetch_threads)
    : store_(store),
      capacity_(capacity_bytes),
      buffers_(ChunkBuffers::Create(std::min(kKeepFreeBuffers, capacity_bytes / 8))),
      max_loads_(MaxLoads(prefetch_threads)) {
  {
    MutexLock lock(mu_);
    refill_ = prefetch_threads > 0;  // the reserve of touched buffers, at once
  }
  {
    MutexLock lock(codecs_mu_);
    for (int i = 0; i < prefetch_threads + kWarmCodecs; ++i) {
      codecs_.push_back(std::make_unique<store::ChunkCodec>());
      codecs_.back()->Warm();
      codecs_made_++;
    }
  }
  for (int i = 0; i < prefetch_threads; ++i) prefetchers_.emplace_back([this] { PrefetchLoop(); });
}

ChunkCache::~ChunkCache() {
  {
    MutexLock lock(mu_);
    stop_ = true;
  }
  prefetch_cv_.notify_all();
  idle_cv_.notify_all();
  for (auto& t : prefetchers_) t.join();
}

Result<std::shared_ptr<const Chunk>> ChunkCache::Get(
    const std::shared_ptr<const storepb::Manifest>& m, uint64_t index) {
  return GetFor(m, index, /*readahead=*/false);
}

Result<std::shared_ptr<const Chunk>> ChunkCache::GetFor(
    const std::shared_ptr<const storepb::Manifest>& m, uint64_t index, bool readahead) {
  if (store::IsHoleChunk(*m, index)) {
    // A hole is neither read nor kept (reading through the holes of a huge
    // sparse file evicts nothing).
    return ZeroChunk(store::ChunkLength(*m, index));
  }
  Key key{m->file_id(), index};
  std::promise<Loaded> promise;
  std::shared_future<Loaded> future;
  bool loader = false;
  bool ready = false;
  {
    MutexLock lock(mu_);
    auto it = slots_.find(key);
    if (it != slots_.end()) {
      stats_.hits++;
      ready = it->second.bytes > 0;
      if (readahead) {
        ahead_bytes_ -= AheadFootprint(*m, index);  // a read or readahead was first
      } else {
        (ready ? stats_.reads_ready : stats_.reads_waited)++;
        it->second.unread = false;
        ForgetAheadLocked(&it->second, /*lost=*/false);
        if (!ready) OvertakeLocked(key);
      }
      lru_.splice(lru_.begin(), lru_, it->second.lru);
      future = it->second.future;
    } else {
      stats_.misses++;
      if (!readahead) {
        stats_.reads_loaded++;
        OvertakeLocked(key);
      }
      loader = true;
      future = promise.get_future().share();
      lru_.push_front(key);
      Slot& slot = slots_.emplace(key, Slot{future, lru_.begin()}).first->second;
      if (readahead) {
        // What Prefetch reserved of readahead's share is now this slot's.
        slot.unread = true;
        slot.ahead = AheadFootprint(*m, index);
        slot.ahead_since = std::chrono::steady_clock::now();
        AgeAheadLocked(slot.ahead_since);
        ahead_order_.push_back(key);
      }
    }
  }
  // A read that did not find its chunk ready times its load or wait (the
  // clock is read only then: a ready chunk is every read's common case).
  const bool timed = !readahead && !ready;
  const auto start =
      timed ? std::chrono::steady_clock::now() : std::chrono::steady_clock::time_point{};
  if (loader) {
    // Tests: a store that takes its time (readahead queued at an unmount).
    if (ShouldFail("cache.slow_chunk")) std::this_thread::sleep_for(std::chrono::seconds(2));
    std::unique_ptr<store::ChunkCodec> codec = TakeCodec();
    auto raw = std::make_shared<Chunk>();
    raw->size = store::ChunkLength(*m, index);
    raw->data = buffers_->Take(raw->size);
    Status st = store_->ReadChunkInto(*m, index, codec.get(), raw->data.get());
    GiveCodec(std::move(codec));
    uint64_t held = 0;
    if (!st.ok() && error_log_.Allow(&held)) {
      spdlog::error("[EIO:cold-chunk] {}{}", st.message(), HeldBack(held));
    }
    promise.set_value({st, st.ok() ? std::shared_ptr<const Chunk>(raw) : nullptr});
    MutexLock lock(mu_);
    if (!refill_ && !prefetchers_.empty() && buffers_->ReserveLow()) {
      refill_ = true;
      prefetch_cv_.notify_one();
    }
    auto it = slots_.find(key);
    if (it != slots_.end()) {
      if (!st.ok() || it->second.let_go) {
        (st.ok() ? stats_.let_go : stats_.errors)++;
        ForgetAheadLocked(&it->second, /*lost=*/st.ok());
        lru_.erase(it->second.lru);
        slots_.erase(it);
      } else {
        it->second.bytes = Footprint(raw->size);
        // Its reader's 2 s count from now (a slow load is no reader's fault).
        if (it->second.ahead > 0) it->second.ahead_since = std::chrono::steady_clock::now();
        bytes_ += it->second.bytes;
        EvictLocked();
      }
    }
  }
  const Loaded& loaded = future.get();
  if (timed) {
    const auto waited = std::chrono::steady_clock::now() - start;
    MutexLock lock(mu_);
    stats_.reads_waiting_ns +=
        static_cast<uint64_t>(std::chrono::duration_cast<std::chrono::nanoseconds>(waited).count());
  }
  if (!loaded.status.ok()) return loaded.status;
  return loaded.data;
}

std::unique_ptr<store::ChunkCodec> ChunkCache::TakeCodec() {
  MutexLock lock(codecs_mu_);
  codec_given_.wait(lock, [&]() TBFS_NO_THREAD_SAFETY_ANALYSIS {
    return !codecs_.empty() || codecs_made_ < max_loads_;
  });
  if (codecs_.empty()) {
    codecs_made_++;
    return std::make_unique<store::ChunkCodec>();
  }
  auto codec = std::move(codecs_.back());
  codecs_.pop_back();
  return codec;
}

void ChunkCache::GiveCodec(std::unique_ptr<store::ChunkCodec> codec) {
  std::string& value = codec->value_buffer();
  if (value.capacity() > kKeepValueBytes) std::string().swap(value);
  {
    MutexLock lock(codecs_mu_);
    codecs_.push_back(std::move(codec));
  }
  codec_given_.notify_one();
}

void ChunkCache::EvictLocked() {
  // Free buffers stranded in slabs with buffers in use are memory too:
  // with them counted, what the buffers map stays within the capacity, the
  // kept free buffers and the chunks readers hold (a mix of chunk sizes
  // could otherwise strand as much again as the cache holds).
  // Readahead's unread chunks go last, in a second pass: one evicted for a
  // chunk decoded after it would be decoded again when its reader comes
  // (with many streams and a small cache, every chunk was, several times).
  // They are at most half the capacity, so the first pass seldom falls short;
  // and those whose reader has not come in kAheadKept go as any other.
  if (bytes_ + buffers_->StrandedBytes() > capacity_ - lent_)
    AgeAheadLocked(std::chrono::steady_clock::now());
  for (const bool spare_ahead : {true, false}) {
    auto it = lru_.end();
    while (bytes_ + buffers_->StrandedBytes() > capacity_ - lent_ && it != lru_.begin()) {
      --it;
      auto slot = slots_.find(*it);
      if (slot->second.bytes == 0) continue;  // still loading
      if (spare_ahead && slot->second.ahead > 0) continue;
      bytes_ -= slot->second.bytes;
      ForgetAheadLocked(&slot->second, /*lost=*/true);
      slots_.erase(slot);
      it = lru_.erase(it);
    }
  }
}

void ChunkCache::ForgetAheadLocked(Slot* slot, bool lost) {
  if (slot->unread && lost) stats_.ahead_unread++;
  UnprotectLocked(slot);
}

void ChunkCache::OvertakeLocked(const Key& key) {
  // On a busy machine readahead falls behind its reader, and then decoded
  // chunks the reader had decoded itself (and evicted), held unread.
  CallOffLocked(key.file_id, 0, key.index + 1);
  UnprotectFileLocked(key.file_id, key.index);
}

void ChunkCache::CallOffLocked(uint64_t file_id, uint64_t from, uint64_t to) {
  for (auto job = queue_.begin(); job != queue_.end();) {
    if (job->first->file_id() == file_id && job->second >= from && job->second < to) {
      ahead_bytes_ -= AheadFootprint(*job->first, job->second);
      job = queue_.erase(job);
    } else {
      ++job;
    }
  }
}

void ChunkCache::UnprotectFileLocked(uint64_t file_id, uint64_t below) {
  for (const Key& k : ahead_order_) {
    if (k.file_id != file_id || k.index >= below) continue;
    if (auto slot = slots_.find(k); slot != slots_.end()) UnprotectLocked(&slot->second);
  }
}

void ChunkCache::UnprotectLocked(Slot* slot) {
  ahead_bytes_ -= slot->ahead;
  slot->ahead = 0;  // still unread: lost if it leaves so
}

void ChunkCache::AgeAheadLocked(std::chrono::steady_clock::time_point now) {
  while (!ahead_order_.empty()) {
    auto slot = slots_.find(ahead_order_.front());
    if (slot != slots_.end() && slot->second.ahead > 0) {
      if (now - slot->second.ahead_since < kAheadKept) return;
      UnprotectLocked(&slot->second);
    }
    ahead_order_.pop_front();
  }
}

uint64_t ChunkCache::Lend(uint64_t bytes) {
  MutexLock lock(mu_);
  const uint64_t lent = std::min(bytes, capacity_ / 2 - std::min(lent_, capacity_ / 2));
  lent_ += lent;
  EvictLocked();
  return lent;
}

void ChunkCache::Return(uint64_t bytes) {
  MutexLock lock(mu_);
  lent_ -= std::min(bytes, lent_);
}

void ChunkCache::Drop(uint64_t file_id) {
  MutexLock lock(mu_);
  for (auto it = lru_.begin(); it != lru_.end();) {
    auto slot = slots_.find(*it);
    if (it->file_id == file_id && slot->second.bytes > 0) {
      bytes_ -= slot->second.bytes;
      ForgetAheadLocked(&slot->second, /*lost=*/false);
      slots_.erase(slot);
      it = lru_.erase(it);
    } else {
      ++it;
    }
  }
}

void ChunkCache::LetGo(uint64_t file_id, uint64_t from, uint64_t to) {
  MutexLock lock(mu_);
  CallOffLocked(file_id, from, to);
  for (uint64_t index = from; index < to; ++index) {
    auto slot = slots_.find({file_id, index});
    if (slot == slots_.end()) continue;
    if (slot->second.bytes == 0) {
      slot->second.let_go = true;  // its loader lets it go
      continue;
    }
    bytes_ -= slot->second.bytes;
    ForgetAheadLocked(&slot->second, /*lost=*/true);
    lru_.erase(slot->second.lru);
    slots_.erase(slot);
    stats_.let_go++;
  }
}

void ChunkCache::ReaderGone(uint64_t file_id) {
  MutexLock lock(mu_);
  CallOffLocked(file_id, 0, UINT64_MAX);
  UnprotectFileLocked(file_id, UINT64_MAX);
}

void ChunkCache::Prefetch(const std::shared_ptr<const storepb::Manifest>& m, uint64_t index) {
  if (prefetchers_.empty() || index >= m->chunks() || store::IsHoleChunk(*m, index)) return;
  {
    MutexLock lock(mu_);
    if (slots_.count({m->file_id(), index}) || queue_.size() >= kMaxQueuedPrefetches) return;
    for (const auto& job : queue_) {
      if (job.second == index && job.first->file_id() == m->file_id()) return;  // queued already
    }
    // Readahead keeps to its share: the chunks it holds for readers that
    // have not come yet leave the other half to what reads use now.
    const uint64_t want = AheadFootprint(*m, index);
    if (ahead_bytes_ + want > AheadBudgetLocked()) {
      AgeAheadLocked(std::chrono::steady_clock::now());
      if (ahead_bytes_ + want > AheadBudgetLocked()) return;
    }
    ahead_bytes_ += want;
    queue_.emplace_back(m, index);
  }
  prefetch_cv_.notify_one();
}

void ChunkCache::PrefetchLoop() {
  // Below the readers (Linux: a thread's own nice value). Readahead still
  // fills idle cores; it never delays a read a caller is waiting for.
  ::setpriority(PRIO_PROCESS, static_cast<id_t>(::gettid()), 10);
  for (;;) {
    std::pair<std::shared_ptr<const storepb::Manifest>, uint64_t> job;
    bool refill = false;
    {
      MutexLock lock(mu_);
      prefetch_cv_.wait(lock, [&]() TBFS_NO_THREAD_SAFETY_ANALYSIS {
        return stop_ || !queue_.empty() || refill_;
      });
      if (stop_) return;
      if (queue_.empty()) {
        refill = true;
        refill_ = false;
      } else {
        job = std::move(queue_.front());
        queue_.pop_front();
        prefetching_++;
      }
    }
    if (refill) {
      // One slab at a time, readahead first.
      if (buffers_->FillReserve()) {
        MutexLock lock(mu_);
        refill_ = true;
      }
      continue;
    }
    (void)GetFor(job.first, job.second, /*readahead=*/true);  // an error is logged and counted
    {
      MutexLock lock(mu_);
      prefetching_--;
    }
    idle_cv_.notify_all();
  }
}

void ChunkCache::WaitForPrefetches() {
  MutexLock lock(mu_);
  idle_cv_.wait(lock, [&]() TBFS_NO_THREAD_SAFETY_ANALYSIS {
    return stop_ || (queue_.empty() && prefetching_ == 0);
  });
}

ChunkCache::Stats ChunkCache::stats() {
  Stats s;
  {
    MutexLock lock(mu_);
    s = stats_;
    s.bytes = bytes_;
    s.lent = lent_;
    AgeAheadLocked(std::chrono::steady_clock::now());
    s.ahead_bytes = ahead_bytes_;
  }
  s.buffers = buffers_->stats();
  MutexLock lock(codecs_mu_);
  s.codecs = static_cast<uint64_t>(codecs_made_);
  for (const auto& c : codecs_) s.codec_value_bytes += c->value_buffer().capacity();
  return s;
}

}  // namespace tbfs::fs
