// tbfs-bench faults: single-byte damage anywhere in a store, and what a
// reader and salvage make of it.
//
// Builds a logdir with the generator, migrates every trace into a store
// (closed and flushed, as a mount leaves it between passes, plus one
// attribute change left in the engine's log), keeps the original bytes,
// then for each of --trials trials: copies the store, flips one random bit
// of one random byte of one store file (files chosen uniformly, every file
// of the store counts: tables, blob files, the log, CURRENT, the engine's
// MANIFEST, OPTIONS, IDENTITY), and
//   - opens it read-only as `tbfs ls/export/fsck` do and reads every cold
//     file whole through ColdStore::ReadRange (the mount's cold read path,
//     without its cache): each file is served correctly, fails (an error:
//     EIO through a mount), or is served with wrong bytes, which must never
//     happen; a store that does not open fails every file;
//   - runs salvage into a scratch folder and counts the files it writes
//     back byte for byte (each verified against its content hash).
// Prints a table by kind of store file and the totals.
//
// Then --crash-trials trials of a crash followed by damage to the engine's
// log: a logdir of the generator's traces plus many small PyTorch traces
// is migrated by `tbfs migrate --apply`, killed (SIGKILL) at a random
// instant of the run; one 4 KiB block of its largest write-ahead log is
// zeroed; a writer opens the store and recovers. Every trace must then be
// in the logdir or in the store, byte for byte: the lost files are counted
// by kind of file, and so are those recovery recorded as lost.
//
// Exit 0 when no wrong byte was ever served or written and no file was
// lost, 1 otherwise, 2 when the run could not start.
#include <fcntl.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <array>
#include <chrono>
#include <filesystem>
#include <map>
#include <nlohmann/json.hpp>
#include <random>

#include "base/fs_util.h"
#include "base/time_util.h"
#include "base/work_pool.h"
#include "fmt/format.h"
#include "spdlog/spdlog.h"
#include "store/classify.h"
#include "store/cold_store.h"
#include "store/migrate.h"
#include "store/salvage.h"
#include "store/store_dir.h"
#include "tools/bench/bench.h"
#include "tools/bench/faults.h"
#include "tools/cli/progress.h"
#include "tools/gen/gen.h"

namespace tbfs::bench {

namespace faults {

namespace stdfs = std::filesystem;

struct Row {
  uint64_t trials = 0;
  uint64_t not_opened = 0;  // trials where the store did not open
  uint64_t served_ok = 0;   // files (summed over trials)
  uint64_t served_error = 0;
  uint64_t served_wrong = 0;  // must stay 0
  uint64_t salvaged = 0;
  uint64_t salvage_wrong = 0;  // must stay 0
  uint64_t salvage_lost = 0;
};

std::string KindOf(const std::string& name) {
  for (const char* suffix : {".sst", ".blob", ".log"}) {
    if (name.ends_with(suffix)) return std::string("*") + suffix;
  }
  return name.substr(0, name.find('-'));
}

std::string Slurp(const std::string& path) {
  std::string out;
  (void)ReadFileToString(path, &out);
  return out;
}

// The generator's logdir of the bench (3 runs, --trace-mb of traces).
Status GenerateLogdir(const Args& a, const std::string& logdir) {
  gen::GenOptions g;
  g.runs = 3;
  g.steps = 100;
  g.trace_mb = a.trace_mb;
  g.seed = a.seed;
  gen::GenReport report;
  return gen::GenerateLogdir(logdir, g, &report);
}

// The pristine store and the bytes of every cold file.
Status Prepare(const Args& a, const std::string& store_dir,
               std::map<std::string, std::string>* originals) {
  const std::string logdir = a.dir + "/logdir";
  TBFS_RETURN_IF_ERROR(GenerateLogdir(a, logdir));
  store::CandidateOptions c;
  c.older_than_s = 0;
  std::vector<store::Candidate> candidates;
  std::vector<store::Skipped> skipped;
  TBFS_RETURN_IF_ERROR(store::FindCandidates(logdir, c, &candidates, &skipped));
  for (const auto& cand : candidates) (*originals)[cand.path] = Slurp(logdir + "/" + cand.path);
  store::OpenOptions o;
  o.create_if_missing = true;
  auto store = store::ColdStore::Open(store_dir, o);
  if (!store.ok()) return store.status();
  store::MigrateOptions m;
  m.chunk_bytes = 256 << 10;
  auto result = store::Migrate(**store, logdir, candidates, m);
  if (!result.ok()) return result.status();
  if (result->files_moved != candidates.size()) {
    return Status::Aborted(
        fmt::format("only {} of {} files migrated", result->files_moved, candidates.size()));
  }
  auto first = (*store)->Lookup(candidates[0].path);
  if (!first.ok()) return first.status();
  first->set_mode((first->mode() & S_IFMT) | 0600);
  store::WriteBatch batch;
  (*store)->UpdateManifest(&batch, *first);
  return (*store)->Commit(batch, true);
}

void ServeAll(const std::string& store_dir, const std::map<std::string, std::string>& originals,
              Row* row) {
  store::OpenOptions ro;
  ro.read_only = true;
  auto store = store::ColdStore::Open(store_dir, ro);
  if (!store.ok()) {
    row->not_opened++;
    row->served_error += originals.size();
    return;
  }
  store::ChunkCodec codec;
  for (const auto& [path, bytes] : originals) {
    auto m = (*store)->Lookup(path);
    if (!m.ok()) {
      row->served_error++;
      continue;
    }
    std::string got(m->size(), '\0');
    size_t n = 0;
    Status st = (*store)->ReadRange(*m, 0, got.size(), got.data(), &n, &codec);
    if (!st.ok()) {
      row->served_error++;
    } else if (n != bytes.size() || got.compare(0, n, bytes) != 0) {
      row->served_wrong++;
    } else {
      row->served_ok++;
    }
  }
}

void SalvageAll(const std::string& store_dir, const std::string& to,
                const std::map<std::string, std::string>& originals, WorkPool* pool, Row* row) {
  store::SalvageOptions o;
  o.store_dir = store_dir;
  o.to = to;
  o.pool = pool;
  auto r = store::Salvage(o);
  if (!r.ok()) {
    row->salvage_lost += originals.size();
    return;
  }
  for (const auto& [path, bytes] : originals) {
    const std::string out = to + "/" + path;
    if (!stdfs::exists(out)) {
      row->salvage_lost++;
    } else if (Slurp(out) != bytes) {
      row->salvage_wrong++;
    } else {
      row->salvaged++;
    }
  }
}

// The flipped-bit trials: each copies the pristine store, flips one bit
// of one of its files, serves and salvages every cold file.
Status FlipTrials(const Args& a, const std::string& pristine, const std::vector<std::string>& files,
                  const std::map<std::string, std::string>& originals,
                  std::map<std::string, Row>* table) {
  std::error_code ec;
  std::mt19937_64 rng(a.seed);
  WorkPool pool(0);
  const std::string work = a.dir + "/work", out = a.dir + "/out";
  cli::Progress progress("faults", static_cast<uint64_t>(a.trials));
  for (int t = 0; t < a.trials; ++t) {
    const std::string name = files[rng() % files.size()];
    stdfs::remove_all(work, ec);
    stdfs::remove_all(out, ec);
    stdfs::copy(pristine, work, ec);
    std::string bytes = Slurp(work + "/" + name);
    const size_t offset = rng() % bytes.size();
    bytes[offset] = static_cast<char>(bytes[offset] ^ (1 << (rng() % 8)));
    TBFS_RETURN_IF_ERROR(WriteFileAtomic(work + "/" + name, bytes, 0600));
    Row& row = (*table)[KindOf(name)];
    row.trials++;
    ServeAll(work, originals, &row);
    SalvageAll(work, out, originals, &pool, &row);
    progress.counter()->fetch_add(1);
  }
  return Status::OK();
}

int Run(const Args& a) {
  std::error_code ec;
  stdfs::remove_all(a.dir, ec);
  stdfs::create_directories(a.dir, ec);
  const std::string pristine = a.dir + "/store";
  std::map<std::string, std::string> originals;
  if (Status st = Prepare(a, pristine, &originals); !st.ok()) {
    fmt::print(stderr, "tbfs-bench faults: {}\n", st.message());
    return 2;
  }
  std::vector<std::string> files;
  for (const auto& e : stdfs::directory_iterator(pristine)) {
    const std::string name = e.path().filename();
    if (name != "LOCK" && name != store::kLogdirLockName && stdfs::file_size(e.path()) > 0)
      files.push_back(name);
  }
  std::sort(files.begin(), files.end());
  std::map<std::string, Row> table;
  if (Status st = FlipTrials(a, pristine, files, originals, &table); !st.ok()) {
    fmt::print(stderr, "tbfs-bench faults: {}\n", st.message());
    return 2;
  }
  Row total;
  for (const auto& [kind, r] : table) {
    total.trials += r.trials;
    total.not_opened += r.not_opened;
    total.served_ok += r.served_ok;
    total.served_error += r.served_error;
    total.served_wrong += r.served_wrong;
    total.salvaged += r.salvaged;
    total.salvage_wrong += r.salvage_wrong;
    total.salvage_lost += r.salvage_lost;
  }
  CrashTotals crash;
  if (a.crash_trials > 0) {
    if (Status st = CrashTrials(a, &crash); !st.ok()) {
      fmt::print(stderr, "tbfs-bench faults: crash trials: {}\n", st.message());
      return 2;
    }
  }
  uint64_t crash_lost = 0, crash_wrong = 0;
  for (const auto& [cls, r] : crash.by_class) {
    crash_lost += r[1];
    crash_wrong += r[2];
  }
  const bool ok =
      total.served_wrong == 0 && total.salvage_wrong == 0 && crash_lost == 0 && crash_wrong == 0;
  auto row_json = [](const Row& r) {
    return nlohmann::json{{"trials", r.trials},
                          {"not_opened", r.not_opened},
                          {"served_ok", r.served_ok},
                          {"served_error", r.served_error},
                          {"served_wrong", r.served_wrong},
                          {"salvaged", r.salvaged},
                          {"salvage_wrong", r.salvage_wrong},
                          {"salvage_lost", r.salvage_lost}};
  };
  if (a.json) {
    nlohmann::json j = {{"cold_files", originals.size()},
                        {"store_files", files.size()},
                        {"total", row_json(total)},
                        {"by_kind", nlohmann::json::object()}};
    for (const auto& [kind, r] : table) j["by_kind"][kind] = row_json(r);
    j["crash_then_damaged_log"] = {{"trials", crash.trials},
                                   {"finished_before_the_kill", crash.finished},
                                   {"store_not_opened", crash.not_opened},
                                   {"first_open_error", crash.open_error},
                                   {"recorded_lost", crash.recorded_lost},
                                   {"lost", crash_lost},
                                   {"wrong", crash_wrong},
                                   {"by_class", nlohmann::json::object()}};
    for (const auto& [cls, r] : crash.by_class) {
      j["crash_then_damaged_log"]["by_class"][cls] = {
          {"files", r[0]}, {"lost", r[1]}, {"wrong", r[2]}};
    }
    cli::PrintJson(j);
  } else {
    fmt::print(
        "{} trials, one flipped bit each in one of {} store files; {} cold files per trial\n",
        a.trials, files.size(), originals.size());
    fmt::print("{:<10} {:>6} {:>10} | {:>9} {:>9} {:>7} | {:>9} {:>6} {:>5}\n", "file", "trials",
               "no open", "served ok", "error", "WRONG", "salvaged", "WRONG", "lost");
    auto line = [](const std::string& kind, const Row& r) {
      fmt::print("{:<10} {:>6} {:>10} | {:>9} {:>9} {:>7} | {:>9} {:>6} {:>5}\n", kind, r.trials,
                 r.not_opened, r.served_ok, r.served_error, r.served_wrong, r.salvaged,
                 r.salvage_wrong, r.salvage_lost);
    };
    for (const auto& [kind, r] : table) line(kind, r);
    line("total", total);
    if (crash.trials > 0) {
      fmt::print(
          "\n{} crashes (kill -9 of tbfs migrate --apply at a random instant; {} ended first), "
          "each followed by a zeroed 4 KiB block of the engine's log; the store did not open "
          "{} times; recovery recorded {} file(s) as lost\n",
          crash.trials, crash.finished, crash.not_opened, crash.recorded_lost);
      if (!crash.open_error.empty()) fmt::print("first refused open: {}\n", crash.open_error);
      fmt::print("{:<14} {:>8} {:>6} {:>6}\n", "kind of file", "files", "lost", "WRONG");
      for (const auto& [cls, r] : crash.by_class)
        fmt::print("{:<14} {:>8} {:>6} {:>6}\n", cls, r[0], r[1], r[2]);
    }
    fmt::print("{}\n", ok ? "no wrong byte served or salvaged, no file lost"
                          : "WRONG BYTES OR LOST FILES: a bug");
  }
  stdfs::remove_all(a.dir, ec);
  return ok ? 0 : 1;
}

}  // namespace faults

void RegisterFaultsBench(CLI::App& app, int* exit_code) {
  auto a = std::make_shared<faults::Args>();
  CLI::App* cmd = app.add_subcommand(
      "faults",
      "flip one random bit in one random store file per trial; count files served "
      "right, failed, wrong (exit 1 if any) and salvaged; then crash migrations and damage "
      "the engine's log: count lost files (exit 1 if any)");
  cmd->add_option("--dir", a->dir, "scratch folder (wiped)")->capture_default_str();
  cmd->add_option("--trials", a->trials, "damaged copies of the store to try")
      ->capture_default_str();
  cmd->add_option("--trace-mb", a->trace_mb, "MiB of traces in the store")->capture_default_str();
  cmd->add_option("--seed", a->seed, "seed of the logdir and the flips")->capture_default_str();
  cmd->add_option("--crash-trials", a->crash_trials,
                  "crashes of tbfs migrate --apply, each followed by damage to the engine's log")
      ->capture_default_str();
  cmd->add_option("--small-traces", a->small_traces,
                  "small PyTorch traces beside the generated ones (crash trials)")
      ->capture_default_str();
  cmd->add_option("--tbfs", a->tbfs, "the tbfs command (crash trials)")->capture_default_str();
  cmd->add_flag("--json", a->json, "print the report as JSON");
  cmd->callback([a, exit_code] { *exit_code = faults::Run(*a); });
}

}  // namespace tbfs::bench
