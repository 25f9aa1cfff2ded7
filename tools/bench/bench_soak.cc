// tbfs-bench soak: churn through a real mount while it migrates every 2 s,
// against a model of every file's expected bytes.
//
// Workers, each on its own thread, for --seconds:
//   - an appender adds scalar records to tfevents files and reads them back;
//   - a creator writes new traces (8 KiB - 2 MiB) under profile folders;
//   - a mover renames traces within and across folders, and deletes some;
//   - two holders open a trace and read it in pieces over a second, across
//     migrations;
//   - a rewriter opens traces read-write (rehydrating cold ones) and
//     overwrites or appends a block;
//   - a walker reads every file of the tree and checks its state xattr;
//   - an outside writer appends to hot traces in the logdir itself, not
//     through the mount, holding each open for two seconds (they must never
//     migrate under it, and every byte must show through the mount once the
//     kernel's cached attributes expire).
// Every file is held by one worker at a time (the model's Take/Give), so
// any failed call or differing byte is the mount's fault, never a race of
// the harness. At the end: a last migration pass, then every file is read
// back through the mount and its (st_dev, st_ino) checked unique, before
// and after a remount; no file may be missing or extra.
//
// Reports operations done, wrong bytes, unexpected errors by operation and
// errno, the mount's migration counters and the daemon's peak RSS. Exit 0
// when nothing was wrong, 1 otherwise, 2 when the run could not start.
#include <fcntl.h>
#include <sys/stat.h>
#include <sys/xattr.h>
#include <unistd.h>

#include <atomic>
#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
#include <mutex>
#include <nlohmann/json.hpp>
#include <random>
#include <set>
#include <thread>

#include "base/fs_util.h"
#include "events/proto/tfevents.pb.h"
#include "events/record.h"
#include "fmt/format.h"
#include "fs/filesystem.h"
#include "tools/bench/bench.h"
#include "tools/bench/soak_model.h"
#include "tools/cli/progress.h"

namespace tbfs::bench {

namespace {
namespace soak_bench {

namespace stdfs = std::filesystem;
using soak::Model;
using soak::Tally;

struct Args {
  std::string dir = "/tmp/tbfs-bench-soak";
  int seconds = 600;
  std::string tbfs = "tbfs";
  uint64_t seed = 1;
  int max_files = 150;
  std::string cache = "256M";
  bool json = false;
};

std::string StateOf(const std::string& path) {
  char buf[16];
  ssize_t n = ::getxattr(path.c_str(), "user.tbfs.state", buf, sizeof(buf));
  return n < 0 ? fmt::format("state: {}", std::strerror(errno))
               : std::string(buf, static_cast<size_t>(n));
}

// Trace-like text that compresses as real traces do.
std::string TraceText(std::mt19937_64& rng, size_t bytes) {
  std::string s = "{\"traceEvents\": [\n";
  while (s.size() < bytes) {
    s += fmt::format("{{\"ph\": \"X\", \"name\": \"aten::op{}\", \"ts\": {}, \"dur\": {}}},\n",
                     rng() % 300, rng() % 1000000000, rng() % 5000);
  }
  s.resize(bytes);
  return s;
}

// One framed tfevents record holding a scalar.
std::string ScalarRecord(int64_t step, float value) {
  pb::Event e;
  e.set_wall_time(1.7e9 + static_cast<double>(step));
  e.set_step(step);
  pb::Summary::Value* v = e.mutable_summary()->add_value();
  v->set_tag("soak/loss");
  v->set_simple_value(value);
  std::string out;
  events::AppendFramedRecord(e.SerializeAsString(), &out);
  return out;
}

class Soak {
 public:
  Soak(const Args& a, const std::string& logdir, const std::string& mnt)
      : a_(a), logdir_(logdir), mnt_(mnt) {}

  void Run(Model& model, Tally& tally) {
    const double end = cli::NowSeconds() + a_.seconds;
    auto until_end = [&](int id, const std::function<void(std::mt19937_64&)>& step) {
      return std::thread([&, id, step] {
        std::mt19937_64 rng(a_.seed * 1000 + static_cast<uint64_t>(id));
        while (cli::NowSeconds() < end) step(rng);
      });
    };
    std::vector<std::thread> workers;
    workers.push_back(until_end(1, [&](auto& rng) { Append(model, tally, rng); }));
    workers.push_back(until_end(2, [&](auto& rng) { Create(model, tally, rng); }));
    workers.push_back(until_end(3, [&](auto& rng) { Move(model, tally, rng); }));
    workers.push_back(until_end(4, [&](auto& rng) { Hold(model, tally, rng); }));
    workers.push_back(until_end(5, [&](auto& rng) { Hold(model, tally, rng); }));
    workers.push_back(until_end(6, [&](auto& rng) { Rewrite(model, tally, rng); }));
    workers.push_back(until_end(7, [&](auto&) { Walk(model, tally); }));
    workers.push_back(until_end(8, [&](auto& rng) { WriteOutside(model, tally, rng); }));
    for (auto& w : workers) w.join();
  }

  // Reads the whole file at rel through the mount and compares it with the model.
  void Check(Model& model, Tally& tally, const std::string& rel, const char* op) {
    std::string path = M(rel), got;
    Status st = ReadFileToString(path, &got);
    if (!st.ok()) return tally.Error(op, rel, st.sys_errno() ? st.sys_errno() : EIO);
    std::string want = model.Bytes(rel);
    tally.Compared();
    if (got != want) tally.Wrong(rel, op, want, got, StateOf(path), Backing(rel));
  }

 private:
  std::string M(const std::string& rel) const { return mnt_ + "/" + rel; }
  std::string Backing(const std::string& rel) const {
    std::string bytes;
    (void)ReadFileToString(logdir_ + "/" + rel, &bytes);
    return bytes;
  }

  void Sleep(std::mt19937_64& rng, int max_ms) {
    std::this_thread::sleep_for(std::chrono::milliseconds(rng() % static_cast<uint64_t>(max_ms)));
  }

  void MakeDirs(const std::string& rel) {
    std::string partial;
    for (const auto& part : stdfs::path(rel)) {
      partial = JoinPath(partial, part.string());
      ::mkdir(M(partial).c_str(), 0755);  // EEXIST is fine
    }
  }

  void Append(Model& model, Tally& tally, std::mt19937_64& rng) {
    std::string rel = model.Take(rng, /*events=*/true);
    if (rel.empty()) return Sleep(rng, 50);
    std::string record =
        ScalarRecord(static_cast<int64_t>(appends_++), static_cast<float>(rng() % 1000) / 1000);
    int fd = ::open(M(rel).c_str(), O_WRONLY | O_APPEND | O_CLOEXEC);
    if (fd < 0) {
      tally.Error("open tfevents for append", rel, errno);
    } else {
      if (WriteAll(fd, record.data(), record.size(), rel).ok()) {
        model.SetBytes(rel, model.Bytes(rel) + record);
        tally.Op("tfevents appends");
      } else {
        tally.Error("append", rel, errno);
      }
      ::close(fd);
      if (appends_ % 20 == 0) Check(model, tally, rel, "read tfevents");
    }
    model.Give(rel);
    Sleep(rng, 20);
  }

  void Create(Model& model, Tally& tally, std::mt19937_64& rng) {
    if (model.traces() >= static_cast<size_t>(a_.max_files)) return Sleep(rng, 100);
    std::string dir = fmt::format("soak/r{}/plugins/profile", rng() % 4);
    std::string rel = fmt::format("{}/c{}.pt.trace.json", dir, creates_++);
    MakeDirs(dir);
    std::string bytes = TraceText(rng, 8192 + rng() % (2 << 20));
    model.Add(rel, "", false, /*held=*/true);
    int fd = ::open(M(rel).c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
    if (fd < 0) {
      tally.Error("create", rel, errno);
      model.Erase(rel);
      return;
    }
    bool ok = true;
    for (size_t at = 0; at < bytes.size() && ok; at += 64 << 10) {
      size_t n = std::min<size_t>(64 << 10, bytes.size() - at);
      ok = WriteAll(fd, bytes.data() + at, n, rel).ok();
    }
    if (!ok) tally.Error("write", rel, errno);
    ::close(fd);
    model.SetBytes(rel, ok ? bytes : ReadBack(rel));
    model.Give(rel);
    tally.Op("traces created");
    Sleep(rng, 50);
  }

  std::string ReadBack(const std::string& rel) {
    std::string got;
    (void)ReadFileToString(M(rel), &got);
    return got;
  }

  void Move(Model& model, Tally& tally, std::mt19937_64& rng) {
    std::string rel = model.Take(rng, false);
    if (rel.empty()) return Sleep(rng, 50);
    if (model.traces() > static_cast<size_t>(a_.max_files) / 2 && rng() % 2) {
      if (::unlink(M(rel).c_str()) != 0) {
        tally.Error("unlink", rel, errno);
        model.Give(rel);
      } else {
        model.Erase(rel);
        tally.Op("traces deleted");
      }
      return Sleep(rng, 100);
    }
    std::string dir = fmt::format("soak/r{}/plugins/profile", rng() % 4);
    std::string to = fmt::format("{}/m{}.pt.trace.json", dir, moves_++);
    MakeDirs(dir);
    if (::rename(M(rel).c_str(), M(to).c_str()) != 0) {
      tally.Error("rename", rel, errno);
      model.Give(rel);
    } else {
      model.Rename(rel, to);
      model.Give(to);
      tally.Op("traces renamed");
    }
    Sleep(rng, 100);
  }

  void Hold(Model& model, Tally& tally, std::mt19937_64& rng) {
    std::string rel = model.Take(rng, false);
    if (rel.empty()) return Sleep(rng, 50);
    std::string want = model.Bytes(rel);
    int fd = ::open(M(rel).c_str(), O_RDONLY | O_CLOEXEC);
    if (fd < 0) {
      tally.Error("open to hold", rel, errno);
      return model.Give(rel);
    }
    // Four pieces, a quarter of a second apart: migrations happen between.
    std::string got(want.size() + 1, '\0');
    size_t total = 0;
    for (int piece = 0; piece < 4; ++piece) {
      size_t from = want.size() * static_cast<size_t>(piece) / 4;
      size_t to = piece == 3 ? got.size() : want.size() * static_cast<size_t>(piece + 1) / 4;
      size_t n = 0;
      if (!PreadFull(fd, got.data() + from, to - from, from, &n, rel).ok()) {
        tally.Error("read held", rel, errno);
        break;
      }
      total += n;
      Sleep(rng, 500);
    }
    ::close(fd);
    got.resize(total);
    tally.Compared();
    if (got != want) tally.Wrong(rel, "read held", want, got, StateOf(M(rel)), Backing(rel));
    tally.Op("held reads");
    model.Give(rel);
  }

  void Rewrite(Model& model, Tally& tally, std::mt19937_64& rng) {
    Sleep(rng, 400);
    std::string rel = model.Take(rng, false);
    if (rel.empty()) return;
    std::string bytes = model.Bytes(rel);
    std::string block = TraceText(rng, 4096);
    size_t at = rng() % 2 ? bytes.size() : rng() % std::max<size_t>(bytes.size(), 1);
    int fd = ::open(M(rel).c_str(), O_RDWR | O_CLOEXEC);
    if (fd < 0) {
      tally.Error("open read-write", rel, errno);
      return model.Give(rel);
    }
    ssize_t n = ::pwrite(fd, block.data(), block.size(), static_cast<off_t>(at));
    if (n != static_cast<ssize_t>(block.size())) {
      tally.Error("pwrite", rel, n < 0 ? errno : EIO);
    } else {
      if (bytes.size() < at + block.size()) bytes.resize(at + block.size());
      bytes.replace(at, block.size(), block);
      model.SetBytes(rel, bytes);
      tally.Op("traces rewritten");
    }
    ::close(fd);
    model.Give(rel);
  }

  void WriteOutside(Model& model, Tally& tally, std::mt19937_64& rng) {
    Sleep(rng, 300);
    std::string rel = model.Take(rng, false);
    if (rel.empty()) return;
    // Cold files are not in the logdir: only a hot one can be opened there.
    int fd = ::open((logdir_ + "/" + rel).c_str(), O_WRONLY | O_APPEND | O_CLOEXEC);
    if (fd < 0) {
      if (errno != ENOENT) tally.Error("open in the logdir", rel, errno);
      return model.Give(rel);
    }
    for (int i = 0; i < 5; ++i) {
      std::string block = TraceText(rng, 1024);
      if (!WriteAll(fd, block.data(), block.size(), rel).ok()) {
        tally.Error("append in the logdir", rel, errno);
        break;
      }
      model.SetBytes(rel, model.Bytes(rel) + block);
      tally.Op("appends in the logdir");
      Sleep(rng, 400);  // migrations happen meanwhile
    }
    ::close(fd);
    // The mount shows a change made in the logdir to a file that is not a
    // folder or a tfevents file once the kernel's cached attributes expire.
    std::this_thread::sleep_for(std::chrono::duration<double>(fs::kStableTtlS + 1));
    Check(model, tally, rel, "read after appends in the logdir");
    model.Give(rel);
  }

  void Walk(Model& model, Tally& tally) {
    std::error_code ec;
    for (stdfs::recursive_directory_iterator it(mnt_, ec), end; !ec && it != end;
         it.increment(ec)) {
      std::error_code tec;
      if (!it->is_regular_file(tec)) continue;
      std::string rel = it->path().string().substr(mnt_.size() + 1);  // it may be gone already
      if (!model.TakeExact(rel)) continue;  // held by another worker, or not ours yet
      std::string state = StateOf(it->path());
      if (state != "hot" && state != "cold")
        tally.Error("getxattr state", rel, errno ? errno : EIO);
      Check(model, tally, rel, "read in the walk");
      model.Give(rel);
      tally.Op("files read by the walker");
    }
    tally.Op("walks");
  }

  const Args& a_;
  const std::string logdir_, mnt_;
  std::atomic<uint64_t> appends_{0}, creates_{0}, moves_{0};
};

// Every file through the mount against the model: bytes, no missing, no
// extra, no two sharing (st_dev, st_ino).
void FinalCheck(Soak& soak, Model& model, Tally& tally, const std::string& mnt, const char* when) {
  auto files = model.Snapshot();
  std::map<std::pair<dev_t, ino_t>, std::string> seen;
  std::set<std::string> found;
  for (const auto& e : stdfs::recursive_directory_iterator(mnt)) {
    if (!e.is_regular_file()) continue;
    std::string rel = stdfs::relative(e.path(), mnt).string();
    found.insert(rel);
    struct stat st;
    if (::lstat(e.path().c_str(), &st) != 0) {
      tally.Error(fmt::format("stat {}", when), rel, errno);
      continue;
    }
    auto [it, fresh] = seen.emplace(std::make_pair(st.st_dev, st.st_ino), rel);
    if (!fresh) {
      fmt::print(stderr, "soak: {} and {} share st_ino {} ({})\n", rel, it->second, st.st_ino,
                 when);
      tally.Error(fmt::format("unique st_ino {}", when), rel, EEXIST);
    }
    if (!files.count(rel)) tally.Error(fmt::format("extra file {}", when), rel, EEXIST);
  }
  for (const auto& [rel, f] : files) {
    if (!found.count(rel))
      tally.Error(fmt::format("missing file {}", when), rel, ENOENT);
    else
      soak.Check(model, tally, rel, when);
  }
}

int Mount(const Args& a, const std::string& logdir, const std::string& mnt, int* pid) {
  if (std::system(fmt::format("{} mount {} {} --cold-after 0 --cache {} -o migrate_interval=2s",
                              a.tbfs, logdir, mnt, a.cache)
                      .c_str()) != 0) {
    return 2;
  }
  auto st = nlohmann::json::parse(MountStatus(a.tbfs, mnt), nullptr, false);
  if (st.is_discarded() || !st.contains("pid")) return 2;
  *pid = st["pid"].get<int>();
  return 0;
}

// Unmounts, lazily when busy: a daemon that died leaves a mount that files
// still open (held reads) keep busy, and no mount may outlive the soak.
void Unmount(const std::string& mnt) {
  if (std::system(("fusermount3 -u " + mnt + " 2>/dev/null").c_str()) != 0) {
    std::system(("fusermount3 -u -z " + mnt + " 2>/dev/null").c_str());
  }
}

int Run(const Args& a) {
  const std::string logdir = a.dir + "/logdir", mnt = a.dir + "/mnt";
  Unmount(mnt);
  stdfs::remove_all(a.dir);
  stdfs::create_directories(mnt);
  if (std::system(fmt::format("{} gen {} --runs 2 --steps 300 --trace-mb 16 --seed {} >/dev/null",
                              a.tbfs, logdir, a.seed)
                      .c_str()) != 0) {
    return 2;
  }
  Model model;
  for (const auto& e : stdfs::recursive_directory_iterator(logdir)) {
    if (!e.is_regular_file()) continue;
    std::string rel = stdfs::relative(e.path(), logdir).string(), bytes;
    if (!ReadFileToString(e.path(), &bytes).ok()) return 2;
    model.Add(rel, bytes, rel.find(".tfevents.") != std::string::npos, false);
  }
  int pid = 0;
  if (Mount(a, logdir, mnt, &pid) != 0) {
    fmt::print(stderr, "soak: cannot mount {} on {}\n", logdir, mnt);
    return 2;
  }
  Tally tally;
  Soak soak(a, logdir, mnt);
  const double t0 = cli::NowSeconds();
  soak.Run(model, tally);
  std::system(fmt::format("{} migrate --now {} >/dev/null", a.tbfs, mnt).c_str());
  FinalCheck(soak, model, tally, mnt, "at the end");
  auto status = nlohmann::json::parse(MountStatus(a.tbfs, mnt), nullptr, false);
  uint64_t rss_kb = PeakRssKb(pid);
  Unmount(mnt);
  for (int i = 0; i < 500 && stdfs::exists("/proc/" + std::to_string(pid)); ++i) ::usleep(10000);
  if (Mount(a, logdir, mnt, &pid) != 0) {
    tally.Error("remount", mnt, EIO);
  } else {
    FinalCheck(soak, model, tally, mnt, "after a remount");
    Unmount(mnt);
  }
  const double seconds = cli::NowSeconds() - t0;

  uint64_t errors = 0;
  for (const auto& [what, n] : tally.errors()) errors += n;
  nlohmann::json j = {{"seconds", seconds},
                      {"operations", tally.ops()},
                      {"wrong_bytes", tally.wrong_bytes()},
                      {"wrong_files", tally.wrong_files()},
                      {"files_compared", tally.compared()},
                      {"unexpected_errors", errors},
                      {"errors", tally.errors()},
                      {"daemon_peak_rss_bytes", rss_kb * 1024},
                      {"files_at_end", model.Snapshot().size()}};
  if (!status.is_discarded()) {
    j["migrations"] = status["migrations"];
    j["rehydrations"] = status["rehydrations"];
    j["eio"] = status["eio"];
  }
  if (a.json) {
    fmt::print("{}\n", j.dump());
  } else {
    fmt::print("soak: {:.0f} s through the mount, migrating every 2 s (--cold-after 0)\n", seconds);
    for (const auto& [what, n] : tally.ops()) fmt::print("  {:<26} {}\n", what, n);
    if (!status.is_discarded()) {
      const auto& m = status["migrations"];
      fmt::print(
          "  migration passes {}, batches {} ({} rolled back), files moved {}, rehydrations {}\n",
          m["passes"].get<uint64_t>(), m["batches"].get<uint64_t>(),
          m["rolled_back"].get<uint64_t>(), m["files_moved"].get<uint64_t>(),
          status["rehydrations"].get<uint64_t>());
    }
    fmt::print("wrong bytes: {} ({} of {} whole-file reads differed)\n", tally.wrong_bytes(),
               tally.wrong_files(), tally.compared());
    fmt::print("unexpected errors: {}\n", errors);
    for (const auto& [what, n] : tally.errors()) fmt::print("  {:<40} {}\n", what, n);
    fmt::print("daemon peak RSS: {:.1f} MB\n", static_cast<double>(rss_kb) / 1024);
  }
  return tally.wrong_bytes() == 0 && tally.wrong_files() == 0 && errors == 0 ? 0 : 1;
}

}  // namespace soak_bench
}  // namespace

void RegisterSoakBench(CLI::App& app, int* exit_code) {
  using namespace soak_bench;  // its Args and Run
  auto a = std::make_shared<Args>();
  CLI::App* cmd = app.add_subcommand(
      "soak",
      "churn through a real mount while it migrates every 2 s; counts wrong bytes and "
      "unexpected errors (exit 1 if any)");
  cmd->add_option("--dir", a->dir, "scratch folder (wiped)")->capture_default_str();
  cmd->add_option("--seconds", a->seconds, "how long the workers run")->capture_default_str();
  cmd->add_option("--tbfs", a->tbfs, "the tbfs command")->capture_default_str();
  cmd->add_option("--cache", a->cache, "the daemon's --cache")->capture_default_str();
  cmd->add_option("--seed", a->seed, "seed of the logdir and the workers")->capture_default_str();
  cmd->add_option("--max-files", a->max_files, "traces the creator keeps at most")
      ->capture_default_str();
  cmd->add_flag("--json", a->json, "print the report as JSON");
  cmd->callback([a, exit_code] { *exit_code = Run(*a); });
}

}  // namespace tbfs::bench
