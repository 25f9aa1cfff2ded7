// The set-ID bits a change by someone other than root clears, as a kernel
// filesystem clears them (the daemon acts as root, so the backing
// filesystem never does):
//   - a change of a regular file's data (write, truncation, fallocate,
//     and an open with O_TRUNC): set-user-ID always, set-group-ID when the
//     file is group-executable or the caller is outside its group;
//   - a new access ACL on a file or folder: set-group-ID when the caller
//     is outside its group.
// The kernel's FUSE side clears them on a write or truncate(2) only where
// group execute is set, not at all for an O_TRUNC open (libfuse's atomic
// O_TRUNC), and leaves the ACL case to the daemon (libfuse 3.14 cannot ask
// for FUSE_SETXATTR_ACL_KILL_SGID).
#pragma once

#include <fuse_lowlevel.h>

#include <cstdint>

namespace tbfs::fs {

class Filesystem;
struct FileHandle;

enum class SetIdCause { kData, kAcl };

// Clears what `cause` clears on `ino` for the caller of `req` (their group
// or one of their supplementary groups counts as in the group), then has
// the kernel drop the attributes it holds. `fh`: the handle the change
// came through, if any. A failure leaves the bits (and is logged).
void DropSetId(fuse_req_t req, Filesystem& fs, uint64_t ino, FileHandle* fh, SetIdCause cause);

}  // namespace tbfs::fs
