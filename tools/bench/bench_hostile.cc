// tbfs-bench hostile: one ordinary user does what they can to everyone
// else's mount while another user's traces keep arriving (issue 21).
//
// The mount migrates every second (--cold-after 0). The hostile user
// (uid 65534, processes of their own, writing straight into the logdir):
//   - exchanges a FIFO and their tfevents file in a tight loop;
//   - creates FIFOs and sockets named like traces and tfevents files;
//   - creates sparse traces of 10 TB each;
//   - builds folders nested deeper than a walk goes, with 250-byte names;
//   - damages their second run's tfevents file and mends it, in turn;
//   - writes traces whose names hold newlines, escape sequences and bytes
//     that are not UTF-8, and sets user xattrs on them.
// The good user (root here) writes a new trace into their run every half
// second. Every second the harness times `tbfs status` and reads the
// passes counter and the size of the mount's log.
//
// Reports passes per minute (and the longest time without a finished
// pass), log bytes per minute, status response times, and whether every
// good trace came through with its bytes. Exit 1 when a minute had no
// pass, a good trace is missing or wrong, or status did not answer.
#include <fcntl.h>
#include <grp.h>
#include <linux/fs.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <sys/xattr.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <filesystem>
#include <functional>
#include <nlohmann/json.hpp>
#include <thread>
#include <vector>

#include "base/fs_util.h"
#include "fmt/format.h"
#include "tools/bench/bench.h"

namespace tbfs::bench {

namespace {
namespace hostile_bench {

namespace stdfs = std::filesystem;
using Clock = std::chrono::steady_clock;

constexpr uid_t kUser = 65534;

struct Args {
  std::string dir = "/tmp/tbfs-bench-hostile";
  int seconds = 120;
  std::string tbfs = "tbfs";
  bool json = false;
};

double Since(Clock::time_point t) {
  return std::chrono::duration<double>(Clock::now() - t).count();
}

// Runs `body` as the ordinary user in a process of its own until `until`.
// Forked before the harness starts any thread.
pid_t AsUser(const std::function<void()>& body) {
  pid_t child = ::fork();
  if (child == 0) {
    if (::setgroups(0, nullptr) != 0 || ::setgid(kUser) != 0 || ::setuid(kUser) != 0) _exit(3);
    body();
    _exit(0);
  }
  return child;
}

void Write(const std::string& path, const std::string& bytes) {
  UniqueFd fd(::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644));
  if (fd.valid()) (void)!::write(fd.get(), bytes.data(), bytes.size());
}

std::string Read(const std::string& path) {
  std::string out;
  return ReadFileToString(path, &out).ok() ? out : std::string("\x01missing");
}

// The first tfevents file of at least 1 KB under dir.
std::string EventsUnder(const std::string& dir) {
  for (const auto& e : stdfs::recursive_directory_iterator(dir)) {
    if (e.is_regular_file() && e.path().filename().string().find("tfevents") != std::string::npos &&
        e.file_size() > 1000) {
      return e.path().string();
    }
  }
  return "";
}

uint64_t LogBytes(const std::string& store) {
  uint64_t total = 0;
  std::error_code ec;
  for (const auto& e : stdfs::directory_iterator(store, ec)) {
    const std::string name = e.path().filename().string();
    if (name.starts_with("tbfs-mount") && name.ends_with(".log")) total += e.file_size(ec);
  }
  return total;
}

// The bench's folders and the files its users act on.
struct Paths {
  std::string logdir, mnt;
  std::string events1, events2;  // the hostile user's two runs' tfevents files
  std::string good_run;          // the good user's run folder
};

// Generates the logdir (a good user's run, two of the hostile user's) and
// mounts it; 0, or the exit code.
int Prepare(const Args& a, Paths* p) {
  p->logdir = a.dir + "/logdir";
  p->mnt = a.dir + "/mnt";
  const std::string &logdir = p->logdir, &mnt = p->mnt;
  std::system(("fusermount3 -u -z " + mnt + " 2>/dev/null; rm -rf " + a.dir).c_str());
  stdfs::create_directories(mnt);
  ::chmod(a.dir.c_str(), 0755);
  for (const char* who : {"good", "u/r1", "u/r2"}) {
    if (std::system(fmt::format("{} gen {}/{} --runs 1 --steps 200 --trace-mb 1 >/dev/null", a.tbfs,
                                logdir, who)
                        .c_str()) != 0) {
      fmt::print(stderr, "hostile: cannot generate {}/{}\n", logdir, who);
      return 2;
    }
  }
  std::system(fmt::format("chown -R {} {}/u", kUser, logdir).c_str());
  p->events1 = EventsUnder(logdir + "/u/r1");
  p->events2 = EventsUnder(logdir + "/u/r2");
  p->good_run = stdfs::path(EventsUnder(logdir + "/good")).parent_path().string();
  if (p->events1.empty() || p->events2.empty() || p->good_run.empty()) {
    fmt::print(stderr, "hostile: the generated runs have no tfevents file\n");
    return 2;
  }
  if (std::system(
          fmt::format("{} mount {} {} --cold-after 0 -o migrate_interval=1s", a.tbfs, logdir, mnt)
              .c_str()) != 0) {
    fmt::print(stderr, "hostile: cannot mount {} on {}\n", logdir, mnt);
    return 2;
  }
  return 0;
}

// The hostile user's processes, forked before any thread of ours, acting
// while running() holds.
std::vector<pid_t> Attack(const Paths& p, const std::function<bool()>& running) {
  const std::string &logdir = p.logdir, &events1 = p.events1, &events2 = p.events2;
  std::vector<pid_t> users;
  users.push_back(AsUser([&] {  // a FIFO and a tfevents file, exchanged
    const std::string fifo = stdfs::path(events1).parent_path().string() + "/fifo";
    ::mkfifo(fifo.c_str(), 0644);
    uint64_t swaps = 0;
    while (running()) {
      swaps += ::syscall(SYS_renameat2, AT_FDCWD, events1.c_str(), AT_FDCWD, fifo.c_str(),
                         RENAME_EXCHANGE) == 0;
    }
    if (swaps % 2 == 1)
      ::syscall(SYS_renameat2, AT_FDCWD, events1.c_str(), AT_FDCWD, fifo.c_str(), RENAME_EXCHANGE);
  }));
  users.push_back(AsUser([&] {  // FIFOs, sockets, sparse files, deep folders, odd names
    const std::string u = logdir + "/u";
    for (uint64_t i = 0; running(); ++i) {
      const std::string n = std::to_string(i % 50);
      ::unlink((u + "/f" + n + ".pt.trace.json").c_str());
      ::mkfifo((u + "/f" + n + ".pt.trace.json").c_str(), 0644);
      ::unlink((u + "/events.out.tfevents.f" + n).c_str());
      ::mkfifo((u + "/events.out.tfevents.f" + n).c_str(), 0644);
      UniqueFd s(::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0));
      sockaddr_un addr{};
      addr.sun_family = AF_UNIX;
      const std::string sock = u + "/s" + n + ".trace.json";
      ::unlink(sock.c_str());
      if (sock.size() < sizeof(addr.sun_path)) {
        std::memcpy(addr.sun_path, sock.c_str(), sock.size() + 1);
        ::bind(s.get(), reinterpret_cast<sockaddr*>(&addr), sizeof(addr));
      }
      if (i % 20 == 0) {  // a 10 TB sparse trace
        UniqueFd f(::open((u + "/huge" + std::to_string(i / 20 % 5) + ".pt.trace.json").c_str(),
                          O_WRONLY | O_CREAT | O_CLOEXEC, 0644));
        if (f.valid()) (void)!::ftruncate(f.get(), off_t{10} << 40);
      }
      if (i % 10 == 0) {  // names made to break log lines and terminals
        const std::string odd =
            fmt::format("{}/odd\n[info] retention: deleted good_{}\x1b[2J\xff.pt.trace.json", u, i);
        Write(odd, "{\"traceEvents\": []}");
        ::setxattr(odd.c_str(), "user.note", "x", 1, 0);
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
    }
  }));
  users.push_back(AsUser([&] {  // folders deeper than a walk goes, 250-byte names
    UniqueFd fd(::open((logdir + "/u").c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC));
    const std::string name(250, 'd');
    for (int depth = 0; depth < 1003 && fd.valid(); ++depth) {
      ::mkdirat(fd.get(), name.c_str(), 0755);
      for (int k = 0; depth > 990 && k < 20; ++k) {
        ::mkdirat(fd.get(), fmt::format("{:02}{}", k, std::string(248, 's')).c_str(), 0755);
      }
      fd.reset(::openat(fd.get(), name.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC));
    }
  }));
  users.push_back(AsUser([&] {  // a run's tfevents, damaged and mended in turn
    const std::string good = Read(events2);
    std::string bad = good;
    bad[bad.size() / 2] ^= 0x40;
    for (bool damaged = true; running(); damaged = !damaged) {
      Write(events2, damaged ? bad : good);
      std::this_thread::sleep_for(std::chrono::seconds(5));
    }
    Write(events2, good);
  }));

  return users;
}

// What the harness measured.
struct Figures {
  double seconds = 0;
  std::vector<double> status_s;  // each status call's time
  uint64_t status_failures = 0;
  uint64_t total_passes = 0;
  double longest_gap = 0;  // the longest stretch without a new finished pass
  uint64_t log_bytes = 0;
  uint64_t good = 0, cold = 0, wrong = 0;  // the good user's traces
  nlohmann::json end_status;
};

int Report(const Args& a, Figures& f) {
  std::sort(f.status_s.begin(), f.status_s.end());
  auto pct = [&](double p) {
    return f.status_s.empty() ? 0.0
                              : f.status_s[std::min(f.status_s.size() - 1,
                                                    static_cast<size_t>(p * f.status_s.size()))];
  };
  nlohmann::json j = {{"seconds", f.seconds},
                      {"passes", f.total_passes},
                      {"passes_per_minute", f.total_passes * 60 / f.seconds},
                      {"longest_seconds_without_a_pass", f.longest_gap},
                      {"log_bytes", f.log_bytes},
                      {"log_bytes_per_minute", static_cast<double>(f.log_bytes) * 60 / f.seconds},
                      {"status_p50_seconds", pct(0.5)},
                      {"status_max_seconds", f.status_s.empty() ? 0.0 : f.status_s.back()},
                      {"status_failures", f.status_failures},
                      {"good_traces", f.good},
                      {"good_traces_cold", f.cold},
                      {"good_traces_wrong", f.wrong}};
  if (!f.end_status.is_discarded()) {
    j["blocked_runs"] = f.end_status["blocked"]["runs"];
    j["unwalked"] = f.end_status["unwalked"]["entries"];
  }
  const bool ok =
      f.longest_gap < 60 && f.total_passes > 0 && f.wrong == 0 && f.status_failures == 0;
  if (a.json) {
    fmt::print("{}\n", j.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace));
  } else {
    fmt::print(
        "hostile: {:.0f} s, one user attacking (FIFO exchange, FIFOs and sockets, 10 TB "
        "sparse files, folders too deep, a damaged run, odd names)\n",
        f.seconds);
    fmt::print("passes: {} ({:.1f} per minute); longest time without a pass: {:.1f} s\n",
               f.total_passes, f.total_passes * 60 / f.seconds, f.longest_gap);
    fmt::print("log: {} bytes ({:.0f} per minute)\n", f.log_bytes,
               static_cast<double>(f.log_bytes) * 60 / f.seconds);
    fmt::print("status: p50 {:.3f} s, max {:.3f} s, {} failed\n", pct(0.5),
               f.status_s.empty() ? 0.0 : f.status_s.back(), f.status_failures);
    fmt::print("good user's traces: {} written, {} cold, {} wrong\n", f.good, f.cold, f.wrong);
  }
  return ok ? 0 : 1;
}

int Run(const Args& a) {
  Paths p;
  if (int r = Prepare(a, &p); r != 0) return r;
  const std::string &logdir = p.logdir, &mnt = p.mnt, &good_run = p.good_run;
  const auto start = Clock::now();
  const auto until = start + std::chrono::seconds(a.seconds);
  auto running = [&] { return Clock::now() < until; };
  const std::vector<pid_t> users = Attack(p, running);

  // The good user: a new trace every half second.
  std::vector<std::pair<std::string, std::string>> good;
  std::thread writer([&] {
    for (int i = 0; running(); ++i) {
      std::string rel = fmt::format("good_{}.pt.trace.json", i);
      std::string bytes =
          fmt::format("{{\"traceEvents\": [{{\"name\": \"step\", \"ts\": {}}}]}}", i);
      Write(good_run + "/" + rel, bytes);
      good.emplace_back(good_run.substr(logdir.size() + 1) + "/" + rel, bytes);
      std::this_thread::sleep_for(std::chrono::milliseconds(500));
    }
  });

  // The harness: status timed, passes and log bytes, every second.
  Figures f;
  std::vector<std::pair<double, uint64_t>> passes;  // (time, passes finished)
  while (running()) {
    const auto t = Clock::now();
    auto s = nlohmann::json::parse(MountStatus(a.tbfs, mnt), nullptr, false);
    f.status_s.push_back(Since(t));
    if (s.is_discarded() || !s.contains("migrations")) {
      f.status_failures++;
    } else {
      passes.emplace_back(Since(start), s["migrations"]["passes"].get<uint64_t>());
    }
    std::this_thread::sleep_for(std::chrono::seconds(1) - (Clock::now() - t));
  }
  writer.join();
  for (pid_t u : users) ::waitpid(u, nullptr, 0);
  f.seconds = Since(start);
  f.log_bytes = LogBytes(logdir + "/.tbfs");
  double last_change = 0;
  for (size_t i = 1; i < passes.size(); ++i) {
    if (passes[i].second != passes[i - 1].second) last_change = passes[i].first;
    f.longest_gap = std::max(f.longest_gap, passes[i].first - last_change);
  }
  f.total_passes = passes.empty() ? 0 : passes.back().second;

  // Every good trace, through the mount, with its bytes.
  std::system(fmt::format("{} migrate --now {} >/dev/null 2>&1", a.tbfs, mnt).c_str());
  f.good = good.size();
  for (const auto& [rel, bytes] : good) {
    f.wrong += Read(mnt + "/" + rel) != bytes;
    char state[8] = {};
    f.cold += ::getxattr((mnt + "/" + rel).c_str(), "user.tbfs.state", state, sizeof(state)) == 4 &&
              std::string_view(state, 4) == "cold";
  }
  f.end_status = nlohmann::json::parse(MountStatus(a.tbfs, mnt), nullptr, false);
  std::system(("fusermount3 -u " + mnt + " 2>/dev/null || fusermount3 -u -z " + mnt).c_str());
  std::system(("rm -rf " + a.dir).c_str());  // rm copes with paths deeper than PATH_MAX
  return Report(a, f);
}

}  // namespace hostile_bench
}  // namespace

void RegisterHostileBench(CLI::App& app, int* exit_code) {
  using namespace hostile_bench;  // its Args and Run
  auto a = std::make_shared<Args>();
  CLI::App* cmd = app.add_subcommand(
      "hostile",
      "one user attacks a mount (FIFOs, sparse files, deep folders, damaged runs, odd names) "
      "while another's traces arrive; passes per minute, log growth, status latency");
  cmd->add_option("--dir", a->dir, "scratch folder (wiped)")->capture_default_str();
  cmd->add_option("--seconds", a->seconds, "how long the user attacks")->capture_default_str();
  cmd->add_option("--tbfs", a->tbfs, "the tbfs command")->capture_default_str();
  cmd->add_flag("--json", a->json, "print the report as JSON");
  cmd->callback([a, exit_code] { *exit_code = Run(*a); });
}

}  // namespace tbfs::bench
