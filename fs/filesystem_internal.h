// Small helpers shared by the files that implement Filesystem; not for use
// outside fs/.
#pragma once

#include <cerrno>

namespace tbfs::fs {

// The current errno as this module returns it (-errno).
inline int Errno() { return -errno; }

}  // namespace tbfs::fs
