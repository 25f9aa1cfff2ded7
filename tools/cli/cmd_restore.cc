// tbfs restore: cold files back to ordinary files (dry run unless --apply).
// tbfs export: cold files copied out under another folder, store unchanged.
#include <nlohmann/json.hpp>

#include "base/text.h"
#include "base/work_pool.h"
#include "fmt/format.h"
#include "store/restore.h"
#include "tools/cli/commands.h"
#include "tools/cli/progress.h"
#include "tools/cli/store_cli.h"

namespace tbfs::cli {

namespace {

using nlohmann::json;

struct CopyArgs {
  std::string logdir;
  std::string store;
  std::vector<std::string> paths;
  bool all = false;
  bool apply = false;
  std::string to;
  bool force = false;
  bool json = false;
};

// What restore and export share: the store's location, the PATH arguments
// as clean relative paths, the store opened, and the cold files they name.
// Returns an exit code, or -1 to go on (files may be empty: nothing cold).
int Prepare(const std::string& cmd, const CopyArgs& args, bool write, StoreLocation* loc,
            std::unique_ptr<store::ColdStore>* store, std::vector<storepb::Manifest>* files) {
  auto located = LocateStore(args.logdir, args.store);
  if (!located.ok()) {
    PrintError(cmd, located.status().message());
    return kExitError;
  }
  *loc = *located;
  std::vector<std::string> rel;
  for (const std::string& p : args.paths) {
    auto n = store::NormalizeUserPath(args.logdir, p);
    if (!n.ok()) {
      PrintError(cmd, n.status().message());
      return kExitError;
    }
    rel.push_back(*n);
  }
  if (cmd == "export" && IsInside(args.to, args.logdir)) {
    // Copies inside the logdir would shadow the cold files they copy.
    PrintError(cmd, "--to " + args.to +
                        " is inside the logdir; export elsewhere, or use "
                        "tbfs restore to bring files back");
    return kExitError;
  }
  auto opened = write ? OpenStoreForWrite(*loc, false, cmd) : OpenStoreForRead(*loc);
  if (!opened.ok()) {
    PrintError(cmd, opened.status().message());
    return kExitError;
  }
  *store = std::move(opened).value();
  std::vector<std::string> not_found = rel;
  if (*store) {
    Status st = store::SelectCold(**store, rel, files, &not_found);
    // A read-only export beside an unfinished migration: a file still at
    // its path is hot, not cold (a writer recovered already).
    if (st.ok() && !write) st = store::DropInFlight(**store, loc->logdir, files);
    if (!st.ok()) {
      PrintError(cmd, st.message());
      return kExitError;
    }
  }
  for (const auto& p : not_found) {
    PrintError(cmd, "not in the cold store: " + p);
    return kExitError;
  }
  if (files->empty()) {
    fmt::print("nothing is cold in {}\n", args.logdir);
    return kExitOk;
  }
  return -1;
}

int Report(const std::string& verb, const CopyArgs& args, const store::CopyResult& r) {
  if (args.json) {
    json j = {{"files", r.files}, {"bytes", r.bytes}, {"failed", json::array()}};
    if (verb == "restored") j["compact_error"] = r.compact_error;
    for (const auto& [p, why] : r.failed) j["failed"].push_back({{"path", p}, {"reason", why}});
    PrintJson(j);
  } else {
    for (const auto& [p, why] : r.failed) fmt::print("  {}: {}\n", Printable(p), Printable(why));
    fmt::print("{} {} files, {}{}\n", verb, r.files, HumanBytes(r.bytes),
               r.failed.empty() ? "" : fmt::format("; {} failed", r.failed.size()));
    if (!r.compact_error.empty()) fmt::print("{}\n", CompactWarning(r.compact_error));
  }
  return r.failed.empty() && r.compact_error.empty() ? kExitOk : kExitFinding;
}

int RunRestore(const CopyArgs& args) {
  if (args.paths.empty() && !args.all) {
    PrintError("restore", "name the PATHs to restore, or --all");
    return kExitError;
  }
  StoreLocation loc;
  std::unique_ptr<store::ColdStore> store;
  std::vector<storepb::Manifest> files;
  if (int rc = Prepare("restore", args, args.apply, &loc, &store, &files); rc >= 0) return rc;
  uint64_t total = 0;
  for (const auto& m : files) total += m.size();
  if (!args.apply) {
    if (args.json) {
      json j = {{"dry_run", true}, {"files", files.size()}, {"bytes", total}};
      for (const auto& m : files) j["paths"].push_back(m.path());
      PrintJson(j);
    } else {
      for (const auto& m : files)
        fmt::print("  {:>10}  {}\n", HumanBytes(m.size()), Printable(m.path()));
      fmt::print("would restore {} files, {}\ndry run: nothing changed. Run again with --apply.\n",
                 files.size(), HumanBytes(total));
    }
    return kExitOk;
  }
  WorkPool pool(0);
  auto run = [&] {
    Progress progress("restore", total);
    return store::Restore(*store, args.logdir, files, &pool, progress.counter());
  };
  auto r = run();
  if (!r.ok()) {
    PrintError("restore", r.status().message());
    return kExitError;
  }
  return Report("restored", args, *r);
}

int RunExport(const CopyArgs& args) {
  StoreLocation loc;
  std::unique_ptr<store::ColdStore> store;
  std::vector<storepb::Manifest> files;
  if (int rc = Prepare("export", args, false, &loc, &store, &files); rc >= 0) return rc;
  uint64_t total = 0;
  for (const auto& m : files) total += m.size();
  WorkPool pool(0);
  double start = NowSeconds();
  auto run = [&] {
    Progress progress("export", total);
    return store::Export(*store, args.to, files, args.force, &pool, progress.counter());
  };
  auto r = run();
  if (!r.ok()) {
    PrintError("export", r.status().message());
    return kExitError;
  }
  if (!args.json) {
    double secs = NowSeconds() - start;
    fmt::print("to {} in {:.1f}s ({:.0f} MB/s)\n", args.to, secs,
               static_cast<double>(r->bytes) / 1e6 / std::max(secs, 1e-9));
  }
  return Report("exported", args, *r);
}

}  // namespace

void RegisterRestore(CLI::App& app, int* exit_code) {
  auto args = std::make_shared<CopyArgs>();
  CLI::App* cmd = app.add_subcommand(
      "restore",
      "Bring cold files back as ordinary files at their paths (mode and times kept, hashes "
      "checked), then drop them from the store. Dry run unless --apply.");
  cmd->add_option("LOGDIR", args->logdir, "the logdir")->required();
  cmd->add_option("PATH", args->paths, "files or folders, relative to LOGDIR");
  cmd->add_flag("--all", args->all, "every cold file");
  cmd->add_flag("--apply", args->apply, "really restore (default: dry run)");
  cmd->add_option("--store", args->store, kStoreOptionHelp);
  cmd->add_flag("--json", args->json, "print the report as JSON");
  cmd->callback([args, exit_code] { *exit_code = RunRestore(*args); });

  auto eargs = std::make_shared<CopyArgs>();
  CLI::App* exp = app.add_subcommand(
      "export",
      "Write cold files under another folder (same relative paths) for a profiling session; "
      "the store is not changed.");
  exp->add_option("LOGDIR", eargs->logdir, "the logdir")->required();
  exp->add_option("PATH", eargs->paths, "files or folders, relative to LOGDIR (default: all)");
  exp->add_option("--to", eargs->to, "destination folder")->required();
  exp->add_flag("--force", eargs->force, "replace files that exist in the destination");
  exp->add_option("--store", eargs->store, kStoreOptionHelp);
  exp->add_flag("--json", eargs->json, "print the report as JSON");
  exp->callback([eargs, exit_code] { *exit_code = RunExport(*eargs); });
}

}  // namespace tbfs::cli
