// tbfs fsck: check every chunk checksum and every file hash of a store.
// tbfs gc: retention, drop cold files older than a cutoff (dry run by default).
#include <cerrno>
#include <map>
#include <nlohmann/json.hpp>

#include "base/text.h"
#include "base/units.h"
#include "base/work_pool.h"
#include "fmt/format.h"
#include "spdlog/spdlog.h"
#include "store/maintenance.h"
#include "store/salvage.h"
#include "store/store_dir.h"
#include "tools/cli/commands.h"
#include "tools/cli/progress.h"
#include "tools/cli/store_cli.h"

namespace tbfs::cli {

namespace {

using nlohmann::json;

struct FsckArgs {
  std::string logdir;
  std::string store;
  std::string older_than;
  std::string migrated_before;
  int64_t keep_last = -1;
  std::string max_store;
  bool across_owners = false;
  bool garbage = false;
  bool apply = false;
  bool json = false;
  bool clear_lost = false;
};

// LOGDIR (its store), or --store DIR alone.
Result<StoreLocation> Locate(const FsckArgs& args) {
  if (args.logdir.empty() && args.store.empty()) {
    return Status::InvalidArgument("give LOGDIR or --store DIR");
  }
  if (args.logdir.empty()) {
    TBFS_RETURN_IF_ERROR(CheckStoreFlag(args.store));
    StoreLocation loc;
    loc.logdir = ".";
    loc.dir = args.store;
    loc.own_dir = args.store;
    loc.given = true;
    return loc;
  }
  return LocateStore(args.logdir, args.store);
}

// A store that does not open: what salvage could still read, file by file
// (unless it is no fault of the store).
int FsckUnopenable(const FsckArgs& args, const StoreLocation& loc, const Status& why) {
  // Out of threads, memory or descriptors (a user's limits): not damage,
  // and not a case for salvage.
  const int err = why.sys_errno();
  if (err == EAGAIN || err == ENOMEM || err == EMFILE || err == ENFILE) {
    PrintError("fsck", why.message());
    return kExitError;
  }
  WorkPool pool(0);
  store::SalvageOptions options;
  options.store_dir = loc.dir;
  if (!args.logdir.empty()) options.logdir = loc.logdir;
  options.pool = &pool;
  auto r = store::Salvage(options);
  if (!r.ok()) {
    PrintError("fsck",
               why.message() + "; and reading it file by file failed: " + r.status().message());
    return kExitError;
  }
  const std::string advice = fmt::format(
      "the store does not open ({}); tbfs salvage {} --to DIR writes out the {} file(s) that "
      "verify",
      why.message(),
      args.logdir.empty() ? "--store " + loc.dir
                          : args.logdir + (loc.given ? " --store " + loc.dir : std::string()),
      r->files);
  if (args.json) {
    json j = {{"files", r->files + r->lost.size()},
              {"bytes", r->bytes},
              {"clean", false},
              {"opens", false},
              {"problems", r->problems},
              {"salvageable_files", r->files},
              {"damaged", json::array()},
              {"advice", advice}};
    for (const auto& l : r->lost) j["damaged"].push_back({{"path", l.path}, {"reason", l.why}});
    PrintJson(j);
  } else {
    for (const auto& p : r->problems) fmt::print("PROBLEM: {}\n", Printable(p));
    for (const auto& l : r->lost) fmt::print("LOST: {}: {}\n", Printable(l.path), Printable(l.why));
    fmt::print("{}: {}\n", loc.dir, advice);
  }
  return kExitFinding;
}

// fsck --clear-lost: the admin has dealt with the files recovery recorded
// as lost; their records go.
int ClearLost(const FsckArgs& args, const StoreLocation& loc) {
  if (args.logdir.empty()) {
    PrintError("fsck", "--clear-lost needs LOGDIR (it opens the store for writing)");
    return kExitError;
  }
  auto store = OpenStoreForWrite(loc, false, "fsck");
  if (!store.ok()) {
    PrintError("fsck", store.status().message());
    return kExitError;
  }
  uint64_t cleared = 0;
  std::vector<store::ColdStore::LostFile> lost;
  Status st = *store ? (*store)->ListLost(&lost) : Status::OK();
  if (st.ok() && *store) st = (*store)->ClearLost(&cleared);
  if (!st.ok()) {
    PrintError("fsck", "--clear-lost: " + st.message());
    return kExitError;
  }
  if (args.json) {
    json j = {{"cleared", cleared}, {"paths", json::array()}};
    for (const auto& l : lost) j["paths"].push_back(l.path);
    PrintJson(j);
  } else {
    for (const auto& l : lost) fmt::print("cleared: {}\n", Printable(l.path));
    fmt::print("{}: {} lost-file record(s) cleared\n", loc.dir, cleared);
  }
  return kExitOk;
}

int RunFsck(const FsckArgs& args) {
  auto loc = Locate(args);
  if (!loc.ok()) {
    PrintError("fsck", loc.status().message());
    return kExitError;
  }
  if (args.clear_lost) return ClearLost(args, *loc);
  auto store = OpenStoreForRead(*loc);
  if (!store.ok() && store.status().code() != Code::kNotSupported &&
      store.status().code() != Code::kInvalidArgument) {
    return FsckUnopenable(args, *loc, store.status());
  }
  if (!store.ok()) {
    PrintError("fsck", store.status().message());
    return kExitError;
  }
  if (!*store) {
    if (args.json) {
      PrintJson(
          {{"files", 0}, {"bytes", 0}, {"clean", true}, {"opens", false}, {"no_store", true}});
    } else {
      fmt::print("no cold store at {}: nothing to check\n", Printable(loc->dir));
    }
    return kExitOk;
  }
  auto totals = (*store)->ComputeTotals();
  WorkPool pool(0);
  auto run = [&] {
    Progress progress("fsck", totals.ok() ? totals->logical_bytes : 0);
    return store::Fsck(**store, &pool, progress.counter());
  };
  auto r = run();
  if (!r.ok()) {
    PrintError("fsck", r.status().message());
    return kExitError;
  }
  // What the engine cannot read is not always lost: salvage reads around
  // damage (manifest copies, the blob files). Each damaged file is labelled
  // by what a salvage check (nothing written) finds of it.
  std::map<std::string, std::string> unsalvageable;
  bool salvage_checked = false;
  if (!r->damaged.empty()) {
    store::SalvageOptions so;
    so.store_dir = loc->dir;
    if (!args.logdir.empty()) so.logdir = loc->logdir;
    so.pool = &pool;
    auto check = store::Salvage(so);
    if (check.ok()) {
      salvage_checked = true;
      for (const auto& l : check->lost) unsalvageable[l.path] = l.why;
    }
  }
  auto label = [&](const std::string& path) -> std::string {
    if (!salvage_checked) return "DAMAGED";
    return unsalvageable.count(path) ? "LOST" : "DAMAGED (recoverable)";
  };
  if (args.json) {
    json j = {{"files", r->files},
              {"bytes", r->bytes},
              {"clean", r->clean()},
              {"opens", true},
              {"problems", r->problems},
              {"manifests_from_copies", r->manifests_from_copies},
              {"set_aside_files", r->set_aside_files},
              {"orphan_chunk_files", r->orphan_chunk_files},
              {"dangling_entries", r->dangling_entries},
              {"journal_records", r->journal_records},
              {"damaged", json::array()},
              {"lost", json::array()}};
    for (const auto& [p, why] : r->damaged) {
      j["damaged"].push_back(
          {{"path", p},
           {"reason", why},
           {"recoverable", salvage_checked ? json(!unsalvageable.count(p)) : json(nullptr)}});
    }
    for (const auto& l : r->lost) {
      j["lost"].push_back(
          {{"path", l.path}, {"batch", l.batch_id}, {"found_ns", l.found_ns}, {"reason", l.why}});
    }
    PrintJson(j);
  } else {
    for (const auto& p : r->problems) fmt::print("PROBLEM: {}\n", Printable(p));
    for (const auto& [p, why] : r->damaged)
      fmt::print("{}: {}: {}\n", label(p), Printable(p), Printable(why));
    for (const auto& l : r->lost)
      fmt::print("LOST: {}: {} (batch {})\n", Printable(l.path), Printable(l.why), l.batch_id);
    if (!r->lost.empty()) {
      fmt::print(
          "note: {} file(s) recorded as lost; restore them from a backup (one in lost+found "
          "comes back by itself at the next writer's open), then tbfs fsck {} --clear-lost\n",
          r->lost.size(), args.logdir.empty() ? "LOGDIR" : args.logdir);
    }
    if (r->orphan_chunk_files) {
      fmt::print(
          "note: chunks of {} unknown file ids (garbage a crash left; tbfs gc --garbage --apply "
          "removes it)\n",
          r->orphan_chunk_files);
    }
    if (r->set_aside_files) {
      fmt::print(
          "note: {} engine file(s) set aside in {}/{} when a writer opened the store (leftovers "
          "of a crash, or data a damaged MANIFEST lost): tbfs salvage reads them; remove them "
          "once you have checked\n",
          r->set_aside_files, loc->dir, store::kLostFoundName);
    }
    if (r->journal_records) {
      fmt::print("note: {} unfinished batch(es); the next migrate/restore/mount recovers them\n",
                 r->journal_records);
    }
    fmt::print("{}: {} files, {} checked: {}\n", loc->dir, r->files, HumanBytes(r->bytes),
               r->clean() ? "clean"
                          : fmt::format("{} problem(s){}",
                                        r->damaged.size() + r->dangling_entries +
                                            r->problems.size() + r->lost.size(),
                                        r->damaged.empty() && r->problems.empty()
                                            ? ""
                                            : "; tbfs salvage recovers every file that verifies"));
  }
  return r->clean() ? kExitOk : kExitFinding;
}

// --older-than, --migrated-before, --keep-last, --max-store into *policy;
// false (said) when one is not valid.
bool ParseRetention(const FsckArgs& args, store::Retention* policy) {
  auto duration = [&](const std::string& flag, const std::string& text,
                      std::optional<int64_t>* out) {
    if (text.empty()) return true;
    auto s = ParseDurationSeconds(text);
    if (!s.ok()) {
      PrintError("gc", flag + ": " + s.status().message());
      return false;
    }
    *out = *s;
    return true;
  };
  if (!duration("--older-than", args.older_than, &policy->older_than_s) ||
      !duration("--migrated-before", args.migrated_before, &policy->migrated_before_s)) {
    return false;
  }
  if (args.keep_last >= 0) policy->keep_last = static_cast<uint64_t>(args.keep_last);
  if (!args.max_store.empty()) {
    auto b = ParseSizeBytes(args.max_store);
    if (!b.ok()) {
      PrintError("gc", "--max-store: " + b.status().message());
      return false;
    }
    policy->max_store_bytes = *b;
  }
  policy->across_owners = args.across_owners;
  return true;
}

// `tbfs gc MOUNTPOINT --garbage`: the mount's daemon, the store's writer,
// collects between passes, so no mount has to stop.
int GcThroughMount(const FsckArgs& args, const store::Retention& policy) {
  if (policy.any()) {
    PrintError("gc", args.logdir +
                         " is a tbfs mount: its retention: policy deletes cold files after "
                         "each pass; on a mount point gc takes --garbage only");
    return kExitError;
  }
  std::string reply;
  if (std::string e = AskMount(args.logdir, args.apply ? "gc-garbage-apply" : "gc-garbage", &reply);
      !e.empty()) {
    PrintError("gc", "garbage: " + e);
    return kExitError;
  }
  const json r = json::parse(reply);
  if (args.json) {
    PrintJson({{"dry_run", !args.apply},
               {"files", 0},
               {"bytes", 0},
               {"stored_bytes", 0},
               {"deleted", json::array()},
               {"garbage", {{"chunks", r["chunks"]}, {"file_ids", r["file_ids"]}}}});
  } else {
    fmt::print("{} {} unreachable chunk(s) of {} file id(s) no record names{}\n",
               args.apply ? "removed" : "would remove", r["chunks"].get<uint64_t>(),
               r["file_ids"].get<uint64_t>(),
               args.apply ? "" : "\ndry run: nothing changed. Run again with --apply to remove.");
  }
  return kExitOk;
}

void PrintGc(const FsckArgs& args, const std::vector<storepb::Manifest>& old,
             const std::vector<std::string>& why, const store::Garbage& garbage,
             const std::string& compact_error) {
  uint64_t bytes = 0, stored = 0;
  for (const auto& m : old) {
    bytes += m.size();
    stored += m.stored_bytes();
  }
  if (args.json) {
    json j = {{"dry_run", !args.apply},
              {"files", old.size()},
              {"bytes", bytes},
              {"stored_bytes", stored},
              {"deleted", json::array()}};
    if (args.apply) j["compact_error"] = compact_error;
    if (args.garbage)
      j["garbage"] = {{"chunks", garbage.chunks.size()}, {"file_ids", garbage.files}};
    for (size_t i = 0; i < old.size(); ++i) {
      j["deleted"].push_back(
          {{"path", old[i].path()}, {"bytes", old[i].size()}, {"reason", why[i]}});
      j["paths"].push_back(old[i].path());
    }
    PrintJson(j);
  } else {
    for (size_t i = 0; i < old.size(); ++i) {
      fmt::print("  {:>10}  {}  ({})\n", HumanBytes(old[i].size()), Printable(old[i].path()),
                 why[i]);
    }
    if (args.garbage) {
      fmt::print("{} {} unreachable chunk(s) of {} file id(s) no record names\n",
                 args.apply ? "removed" : "would remove", garbage.chunks.size(), garbage.files);
    }
    fmt::print("{} {} cold files ({} logical, {} stored){}\n",
               args.apply ? "deleted" : "would delete", old.size(), HumanBytes(bytes),
               HumanBytes(stored),
               args.apply ? "" : "\ndry run: nothing changed. Run again with --apply to delete.");
    if (!compact_error.empty()) fmt::print("{}\n", CompactWarning(compact_error));
  }
}

int RunGc(const FsckArgs& args) {
  store::Retention policy;
  if (!ParseRetention(args, &policy)) return kExitError;
  if (!policy.any() && !args.garbage) {
    PrintError("gc",
               "give a policy: --older-than DUR, --migrated-before DUR, --keep-last N or "
               "--max-store SIZE, "
               "or --garbage");
    return kExitError;
  }
  if (!args.logdir.empty() && IsTbfsMount(args.logdir)) return GcThroughMount(args, policy);
  if (args.apply && args.logdir.empty()) {
    // A writer's open finishes what a crash left, writing files back into the logdir.
    PrintError("gc", "--apply needs LOGDIR (recovery may write files back into it)");
    return kExitError;
  }
  auto loc = Locate(args);
  if (!loc.ok()) {
    PrintError("gc", loc.status().message());
    return kExitError;
  }
  auto store = args.apply ? OpenStoreForWrite(*loc, false, "gc") : OpenStoreForRead(*loc);
  if (!store.ok()) {
    PrintError("gc", store.status().message());
    return kExitError;
  }
  std::vector<storepb::Manifest> old;
  std::vector<std::string> why;
  store::Garbage garbage;
  if (*store && policy.any()) {
    Status st = store::SelectForRetention(**store, policy, &old, &why);
    if (!st.ok()) {
      PrintError("gc", st.message());
      return kExitError;
    }
  }
  if (*store && args.garbage) {
    // After recovery (a writer's open runs it): no batch is in flight.
    Status st = store::FindGarbage(**store, &garbage);
    if (st.ok() && args.apply) st = store::RemoveGarbage(**store, garbage);
    if (!st.ok()) {
      PrintError("gc", "garbage: " + st.message());
      return kExitError;
    }
    if (args.apply && !garbage.chunks.empty()) {
      spdlog::info("gc: removed {} unreachable chunk(s) of {} file id(s)", garbage.chunks.size(),
                   garbage.files);
    }
  }
  std::string compact_error;
  if (args.apply && !old.empty()) {
    Status st = store::DeleteCold(**store, old, &compact_error);
    if (!st.ok()) {
      PrintError("gc", st.message());
      return kExitError;
    }
    for (size_t i = 0; i < old.size(); ++i)
      spdlog::info("gc: deleted {} ({})", old[i].path(), why[i]);
  } else if (args.apply && store::HoldsGarbage(**store)) {
    // What an earlier change's failed compaction left (its warning says
    // the next gc compacts).
    if (Status c = (*store)->Compact(); !c.ok()) compact_error = c.message();
  }
  PrintGc(args, old, why, garbage, compact_error);
  return compact_error.empty() ? kExitOk : kExitFinding;
}

}  // namespace

void RegisterFsck(CLI::App& app, int* exit_code) {
  auto args = std::make_shared<FsckArgs>();
  CLI::App* cmd = app.add_subcommand(
      "fsck",
      "Check every chunk checksum and every file hash of a cold store; exit 1 if any is "
      "damaged");
  cmd->add_option("LOGDIR", args->logdir, "the logdir");
  cmd->add_option("--store", args->store, kStoreOptionHelp);
  cmd->add_flag("--json", args->json, "print the report as JSON");
  cmd->add_flag("--clear-lost", args->clear_lost,
                "forget the files a recovery recorded as lost (after restoring them or "
                "accepting the loss); fsck reports them until then");
  cmd->callback([args, exit_code] { *exit_code = RunFsck(*args); });

  auto gargs = std::make_shared<FsckArgs>();
  CLI::App* gc = app.add_subcommand(
      "gc",
      "Retention: delete cold files for good by age, migration time, the newest profiles "
      "per run or a size budget for the store (any policies given; the union is deleted). "
      "Dry run unless --apply.");
  gc->add_option("LOGDIR", gargs->logdir, "the logdir");
  gc->add_option("--store", gargs->store, kStoreOptionHelp);
  gc->add_option("--older-than", gargs->older_than,
                 "files modified longer ago than this (e.g. 30d)");
  gc->add_option("--migrated-before", gargs->migrated_before,
                 "files moved to the store longer ago than this");
  gc->add_option("--keep-last", gargs->keep_last,
                 "keep only the newest N profiles of each run (of each owner's, in a shared "
                 "folder)")
      ->check(CLI::NonNegativeNumber);
  gc->add_option("--max-store", gargs->max_store,
                 "delete each owner's longest-migrated files until that owner's files take at "
                 "most SIZE in the store");
  gc->add_flag("--across-owners", gargs->across_owners,
               "--keep-last and --max-store count every owner's files together (one budget)");
  gc->add_flag(
      "--garbage", gargs->garbage,
      "also remove chunks no record names (left by a crash in the middle of a RADOS commit)");
  gc->add_flag("--apply", gargs->apply, "really delete (default: dry run)");
  gc->add_flag("--json", gargs->json, "print the report as JSON");
  gc->callback([gargs, exit_code] { *exit_code = RunGc(*gargs); });
}

}  // namespace tbfs::cli
