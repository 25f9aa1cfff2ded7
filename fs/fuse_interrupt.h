// A FUSE request's interruption, for the operations that may wait on their
// caller's behalf (fs/fuse_ops.cc).
#pragma once

#include <fuse_lowlevel.h>

#include <atomic>

#include "fs/filesystem.h"
#include "fs/fuse_ops.h"

namespace tbfs::fs {

// The request's interruption (FUSE_INTERRUPT: its caller got a signal),
// for an operation that may wait on the caller's behalf for a file's
// transition: the wait ends and the operation answers EINTR. libfuse calls
// Fire from the thread that reads the interrupt, holding the request's
// lock, which the destructor takes too: no call runs after it. Destroyed
// before the reply, which frees the request.
class Interruptible {
 public:
  explicit Interruptible(fuse_req_t req) : req_(req) { fuse_req_interrupt_func(req, &Fire, this); }
  ~Interruptible() { fuse_req_interrupt_func(req_, nullptr, nullptr); }
  Interruptible(const Interruptible&) = delete;
  Interruptible& operator=(const Interruptible&) = delete;
  const std::atomic<bool>* get() const { return &fired_; }

 private:
  static void Fire(fuse_req_t req, void* self) {
    static_cast<Interruptible*>(self)->fired_.store(true);
    FsOf(req).WakeWaiters();
  }
  fuse_req_t req_;
  std::atomic<bool> fired_{false};
};

}  // namespace tbfs::fs
