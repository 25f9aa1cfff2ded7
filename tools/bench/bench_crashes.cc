// tbfs-bench crashes: `tbfs migrate --apply` killed at random instants (and,
// in a build with test failpoints, at the phase boundaries), the recoveries
// after it killed too, while a second user keeps saving new versions of the
// traces in their run folder, in place and by rename. After each round a
// clean recovery, and the check of invariant I4 against that user: each of
// their traces holds the last version they saved (in the logdir or in the
// store), every copy put beside a name is a version they saved, nothing is
// recorded as lost, no leftover of tbfs's own is left; the generator's
// traces are byte for byte where they were or in the store.
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <random>
#include <thread>

#include "base/fs_util.h"
#include "fmt/format.h"
#include "spdlog/spdlog.h"
#include "store/cold_store.h"
#include "store/migrate.h"
#include "store/store_dir.h"
#include "tools/bench/bench.h"
#include "tools/bench/faults.h"
#include "tools/cli/progress.h"

namespace tbfs::bench {

namespace {
namespace crashes_bench {

namespace stdfs = std::filesystem;

struct Args {
  std::string dir = "/tmp/tbfs-bench-crashes";
  std::string tbfs = "tbfs";
  int rounds = 40;
  int files = 6;
  uint32_t uid = 65534;  // the writer (nobody)
  uint64_t seed = 1;
  bool json = false;
};

struct Totals {
  uint64_t rounds = 0, killed = 0, failpoint_crashes = 0, recoveries_killed = 0,
           restores_killed = 0;
  uint64_t saves = 0, checked = 0, lost = 0, stale = 0, wrong = 0, recorded_lost = 0;
  uint64_t leftovers = 0, unfinished = 0;
  uint64_t beside = 0;  // copies beside a name at the last check
  std::string first_problem;
};

constexpr const char* kUserRun = "userrun";

// Version v of the writer's file f: a Chrome trace of 0.1-1.2 MB whose first
// line names both (so a copy found beside a name says which it must be).
std::string Version(int f, uint64_t v) {
  std::mt19937_64 rng(static_cast<uint64_t>(f) * 1000003 + v);
  std::string out = fmt::format("{{\"tbfs_bench\":[{},{}],\n\"traceEvents\":[", f, v);
  const int events = 1000 + static_cast<int>(rng() % 11000);
  for (int e = 0; e < events; ++e) {
    out += fmt::format("{}{{\"ph\":\"X\",\"name\":\"op{}\",\"ts\":{},\"dur\":{}}}", e ? "," : "",
                       rng() % 97, e * 3, rng() % 50);
  }
  return out + "]}";
}

std::string NameOf(int f) { return fmt::format("w{}.pt.trace.json", f); }

// The writer, in its own process as `uid`: saves versions of its files, in
// place (O_TRUNC) or by rename over the name, each dated an hour back (a
// candidate at once). Reports each save done ("f v\n") on `report`; on 'p'
// from `control` it reports "paused\n" and waits for 'r'.
[[noreturn]] void Writer(const std::string& folder, int files, uint32_t uid, uint64_t seed,
                         int control, int report) {
  if (::setgid(uid) != 0 || ::setuid(uid) != 0) ::_exit(3);
  std::mt19937_64 rng(seed);
  std::vector<uint64_t> version(static_cast<size_t>(files), 0);
  ::fcntl(control, F_SETFL, O_NONBLOCK);
  for (;;) {
    char c;
    if (::read(control, &c, 1) == 1 && c == 'p') {
      (void)!::write(report, "paused\n", 7);
      ::fcntl(control, F_SETFL, 0);
      while (::read(control, &c, 1) == 1 && c != 'r') {
      }
      ::fcntl(control, F_SETFL, O_NONBLOCK);
    }
    const int f = static_cast<int>(rng() % static_cast<uint64_t>(files));
    const uint64_t v = ++version[static_cast<size_t>(f)];
    const std::string path = folder + "/" + NameOf(f), bytes = Version(f, v);
    const bool rename_over = rng() % 2 == 0;
    const std::string target = rename_over ? folder + "/.save.tmp" : path;
    UniqueFd fd(::open(target.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644));
    if (!fd.valid() || !WriteAll(fd.get(), bytes.data(), bytes.size(), target).ok()) ::_exit(4);
    const struct timespec hour_ago = {::time(nullptr) - 3600, 0};
    const struct timespec times[2] = {hour_ago, hour_ago};
    ::futimens(fd.get(), times);
    fd.reset();
    if (rename_over && ::rename(target.c_str(), path.c_str()) != 0) ::_exit(5);
    const std::string line = fmt::format("{} {}\n", f, v);
    (void)!::write(report, line.data(), line.size());
    std::this_thread::sleep_for(std::chrono::milliseconds(rng() % 30));
  }
}

// Runs `tbfs ARGS` with TBFS_FAILPOINT=point (when not empty); SIGKILLs it
// after kill_after_s (when >= 0). True when it was killed or crashed at
// the point.
bool RunTbfs(const Args& a, const std::vector<std::string>& args, const std::string& point,
             double kill_after_s) {
  pid_t pid = ::fork();
  if (pid == 0) {
    ::freopen("/dev/null", "w", stdout);
    ::freopen("/dev/null", "w", stderr);
    if (!point.empty()) ::setenv("TBFS_FAILPOINT", point.c_str(), 1);
    std::vector<char*> argv{const_cast<char*>(a.tbfs.c_str())};
    for (const std::string& s : args) argv.push_back(const_cast<char*>(s.c_str()));
    argv.push_back(nullptr);
    ::execvp(a.tbfs.c_str(), argv.data());
    ::_exit(127);
  }
  const auto start = std::chrono::steady_clock::now();
  const double limit = kill_after_s >= 0 ? kill_after_s : 300;
  int status = 0;
  while (::waitpid(pid, &status, WNOHANG) != pid) {
    if (std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count() > limit) {
      ::kill(pid, SIGKILL);
      ::waitpid(pid, &status, 0);
      return true;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
  }
  return WIFEXITED(status) && WEXITSTATUS(status) == 86;
}

// A build with test failpoints refuses a point of no such name.
bool HasFailpoints(const Args& a) {
  const std::string cmd = "TBFS_FAILPOINT=no.such.point " + a.tbfs + " --version >/dev/null 2>&1";
  return std::system(cmd.c_str()) != 0;
}

void Problem(Totals* t, const std::string& what) {
  if (t->first_problem.empty()) t->first_problem = what;
}

// The file's bytes: in the logdir, else in the store (when there is one);
// false when in neither.
bool Current(store::ColdStore* s, const std::string& logdir, const std::string& rel,
             std::string* out) {
  if (ReadFileToString(logdir + "/" + rel, out).ok()) return true;
  auto m = s != nullptr ? s->Lookup(rel) : Result<storepb::Manifest>(Status::NotFound(rel));
  if (!m.ok()) return false;
  out->assign(m->size(), '\0');
  size_t n = 0;
  store::ChunkCodec codec;
  return s->ReadRange(*m, 0, out->size(), out->data(), &n, &codec).ok() && n == out->size();
}

// After a round: a clean recovery by the tbfs under test, then every file
// checked through a read-only open of the store.
void Check(const Args& a, const std::string& logdir,
           const std::map<std::string, std::string>& originals, const std::vector<uint64_t>& last,
           Totals* t) {
  const std::vector<std::string> recover = {"migrate", logdir, "--apply", "--older-than", "1000d"};
  if (RunTbfs(a, recover, "", -1)) Problem(t, "the clean recovery crashed");
  store::OpenOptions o;
  o.read_only = true;
  auto opened = store::ColdStore::Open(logdir + "/" + store::kStoreDirName, o);
  store::ColdStore* s = opened.ok() ? opened->get() : nullptr;
  if (!opened.ok() && !opened.status().IsNotFound()) {
    Problem(t, "open: " + opened.status().message());  // a store not made yet is no problem
  }
  if (s != nullptr) {
    // Nothing stands in its way here (no folder is a symlink): it finishes.
    std::vector<storepb::JournalRecord> journal;
    if (s->ListJournal(&journal).ok() && !journal.empty()) {
      t->unfinished++;
      Problem(t, fmt::format("a journal record stayed after recovery (batch {})",
                             journal[0].batch_id()));
    }
    std::vector<store::ColdStore::LostFile> lost;
    if (s->ListLost(&lost).ok() && !lost.empty()) {
      t->recorded_lost += lost.size();
      Problem(t, "recorded as lost: " + lost.front().path);
    }
  }
  std::string got;
  for (const auto& [rel, bytes] : originals) {
    t->checked++;
    if (!Current(s, logdir, rel, &got)) {
      t->lost++;
      Problem(t, "lost: " + rel);
    } else if (got != bytes) {
      t->wrong++;
      Problem(t, "wrong bytes: " + rel);
    }
  }
  for (size_t f = 0; f < last.size(); ++f) {
    const std::string rel = std::string(kUserRun) + "/" + NameOf(static_cast<int>(f));
    t->checked++;
    if (!Current(s, logdir, rel, &got)) {
      t->lost++;
      Problem(t, "lost: " + rel);
    } else if (got != Version(static_cast<int>(f), last[f])) {
      t->stale++;
      Problem(t, fmt::format("{}: not the last version saved ({})", rel, last[f]));
    }
  }
  uint64_t beside = 0;
  for (const auto& e : stdfs::directory_iterator(logdir + "/" + kUserRun)) {
    const std::string name = e.path().filename();
    if (name.find(".tbfs-recovered-") != std::string::npos) {
      beside++;
      int f = -1;
      unsigned long long v = 0;
      const std::string bytes = faults::Slurp(e.path());
      if (std::sscanf(bytes.c_str(), "{\"tbfs_bench\":[%d,%llu]", &f, &v) != 2 ||
          bytes != Version(f, v)) {
        t->wrong++;
        Problem(t, "beside a name, not a version saved: " + name);
      }
    } else if (name.find(".tbfs-") != std::string::npos) {
      t->leftovers++;
      Problem(t, "left over: " + name);
    }
  }
  t->beside = beside;  // in the folder now (they stay: the user's to sort out)
}

}  // namespace crashes_bench
}  // namespace

namespace {
namespace crashes_bench {

const std::vector<std::string> kPoints = {
    "migrate.copying",   "migrate.stored",   "migrate.read_back",    "migrate.aside",
    "migrate.flushed",   "migrate.unlinked", "migrate.all_unlinked", "migrate.verified",
    "migrate.committed", "ingest.commit"};

// The report lines of the writer up to "paused": the last version of each file.
bool PauseWriter(int control, int report, std::vector<uint64_t>* last, Totals* t) {
  if (::write(control, "p", 1) != 1) return false;
  std::string line;
  char c;
  while (::read(report, &c, 1) == 1) {
    if (c != '\n') {
      line += c;
      continue;
    }
    if (line == "paused") return true;
    int f = 0;
    unsigned long long v = 0;
    if (std::sscanf(line.c_str(), "%d %llu", &f, &v) == 2 && f >= 0 &&
        static_cast<size_t>(f) < last->size()) {
      (*last)[static_cast<size_t>(f)] = v;
      t->saves++;
    }
    line.clear();
  }
  return false;  // the writer died
}

Status Setup(const Args& a, const std::string& logdir,
             std::map<std::string, std::string>* originals) {
  faults::Args fa;
  fa.trace_mb = 2;
  fa.seed = a.seed;
  TBFS_RETURN_IF_ERROR(faults::GenerateLogdir(fa, logdir));
  store::CandidateOptions c;
  c.older_than_s = 0;
  std::vector<store::Candidate> candidates;
  std::vector<store::Skipped> skipped;
  TBFS_RETURN_IF_ERROR(store::FindCandidates(logdir, c, &candidates, &skipped));
  for (const auto& cand : candidates)
    (*originals)[cand.path] = faults::Slurp(logdir + "/" + cand.path);
  const std::string run = logdir + "/" + kUserRun;
  if (::mkdir(run.c_str(), 0755) != 0 || ::chown(run.c_str(), a.uid, a.uid) != 0)
    return Status::FromErrno(errno, "make", run);
  for (int f = 0; f < a.files; ++f) {
    const std::string path = run + "/" + NameOf(f);
    TBFS_RETURN_IF_ERROR(WriteFileAtomic(path, Version(f, 0), 0644));
    const struct timespec hour_ago = {::time(nullptr) - 3600, 0};
    const struct timespec times[2] = {hour_ago, hour_ago};
    if (::chown(path.c_str(), a.uid, a.uid) != 0 ||
        ::utimensat(AT_FDCWD, path.c_str(), times, 0) != 0)
      return Status::FromErrno(errno, "chown", path);
  }
  return Status::OK();
}

void Print(const Args& a, const Totals& t, bool failpoints) {
  const bool ok = t.first_problem.empty();
  if (a.json) {
    fmt::print("{}\n", nlohmann::json{{"rounds", t.rounds},
                                      {"killed", t.killed},
                                      {"failpoint_crashes", t.failpoint_crashes},
                                      {"recoveries_killed", t.recoveries_killed},
                                      {"restores_killed", t.restores_killed},
                                      {"saves", t.saves},
                                      {"checked", t.checked},
                                      {"lost", t.lost},
                                      {"stale", t.stale},
                                      {"wrong", t.wrong},
                                      {"recorded_lost", t.recorded_lost},
                                      {"beside", t.beside},
                                      {"leftovers", t.leftovers},
                                      {"unfinished", t.unfinished},
                                      {"first_problem", t.first_problem},
                                      {"ok", ok}}
                           .dump(2));
    return;
  }
  fmt::print(
      "{} rounds: tbfs migrate --apply killed at a random instant {} times, crashed at a "
      "failpoint {} times{}; {} recoveries and {} restores after them killed too\n",
      t.rounds, t.killed, t.failpoint_crashes, failpoints ? "" : " (this build has none)",
      t.recoveries_killed, t.restores_killed);
  fmt::print("meanwhile uid {} saved {} versions of {} traces (in place and by rename)\n", a.uid,
             t.saves, a.files);
  fmt::print(
      "files checked {}: lost {}, not the last version saved {}, wrong bytes {}, recorded as "
      "lost {}, left over {}, batches recovery left unfinished {}; copies beside a name at the end "
      "{} "
      "(each a version saved)\n",
      t.checked, t.lost, t.stale, t.wrong, t.recorded_lost, t.leftovers, t.unfinished, t.beside);
  fmt::print("{}\n", ok ? "nothing lost" : "FAILED: " + t.first_problem);
}

int RunCrashes(const Args& a) {
  std::error_code ec;
  stdfs::remove_all(a.dir, ec);
  stdfs::create_directories(a.dir, ec);
  const std::string logdir = a.dir + "/logdir";
  std::map<std::string, std::string> originals;
  if (Status st = Setup(a, logdir, &originals); !st.ok()) {
    fmt::print(stderr, "tbfs-bench crashes: {}\n", st.message());
    return 2;
  }
  const bool failpoints = HasFailpoints(a);
  int control[2], report[2];
  if (::pipe2(control, O_CLOEXEC) != 0 || ::pipe2(report, O_CLOEXEC) != 0) return 2;
  const pid_t writer = ::fork();
  if (writer == 0) Writer(logdir + "/" + kUserRun, a.files, a.uid, a.seed, control[0], report[1]);
  ::close(control[0]);
  ::close(report[1]);
  std::mt19937_64 rng(a.seed);
  auto uniform = [&](double lo, double hi) {
    return lo + (hi - lo) * static_cast<double>(rng() % 10000) / 10000;
  };
  const std::vector<std::string> migrate = {"migrate", logdir, "--apply", "--older-than", "0s"};
  const std::vector<std::string> recover = {"migrate", logdir, "--apply", "--older-than", "1000d"};
  std::vector<uint64_t> last(static_cast<size_t>(a.files), 0);
  Totals t;
  double whole = 2;  // a whole run's time, from the first (not killed)
  spdlog::set_level(spdlog::level::err);
  cli::Progress progress("rounds", static_cast<uint64_t>(a.rounds));
  for (int r = 0; r < a.rounds && t.first_problem.empty(); ++r) {
    t.rounds++;
    if (r == 0) {
      const auto start = std::chrono::steady_clock::now();
      RunTbfs(a, migrate, "", -1);
      whole = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    } else if (failpoints && rng() % 2 == 0) {
      t.failpoint_crashes += RunTbfs(a, migrate, kPoints[rng() % kPoints.size()], -1);
    } else {
      t.killed += RunTbfs(a, migrate, "", uniform(0.02, 1.1) * whole);
    }
    if (rng() % 4 == 0) {  // some cold files back, the restore crashed too
      const bool at_point = failpoints && rng() % 2 == 0;
      t.restores_killed +=
          RunTbfs(a, {"restore", logdir, "--apply", "--all"}, at_point ? "restore.in_place" : "",
                  at_point ? -1 : uniform(0, 0.5));
    }
    for (int n = static_cast<int>(rng() % 3); n > 0; --n) {
      const bool at_point = failpoints && rng() % 2 == 0;
      t.recoveries_killed += RunTbfs(a, recover, at_point ? "recovery.written_back" : "",
                                     at_point ? -1 : uniform(0, 0.4));
    }
    if (!PauseWriter(control[1], report[0], &last, &t)) {
      Problem(&t, "the writer died");
      break;
    }
    Check(a, logdir, originals, last, &t);
    if (::write(control[1], "r", 1) != 1) break;
    progress.counter()->fetch_add(1);
  }
  ::kill(writer, SIGKILL);
  ::waitpid(writer, nullptr, 0);
  Print(a, t, failpoints);
  return t.first_problem.empty() ? 0 : 1;
}

}  // namespace crashes_bench
}  // namespace

void RegisterCrashesBench(CLI::App& app, int* exit_code) {
  using namespace crashes_bench;  // its Args and Run
  auto a = std::make_shared<Args>();
  CLI::App* cmd = app.add_subcommand(
      "crashes",
      "kill tbfs migrate --apply and the recoveries after it at random instants (and at the "
      "failpoints of a test build) while another user saves new versions of their traces; after "
      "each round, check that nothing was lost (exit 1 naming the first problem)");
  cmd->add_option("--dir", a->dir, "scratch folder (wiped)")->capture_default_str();
  cmd->add_option("--tbfs", a->tbfs, "the tbfs command")->capture_default_str();
  cmd->add_option("--rounds", a->rounds, "crash rounds")->capture_default_str();
  cmd->add_option("--files", a->files, "traces the other user keeps saving")->capture_default_str();
  cmd->add_option("--uid", a->uid, "that user's uid (and gid)")->capture_default_str();
  cmd->add_option("--seed", a->seed, "seed of the logdir, the kills and the saves")
      ->capture_default_str();
  cmd->add_flag("--json", a->json, "print the report as JSON");
  cmd->callback([a, exit_code] { *exit_code = RunCrashes(*a); });
}

}  // namespace tbfs::bench
