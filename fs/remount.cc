// mount -o remount of a running tbfs mount (fs/mount.h, RunRemount).
#include <sys/mount.h>
#include <sys/statvfs.h>

#include <cstring>
#include <set>
#include <string>
#include <string_view>
#include <vector>

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
    {"nosuid", MS_NOSUID},           {"nodev", MS_NODEV},           {"noexec", MS_NOEXEC},
    {"noatime", MS_NOATIME},         {"nodiratime", MS_NODIRATIME}, {"relatime", MS_RELATIME},
    {"nosymfollow", MS_NOSYMFOLLOW},
};

// The filesystem's flags that mount(2) with MS_REMOUNT sets as well.
constexpr struct {
  std::string_view word;
  unsigned long flag;
} kSuperFlags[] = {
    {"sync", MS_SYNCHRONOUS},
    {"dirsync", MS_DIRSYNC},
    {"lazytime", MS_LAZYTIME},
    {"mand", MS_MANDLOCK},
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

namespace {

// tbfs's own options in `config` that a remount cannot change (they come
// along from fstab, which mount(8) reads for a remount too).
std::vector<std::string> OwnOptionsGiven(const MountOptions& config) {
  const MountOptions d;
  std::vector<std::string> given;
  auto note = [&](bool differs, const char* name) {
    if (differs) given.push_back(name);
  };
  note(config.store_dir != d.store_dir, "store=");
  note(config.state_dir != d.state_dir, "state=");
  note(config.cold_after_s != d.cold_after_s, "cold_after=");
  note(config.migrate_interval_s != d.migrate_interval_s, "migrate_interval=");
  note(config.cache_bytes != d.cache_bytes, "cache=");
  note(config.migrate != d.migrate, "no_migrate");
  note(config.config_file != d.config_file, "config=");
  note(config.metrics_address != d.metrics_address, "metrics=");
  note(config.nodiratime != d.nodiratime, "nodiratime");
  return given;
}

}  // namespace

int RunRemount(const MountOptions& config) {
  if (config.mountpoint.empty())
    return Refuse("give the mount point: tbfs mount MOUNTPOINT -o remount,ro (or rw)");
  const std::string mnt = RealPath(config.mountpoint);
  auto entry = mnt.empty() ? std::nullopt : FindMount(mnt);
  if (!entry || entry->fstype != "fuse.tbfs")
    return Refuse(config.mountpoint + " is not a tbfs mount point");
  struct statvfs vfs;
  if (::statvfs(mnt.c_str(), &vfs) != 0 && (errno == ENOTCONN || errno == ECONNABORTED)) {
    return Refuse(fmt::format("the daemon of {} is gone; fusermount3 -u -z {}, then mount it again",
                              mnt, mnt));
  }
  const auto mount_flags = Words(entry->vfs_options);
  const auto fs_flags = Words(entry->fs_options);
  auto needs_new_mount = [&](const std::string& o) {
    return Refuse(
        fmt::format("only ro and rw change on a running mount; {} needs a new mount "
                    "(fusermount3 -u {}, then mount it again)",
                    o, mnt));
  };
  bool read_only = mount_flags.count("ro") > 0;
  for (const std::string& o : config.fuse_options) {
    if (o == "ro" || o == "rw") {
      read_only = o == "ro";
      continue;
    }
    bool flag_word = false;
    for (const auto& [word, flag, on] : kFlagWords) {
      if (o != word) continue;
      flag_word = true;
      if ((mount_flags.count(flag) > 0) != on) return needs_new_mount(o);
    }
    // Anything else only as the mount has it already (mount(8) repeats the
    // mount's own: user_id=, allow_other, ...).
    if (!flag_word && !fs_flags.count(o) && !mount_flags.count(o)) return needs_new_mount(o);
  }
  unsigned long flags = MS_REMOUNT | (read_only ? MS_RDONLY : 0);
  for (const auto& [word, flag] : kMountFlags) {
    if (mount_flags.count(word)) flags |= flag;
  }
  if (!mount_flags.count("relatime") && !mount_flags.count("noatime")) flags |= MS_STRICTATIME;
  for (const auto& [word, flag] : kSuperFlags) {
    if (fs_flags.count(word)) flags |= flag;
  }
  if (::mount(entry->source.c_str(), mnt.c_str(), entry->fstype.c_str(), flags, nullptr) != 0) {
    return Refuse(
        fmt::format("mount {} ({}): {}", mnt, read_only ? "ro" : "rw", std::strerror(errno)));
  }
  if (auto kept = OwnOptionsGiven(config); !kept.empty()) {
    std::string list;
    for (const std::string& k : kept) list += (list.empty() ? "" : ", ") + k;
    fmt::print(stderr, "tbfs mount: remount: {} {}: {} stay as the mount started\n", mnt,
               read_only ? "is read-only" : "is writable", list);
  }
  return 0;
}

}  // namespace tbfs::fs
