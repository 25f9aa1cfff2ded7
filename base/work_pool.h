// A fixed set of worker threads for data-parallel loops (compressing the
// chunks of a file, reading them back). ParallelFor runs on the workers and
// on the calling thread; each call gets a worker index in [0, size()) so
// callers can keep per-worker state (zstd contexts) without locks.
//
// One ParallelFor at a time per pool (calls are serialized).
#pragma once

#include <condition_variable>
#include <functional>
#include <mutex>
#include <string_view>
#include <thread>
#include <vector>

#include "base/thread_annotations.h"

namespace tbfs {

// Starts body(i) on a thread of its own for each i in [0, n), appending the
// threads to *threads; returns how many started. A thread the system
// refuses (a user's RLIMIT_NPROC on a shared machine, the kernel's
// threads-max) ends the starting with a warning naming `what` (the first
// time in the process; later ones are debug): the caller goes on with the
// threads it got.
size_t StartThreads(size_t n, std::string_view what, const std::function<void(size_t)>& body,
                    std::vector<std::thread>* threads);

class WorkPool {
 public:
  // threads <= 0: one per core. Fewer where the system refuses threads
  // (StartThreads); size() says how many.
  explicit WorkPool(int threads);
  ~WorkPool();
  WorkPool(const WorkPool&) = delete;
  WorkPool& operator=(const WorkPool&) = delete;

  int size() const { return static_cast<int>(helpers_.size()) + 1; }
  void ParallelFor(size_t n, const std::function<void(size_t index, int worker)>& fn);

 private:
  void HelperLoop(int worker);
  void RunItems(int worker);

  // Lock order: call_mu_ -> mu_. No lock is held while an item runs.
  Mutex call_mu_ TBFS_ACQUIRED_BEFORE(mu_);  // serializes ParallelFor calls
  Mutex mu_;
  std::condition_variable_any work_cv_;
  std::condition_variable_any done_cv_;
  const std::function<void(size_t, int)>* fn_ TBFS_GUARDED_BY(mu_) = nullptr;
  size_t n_ TBFS_GUARDED_BY(mu_) = 0;
  size_t next_ TBFS_GUARDED_BY(mu_) = 0;
  size_t done_ TBFS_GUARDED_BY(mu_) = 0;
  uint64_t generation_ TBFS_GUARDED_BY(mu_) = 0;
  bool stop_ TBFS_GUARDED_BY(mu_) = false;
  std::vector<std::thread> helpers_;
};

}  // namespace tbfs
