// tbfs mount LOGDIR MOUNTPOINT: serve a logdir through FUSE.
// tbfs status MOUNTPOINT: what a running mount holds and has done.
#include <sys/xattr.h>

#include <climits>

#include <nlohmann/json.hpp>

#include "base/units.h"
#include "fmt/format.h"
#include "fs/control.h"
#include "fs/filesystem.h"
#include "fs/mount.h"
#include "tools/cli/commands.h"
#include "tools/cli/progress.h"

namespace tbfs::cli {

namespace {

struct MountArgs {
  fs::MountConfig config;
  std::string cold_after;
  std::string cache;
  std::vector<std::string> options;
};

int RunMountCmd(MountArgs args) {
  for (const std::string& o : args.options) {
    std::string err = fs::ParseMountOptions(o, &args.config);
    if (!err.empty()) {
      PrintError("mount", err);
      return kExitError;
    }
  }
  if (!args.cold_after.empty()) {
    auto s = ParseDurationSeconds(args.cold_after);
    if (!s.ok()) {
      PrintError("mount", "--cold-after: " + s.status().message());
      return kExitError;
    }
    args.config.cold_after_s = *s;
  }
  if (!args.cache.empty()) {
    auto b = ParseSizeBytes(args.cache);
    if (!b.ok() || *b < (1u << 20)) {
      PrintError("mount", "--cache: use a size of at least 1M");
      return kExitError;
    }
    args.config.cache_bytes = *b;
  }
  return fs::RunMount(args.config);
}

int RunStatus(const std::string& mountpoint, bool json) {
  std::string value;
  auto status = AskMount(mountpoint, "status", &value);
  if (!status.empty()) {
    PrintError("status", status);
    return kExitError;
  }
  if (json) {
    fmt::print("{}\n", value);
    return kExitOk;
  }
  auto j = nlohmann::json::parse(value, nullptr, false);
  if (j.is_discarded()) {
    PrintError("status", "the mount answered something that is not JSON");
    return kExitError;
  }
  auto u = [&](const char* a, const char* b) { return j[a][b].get<uint64_t>(); };
  fmt::print("{} on {} (pid {}), store {}\n", j["logdir"].get<std::string>(),
             j["mountpoint"].get<std::string>(), j["pid"].get<int>(), j["store"].get<std::string>());
  fmt::print("hot:   {} files, {} (at the last pass)\n", u("hot", "files"), HumanBytes(u("hot", "bytes")));
  fmt::print("cold:  {} files, {} stored as {}; {} saved\n", u("cold", "files"),
             HumanBytes(u("cold", "bytes")), HumanBytes(u("cold", "stored_bytes")),
             HumanBytes(j["bytes_saved"].get<uint64_t>()));
  fmt::print("migrations: {} passes, {} batches ({} rolled back), {} files moved\n",
             u("migrations", "passes"), u("migrations", "batches"), u("migrations", "rolled_back"),
             u("migrations", "files_moved"));
  fmt::print("last verifier: {}\n", j["last_verifier"].get<std::string>().empty()
                                        ? "no batch yet"
                                        : j["last_verifier"].get<std::string>());
  fmt::print("rehydrations: {}; cache hit ratio {:.1f}% ({} cached)\n",
             j["rehydrations"].get<uint64_t>(), 100 * j["cache"]["hit_ratio"].get<double>(),
             HumanBytes(u("cache", "bytes")));
  return kExitOk;
}

}  // namespace

bool IsTbfsMount(const std::string& path) {
  return ::getxattr(path.c_str(), fs::kControlXattr, nullptr, 0) > 0;
}

std::string AskMount(const std::string& mountpoint, const std::string& request, std::string* json) {
  std::string socket(PATH_MAX, '\0');
  ssize_t n = ::getxattr(mountpoint.c_str(), fs::kControlXattr, socket.data(), socket.size());
  if (n <= 0) return "not a tbfs mount point: " + mountpoint;
  socket.resize(static_cast<size_t>(n));
  auto reply = fs::ControlRequest(socket, request);
  if (!reply.ok()) {
    if (reply.status().sys_errno() == EACCES) {
      return "permission denied: only root and the owner of the mount on " + mountpoint + " may ask it";
    }
    return "the mount on " + mountpoint + " does not answer: " + reply.status().message();
  }
  auto j = nlohmann::json::parse(*reply, nullptr, false);
  if (j.is_discarded()) return "the mount on " + mountpoint + " answered something that is not JSON";
  if (j.contains("error")) {
    std::string error = j["error"].get<std::string>();
    if (error == "permission denied") {
      return "permission denied: only root and the owner of the mount on " + mountpoint + " may ask it";
    }
    return "the mount on " + mountpoint + ": " + error;
  }
  *json = std::move(reply).value();
  return "";
}

void RegisterMount(CLI::App& app, int* exit_code) {
  auto args = std::make_shared<MountArgs>();
  CLI::App* cmd = app.add_subcommand(
      "mount",
      "Mount LOGDIR on MOUNTPOINT: tfevents pass through, quiet traces move to the cold store "
      "and come back on demand.\nAlso usable from fstab: "
      "LOGDIR MOUNTPOINT fuse.tbfs store=DIR,cold_after=5m 0 0");
  cmd->add_option("LOGDIR", args->config.logdir, "the logdir")->required();
  cmd->add_option("MOUNTPOINT", args->config.mountpoint, "an empty folder")->required();
  cmd->add_option("--store", args->config.store_dir, "store folder (default LOGDIR/.tbfs)");
  cmd->add_option("--cold-after", args->cold_after,
                  "migrate traces not modified for this long (default 5m)");
  cmd->add_option("--cache", args->cache, "cold chunk cache size (default 256M)");
  cmd->add_flag("--no-migrate", [args](int64_t) { args->config.migrate = false; },
                "no background migration (tbfs migrate MOUNTPOINT --now still works)");
  cmd->add_option("--config", args->config.config_file, "YAML policy file (markers, must-haves)");
  cmd->add_flag("-f,--foreground", args->config.foreground, "stay in the foreground, log to stderr");
  cmd->add_option("-o", args->options,
                  "options: store=DIR, cold_after=DUR, cache=SIZE, no_migrate, config=FILE, "
                  "migrate_interval=DUR, and FUSE options (allow_other, ro, ...)");
  cmd->callback([args, exit_code] { *exit_code = RunMountCmd(*args); });

  auto mountpoint = std::make_shared<std::string>();
  auto json = std::make_shared<bool>(false);
  CLI::App* status = app.add_subcommand(
      "status", "Files and bytes hot and cold, bytes saved, migrations, rehydrations, cache "
                "hit ratio and the last verifier result of a running mount");
  status->add_option("MOUNTPOINT", *mountpoint, "a tbfs mount point")->required();
  status->add_flag("--json", *json, "print the status as JSON");
  status->callback([mountpoint, json, exit_code] { *exit_code = RunStatus(*mountpoint, *json); });
}

}  // namespace tbfs::cli
