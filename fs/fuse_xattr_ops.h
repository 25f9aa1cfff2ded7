// FUSE's extended-attribute operations (fs/fuse_ops.h's adapters, in a
// room of their own): get, list, set and remove, each one Filesystem call.
#pragma once

#include <fuse_lowlevel.h>

namespace tbfs::fs {

// Sets ops' getxattr, listxattr, setxattr and removexattr.
void AddXattrOps(struct fuse_lowlevel_ops* ops);

}  // namespace tbfs::fs
