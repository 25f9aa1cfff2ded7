// The kernel's mount table, read through libmount (which undoes the
// table's escapes: a space in a path is "\040" there).
#pragma once

#include <sys/types.h>

#include <optional>
#include <string>

namespace tbfs::fs {

struct MountEntry {
  dev_t dev = 0;       // the mount's device number (st_dev of what it serves)
  std::string fstype;  // "fuse.tbfs", "ext4", ...
  std::string source;  // "tbfs:LOGDIR", "/dev/sda1", ...
  // The mount point's own flags, as the kernel lists them:
  // "rw,nosuid,nodev,relatime".
  std::string vfs_options;
  // Its filesystem's: "rw,sync,user_id=0,group_id=0,allow_other".
  std::string fs_options;
};

// The topmost mount at `mountpoint` (an absolute, normal path, compared as
// text: nothing is stat'ed, so a hung or unanswered FUSE mount there cannot
// block) in this process's /proc/self/mountinfo; none when nothing is
// mounted there or the table cannot be read.
std::optional<MountEntry> FindMount(const std::string& mountpoint);

}  // namespace tbfs::fs
