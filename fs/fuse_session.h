// The mount daemon's FUSE session, owned: made with its signal handlers,
// mounted, served, and at destruction unmounted (when still mounted), its
// handlers removed and destroyed, so that no exit of the daemon, early or
// late, leaves half a session behind. Not for use outside fs/.
#pragma once

#include <fuse_lowlevel.h>

#include <atomic>
#include <memory>
#include <string>

#include "base/status.h"
#include "fs/filesystem.h"
#include "fs/fuse_ops.h"

namespace tbfs::fs {

class FuseSession {
 public:
  // A session serving `context` (which must outlive it) with the FUSE
  // options `opts` (a -o list), SIGTERM, SIGINT and SIGHUP ending its loop.
  static Result<std::unique_ptr<FuseSession>> Create(const std::string& opts, FuseContext* context);
  ~FuseSession();
  FuseSession(const FuseSession&) = delete;
  FuseSession& operator=(const FuseSession&) = delete;

  Status Mount(const std::string& mountpoint);
  // Serves requests on up to `max_threads` threads until the unmount or a
  // signal. Returns 0 (unmounted), the signal's number, or -errno.
  int Loop(unsigned max_threads);
  // Detaches the mount; nothing if it is not mounted. Idempotent.
  void Unmount();

  struct fuse_session* get() const {
    return se_;
  }

 private:
  explicit FuseSession(struct fuse_session* se) : se_(se) {}

  struct fuse_session* se_;
  bool handlers_ = false;
  bool mounted_ = false;
};

// Tells the kernel of a FUSE session that an inode's attributes, an entry
// or a listing changed; nothing before Set or after Set(nullptr).
class SessionCache : public Filesystem::KernelCache {
 public:
  void Set(struct fuse_session* se) { se_ = se; }
  void InvalidateAttrs(uint64_t ino) override;
  void InvalidateEntry(uint64_t parent, const std::string& name) override;
  void InvalidateListing(uint64_t folder) override;

 private:
  std::atomic<struct fuse_session*> se_{nullptr};
};

}  // namespace tbfs::fs
