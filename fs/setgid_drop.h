// The set-group-ID bit a change by someone outside the file's group
// clears, as a kernel filesystem clears it: on a write, truncation or
// fallocate of a regular file, and when they set a file's or folder's
// access ACL. The kernel's FUSE side clears it only where group execute is
// set, and leaves the ACL case to the daemon (libfuse 3.14 does not ask
// for FUSE_SETXATTR_ACL_KILL_SGID).
#pragma once

#include <fuse_lowlevel.h>

#include <cstdint>

namespace tbfs::fs {

class Filesystem;
struct FileHandle;

// Clears the bit of `ino` when the caller of `req` is neither root nor in
// the file's group (their group or one of their supplementary groups);
// regular files only unless `any_kind`. `fh`: the handle the change came
// through, if any. A failure leaves the bit (and is logged).
void DropSetgidOfOutsider(fuse_req_t req, Filesystem& fs, uint64_t ino, FileHandle* fh,
                          bool any_kind = false);

}  // namespace tbfs::fs
