// Mounting: `tbfs mount LOGDIR MOUNTPOINT`, in the foreground or as a
// daemon, until fusermount3 -u, umount, SIGTERM or SIGINT.
//
// Order of events: check the paths; (daemon) fork, the parent waiting for
// the child's verdict; open the store (creating it) and run journal
// recovery (I4) before the first request is served; mount; start the
// migrator; tell the parent.
//
// A RADOS store is shared by the mounts of many hosts: the mount that holds
// its writer's lease migrates (and changes cold files); the others serve
// it read-only (a change to a cold file there is EROFS) and take the lease
// over, with recovery first, when its holder is gone. At the end: the migrator finishes its batch
// in flight, the session unmounts, the store closes.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace tbfs::fs {

struct MountOptions {
  std::string logdir;
  std::string mountpoint;
  std::string store_dir;  // "" : LOGDIR/.tbfs; or rados://POOL[/PREFIX]?...
  // Where the mount keeps its own files (log, control socket, growth
  // series): the store folder, or for a RADOS store this folder
  // ("" : /var/lib/tbfs/mounts/ + the mount point, escaped).
  std::string state_dir;
  int64_t cold_after_s = 300;
  int64_t migrate_interval_s = 30;
  uint64_t cache_bytes = 256ull << 20;
  bool migrate = true;  // background migration
  bool foreground = false;
  bool nonempty = false;                  // allow a mount point that is not empty
  std::string config_file;                // YAML policy (store/config.h)
  std::vector<std::string> fuse_options;  // passed to libfuse as -o
  // Reads through the mount leave access times as they were: -o noatime
  // (every file and folder), -o nodiratime (folders); the last of noatime/
  // atime/relatime and of nodiratime/diratime wins, as mount(8) reads them.
  // Otherwise reads change them as the backing filesystem's own mount says
  // (relatime on most). -o strictatime: every read changes them, which only
  // a backing filesystem mounted strictatime does (refused on any other:
  // the daemon cannot set an access time alone, utimensat moves the change
  // time too). Only noatime and atime reach the kernel's mount flags
  // (libfuse 3.14 passes no other).
  bool noatime = false;
  bool nodiratime = false;
  bool strictatime = false;
  // -o remount (mount -o remount,ro MOUNTPOINT through mount.fuse3): change
  // the running mount at `mountpoint` (RunRemount) instead of mounting.
  bool remount = false;
  std::string metrics_address;  // "ADDR:PORT" for /metrics; "" : none
};

// The smallest cold chunk cache a mount takes (cache=, --cache).
inline constexpr uint64_t kMinCacheBytes = 1 << 20;

// Parses a mount -o string: our keys (store=, state=, cold_after=, cache=,
// no_migrate, config=, migrate_interval=, nonempty, metrics=) go into *config, the
// rest into config->fuse_options. Returns "" or a one-line error.
std::string ParseMountOptions(const std::string& opts, MountOptions* config);
// One option, key=value, with the value taken as it is (a comma or a
// backslash in it is part of it: a value from a config file, not a list).
std::string ParseMountOption(const std::string& key, const std::string& value,
                             MountOptions* config);

// Runs the mount; returns the process exit status (0 clean unmount, 2 error).
int RunMount(const MountOptions& config);

// Remounts the tbfs mount at config.mountpoint read-only or read-write, as
// the last of -o ro and rw says; its other flags (nosuid, nodev, atime)
// stay as they are. An option that would change one of them is refused:
// it needs a new mount. Returns the exit status (0, or 2 with a one-line
// error on stderr); as root only (mount(2)).
int RunRemount(const MountOptions& config);

// Where a mount of a RADOS store keeps its own files by default.
inline constexpr char kDefaultStateRoot[] = "/var/lib/tbfs/mounts";

// The file in a store folder naming the mount that holds it.
inline constexpr char kMountInfoFile[] = "MOUNTED_BY";

}  // namespace tbfs::fs
