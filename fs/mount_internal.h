// What the parts of the mount daemon (mount.cc, mount_options.cc,
// mount_status.cc) share; not for use outside fs/.
#pragma once

#include <string>

#include "fs/filesystem.h"
#include "fs/migrator.h"
#include "fs/mount.h"
#include "store/cold_store.h"

namespace tbfs::fs {

// A mount point as one file name: '/' becomes '-', and every byte that is
// not a letter, a digit, '_' or '.' becomes %XX (so '-' itself is %2D).
std::string EscapePath(const std::string& path);

// One option as libfuse's -o list wants it: ',' and '\\' escaped.
std::string EscapeFuseOpt(const std::string& opt);

// The status report, one line of JSON (tbfs status --json).
std::string StatusJson(const MountOptions& mc, const std::string& store_dir, store::ColdStore& store,
                       Filesystem& fs, Migrator& migrator);

// Answers the control socket's requests (fs/control.h): "status",
// "migrate-now".
std::string Control(const std::string& request, const MountOptions& mc,
                    const std::string& store_dir, store::ColdStore& store, Filesystem& fs,
                    Migrator& migrator);

}  // namespace tbfs::fs
