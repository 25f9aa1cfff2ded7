#include "fs/mount_table.h"

#include <libmount/libmount.h>

#include <memory>

namespace tbfs::fs {

std::optional<MountEntry> FindMount(const std::string& mountpoint) {
  std::unique_ptr<libmnt_table, decltype(&mnt_unref_table)> table(
      mnt_new_table_from_file("/proc/self/mountinfo"), &mnt_unref_table);
  if (!table) return std::nullopt;
  // No path cache is set on the table, so libmount compares the text alone
  // and never resolves (stats) the path. Backward: the last mounted, on top.
  libmnt_fs* fs = mnt_table_find_target(table.get(), mountpoint.c_str(), MNT_ITER_BACKWARD);
  if (fs == nullptr) return std::nullopt;
  MountEntry entry;
  entry.dev = mnt_fs_get_devno(fs);
  const char* type = mnt_fs_get_fstype(fs);
  entry.fstype = type != nullptr ? type : "";
  const char* source = mnt_fs_get_source(fs);
  entry.source = source != nullptr ? source : "";
  const char* vfs = mnt_fs_get_vfs_options(fs);
  entry.vfs_options = vfs != nullptr ? vfs : "";
  const char* super = mnt_fs_get_fs_options(fs);
  entry.fs_options = super != nullptr ? super : "";
  return entry;
}

}  // namespace tbfs::fs
