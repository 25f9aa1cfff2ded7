// Whether a running mount is read-only now. `mount -o remount,ro` (and
// `rw`) changes the kernel's flag under a running daemon, and no FUSE
// request says so; a read-only mount changes no access time, which only
// the daemon's reads of backing files can keep.
#pragma once

#include <atomic>
#include <memory>
#include <string>
#include <thread>

#include "base/fs_util.h"
#include "base/status.h"

namespace tbfs::fs {

class ReadOnlyWatch {
 public:
  // Sets *read_only from the tbfs mount at `mountpoint` (absolute; the
  // topmost there now, just mounted, followed by its id from then on, so
  // a mount stacked on it later is not it) now and whenever a mount table
  // changes (the kernel marks /proc/self/mountinfo POLLPRI), at most every
  // 50 ms, until destroyed. Read-only: the mount's own flag or its
  // filesystem's. Not seen: a remount in another mount namespace of the
  // filesystem's flag (this namespace's table is not marked).
  static Result<std::unique_ptr<ReadOnlyWatch>> Start(const std::string& mountpoint,
                                                      std::atomic<bool>* read_only);
  ~ReadOnlyWatch();  // stops and joins the thread

 private:
  ReadOnlyWatch(std::string mountpoint, std::string id, std::atomic<bool>* read_only,
                UniqueFd table, UniqueFd stop);
  void Update();
  void Run();

  const std::string mountpoint_;
  const std::string id_;  // the mount's id in the table (its first field)
  std::atomic<bool>* const read_only_;
  const UniqueFd table_;  // /proc/self/mountinfo, polled
  const UniqueFd stop_;   // an eventfd: written once to stop
  std::thread thread_;
};

}  // namespace tbfs::fs
