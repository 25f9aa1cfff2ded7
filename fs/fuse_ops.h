// The FUSE adapters: one small function per low-level operation, each
// turning the request into one Filesystem call and sending exactly one
// reply; they make no system calls of their own. The session's userdata is
// a FuseContext.
#pragma once

#include <fuse_lowlevel.h>

#include <future>

#include "fs/filesystem.h"
#include "fs/op_latency.h"

namespace tbfs::fs {

struct FuseContext {
  Filesystem* fs = nullptr;
  OpLatency* latency = nullptr;    // where the adapters record each operation's time
  std::promise<void> initialized;  // set when the kernel's INIT has been answered
};

const struct fuse_lowlevel_ops* TbfsOps();

}  // namespace tbfs::fs
