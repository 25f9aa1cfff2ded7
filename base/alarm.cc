#include "base/alarm.h"

#include <utility>

#include "base/work_pool.h"

namespace tbfs {

Alarm::Alarm(std::string_view what) {
  StartThreads(
      1, what, [this](size_t) { Loop(); }, &thread_);
}

Alarm::~Alarm() {
  {
    MutexLock lock(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  for (std::thread& t : thread_) t.join();
}

bool Alarm::Arm(Clock::time_point at, std::function<void()> task) {
  if (thread_.empty()) return false;
  {
    MutexLock lock(mu_);
    at_ = at;
    task_ = std::move(task);
    armed_ = true;
    ran_ = false;
    ++generation_;
  }
  cv_.notify_all();
  return true;
}

bool Alarm::Disarm() {
  MutexLock lock(mu_);
  cv_.wait(lock, [&]() TBFS_NO_THREAD_SAFETY_ANALYSIS { return !running_; });
  const bool ran = ran_;
  armed_ = ran_ = false;
  task_ = nullptr;
  cv_.notify_all();
  return ran;
}

void Alarm::Loop() {
  MutexLock lock(mu_);
  for (;;) {
    cv_.wait(lock, [&]() TBFS_NO_THREAD_SAFETY_ANALYSIS { return stop_ || armed_; });
    if (stop_) return;
    // Copies: the wait reads its time with mu_ released, when an Arm may
    // write at_.
    const uint64_t armed_as = generation_;
    const Clock::time_point at = at_;
    // Woken early by a Disarm, an Arm for another time or the destructor:
    // nothing runs at this time.
    if (cv_.wait_until(lock, at, [&]() TBFS_NO_THREAD_SAFETY_ANALYSIS {
          return stop_ || !armed_ || generation_ != armed_as;
        })) {
      continue;
    }
    std::function<void()> task = std::move(task_);
    running_ = true;
    lock.unlock();
    task();
    lock.lock();
    running_ = false;
    armed_ = false;
    ran_ = true;
    cv_.notify_all();
  }
}

}  // namespace tbfs
