#include "tools/cli/store_cli.h"

#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <climits>
#include <cstdlib>
#include <cstring>

#include "base/text.h"
#include "fmt/format.h"
#include "fs/mount.h"
#include "fs/mount_table.h"
#include "store/classify.h"
#include "store/migrate.h"
#include "store/rados_backend.h"
#include "store/store_dir.h"
#include "tools/cli/commands.h"

namespace tbfs::cli {

namespace {

std::atomic<bool> recovery_found_losses{false};  // RecoveryFoundLosses

std::string RealPath(const std::string& p) {
  char buf[PATH_MAX];
  return ::realpath(p.c_str(), buf) ? std::string(buf) : p;
}

// The tbfs mount point that `dir` is or lies beneath; "" when none.
// Through a mount the store is hidden and cold files look hot, so an
// offline command given one would find nothing and say so.
std::string EnclosingTbfsMount(const std::string& dir) {
  for (std::string at = RealPath(dir); at.size() > 1; at = ParentPath(at)) {
    if (IsTbfsMount(at)) return at;
  }
  return "";
}

bool Exists(const std::string& path) {
  struct stat st;
  return ::lstat(path.c_str(), &st) == 0;
}

}  // namespace

bool IsInside(const std::string& path, const std::string& dir) {
  std::string existing = path;  // the deepest part that exists
  while (!existing.empty() && ::access(existing.c_str(), F_OK) != 0)
    existing = ParentPath(existing);
  if (existing.empty()) existing = ".";
  std::string p = RealPath(existing), d = RealPath(dir);
  return p == d || p.starts_with(d + "/");
}

Status CheckStoreFlag(const std::string& store_flag) {
  if (store::IsRadosUrl(store_flag)) return store::ParseRadosUrl(store_flag).status();
  if (store::LooksLikeAddress(store_flag)) {
    return Status::InvalidArgument(store_flag +
                                   ": not a store folder, and not a store address this tbfs knows "
                                   "(rados://POOL[/PREFIX]?conf=FILE)");
  }
  return Status::OK();
}

Result<StoreLocation> LocateStore(const std::string& logdir, const std::string& store_flag) {
  TBFS_RETURN_IF_ERROR(CheckStoreFlag(store_flag));
  struct stat st;
  if (::stat(logdir.c_str(), &st) != 0) return Status::FromErrno(errno, "stat", logdir);
  if (!S_ISDIR(st.st_mode)) return Status::InvalidArgument(logdir + " is not a directory");
  if (std::string mnt = EnclosingTbfsMount(logdir); !mnt.empty()) {
    auto entry = fs::FindMount(mnt);
    const std::string served =
        entry && entry->source.starts_with("tbfs:") ? " (" + entry->source.substr(5) + ")" : "";
    return Status::InvalidArgument(
        fmt::format("{} is {} the tbfs mount on {}: give the logdir it serves{}", logdir,
                    RealPath(logdir) == mnt ? "the mount point of" : "inside", mnt, served));
  }
  // LOGDIR/.tbfs given as the logdir: its own .tbfs does not exist, and
  // "no cold store there" would read as "nothing to do".
  if (store_flag.empty() && !Exists(JoinPath(logdir, store::kStoreDirName)) &&
      (Exists(JoinPath(logdir, store::kLogdirLockName)) || Exists(JoinPath(logdir, "CURRENT")))) {
    return Status::InvalidArgument(
        fmt::format("{} is a store folder, not a logdir: give the logdir, or --store {} beside it",
                    logdir, logdir));
  }
  if (store_flag.empty()) TBFS_RETURN_IF_ERROR(store::CheckLogdirFolder(logdir));
  StoreLocation loc;
  loc.logdir = logdir;
  loc.dir = store_flag.empty() ? JoinPath(logdir, store::kStoreDirName) : store_flag;
  if (!store_flag.empty() && !store::IsRadosUrl(store_flag) &&
      ::lstat(store_flag.c_str(), &st) == 0 && S_ISLNK(st.st_mode)) {
    // A link named by --store is the admin's: every command follows it,
    // once, here (the store's own code never follows one).
    char real[PATH_MAX];
    if (::realpath(store_flag.c_str(), real) == nullptr) {
      return Status::InvalidArgument(
          fmt::format("--store {}: a symbolic link that leads nowhere ({})", Printable(store_flag),
                      std::strerror(errno)));
    }
    loc.dir = real;
  }
  loc.given = !store_flag.empty();
  loc.own_dir = store::IsRadosUrl(loc.dir) ? JoinPath(logdir, store::kStoreDirName) : loc.dir;
  // Whatever the store's name, a walk of the logdir must never enter it.
  std::string root = RealPath(logdir) + "/";
  std::string dir = RealPath(loc.dir);
  loc.walk.skip_dirs.push_back(store::kStoreDirName);
  if (dir.compare(0, root.size(), root) == 0) loc.walk.skip_dirs.push_back(dir.substr(root.size()));
  return loc;
}

namespace {

// What a store that is not there means: nothing cold (nullptr), unless
// --store named a folder that does not exist, or the folder cannot be
// reached (a private folder on its way).
Result<std::unique_ptr<store::ColdStore>> NoStore(const StoreLocation& loc) {
  struct stat st;
  if (store::IsRadosUrl(loc.dir) || ::stat(loc.dir.c_str(), &st) == 0) {
    return std::unique_ptr<store::ColdStore>();
  }
  if (errno == ENOENT && !loc.given) return std::unique_ptr<store::ColdStore>();
  // A folder on the way that this user cannot search hides a store that
  // may hold files: not "nothing cold".
  return Status::InvalidArgument(fmt::format("{}{}: {} (no store read there)",
                                             loc.given ? "--store " : "", Printable(loc.dir),
                                             std::strerror(errno)));
}

}  // namespace

Result<std::unique_ptr<store::ColdStore>> OpenStoreForRead(const StoreLocation& loc) {
  store::OpenOptions options;
  options.read_only = true;
  auto s = store::ColdStore::Open(loc.dir, options);
  if (!s.ok() && s.status().IsNotFound()) return NoStore(loc);
  return s;
}

bool RecoveryFoundLosses() { return recovery_found_losses.load(); }

namespace {

// What to do instead of a writer's command that a mount is in the way of.
std::string MountHint(const std::string& command, const std::string& mountpoint) {
  if (command == "migrate") {
    return "run the command on the mount point (tbfs migrate " + mountpoint +
           " --now), or unmount it first";
  }
  if (command == "recompress") {
    return "run it on the mount point (tbfs recompress " + mountpoint +
           "), which does it while it serves, or unmount it first";
  }
  return "unmount it first";
}

}  // namespace

Result<std::unique_ptr<store::ColdStore>> OpenStoreForWrite(const StoreLocation& loc, bool create,
                                                            const std::string& command) {
  store::OpenOptions options;
  options.create_if_missing = create;
  options.logdir = loc.logdir;
  options.holder = fmt::format("tbfs {} (pid {})", command, ::getpid());
  auto s = store::ColdStore::Open(loc.dir, options);
  if (!s.ok()) {
    if (s.status().IsNotFound() && !create) return NoStore(loc);
    if (s.status().code() == Code::kBusy) {
      // The logdir's lock names its holder; the store's folder, the mount
      // that holds it.
      const std::string& why = s.status().message();
      const size_t on = why.find("tbfs mount on ");
      std::string mountpoint, holder;
      if (on != std::string::npos) {
        mountpoint = why.substr(on + 14, why.rfind(" (pid ") - (on + 14));
        // A shared store's holder is named host:mountpoint (a mount point
        // is an absolute path, whatever colons it holds).
        if (const size_t colon = mountpoint.find(":/");
            !mountpoint.starts_with("/") && colon != std::string::npos) {
          mountpoint = mountpoint.substr(colon + 1);
        }
        return Status::Busy(why + ": " + MountHint(command, mountpoint));
      }
      if (ReadFileToString(JoinPath(loc.dir, fs::kMountInfoFile), &holder).ok() &&
          !holder.empty()) {
        mountpoint = holder.substr(0, holder.find(' '));
        return Status::Busy("the store " + loc.dir + " is held by the tbfs mount at " + mountpoint +
                            ": " + MountHint(command, mountpoint));
      }
    }
    return s.status();
  }
  auto recovered = store::Recover(**s, loc.logdir);
  if (!recovered.ok()) return recovered.status();
  if (recovered->batches > 0) {
    PrintError(command, fmt::format("recovered {} unfinished batch(es) left by a crash: {} file(s) "
                                    "written back, {} store copy(ies) dropped",
                                    recovered->batches, recovered->restored, recovered->dropped));
  }
  for (const std::string& note : recovered->notes) PrintError(command, "recovery: " + note);
  for (const std::string& path : recovered->lost) {
    PrintError(command, "recovery: LOST " + Printable(JoinPath(loc.logdir, path)) +
                            ": in neither the logdir nor the store's index (recorded: tbfs "
                            "fsck reports it until --clear-lost)");
  }
  if (!recovered->lost.empty()) recovery_found_losses = true;
  return s;
}

}  // namespace tbfs::cli
