// The engine's threads where the system refuses some (store/rocks_env.h).
#include <unistd.h>

#include <system_error>

#include "store/rocks_env.h"

namespace tbfs::store {

// The engine starts these threads for the purpose (16 by default) and
// aborts the process where the system refuses one: it destroys the ones it
// started, still running ("terminate called without an active
// exception"). A user under a cap on their processes (RLIMIT_NPROC on a
// shared machine; any other process of theirs may take the last thread at
// any moment) opens the table files on the opening thread. Root, whom no
// such cap binds, gets the default.
int FileOpeningThreads() { return ::geteuid() == 0 ? 16 : 1; }

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
