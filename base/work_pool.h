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
#include <thread>
#include <vector>

namespace tbfs {

class WorkPool {
 public:
  // threads <= 0: one per core.
  explicit WorkPool(int threads);
  ~WorkPool();
  WorkPool(const WorkPool&) = delete;
  WorkPool& operator=(const WorkPool&) = delete;

  int size() const { return static_cast<int>(helpers_.size()) + 1; }
  void ParallelFor(size_t n, const std::function<void(size_t index, int worker)>& fn);

 private:
  void HelperLoop(int worker);
  void RunItems(int worker);

  std::mutex call_mu_;  // serializes ParallelFor calls
  std::mutex mu_;
  std::condition_variable work_cv_;
  std::condition_variable done_cv_;
  // Guarded by mu_:
  const std::function<void(size_t, int)>* fn_ = nullptr;
  size_t n_ = 0;
  size_t next_ = 0;
  size_t done_ = 0;
  uint64_t generation_ = 0;
  bool stop_ = false;
  std::vector<std::thread> helpers_;
};

}  // namespace tbfs
