// The FUSE adapters: one small function per low-level operation, each
// turning the request into one Filesystem call and sending exactly one
// reply. The session's userdata is the Filesystem.
#pragma once

#include <fuse_lowlevel.h>

namespace tbfs::fs {

const struct fuse_lowlevel_ops* TbfsOps();

}  // namespace tbfs::fs
