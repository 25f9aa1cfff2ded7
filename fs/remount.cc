// mount -o remount of a running tbfs mount (fs/mount.h, RunRemount).
#include <sys/mount.h>

#include <cstring>
#include <set>
#include <string>
#include <string_view>

#include "fmt/format.h"
#include "fs/mount.h"
#include "fs/mount_internal.h"
#include "fs/mount_table.h"

namespace tbfs::fs {

namespace {

// The flags of the mount point that are not the filesystem's: mount(2)
// with MS_REMOUNT sets them all, so each is given as the mount has it.
constexpr struct {
  std::string_view word;
  unsigned long flag;
} kMountFlags[] = {
    {"nosuid", MS_NOSUID},   {"nodev", MS_NODEV},           {"noexec", MS_NOEXEC},
    {"noatime", MS_NOATIME}, {"nodiratime", MS_NODIRATIME}, {"relatime", MS_RELATIME},
};

// What each word of -o says of those flags: `flag` (as the kernel lists
// it) on or off. A word that says otherwise than the mount has it would
// change the mount point, which needs a new mount.
constexpr struct {
  std::string_view word;
  std::string_view flag;
  bool on;
} kFlagWords[] = {
    {"nosuid", "nosuid", true},         {"suid", "nosuid", false},
    {"nodev", "nodev", true},           {"dev", "nodev", false},
    {"noexec", "noexec", true},         {"exec", "noexec", false},
    {"noatime", "noatime", true},       {"atime", "noatime", false},
    {"nodiratime", "nodiratime", true}, {"diratime", "nodiratime", false},
    {"relatime", "relatime", true},     {"norelatime", "relatime", false},
    {"strictatime", "relatime", false}, {"strictatime", "noatime", false},
};

std::set<std::string, std::less<>> Words(const std::string& list) {
  std::set<std::string, std::less<>> words;
  for (size_t at = 0; at <= list.size();) {
    size_t comma = list.find(',', at);
    if (comma == std::string::npos) comma = list.size();
    if (comma > at) words.insert(list.substr(at, comma - at));
    at = comma + 1;
  }
  return words;
}

int Refuse(const std::string& msg) {
  fmt::print(stderr, "tbfs mount: remount: {}\n", msg);
  return 2;
}

}  // namespace

int RunRemount(const MountOptions& config) {
  const std::string mnt = RealPath(config.mountpoint);
  auto entry = mnt.empty() ? std::nullopt : FindMount(mnt);
  if (!entry || entry->fstype != "fuse.tbfs")
    return Refuse(config.mountpoint + " is not a tbfs mount point");
  const auto now = Words(entry->vfs_options);
  bool read_only = now.count("ro") > 0;
  for (const std::string& o : config.fuse_options) {
    if (o == "ro") read_only = true;
    if (o == "rw") read_only = false;
    for (const auto& [word, flag, on] : kFlagWords) {
      if (o == word && (now.count(flag) > 0) != on) {
        return Refuse(
            fmt::format("only ro and rw change on a running mount; {} needs a new "
                        "mount (fusermount3 -u {}, then mount it again)",
                        o, mnt));
      }
    }
  }
  unsigned long flags = MS_REMOUNT | (read_only ? MS_RDONLY : 0);
  for (const auto& [word, flag] : kMountFlags) {
    if (now.count(word)) flags |= flag;
  }
  if (!now.count("relatime") && !now.count("noatime")) flags |= MS_STRICTATIME;
  if (::mount(entry->source.c_str(), mnt.c_str(), entry->fstype.c_str(), flags, nullptr) != 0) {
    return Refuse(
        fmt::format("mount {} ({}): {}", mnt, read_only ? "ro" : "rw", std::strerror(errno)));
  }
  return 0;
}

}  // namespace tbfs::fs
