// tbfs mount LOGDIR MOUNTPOINT: serve a logdir through FUSE.
// tbfs status MOUNTPOINT: what a running mount holds and has done.
#include <sys/xattr.h>

#include <climits>
#include <nlohmann/json.hpp>

#include "base/text.h"
#include "base/units.h"
#include "fmt/format.h"
#include "fs/control.h"
#include "fs/filesystem.h"
#include "fs/mount.h"
#include "store/config.h"
#include "tools/cli/commands.h"
#include "tools/cli/progress.h"
#include "tools/cli/store_cli.h"

namespace tbfs::cli {

namespace {

constexpr size_t kStatusListed = 10;  // blocked runs named by plain status

// As given on the command line; RunMountCmd lays it over the config file's
// mount: section (the command line wins).
struct MountArgs {
  std::string logdir;
  std::string mountpoint;
  std::string store;
  std::string cold_after;
  std::string cache;
  std::string config_file;
  bool no_migrate = false;
  bool foreground = false;
  std::vector<std::string> options;
};

int RunMountCmd(const MountArgs& args) {
  fs::MountOptions config;
  auto apply = [&](const std::string& opts, const std::string& where) {
    std::string err = fs::ParseMountOptions(opts, &config);
    if (!err.empty()) PrintError("mount", where + err);
    return err.empty();
  };
  // The config file: from --config, or config= among the -o options.
  std::string file = args.config_file;
  for (const std::string& o : args.options) {
    fs::MountOptions probe;
    if (fs::ParseMountOptions(o, &probe).empty() && !probe.config_file.empty())
      file = probe.config_file;
  }
  if (!file.empty()) {
    auto loaded = store::LoadConfigFile(file);
    if (!loaded.ok()) {
      PrintError("mount", loaded.status().message());
      return kExitError;
    }
    const store::MountSection& m = loaded->mount;
    const std::string where = file + ": mount: ";
    if (loaded->logdir) config.logdir = *loaded->logdir;
    if (m.mountpoint) config.mountpoint = *m.mountpoint;
    // Each value is one value, commas and backslashes included.
    auto set = [&](const char* key, const std::optional<std::string>& value) {
      if (!value) return true;
      std::string err = fs::ParseMountOption(key, *value, &config);
      if (!err.empty()) PrintError("mount", where + err);
      return err.empty();
    };
    if (!set("store", m.store) || !set("cold_after", m.cold_after) ||
        !set("migrate_interval", m.migrate_interval) || !set("cache", m.cache) ||
        !set("metrics", m.metrics)) {
      return kExitError;
    }
    if (m.migrate && !*m.migrate) config.migrate = false;
    for (const std::string& o : m.options) {
      if (!apply(o, where)) return kExitError;
    }
    config.config_file = file;
  }
  if (!args.logdir.empty()) config.logdir = args.logdir;
  if (!args.mountpoint.empty()) config.mountpoint = args.mountpoint;
  for (const std::string& o : args.options) {
    if (!apply(o, "")) return kExitError;
  }
  // The source a mount shows (/proc/mounts, findmnt -S) is tbfs:LOGDIR: it
  // names the logdir too, as mount(8) users and xfstests expect. Only an
  // absolute path follows it (tbfs:run is the relative folder of that name).
  if (config.logdir.starts_with("tbfs:/")) config.logdir.erase(0, 5);
  if (config.remount) {
    // mount(8) through mount.fuse3 gives the mount's source and its mount
    // point; by hand, the mount point alone does.
    if (config.mountpoint.empty()) config.mountpoint = config.logdir;
    return fs::RunRemount(config);
  }
  if (config.logdir.empty() || config.mountpoint.empty()) {
    PrintError("mount",
               "give LOGDIR and MOUNTPOINT, or logdir: and mount: mountpoint: in --config");
    return kExitError;
  }
  if (!args.store.empty()) config.store_dir = args.store;
  if (args.no_migrate) config.migrate = false;
  if (args.foreground) config.foreground = true;
  if (!args.cold_after.empty()) {
    auto s = ParseDurationSeconds(args.cold_after);
    if (!s.ok()) {
      PrintError("mount", "--cold-after: " + s.status().message());
      return kExitError;
    }
    config.cold_after_s = *s;
  }
  if (!args.cache.empty()) {
    auto b = ParseSizeBytes(args.cache);
    if (!b.ok() || *b < fs::kMinCacheBytes) {
      PrintError("mount", "--cache: use a size of at least 1M");
      return kExitError;
    }
    config.cache_bytes = *b;
  }
  return fs::RunMount(config);
}

// What the last pass left hot, and why: runs, owners, conflicts, folders
// it could not walk, files with too many extended attributes.
void PrintHeldHot(const nlohmann::json& j) {
  auto u = [&](const char* a, const char* b) { return j[a][b].get<uint64_t>(); };
  if (j.contains("blocked") && j["blocked"].value("runs", uint64_t{0}) > 0) {
    const auto& b = j["blocked"];
    fmt::print(
        "HELD HOT: {} run(s) have a tfevents file that cannot be read; their traces stay "
        "hot (tbfs verify LOGDIR checks them):",
        b["runs"].get<uint64_t>());
    size_t shown = 0;
    for (const auto& r : b["list"]) {
      if (shown++ == kStatusListed) break;
      fmt::print("\n  {}: {} trace(s); {}", Printable(r["run"].get<std::string>()),
                 r["traces"].get<uint64_t>(), Printable(r["reason"].get<std::string>()));
    }
    if (b["runs"].get<uint64_t>() > kStatusListed) {
      fmt::print("\n  and {} more (status --json lists up to 100)",
                 b["runs"].get<uint64_t>() - kStatusListed);
    }
    fmt::print("\n");
  }
  if (j.contains("blocked") && j["blocked"].contains("owners") && !j["blocked"]["owners"].empty()) {
    std::string uids;
    for (const auto& u : j["blocked"]["owners"]) uids += " " + std::to_string(u.get<uint32_t>());
    fmt::print(
        "HELD HOT: every trace of uid{} for a while (a tfevents file of theirs failed the "
        "check after its batch moved)\n",
        uids);
  }
  if (j.contains("conflicts") && j["conflicts"].value("files", uint64_t{0}) > 0) {
    fmt::print(
        "hot files left in place (another owner's cold file is at their name in a sticky "
        "folder; both kept): {}, e.g. {}\n",
        u("conflicts", "files"), Printable(j["conflicts"]["examples"][0].get<std::string>()));
  }
  if (j.contains("unwalked") && j["unwalked"].value("entries", uint64_t{0}) > 0) {
    fmt::print("not walked: {} folder(s) or entries, e.g. {}\n", u("unwalked", "entries"),
               Printable(j["unwalked"]["examples"][0].get<std::string>()));
  }
  if (j.contains("big_xattrs") && j["big_xattrs"].value("files", uint64_t{0}) > 0) {
    fmt::print("left hot, extended attributes over 64 KiB: {}, e.g. {}\n", u("big_xattrs", "files"),
               Printable(j["big_xattrs"]["examples"][0].get<std::string>()));
  }
}

void PrintGrowth(const nlohmann::json& g) {
  auto rate = [](const nlohmann::json& v) {
    return v.is_null() ? std::string("unknown") : HumanRate(v.get<double>() / 3600);
  };
  fmt::print("filesystem: {:.1f}% used, {} free of {}\n",
             g["filesystem"]["used_percent"].get<double>(),
             HumanBytes(g["filesystem"]["free"].get<uint64_t>()),
             HumanBytes(g["filesystem"]["size"].get<uint64_t>()));
  fmt::print("growth over {} ({} samples): logdir {}, filesystem {}; full in {}\n",
             HumanDuration(g["span_seconds"].get<double>()), g["samples"].get<uint64_t>(),
             rate(g["logdir_bytes_per_hour"]), rate(g["filesystem_bytes_per_hour"]),
             !g["full_in_seconds"].is_null() ? HumanDuration(g["full_in_seconds"].get<double>())
             : !g["filesystem_bytes_per_hour"].is_null() &&
                     g["filesystem_bytes_per_hour"].get<double>() > 0
                 ? std::string("not filling now (nothing grew since the last sample)")
                 : std::string("never at this rate"));
  for (const auto& r : g["top_runs"]) {
    fmt::print("  {:>12}  {}\n", HumanRate(r["bytes_per_hour"].get<double>() / 3600),
               Printable(r["run"].get<std::string>()));
  }
  if (g.contains("recent") && !g["recent"]["logdir_bytes_per_hour"].is_null()) {
    fmt::print("growth over the last {}: logdir {}, filesystem {}\n",
               HumanDuration(g["recent"]["span_seconds"].get<double>()),
               rate(g["recent"]["logdir_bytes_per_hour"]),
               rate(g["recent"]["filesystem_bytes_per_hour"]));
  }
}

// One line: the resident set and what holds it.
void PrintMemory(const nlohmann::json& m) {
  auto b = [&](const char* a, const char* k) { return HumanBytes(m[a][k].get<uint64_t>()); };
  const nlohmann::json& e = m["engine"];
  // A daemon from before the allocator was named says none.
  const std::string allocator = m["heap"].value("allocator", "");
  // A daemon from before the cache lent its capacity says none.
  const uint64_t lent = m["chunk_cache"].value("lent_bytes", uint64_t{0});
  fmt::print(
      "memory: {} resident (peak {}); heap {} in use, {} free{}; chunk cache {} of {}{}; engine {} "
      "(table files {}, block cache {} of {}, memtables {})\n",
      HumanBytes(m["rss_bytes"].get<uint64_t>()), HumanBytes(m["peak_rss_bytes"].get<uint64_t>()),
      b("heap", "in_use_bytes"), b("heap", "free_bytes"),
      allocator.empty() ? "" : fmt::format(" ({})", allocator), b("chunk_cache", "bytes"),
      b("chunk_cache", "capacity_bytes"),
      lent == 0 ? "" : fmt::format(" ({} of it lent to a recompress)", HumanBytes(lent)),
      HumanBytes(e["table_readers_bytes"].get<uint64_t>() + e["block_cache_bytes"].get<uint64_t>() +
                 e["memtables_bytes"].get<uint64_t>()),
      b("engine", "table_readers_bytes"), b("engine", "block_cache_bytes"),
      b("engine", "block_cache_capacity_bytes"), b("engine", "memtables_bytes"));
}

int RunStatus(const std::string& mountpoint, bool json) {
  std::string value;
  auto status = AskMount(mountpoint, "status", &value);
  if (!status.empty()) {
    if (json) PrintJsonError(status);
    PrintError("status", status);
    return kExitError;
  }
  auto j = nlohmann::json::parse(value, nullptr, false);
  if (j.is_discarded()) {
    PrintError("status", "the mount answered something that is not JSON");
    return kExitError;
  }
  // Lost files are a finding, in either form.
  const uint64_t lost = j.contains("lost") ? j["lost"].value("files", uint64_t{0}) : 0;
  if (json) {
    PrintJsonText(value);
    return lost > 0 ? kExitFinding : kExitOk;
  }
  auto u = [&](const char* a, const char* b) { return j[a][b].get<uint64_t>(); };
  fmt::print("{} on {} (pid {}{}), store {}\n", j["logdir"].get<std::string>(),
             j["mountpoint"].get<std::string>(), j["pid"].get<int>(),
             j.value("read_only", false) ? ", read-only" : "", j["store"].get<std::string>());
  if (const std::string role = j.value("store_role", ""); role != "writer") {
    // Always for a shared store (a reader's line names the writer's host).
    fmt::print("role:  {}\n", Printable(role));
  }
  fmt::print("hot:   {} files, {} (at the last pass)\n", u("hot", "files"),
             HumanBytes(u("hot", "bytes")));
  fmt::print("cold:  {} files, {} stored as {}; {} saved\n", u("cold", "files"),
             HumanBytes(u("cold", "bytes")), HumanBytes(u("cold", "stored_bytes")),
             HumanBytes(j["bytes_saved"].get<uint64_t>()));
  fmt::print("migrations: {} passes, {} batches ({} rolled back), {} files moved\n",
             u("migrations", "passes"), u("migrations", "batches"), u("migrations", "rolled_back"),
             u("migrations", "files_moved"));
  fmt::print("last verifier: {}\n", j["last_verifier"].get<std::string>().empty()
                                        ? "no batch yet"
                                        : j["last_verifier"].get<std::string>());
  PrintHeldHot(j);
  const std::string last_error = j["migrations"]["last_error"].get<std::string>();
  if (!last_error.empty()) fmt::print("last pass: {}\n", Printable(last_error));
  if (u("migrations", "stopped_store_full") > 0) {
    fmt::print("passes stopped by a full store: {}\n", u("migrations", "stopped_store_full"));
  }
  if (j.contains("lost") && !j["lost"].value("error", "").empty()) {
    fmt::print("LOST: the records of lost files cannot be read: {}\n",
               Printable(j["lost"]["error"].get<std::string>()));
  }
  if (lost > 0) {
    fmt::print("LOST: {} file(s) a recovery found neither in the logdir nor in the store", lost);
    for (const auto& p : j["lost"]["paths"]) fmt::print("\n  {}", Printable(p.get<std::string>()));
    fmt::print("\n(tbfs fsck LOGDIR lists them; --clear-lost once dealt with)\n");
  }
  fmt::print("rehydrations: {}; cache hit ratio {:.1f}% ({} cached, {} chunks let go by streams)\n",
             j["rehydrations"].get<uint64_t>(), 100 * j["cache"]["hit_ratio"].get<double>(),
             HumanBytes(u("cache", "bytes")), j["cache"].value("let_go", uint64_t{0}));
  if (j["cache"].contains("reads")) {
    const auto& r = j["cache"]["reads"];
    fmt::print("cold chunks for reads: {} ready, {} waited for, {} loaded by the read ({:.3f} s)\n",
               r.value("ready", uint64_t{0}), r.value("waited", uint64_t{0}),
               r.value("loaded", uint64_t{0}), r.value("waiting_seconds", 0.0));
  }
  if (j["cache"].contains("readahead")) {
    const auto& ra = j["cache"]["readahead"];
    fmt::print("readahead: {} held for readers to come, {} chunks lost before a read came\n",
               HumanBytes(ra.value("held_bytes", uint64_t{0})), ra.value("lost", uint64_t{0}));
  }
  if (j.contains("memory")) PrintMemory(j["memory"]);
  std::string eio;
  for (const auto& [site, n] : j["eio"]["by_site"].items()) {
    if (n.get<uint64_t>() > 0)
      eio += fmt::format("{}{} {}", eio.empty() ? "" : ", ", site, n.get<uint64_t>());
  }
  if (!eio.empty()) fmt::print("I/O errors (EIO) by where they were answered: {}\n", eio);
  if (j["retention"]["enabled"].get<bool>()) {
    fmt::print("retention: {} cold files deleted ({})\n", u("retention", "deleted_files"),
               HumanBytes(u("retention", "deleted_bytes")));
  }
  if (j.contains("growth")) PrintGrowth(j["growth"]);
  return lost > 0 ? kExitFinding : kExitOk;
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
      return "permission denied: only root and the owner of the mount on " + mountpoint +
             " may ask it";
    }
    return "the mount on " + mountpoint + " does not answer: " + reply.status().message();
  }
  auto j = nlohmann::json::parse(*reply, nullptr, false);
  if (j.is_discarded())
    return "the mount on " + mountpoint + " answered something that is not JSON";
  if (j.contains("error")) {
    std::string error = j["error"].get<std::string>();
    if (error == "permission denied") {
      return "permission denied: only root and the owner of the mount on " + mountpoint +
             " may ask it";
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
  cmd->add_option("LOGDIR", args->logdir, "the logdir (or logdir: in --config)");
  cmd->add_option("MOUNTPOINT", args->mountpoint,
                  "an empty folder (or mount: mountpoint: in --config)");
  cmd->add_option("--store", args->store, kStoreOptionHelp);
  cmd->add_option("--cold-after", args->cold_after,
                  "migrate traces not modified for this long (default 5m)");
  cmd->add_option("--cache", args->cache, "cold chunk cache size (default 256M)");
  cmd->add_flag("--no-migrate", args->no_migrate,
                "no background migration (tbfs migrate MOUNTPOINT --now still works)");
  cmd->add_option("--config", args->config_file,
                  "YAML file: policy (markers, must-haves) and the mount: section's settings");
  cmd->add_flag("-f,--foreground", args->foreground, "stay in the foreground, log to stderr");
  cmd->add_option(
         "-o", args->options,
         "options: store=DIR, cold_after=DUR, cache=SIZE, no_migrate, config=FILE, "
         "migrate_interval=DUR, metrics=[ADDR:]PORT, remount (with ro or rw: change a running "
         "mount), and FUSE options (allow_other, ro, noatime, ...)")
      ->allow_extra_args(false);  // -o takes one list: `-o ro LOGDIR MOUNTPOINT` works
  cmd->callback([args, exit_code] { *exit_code = RunMountCmd(*args); });

  auto mountpoint = std::make_shared<std::string>();
  auto json = std::make_shared<bool>(false);
  CLI::App* status = app.add_subcommand(
      "status",
      "Files and bytes hot and cold, bytes saved, migrations, rehydrations, cache "
      "hit ratio, memory by holder and the last verifier result of a running mount");
  status->add_option("MOUNTPOINT", *mountpoint, "a tbfs mount point")->required();
  status->add_flag("--json", *json, "print the status as JSON");
  status->callback([mountpoint, json, exit_code] { *exit_code = RunStatus(*mountpoint, *json); });
}

}  // namespace tbfs::cli
