// The engine's threads where the system refuses some (store/rocks_env.h).
#include <unistd.h>

#include <algorithm>
#include <condition_variable>
#include <mutex>
#include <system_error>
#include <thread>
#include <vector>

#include "base/work_pool.h"
#include "store/rocks_env.h"

namespace tbfs::store {

// The engine starts these threads for the purpose (16 by default) and
// aborts the process where the system refuses one (a user's RLIMIT_NPROC on
// a shared machine): "terminate called without an active exception". The
// probe leaves two for the engine's background jobs. Root, whom no such
// limit binds, gets the default.
int FileOpeningThreads() {
  constexpr int kDefault = 16;
  if (::geteuid() == 0) return kDefault;
  std::mutex mu;
  std::condition_variable cv;
  bool done = false;
  std::vector<std::thread> probes;
  const size_t had = StartThreads(
      kDefault + 2, "the store's engine",
      [&](size_t) {
        std::unique_lock lock(mu);
        cv.wait(lock, [&] { return done; });
      },
      &probes);
  {
    std::lock_guard lock(mu);
    done = true;
  }
  cv.notify_all();
  for (std::thread& t : probes) t.join();
  return std::clamp(static_cast<int>(had) - 2, 1, kDefault);
}

rocksdb::Status OpenUnlessThreadsRefused(const std::function<rocksdb::Status()>& open,
                                         int* refused) {
  try {
    return open();
  } catch (const std::system_error& e) {
    *refused = e.code().value();
    return rocksdb::Status::Aborted("the system refused the engine a thread");
  }
}

}  // namespace tbfs::store
