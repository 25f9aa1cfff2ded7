// A task run on a thread of its own once its time comes, unless it is
// called off first: what a thread busy with something long (a file's copy)
// wants done meanwhile at a set time (the files it moved aside before it
// finished; store/batch_runner.cc). One task armed at a time.
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <string_view>
#include <thread>
#include <vector>

#include "base/thread_annotations.h"

namespace tbfs {

class Alarm {
 public:
  using Clock = std::chrono::steady_clock;

  // Starts the thread; none where the system refuses it (StartThreads in
  // base/work_pool.h warns, naming `what`): then nothing can be armed.
  explicit Alarm(std::string_view what);
  // Calls off a task not begun, waits for one running.
  ~Alarm();
  Alarm(const Alarm&) = delete;
  Alarm& operator=(const Alarm&) = delete;

  // `task` runs on the alarm's thread at `at` (at once if that has passed)
  // unless Disarm comes first. false: there is no thread, and it never
  // runs. Not while armed.
  bool Arm(Clock::time_point at, std::function<void()> task);
  // The task armed is called off if it has not begun, or waited for if it
  // has; returns whether it ran. Nothing armed: false.
  bool Disarm();

 private:
  void Loop();

  Mutex mu_;
  std::condition_variable_any cv_;
  std::function<void()> task_ TBFS_GUARDED_BY(mu_);
  Clock::time_point at_ TBFS_GUARDED_BY(mu_);
  bool armed_ TBFS_GUARDED_BY(mu_) = false;
  bool running_ TBFS_GUARDED_BY(mu_) = false;
  bool ran_ TBFS_GUARDED_BY(mu_) = false;
  bool stop_ TBFS_GUARDED_BY(mu_) = false;
  uint64_t generation_ TBFS_GUARDED_BY(mu_) = 0;  // Arms so far
  std::vector<std::thread> thread_;               // one, or none
};

}  // namespace tbfs
