#include "fs/exporter.h"

#include <dirent.h>
#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <sys/stat.h>
#include <systemd/sd-daemon.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <nlohmann/json.hpp>
#include <optional>
#include <set>
#include <thread>
#include <vector>

#include "base/fs_util.h"
#include "base/text.h"
#include "fmt/format.h"
#include "fs/control.h"
#include "fs/metrics.h"
#include "fs/metrics_server.h"
#include "fs/mount_internal.h"
#include "fs/mount_table.h"
#include "prometheus/metric_family.h"
#include "prometheus/text_serializer.h"
#include "spdlog/spdlog.h"

namespace tbfs::fs {

namespace {

// A registration: the mount point, NUL, the control socket, NUL, the
// daemon's pid, NUL.
struct Registration {
  std::string mountpoint, socket;
  pid_t pid = 0;
};

std::string Encode(const Registration& r) {
  return r.mountpoint + '\0' + r.socket + '\0' + std::to_string(r.pid) + '\0';
}

bool Decode(const std::string& data, Registration* r) {
  std::vector<std::string> fields;
  for (size_t at = 0; at < data.size();) {
    const size_t end = data.find('\0', at);
    if (end == std::string::npos) return false;
    fields.push_back(data.substr(at, end - at));
    at = end + 1;
  }
  if (fields.size() != 3) return false;
  r->mountpoint = fields[0];
  r->socket = fields[1];
  char* end = nullptr;
  const long pid = std::strtol(fields[2].c_str(), &end, 10);
  r->pid = static_cast<pid_t>(pid);
  return !r->mountpoint.empty() && r->mountpoint.front() == '/' && !r->socket.empty() &&
         r->socket.front() == '/' && end != fields[2].c_str() && *end == '\0' && pid > 0;
}

}  // namespace

Status RegisterWithExporter(const std::string& dir, const std::string& mountpoint,
                            const std::string& socket) {
  TBFS_RETURN_IF_ERROR(MakeDirs(dir, 0700));
  // Only root's folder is trusted with what the exporter connects to.
  struct stat st;
  if (::lstat(dir.c_str(), &st) != 0) return Status::FromErrno(errno, "lstat", dir);
  if (!S_ISDIR(st.st_mode) || st.st_uid != 0 || (st.st_mode & 022) != 0) {
    return Status::InvalidArgument(dir + " is not a folder of root's that only root can write");
  }
  return WriteFileAtomic(JoinPath(dir, EscapePath(mountpoint)),
                         Encode({mountpoint, socket, ::getpid()}), 0600);
}

void UnregisterFromExporter(const std::string& dir, const std::string& mountpoint) {
  // Only this daemon's: a mount stacked on the same mount point (-o
  // nonempty) registered under the same name, and keeps its registration.
  const std::string path = JoinPath(dir, EscapePath(mountpoint));
  std::string data;
  Registration r;
  if (ReadFileToString(path, &data, O_NOFOLLOW).ok() && Decode(data, &r) && r.pid == ::getpid()) {
    ::unlink(path.c_str());
  }
}

std::string ScrapeRegisteredMounts(const std::string& dir) {
  const auto start = std::chrono::steady_clock::now();
  std::vector<std::string> names;
  if (DIR* d = ::opendir(dir.c_str())) {
    while (struct dirent* e = ::readdir(d)) {
      if (e->d_name[0] != '.') names.push_back(e->d_name);
    }
    ::closedir(d);
  }
  std::sort(names.begin(), names.end());
  std::vector<Registration> mounts;
  for (const std::string& name : names) {
    std::string data;
    Registration r;
    if (!ReadFileToString(JoinPath(dir, name), &data, O_NOFOLLOW).ok() || !Decode(data, &r)) {
      continue;
    }
    auto entry = FindMount(r.mountpoint);
    if (!entry || entry->fstype != "fuse.tbfs") continue;  // left by a daemon that died
    mounts.push_back(std::move(r));
  }
  // All at once, under one deadline for the scrape. Reaching a socket may
  // itself hang before any timeout applies (a path through a FUSE mount
  // that does not answer, which a user can set up beneath a folder of
  // theirs), so each ask runs on a thread of its own that the scrape
  // leaves behind at the deadline; a mount whose last ask is still stuck
  // is not asked again (one stuck thread per mount at most).
  struct Ask {
    std::mutex mu;
    std::condition_variable cv;
    bool done = false;
    std::optional<std::string> text;
  };
  // Never destroyed: an ask left behind may still use them at exit.
  static std::mutex& stuck_mu = *new std::mutex;
  static std::set<std::string>& stuck = *new std::set<std::string>;  // asks not returned yet
  const auto deadline = start + std::chrono::milliseconds(kExporterMountTimeoutS * 1000 + 500);
  std::vector<std::shared_ptr<Ask>> asked;
  for (const Registration& r : mounts) {
    auto ask = std::make_shared<Ask>();
    asked.push_back(ask);
    {
      std::lock_guard<std::mutex> lock(stuck_mu);
      if (!stuck.insert(r.mountpoint).second) {
        ask->done = true;  // its last ask is still stuck: no answer now either
        continue;
      }
    }
    std::thread([ask, r] {
      ControlCall call;
      call.timeout_s = kExporterMountTimeoutS;
      call.peer_pid = r.pid;  // the daemon that registered, not whatever listens there now
      std::optional<std::string> text;
      auto reply = ControlRequest(r.socket, "metrics", call);
      if (reply.ok()) {
        auto j = nlohmann::json::parse(*reply, nullptr, false);
        if (!j.is_discarded() && j.contains("metrics") && j["metrics"].is_string())
          text = j["metrics"].get<std::string>();
      }
      {
        std::lock_guard<std::mutex> lock(stuck_mu);
        stuck.erase(r.mountpoint);
      }
      std::lock_guard<std::mutex> lock(ask->mu);
      ask->text = std::move(text);
      ask->done = true;
      ask->cv.notify_all();
    }).detach();
  }
  // The exporter's own series, serialized as the mounts' are (labels
  // escaped, and UTF-8: a mount point need not be).
  using prometheus::ClientMetric;
  using prometheus::MetricType;
  prometheus::MetricFamily up{
      "tbfs_exporter_mount_up",
      fmt::format("1 when the mount answered this scrape, 0 when it did not within {} s",
                  kExporterMountTimeoutS),
      MetricType::Gauge,
      {}};
  std::vector<std::string> texts;
  for (size_t i = 0; i < mounts.size(); ++i) {
    Ask& ask = *asked[i];
    std::unique_lock<std::mutex> lock(ask.mu);
    ask.cv.wait_until(lock, deadline, [&] { return ask.done; });
    const bool ok = ask.done && ask.text.has_value();
    if (ok) texts.push_back(*ask.text);
    ClientMetric m;
    m.label.push_back({"mountpoint", ValidUtf8(mounts[i].mountpoint)});
    m.gauge.value = ok ? 1 : 0;
    up.metric.push_back(std::move(m));
  }
  auto gauge = [](std::string name, std::string help, double value) {
    ClientMetric m;
    m.gauge.value = value;
    return prometheus::MetricFamily{std::move(name), std::move(help), MetricType::Gauge, {m}};
  };
  const std::string own = prometheus::TextSerializer().Serialize(
      {up,
       gauge("tbfs_exporter_mounts", "tbfs mounts of this host registered with the exporter",
             static_cast<double>(mounts.size())),
       gauge("tbfs_exporter_scrape_duration_seconds", "How long asking every mount took",
             std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count())});
  texts.push_back(own);
  return MergeExpositions(texts);
}

int RunExporter(const std::string& dir, const std::string& address, std::string* error) {
  sigset_t stop;
  sigemptyset(&stop);
  for (int sig : {SIGTERM, SIGINT, SIGHUP}) sigaddset(&stop, sig);
  // Blocked before the server's threads start, so they inherit the mask
  // and the signal comes to sigwait below.
  pthread_sigmask(SIG_BLOCK, &stop, nullptr);
  auto server = MetricsServer::Start(address, [&dir] { return ScrapeRegisteredMounts(dir); });
  if (!server.ok()) {
    *error = server.status().message();
    return 2;
  }
  spdlog::info("tbfs exporter: the metrics of every tbfs mount of this host on http://{}/metrics",
               address);
  sd_notifyf(0, "READY=1\nSTATUS=serving http://%s/metrics", address.c_str());
  int sig = 0;
  sigwait(&stop, &sig);
  sd_notify(0, "STOPPING=1");
  spdlog::info("tbfs exporter: stopping ({})", strsignal(sig));
  return 0;
}

}  // namespace tbfs::fs
