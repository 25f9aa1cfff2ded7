// The FUSE adapters: one small function per low-level operation, each
// turning the request into one Filesystem call and sending exactly one
// reply; they make no system calls of their own. The session's userdata is
// a FuseContext.
#pragma once

#include <fuse_lowlevel.h>

#include <future>
#include <set>

#include "base/thread_annotations.h"
#include "fs/filesystem.h"
#include "fs/op_latency.h"

namespace tbfs::fs {

struct FuseContext {
  Filesystem* fs = nullptr;
  OpLatency* latency = nullptr;  // where the adapters record each operation's time
  // The session, set once before serving: a long request (a cold read of
  // many chunks) stops when the session is ending (unmount, SIGTERM).
  struct fuse_session* session = nullptr;
  std::promise<void> initialized;  // set when the kernel's INIT has been answered

  // The handles the kernel holds: entered before the open's reply (the
  // release may come at once), left at the release. The kernel never
  // releases what is still open when the mount goes (a lazy unmount, a
  // killed opener's last close racing it): CloseHandles frees those once
  // the session has ended.
  Mutex handles_mu;
  std::set<FileHandle*> files TBFS_GUARDED_BY(handles_mu);
  std::set<DirHandle*> dirs TBFS_GUARDED_BY(handles_mu);
  // After the session loop and the unmount: no request runs any more.
  void CloseHandles();
};

const struct fuse_lowlevel_ops* TbfsOps();

// A request's FuseContext and its Filesystem (the session's userdata).
inline FuseContext& ContextOf(fuse_req_t req) {
  return *static_cast<FuseContext*>(fuse_req_userdata(req));
}
inline Filesystem& FsOf(fuse_req_t req) { return *ContextOf(req).fs; }

}  // namespace tbfs::fs
