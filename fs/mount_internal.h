// What the parts of the mount daemon (mount.cc, mount_checks.cc,
// mount_process.cc, mount_options.cc, mount_status.cc) share; not for use
// outside fs/.
#pragma once

#include <sys/types.h>

#include <string>

#include "base/fs_util.h"
#include "base/status.h"
#include "fs/filesystem.h"
#include "fs/migrator.h"
#include "fs/mount.h"
#include "store/cold_store.h"
#include "store/config.h"

namespace tbfs::fs {

// A mount as CheckMount found it, before anything changed.
struct MountPlan {
  // logdir and mountpoint resolved; store_dir (when given) and state_dir
  // (a RADOS store's) absolute.
  MountOptions options;
  bool shared = false;    // a RADOS store
  std::string store_dir;  // the store to open: a folder or a rados:// URL
  store::ConfigFile policy;
};

// Checks a mount's paths, store address, state folder, policy file and
// /dev/fuse; the only change it makes is detaching the dead mount of a
// tbfs daemon that exited at the mount point. Errors are one line.
Result<MountPlan> CheckMount(const MountOptions& options);

// The folder a RADOS mount keeps its own files in (log, control socket,
// growth series; the lock that keeps it to one mount): made 0700 when
// missing, and refused unless no other user can change it or anything
// on the way to it: no symlink, each folder owned by root or this user,
// none writable by others but sticky ones (like /tmp), and the folder
// itself this user's and not writable by others. Returns the lock's fd.
Result<UniqueFd> PrepareStateDir(const std::string& dir);

// realpath(3), or "" when `p` cannot be resolved.
std::string RealPath(const std::string& p);
std::string HostName();

// Reports the verdict of a daemon child to its waiting parent, which
// exits 0 on "ok" and 2, printing it, on anything else.
class Verdict {
 public:
  // A daemon forks here: the parent waits for the verdict and exits; the
  // child goes on in a session of its own. In the foreground, nothing.
  void Fork(bool foreground);
  // Sends `msg` once; later calls do nothing.
  void Send(const std::string& msg);
  bool daemon() const { return fd_ >= 0; }

 private:
  int fd_ = -1;
};

// Fails the mount with `msg`: to the waiting parent, or on stderr.
// Returns the exit status (2).
int Fail(Verdict& verdict, const std::string& msg);

// What the daemon process sets for itself once it has forked: its open
// file limit and its allocator's arenas.
void TuneProcess();

// A daemon's log file is in the store's folder, which the store's open may
// make: what the daemon says before (the open's warnings: engine files set
// aside, a blob file gone) is kept in memory from this call on, and
// StartMountLog writes it into the file first. Nothing in the foreground.
void KeepEarlyLog(bool foreground);
// Sends the log where a mount keeps it: a daemon's to a capped file in
// `state_dir`; a foreground mount run by systemd logs at info.
void StartMountLog(bool foreground, const std::string& state_dir);

// Raises the kernel's readahead for the mount's device `dev` to a chunk
// (as root; otherwise the default stays).
void RaiseReadahead(dev_t dev);

// A mount point as one file name: '/' becomes '-', and every byte that is
// not a letter, a digit, '_' or '.' becomes %XX (so '-' itself is %2D).
std::string EscapePath(const std::string& path);

// One option as libfuse's -o list wants it: ',' and '\\' escaped.
std::string EscapeFuseOpt(const std::string& opt);

// The status report, one line of JSON (tbfs status --json).
std::string StatusJson(const MountOptions& mc, const std::string& store_dir,
                       store::ColdStore& store, Filesystem& fs, Migrator& migrator);

// Answers the control socket's requests (fs/control.h): "status",
// "migrate-now".
std::string Control(const std::string& request, const MountOptions& mc,
                    const std::string& store_dir, store::ColdStore& store, Filesystem& fs,
                    Migrator& migrator);

}  // namespace tbfs::fs
