// mount -o remount of a running tbfs mount (fs/mount.h, RunRemount).
#include <libmount/libmount.h>
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

// The MS_* flags the options in `optstr` say (libmount's table of
// mount(8)'s words), each applied to `flags` in turn: "nosuid" sets
// MS_NOSUID, "suid" clears it; a word that is no flag changes nothing.
unsigned long Flags(const std::string& optstr, unsigned long flags = 0) {
  mnt_optstr_get_flags(optstr.c_str(), &flags, mnt_get_builtin_optmap(MNT_LINUX_MAP));
  return flags;
}

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
  note(config.strictatime != d.strictatime, "strictatime");
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
  const auto mount_words = Words(entry->vfs_options);
  const auto fs_words = Words(entry->fs_options);
  // The flags mount(2) with MS_REMOUNT sets, every one: the mount point's
  // and its filesystem's as they are, ro aside.
  const unsigned long now = Flags(entry->vfs_options + "," + entry->fs_options) & ~MS_RDONLY;
  auto needs_new_mount = [&](const std::string& o) {
    return Refuse(
        fmt::format("only ro and rw change on a running mount; {} needs a new mount "
                    "(fusermount3 -u {}, then mount it again)",
                    o, mnt));
  };
  bool read_only = mount_words.count("ro") > 0;
  for (const std::string& o : config.fuse_options) {
    if (o == "ro" || o == "rw") {
      read_only = o == "ro";
      continue;
    }
    if (Flags(o, now) != now) return needs_new_mount(o);
    // Anything else only as the mount has it already (mount(8) repeats the
    // mount's own: user_id=, allow_other, ...).
    const bool flag_word = Flags(o, 0) != 0 || Flags(o, ~0ul) != ~0ul;
    if (!flag_word && !fs_words.count(o) && !mount_words.count(o)) return needs_new_mount(o);
  }
  unsigned long flags = MS_REMOUNT | now | (read_only ? MS_RDONLY : 0);
  if (!(now & (MS_RELATIME | MS_NOATIME))) flags |= MS_STRICTATIME;
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
