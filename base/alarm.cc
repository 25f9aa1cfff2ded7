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
    // Woken early by a Disarm (or the destructor): nothing runs.
    if (cv_.wait_until(lock, at_,
                       [&]() TBFS_NO_THREAD_SAFETY_ANALYSIS { return stop_ || !armed_; })) {
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
