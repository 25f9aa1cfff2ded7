// tbfs migrate LOGDIR: move quiet traces into the cold store. A dry run
// unless --apply (or a config with dry_run: false).
#include <sys/xattr.h>

#include <cstring>
#include <nlohmann/json.hpp>
#include <optional>
#include <set>

#include "base/text.h"
#include "base/units.h"
#include "events/logdir_digest.h"
#include "events/verifier.h"
#include "fmt/format.h"
#include "fs/filesystem.h"
#include "store/backup.h"
#include "store/config.h"
#include "store/migrate.h"
#include "tools/cli/commands.h"
#include "tools/cli/migrate_report.h"
#include "tools/cli/progress.h"
#include "tools/cli/store_cli.h"

namespace tbfs::cli {

namespace {

using nlohmann::json;

struct MigrateArgs {
  std::string logdir;
  std::string store;
  bool apply = false;
  bool dry_run = false;
  std::vector<std::string> classes;
  std::string min_size;
  std::string older_than = "5m";
  std::vector<std::string> must_have;
  std::string backup;
  std::string config;
  bool json = false;
  bool allow_no_events = false;
  std::string chunk_size;
  int level = store::kDefaultZstdLevel;
  bool no_dictionaries = false;
  int threads = 0;
  bool now = false;
};

// `tbfs migrate MOUNTPOINT --now`: the running mount migrates at once, with
// its own policy; returns when the pass is done.
int MigrateThroughMount(const MigrateArgs& args) {
  if (!IsTbfsMount(args.logdir)) {
    const std::string err =
        "not a tbfs mount point: " + args.logdir + " (--now asks a running mount to migrate)";
    if (args.json) PrintJsonError(err);
    PrintError("migrate", err);
    return kExitError;
  }
  std::string after;
  if (std::string err = AskMount(args.logdir, "migrate-now", &after); !err.empty()) {
    if (args.json) PrintJsonError(err);
    PrintError("migrate", err);
    return kExitError;
  }
  auto j = json::parse(after, nullptr, false);
  if (args.json || j.is_discarded()) {
    PrintJsonText(after);
  } else {
    fmt::print("{}: {} cold files, {} stored as {}; last verifier: {}\n", args.logdir,
               j["cold"]["files"].get<uint64_t>(), HumanBytes(j["cold"]["bytes"].get<uint64_t>()),
               HumanBytes(j["cold"]["stored_bytes"].get<uint64_t>()),
               j["last_verifier"].get<std::string>().empty()
                   ? "no batch yet"
                   : j["last_verifier"].get<std::string>());
  }
  return j.is_discarded() || j["last_verifier"].get<std::string>().starts_with("failed")
             ? kExitFinding
             : kExitOk;
}

// Merges the config file into the arguments (flags win) and builds the
// candidate options. Returns an error message, or "".
std::string Prepare(MigrateArgs* args, store::CandidateOptions* copt, bool* apply) {
  store::ConfigFile config;
  if (!args->config.empty()) {
    auto loaded = store::LoadConfigFile(args->config);
    if (!loaded.ok()) return loaded.status().message();
    config = *loaded;
  }
  if (args->logdir.empty()) {
    if (!config.logdir) return "no LOGDIR given (on the command line or as logdir: in --config)";
    args->logdir = *config.logdir;
  }
  *apply = args->dry_run ? false : (args->apply || !config.dry_run);
  if (args->backup.empty() && config.backup_enabled) args->backup = config.backup_dir;
  if (args->must_have.empty()) args->must_have = config.must_have_tags;
  copt->policy.trace_markers = config.trace_markers;
  copt->policy.protected_markers = config.protected_markers;
  for (const std::string& c : args->classes) {
    store::FileClass cls;
    if (!store::ParseClassName(c, &cls) || !store::IsTraceClass(cls)) {
      return "unknown trace class '" + c + "' (use tf_profile, pytorch_trace, other_trace)";
    }
    copt->classes.push_back(cls);
  }
  if (!args->min_size.empty()) {
    auto n = ParseSizeBytes(args->min_size);
    if (!n.ok()) return "--min-size: " + n.status().message();
    copt->min_size_bytes = *n;
  }
  auto age = ParseDurationSeconds(args->older_than);
  if (!age.ok()) return "--older-than: " + age.status().message();
  copt->older_than_s = *age;
  if (args->level < 1 || args->level > 22) return "--level must be 1..22";
  return "";
}

// The scalars must be intact (and the must-haves there) before anything
// moves. A run whose tfevents file cannot be read holds only its own traces
// (HELD in the report); any other failure (a must-have tag missing) refuses
// the whole migration. Returns the exit code when the migration stops here.
// `events_files`: the tfevents files the walk for candidates found; their
// digest goes to *digest (the migration's baseline).
std::optional<int> CheckBefore(const MigrateArgs& args,
                               const std::vector<std::string>& events_files,
                               events::LogdirDigest* digest) {
  events::VerifyOptions vopt;
  vopt.files = &events_files;  // no walk of its own
  vopt.must_have = args.must_have;
  auto before = events::VerifyLogdir(args.logdir, vopt);
  if (!before.ok()) {
    PrintError("migrate", before.status().message());
    return kExitError;
  }
  if (before->digest.files.empty() && !args.allow_no_events) {
    PrintError("migrate", "no *.tfevents.* file under " + args.logdir +
                              " (wrong path?); use --allow-no-events to migrate anyway");
    return kExitError;
  }
  std::set<std::string> unreadable;
  for (const auto& e : before->digest.errors) unreadable.insert(e.path);
  bool refuse = false;
  for (const auto& f : before->failures) {
    if (!f.file.empty() && unreadable.count(f.file) > 0) continue;
    PrintError("migrate", "refusing: " + f.ToString());
    refuse = true;
  }
  if (refuse) return kExitFinding;
  *digest = std::move(before->digest);
  return std::nullopt;
}

// What a walk finds to move. --apply without --backup keeps no list of the
// files: a first walk counts them (the progress line's total), the
// migration takes them as a second walk finds them, a batch at a time, and
// the report goes out batch by batch. A dry run, a backup, or nothing to
// move need the list (*candidates). The first walk also lists the tfevents
// files (found->events_files), for the check before anything moves.
struct Found {
  std::vector<store::Candidate> candidates;
  std::vector<store::Skipped> skipped;
  uint64_t count = 0, total = 0;
  std::vector<std::string> events_files;
  events::LogdirDigest events_digest;  // of events_files, before anything moved
};
Status FindWhatMoves(const MigrateArgs& args, store::CandidateOptions copt, bool apply,
                     Found* found) {
  copt.on_entry = [found](const WalkEntry& e) {
    if (events::IsEventsFile(e)) found->events_files.push_back(e.rel);
  };
  const bool counted = apply && args.backup.empty();
  if (counted) {
    TBFS_RETURN_IF_ERROR(store::ForEachCandidate(
        args.logdir, copt,
        [&](store::Candidate&& c) {
          found->count++;
          found->total += c.size;
        },
        [](store::Skipped&&) {}));
  }
  if (!apply || !args.backup.empty() || found->count == 0) {
    if (counted) copt.on_entry = nullptr;  // the tfevents files are listed
    TBFS_RETURN_IF_ERROR(
        store::FindCandidates(args.logdir, copt, &found->candidates, &found->skipped));
    found->count = found->candidates.size();
    found->total = 0;
    for (const auto& c : found->candidates) found->total += c.size;
  }
  return Status::OK();
}

// --backup: a .tar.zst of the files before anything moves (its path into
// *archive).
Status Backup(const MigrateArgs& args, const Found& found, std::string* archive) {
  if (store::SameFilesystem(args.backup, args.logdir) ||
      store::SameFilesystem(ParentPath(args.backup).empty() ? "." : ParentPath(args.backup),
                            args.logdir)) {
    PrintError("migrate", "warning: the backup folder " + args.backup +
                              " is on the same filesystem as the logdir");
  }
  std::vector<std::string> paths;
  for (const auto& c : found.candidates) paths.push_back(c.path);
  Progress progress("backup", found.total);
  return store::WriteBackup(args.logdir, paths, args.backup, archive, progress.counter());
}

// Moves what was found (or, without a list, what a second walk finds).
int Apply(const MigrateArgs& args, const StoreLocation& loc, const store::CandidateOptions& copt,
          uint32_t chunk_bytes, const Found& found) {
  // The store first (and the logdir's lock): a wrong --store, or another
  // tbfs at work, is refused before anything is written.
  auto store = OpenStoreForWrite(loc, true, "migrate");
  if (!store.ok()) {
    PrintError("migrate", store.status().message());
    return kExitError;
  }
  std::string archive;
  if (!args.backup.empty()) {
    if (Status st = Backup(args, found, &archive); !st.ok()) {
      PrintError("migrate", "backup failed, nothing moved: " + st.message());
      return kExitError;
    }
  }
  store::MigrateOptions mopt;
  mopt.must_have = args.must_have;
  mopt.chunk_bytes = chunk_bytes;
  mopt.level = args.level;
  mopt.dictionaries = !args.no_dictionaries;
  mopt.threads = args.threads;
  mopt.walk = loc.walk;
  mopt.events_digest = &found.events_digest;
  mopt.keep_batches = false;
  BatchReport report(args.json);
  report.Open(args.logdir, loc.dir);
  mopt.after_batch = [&](const store::BatchResult& b) { report.Batch(b); };
  double start = NowSeconds();
  Result<store::MigrateResult> result = [&] {
    Progress progress("migrate", found.total);
    mopt.progress = progress.counter();
    if (!found.candidates.empty()) {
      return store::Migrate(**store, args.logdir, found.candidates, mopt);
    }
    return store::MigrateFrom(
        **store, args.logdir,
        [&](const std::function<void(store::Candidate &&)>& sink) {
          return store::ForEachCandidate(args.logdir, copt, sink, [](store::Skipped&&) {});
        },
        mopt);
  }();
  return report.Close(result, NowSeconds() - start, archive);
}

int RunMigrate(MigrateArgs args) {
  if (args.now) return MigrateThroughMount(args);
  if (!args.logdir.empty() && IsTbfsMount(args.logdir)) {
    PrintError("migrate", args.logdir +
                              " is a tbfs mount point: use --now to have the mount "
                              "migrate, or give the backing logdir");
    return kExitError;
  }
  store::CandidateOptions copt;
  bool apply = false;
  std::string err = Prepare(&args, &copt, &apply);
  if (!err.empty()) {
    PrintError("migrate", err);
    return kExitError;
  }
  auto loc = LocateStore(args.logdir, args.store);
  if (!loc.ok()) {
    PrintError("migrate", loc.status().message());
    return kExitError;
  }
  copt.walk = loc->walk;

  uint32_t chunk_bytes = store::kDefaultChunkBytes;
  if (!args.chunk_size.empty()) {
    auto n = ParseSizeBytes(args.chunk_size);
    if (!n.ok() || *n < 4096 || *n > (64u << 20)) {
      PrintError("migrate", "--chunk-size must be between 4K and 64M");
      return kExitError;
    }
    chunk_bytes = static_cast<uint32_t>(*n);
  }
  Found found;
  if (Status st = FindWhatMoves(args, copt, apply, &found); !st.ok()) {
    PrintError("migrate", st.message());
    return kExitError;
  }
  if (auto stop = CheckBefore(args, found.events_files, &found.events_digest)) return *stop;
  if (found.count == 0) {
    // Still a writer: what a batch left unfinished (a crash, a commit the
    // store refused) is recovered now, as the last run said it would be;
    // a store refused is said alone.
    if (apply) {
      auto store = OpenStoreForWrite(*loc, /*create=*/false, "migrate");
      if (!store.ok() && store.status().code() != Code::kBusy) {
        PrintError("migrate", store.status().message());
        return kExitError;
      }
    }
    if (args.json) {
      PrintJson(json{{"logdir", args.logdir}, {"files", 0}, {"dry_run", !apply}});
    } else {
      for (const auto& s : found.skipped)
        fmt::print("  skipped: {} ({})\n", Printable(s.path), Printable(s.reason));
      fmt::print("nothing to migrate in {}\n", args.logdir);
    }
    return kExitOk;
  }
  if (apply) return Apply(args, *loc, copt, chunk_bytes, found);
  uint64_t sample = 0;
  auto ratio =
      store::EstimateRatio(args.logdir, found.candidates, chunk_bytes, args.level, &sample);
  if (!ratio.ok()) {
    PrintError("migrate", ratio.status().message());
    return kExitError;
  }
  PrintPlan(found.candidates, found.skipped, *ratio, sample, args.json, args.logdir);
  return kExitOk;
}

}  // namespace

void RegisterMigrate(CLI::App& app, int* exit_code) {
  auto args = std::make_shared<MigrateArgs>();
  CLI::App* cmd = app.add_subcommand(
      "migrate",
      "Move quiet profiler traces into the compressed cold store. Dry run unless --apply.\n"
      "Every batch is journaled, verified (scalar digests before and after) and rolled back "
      "on any difference. tfevents files are never moved.");
  cmd->add_option("LOGDIR", args->logdir, "the logdir (or logdir: in --config)");
  cmd->add_option("--store", args->store, kStoreOptionHelp);
  cmd->add_flag("--apply", args->apply, "really migrate (default: dry run)");
  cmd->add_flag("--dry-run", args->dry_run, "force a dry run, whatever the config says");
  cmd->add_option("--class", args->classes,
                  "only these classes: tf_profile,pytorch_trace,other_trace")
      ->delimiter(',');
  cmd->add_option("--min-size", args->min_size, "skip files smaller than this (e.g. 1M)");
  cmd->add_option("--older-than", args->older_than,
                  "only files not modified for this long (e.g. 30s, 5m, 2h)")
      ->capture_default_str();
  cmd->add_option("--must-have", args->must_have, "tags some run must hold, before and after")
      ->delimiter(',');
  cmd->add_option("--backup", args->backup, "first write a .tar.zst of the files to DIR");
  cmd->add_option("--config", args->config, "YAML policy file (flags override it)");
  cmd->add_flag("--allow-no-events", args->allow_no_events,
                "migrate even when no tfevents file is found");
  cmd->add_option("--chunk-size", args->chunk_size, "uncompressed chunk size (default 1M)");
  cmd->add_option("--level", args->level, "zstd level")->capture_default_str();
  cmd->add_flag("--no-dictionaries", args->no_dictionaries,
                "compress each chunk on its own, without its file family's zstd dictionary");
  cmd->add_option("--threads", args->threads, "compression threads (default: one per core)")
      ->check(CLI::Range(0, 1024));
  cmd->add_flag("--now", args->now, "LOGDIR is a tbfs mount point: have the mount migrate now");
  cmd->add_flag("--json", args->json, "print the plan or the report as JSON");
  cmd->callback([args, exit_code] { *exit_code = RunMigrate(*args); });
}

}  // namespace tbfs::cli
