// tbfs salvage: every cold file that can still be proven intact, out of a
// damaged store into a new folder (store/salvage.h). The store is only read.
#include <nlohmann/json.hpp>

#include "base/text.h"
#include "base/work_pool.h"
#include "fmt/format.h"
#include "store/salvage.h"
#include "tools/cli/commands.h"
#include "tools/cli/progress.h"
#include "tools/cli/store_cli.h"

namespace tbfs::cli {

namespace {

using nlohmann::json;

struct SalvageArgs {
  std::string logdir;
  std::string store;
  std::string to;
  bool json = false;
};

int RunSalvage(const SalvageArgs& args) {
  StoreLocation loc;
  if (args.logdir.empty()) {
    if (args.store.empty()) {
      PrintError("salvage", "give LOGDIR or --store DIR");
      return kExitError;
    }
    loc.dir = args.store;
  } else {
    auto located = LocateStore(args.logdir, args.store);
    if (!located.ok()) {
      PrintError("salvage", located.status().message());
      return kExitError;
    }
    loc = *located;
  }
  if (IsInside(args.to, loc.dir)) {
    PrintError("salvage", "--to " + args.to + " is inside the store; salvage elsewhere");
    return kExitError;
  }
  if (!args.logdir.empty() && IsInside(args.to, args.logdir)) {
    PrintError("salvage", "--to " + args.to +
                              " is inside the logdir, where the files would "
                              "shadow the cold ones; salvage elsewhere");
    return kExitError;
  }
  WorkPool pool(0);
  store::SalvageOptions options;
  options.store_dir = loc.dir;
  options.to = args.to;
  if (!args.logdir.empty()) options.logdir = loc.logdir;
  options.pool = &pool;
  Result<store::SalvageReport> r = [&] {
    Progress progress("salvage", 0);
    options.progress = progress.counter();
    return store::Salvage(options);
  }();
  if (!r.ok()) {
    PrintError("salvage", r.status().message());
    return kExitError;
  }
  if (args.json) {
    json j = {{"store", loc.dir},
              {"to", args.to},
              {"engine", r->engine},
              {"problems", r->problems},
              {"blob_files", r->blob_files},
              {"blob_values", r->blob_values},
              {"manifests_from_copies", r->manifests_from_copies},
              {"blob_files_only", r->blob_files_only},
              {"unlisted", r->unlisted},
              {"found_again", r->found_again},
              {"files", r->files},
              {"bytes", r->bytes},
              {"lost", json::array()}};
    for (const auto& l : r->lost)
      j["lost"].push_back({{"path", l.path}, {"file_id", l.file_id}, {"reason", l.why}});
    PrintJson(j);
  } else {
    fmt::print("store {}: engine {}; {} blob file(s), {} value(s) found in them\n", loc.dir,
               r->engine, r->blob_files, r->blob_values);
    for (const auto& p : r->problems) fmt::print("problem: {}\n", Printable(p));
    if (r->manifests_from_copies) {
      fmt::print("note: {} file(s) known only by their manifest's second copy\n",
                 r->manifests_from_copies);
    }
    if (r->blob_files_only) {
      fmt::print(
          "note: the engine did not open; files deleted from the store since it was last "
          "compacted may be among those written\n");
    }
    if (r->unlisted) {
      fmt::print(
          "note: {} file(s) found only in the blob files, which the store does not list (deleted "
          "since its last compaction, or lost from its damaged index): written under {}/{}\n",
          r->unlisted, args.to, store::kUnlisted);
    }
    if (r->found_again) {
      fmt::print(
          "note: {} file(s) a recovery had recorded as lost were found intact and written (their "
          "records stay until tbfs fsck --clear-lost, once you have put them back)\n",
          r->found_again);
    }
    for (const auto& l : r->lost)
      fmt::print("LOST: {} (file id {}): {}\n", Printable(l.path), l.file_id, Printable(l.why));
    fmt::print("salvaged {} file(s), {} into {}, each checked against its content hash; {} lost\n",
               r->files, HumanBytes(r->bytes), args.to, r->lost.size());
  }
  return r->lost.empty() ? kExitOk : kExitFinding;
}

}  // namespace

void RegisterSalvage(CLI::App& app, int* exit_code) {
  auto args = std::make_shared<SalvageArgs>();
  CLI::App* cmd = app.add_subcommand(
      "salvage",
      "Write every cold file of a damaged store that can be proven intact into a new folder "
      "(the store is only read); exit 1 naming each file that could not be");
  cmd->add_option("LOGDIR", args->logdir, "the logdir");
  cmd->add_option("--store", args->store,
                  "store folder (default LOGDIR/.tbfs); a RADOS store needs no salvage");
  cmd->add_option("--to", args->to, "folder to write into (made 0700; must be missing or empty)")
      ->required();
  cmd->add_flag("--json", args->json, "print the report as JSON");
  cmd->callback([args, exit_code] { *exit_code = RunSalvage(*args); });
}

}  // namespace tbfs::cli
