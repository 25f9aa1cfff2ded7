// tbfs recompress: the cold files' chunks compressed again, in place, at
// another zstd level and with their family's dictionary (store/recompress.h).
#include <nlohmann/json.hpp>

#include "base/text.h"
#include "base/work_pool.h"
#include "fmt/format.h"
#include "fs/migrator.h"
#include "store/recompress.h"
#include "tools/cli/commands.h"
#include "tools/cli/progress.h"
#include "tools/cli/store_cli.h"

namespace tbfs::cli {

namespace {

using nlohmann::json;

struct RecompressArgs {
  std::string logdir;
  std::string store;
  int level = 15;
  bool no_dictionaries = false;
  bool json = false;
};

// Prints a report (fs::RecompressJson: the command's own, or the mount's).
int PrintReport(const RecompressArgs& args, const json& r) {
  if (args.json) {
    PrintJson(r);
  } else {
    for (const auto& p : r["problems"]) {
      fmt::print("warning: {} (tbfs fsck; tbfs salvage can copy the files out)\n",
                 Printable(p.get<std::string>()));
    }
    for (const auto& f : r["failed"]) {
      // The store's errors name the file already.
      const std::string path = f["path"], why = f["why"];
      const std::string said = why.starts_with(path + ": ") ? why.substr(path.size() + 2) : why;
      fmt::print("FAILED: {}: {} (left as it was)\n", Printable(path), Printable(said));
    }
    fmt::print(
        "recompressed {} file(s) ({}) at level {}: {} -> {} stored, in {:.1f} s; {} already "
        "there; {} failed\n",
        r["files"].get<uint64_t>(), HumanBytes(r["bytes"]), r["level"].get<int>(),
        HumanBytes(r["stored_before"]), HumanBytes(r["stored_after"]), r["seconds"].get<double>(),
        r["unchanged"].get<uint64_t>(), r["failed"].size());
    if (r["gone"] > 0) {
      fmt::print("{} file(s) were removed or made hot through the mount meanwhile: left so\n",
                 r["gone"].get<uint64_t>());
    }
    if (r["stopped"] == true) {
      fmt::print(
          "warning: the mount is stopping or turned read-only: the files not reached are as "
          "they were; run tbfs recompress again to do them\n");
    }
    fmt::print("the store takes {} on disk (was {})\n", HumanBytes(r["disk_after"]),
               HumanBytes(r["disk_before"]));
    if (r["compact_error"] != "") {
      fmt::print("{}\n", CompactWarning(r["compact_error"].get<std::string>()));
    }
  }
  return r["failed"].empty() && r["compact_error"] == "" && r["stopped"] == false ? kExitOk
                                                                                  : kExitFinding;
}

// `tbfs recompress MOUNTPOINT`: the mount's daemon, the store's writer,
// does it a file at a time between its passes, while it serves.
int RecompressThroughMount(const RecompressArgs& args) {
  if (!args.store.empty()) {
    PrintError("recompress", args.logdir +
                                 " is a tbfs mount: it recompresses its own store; --store is "
                                 "for a logdir");
    return kExitError;
  }
  if (!args.json) {
    fmt::print(stderr,
               "the mount on {} compresses its cold files again while it serves; this takes a "
               "while...\n",
               Printable(args.logdir));
  }
  std::string reply;
  if (std::string e = AskMount(
          args.logdir, fmt::format("recompress {} {}", args.level, args.no_dictionaries ? 0 : 1),
          &reply);
      !e.empty()) {
    PrintError("recompress", e);
    return kExitError;
  }
  return PrintReport(args, json::parse(reply));
}

int RunRecompress(const RecompressArgs& args) {
  if (args.level < 1 || args.level > 22) {
    PrintError("recompress", "--level must be 1..22");
    return kExitError;
  }
  if (IsTbfsMount(args.logdir)) return RecompressThroughMount(args);
  auto loc = LocateStore(args.logdir, args.store);
  if (!loc.ok()) {
    PrintError("recompress", loc.status().message());
    return kExitError;
  }
  // Where there is no store, nothing is cold: nothing to do, and nothing
  // made (a writer that does not create a store takes no lock without one).
  auto store = OpenStoreForWrite(*loc, /*create=*/false, "recompress");
  if (!store.ok()) {
    PrintError("recompress", store.status().message());
    return kExitError;
  }
  if (*store == nullptr) {
    if (args.json) {
      PrintJson(json{
          {"store", loc->dir}, {"level", args.level}, {"files", 0}, {"failed", json::array()}});
    } else {
      fmt::print("nothing is cold in {} (no store at {})\n", Printable(args.logdir),
                 Printable(loc->dir));
    }
    return kExitOk;
  }
  auto totals = (*store)->GetTotals();
  WorkPool pool(0);
  store::RecompressOptions options;
  options.level = args.level;
  options.dictionaries = !args.no_dictionaries;
  options.pool = &pool;
  const double t0 = NowSeconds();
  Result<store::RecompressReport> r = [&] {
    Progress progress("recompress", totals.ok() ? totals->logical_bytes : 0);
    options.progress = progress.counter();
    return store::Recompress(**store, options);
  }();
  const double seconds = NowSeconds() - t0;
  if (!r.ok()) {
    PrintError("recompress", r.status().message());
    return kExitError;
  }
  return PrintReport(args, fs::RecompressJson(*r, loc->dir, args.level, seconds));
}

}  // namespace

void RegisterRecompress(CLI::App& app, int* exit_code) {
  auto args = std::make_shared<RecompressArgs>();
  CLI::App* cmd = app.add_subcommand(
      "recompress",
      "Compress the cold files' chunks again, in place, at another zstd level and with their "
      "family's dictionary; on a mount point, its daemon does it while it serves; exit 1 "
      "naming each file that could not be");
  cmd->add_option("LOGDIR", args->logdir, "the logdir, or a tbfs mount point")->required();
  cmd->add_option("--store", args->store, kStoreOptionHelp);
  cmd->add_option("--level", args->level, "zstd level")->capture_default_str();
  cmd->add_flag("--no-dictionaries", args->no_dictionaries,
                "compress each chunk on its own, without its file family's zstd dictionary");
  cmd->add_flag("--json", args->json, "print the report as JSON");
  cmd->callback([args, exit_code] { *exit_code = RunRecompress(*args); });
}

}  // namespace tbfs::cli
