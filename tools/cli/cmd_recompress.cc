// tbfs recompress: the cold files' chunks compressed again, in place, at
// another zstd level and with their family's dictionary (store/recompress.h).
#include <nlohmann/json.hpp>

#include "base/text.h"
#include "base/work_pool.h"
#include "fmt/format.h"
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

int RunRecompress(const RecompressArgs& args) {
  if (args.level < 1 || args.level > 22) {
    PrintError("recompress", "--level must be 1..22");
    return kExitError;
  }
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
  if (args.json) {
    json j = {{"store", loc->dir},
              {"level", args.level},
              {"files", r->files},
              {"unchanged", r->unchanged},
              {"bytes", r->bytes},
              {"stored_before", r->stored_before},
              {"stored_after", r->stored_after},
              {"disk_before", r->disk_before},
              {"disk_after", r->disk_after},
              {"compact_error", r->compact_error},
              {"seconds", seconds},
              {"problems", r->problems},
              {"failed", json::array()}};
    for (const auto& [path, why] : r->failed) j["failed"].push_back({{"path", path}, {"why", why}});
    PrintJson(j);
  } else {
    for (const auto& p : r->problems) {
      fmt::print("warning: {} (tbfs fsck; tbfs salvage can copy the files out)\n", Printable(p));
    }
    for (const auto& [path, why] : r->failed) {
      // The store's errors name the file already.
      const std::string said = why.starts_with(path + ": ") ? why.substr(path.size() + 2) : why;
      fmt::print("FAILED: {}: {} (left as it was)\n", Printable(path), Printable(said));
    }
    fmt::print(
        "recompressed {} file(s) ({}) at level {}: {} -> {} stored, in {:.1f} s; {} already "
        "there; {} failed\n",
        r->files, HumanBytes(r->bytes), args.level, HumanBytes(r->stored_before),
        HumanBytes(r->stored_after), seconds, r->unchanged, r->failed.size());
    fmt::print("the store takes {} on disk (was {})\n", HumanBytes(r->disk_after),
               HumanBytes(r->disk_before));
    if (!r->compact_error.empty()) {
      fmt::print(
          "warning: the chunks replaced are still on disk ({}); every file is readable; "
          "run tbfs recompress again to take them off\n",
          Printable(r->compact_error));
    }
  }
  return r->failed.empty() && r->compact_error.empty() ? kExitOk : kExitFinding;
}

}  // namespace

void RegisterRecompress(CLI::App& app, int* exit_code) {
  auto args = std::make_shared<RecompressArgs>();
  CLI::App* cmd = app.add_subcommand(
      "recompress",
      "Compress the cold files' chunks again, in place, at another zstd level and with their "
      "family's dictionary (a mount must not be running); exit 1 naming each file that could "
      "not be");
  cmd->add_option("LOGDIR", args->logdir, "the logdir")->required();
  cmd->add_option("--store", args->store, kStoreOptionHelp);
  cmd->add_option("--level", args->level, "zstd level")->capture_default_str();
  cmd->add_flag("--no-dictionaries", args->no_dictionaries,
                "compress each chunk on its own, without its file family's zstd dictionary");
  cmd->add_flag("--json", args->json, "print the report as JSON");
  cmd->callback([args, exit_code] { *exit_code = RunRecompress(*args); });
}

}  // namespace tbfs::cli
