// tbfs-bench faults, its second half: a crash of `tbfs migrate --apply`,
// then damage to the engine's log (see bench_faults.cc).
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

namespace tbfs::bench::faults {

namespace {

namespace stdfs = std::filesystem;

struct Original {
  std::string bytes;
  std::string cls;
};

// Runs `tbfs migrate LOGDIR --apply`; with kill_after_s >= 0, SIGKILLs it
// that long after it started. True when it ran to its end.
bool RunMigrate(const std::string& tbfs, const std::string& logdir, double kill_after_s) {
  pid_t pid = ::fork();
  if (pid == 0) {
    ::freopen("/dev/null", "w", stdout);
    ::freopen("/dev/null", "w", stderr);
    ::execlp(tbfs.c_str(), tbfs.c_str(), "migrate", logdir.c_str(), "--apply", "--older-than", "0s",
             static_cast<char*>(nullptr));
    ::_exit(127);
  }
  int status = 0;
  if (kill_after_s >= 0) {
    const double deadline = cli::NowSeconds() + kill_after_s;
    while (cli::NowSeconds() < deadline) {
      if (::waitpid(pid, &status, WNOHANG) == pid) return true;
      ::usleep(2000);
    }
    ::kill(pid, SIGKILL);
  }
  ::waitpid(pid, &status, 0);
  return WIFEXITED(status);
}

// Zeroes one 4 KiB block at a random offset of the largest *.log of the
// store. False when there is no log with bytes in it.
bool DamageLargestLog(const std::string& store_dir, std::mt19937_64& rng) {
  std::string largest;
  uint64_t size = 0;
  std::error_code ec;
  for (const auto& e : stdfs::directory_iterator(store_dir, ec)) {
    if (e.path().extension() == ".log" && e.file_size() > size) {
      size = e.file_size();
      largest = e.path();
    }
  }
  if (size == 0) return false;
  const uint64_t at = (rng() % size) & ~uint64_t{4095};
  const std::string zeros(std::min<uint64_t>(4096, size - at), '\0');
  UniqueFd fd(::open(largest.c_str(), O_WRONLY | O_CLOEXEC));
  return fd.valid() && ::pwrite(fd.get(), zeros.data(), zeros.size(), static_cast<off_t>(at)) ==
                           static_cast<ssize_t>(zeros.size());
}

// Where each original is after recovery: in place, cold, lost or wrong.
void CountAfterRecovery(const std::string& logdir, const std::map<std::string, Original>& originals,
                        CrashTotals* t) {
  store::OpenOptions o;
  auto store = store::ColdStore::Open(logdir + "/" + store::kStoreDirName, o);
  if (store.ok()) {
    auto recovered = store::Recover(**store, logdir);
    if (recovered.ok()) t->recorded_lost += recovered->lost.size();
  } else {
    t->not_opened++;
    if (t->open_error.empty()) t->open_error = store.status().message();
  }
  store::ChunkCodec codec;
  for (const auto& [path, orig] : originals) {
    auto& row = t->by_class[orig.cls];
    row[0]++;
    std::string got;
    if (ReadFileToString(logdir + "/" + path, &got).ok()) {
      if (got != orig.bytes) row[2]++;
      continue;
    }
    auto m = store.ok() ? (*store)->Lookup(path) : Result<storepb::Manifest>(Status::NotFound(""));
    if (!m.ok()) {
      row[1]++;
      continue;
    }
    got.assign(m->size(), '\0');
    size_t n = 0;
    Status st = (*store)->ReadRange(*m, 0, got.size(), got.data(), &n, &codec);
    if (!st.ok()) {
      row[1]++;
    } else if (n != orig.bytes.size() || got.compare(0, n, orig.bytes) != 0) {
      row[2]++;
    }
  }
}

}  // namespace

Status CrashTrials(const Args& a, CrashTotals* t) {
  std::error_code ec;
  const std::string pristine = a.dir + "/crash-pristine", logdir = a.dir + "/crash-logdir";
  TBFS_RETURN_IF_ERROR(GenerateLogdir(a, pristine));
  std::mt19937_64 rng(a.seed);
  for (int i = 0; i < a.small_traces; ++i) {
    const std::string dir = fmt::format("{}/small{:02}", pristine, i % 10);
    stdfs::create_directories(dir, ec);
    std::string trace = "{\"traceEvents\":[";
    const int events = 50 + static_cast<int>(rng() % 3000);
    for (int e = 0; e < events; ++e) {
      trace += fmt::format("{}{{\"ph\":\"X\",\"name\":\"op{}\",\"ts\":{},\"dur\":{}}}",
                           e ? "," : "", e % 97, e * 3, e % 7);
    }
    trace += "]}";
    TBFS_RETURN_IF_ERROR(WriteFileAtomic(fmt::format("{}/w{}.pt.trace.json", dir, i), trace, 0644));
  }
  store::CandidateOptions c;
  c.older_than_s = 0;
  std::vector<store::Candidate> candidates;
  std::vector<store::Skipped> skipped;
  TBFS_RETURN_IF_ERROR(store::FindCandidates(pristine, c, &candidates, &skipped));
  std::map<std::string, Original> originals;
  for (const auto& cand : candidates) {
    originals[cand.path] = {Slurp(pristine + "/" + cand.path),
                            std::string(store::ClassName(cand.cls))};
  }
  // How long a whole run takes: the kills fall anywhere in it.
  stdfs::copy(pristine, logdir, stdfs::copy_options::recursive, ec);
  const double t0 = cli::NowSeconds();
  if (!RunMigrate(a.tbfs, logdir, -1)) {
    return Status::Aborted("tbfs migrate did not run (--tbfs " + a.tbfs + ")");
  }
  const double whole = cli::NowSeconds() - t0;
  // The engine's account of each damaged log (records dropped) is not the
  // report: errors only.
  const auto level = spdlog::get_level();
  spdlog::set_level(spdlog::level::err);
  cli::Progress progress("crashes", static_cast<uint64_t>(a.crash_trials));
  for (int i = 0; i < a.crash_trials; ++i) {
    stdfs::remove_all(logdir, ec);
    stdfs::copy(pristine, logdir, stdfs::copy_options::recursive, ec);
    const double kill_at = whole * (0.05 + 0.9 * static_cast<double>(rng() % 1000) / 1000);
    t->trials++;
    if (RunMigrate(a.tbfs, logdir, kill_at)) t->finished++;
    (void)DamageLargestLog(logdir + "/" + store::kStoreDirName, rng);
    CountAfterRecovery(logdir, originals, t);
    progress.counter()->fetch_add(1);
  }
  spdlog::set_level(level);
  stdfs::remove_all(logdir, ec);
  stdfs::remove_all(pristine, ec);
  return Status::OK();
}

}  // namespace tbfs::bench::faults
