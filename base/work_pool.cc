#include "base/work_pool.h"

#include <algorithm>
#include <atomic>
#include <system_error>

#include "spdlog/spdlog.h"

namespace tbfs {

size_t StartThreads(size_t n, std::string_view what, const std::function<void(size_t)>& body,
                    std::vector<std::thread>* threads) {
  for (size_t i = 0; i < n; ++i) {
    try {
      threads->emplace_back(body, i);
    } catch (const std::system_error& e) {
      // Said once a process: every batch of a migration starts threads.
      static std::atomic<bool> said{false};
      spdlog::log(said.exchange(true) ? spdlog::level::debug : spdlog::level::warn,
                  "{}: {} of {} threads started ({}); going on with fewer", what, i, n, e.what());
      return i;
    }
  }
  return n;
}

WorkPool::WorkPool(int threads) {
  int n =
      threads > 0 ? threads : static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  StartThreads(
      static_cast<size_t>(n - 1), "work pool",
      [this](size_t i) { HelperLoop(static_cast<int>(i) + 1); }, &helpers_);
}

WorkPool::~WorkPool() {
  {
    MutexLock lock(mu_);
    stop_ = true;
  }
  work_cv_.notify_all();
  for (auto& t : helpers_) t.join();
}

void WorkPool::RunItems(int worker) {
  MutexLock lock(mu_);
  while (next_ < n_) {
    size_t i = next_++;
    const auto* fn = fn_;
    lock.unlock();
    (*fn)(i, worker);
    lock.lock();
    if (++done_ == n_) done_cv_.notify_all();
  }
}

void WorkPool::HelperLoop(int worker) {
  uint64_t seen = 0;
  for (;;) {
    {
      MutexLock lock(mu_);
      work_cv_.wait(lock,
                    [&]() TBFS_NO_THREAD_SAFETY_ANALYSIS { return stop_ || generation_ != seen; });
      if (stop_) return;
      seen = generation_;
    }
    RunItems(worker);
  }
}

void WorkPool::ParallelFor(size_t n, const std::function<void(size_t, int)>& fn) {
  if (n == 0) return;
  MutexLock call(call_mu_);
  {
    MutexLock lock(mu_);
    fn_ = &fn;
    n_ = n;
    next_ = 0;
    done_ = 0;
    ++generation_;
  }
  work_cv_.notify_all();
  RunItems(0);
  MutexLock lock(mu_);
  done_cv_.wait(lock, [&]() TBFS_NO_THREAD_SAFETY_ANALYSIS { return done_ == n_; });
  fn_ = nullptr;
}

}  // namespace tbfs
