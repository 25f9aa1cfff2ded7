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
#include <cstring>
#include <nlohmann/json.hpp>
#include <vector>

#include "base/fs_util.h"
#include "base/text.h"
#include "fmt/format.h"
#include "fs/control.h"
#include "fs/metrics.h"
#include "fs/metrics_server.h"
#include "fs/mount_internal.h"
#include "fs/mount_table.h"
#include "spdlog/spdlog.h"

namespace tbfs::fs {

namespace {

// A registration: the mount point, NUL, the control socket, NUL.
std::string Encode(const std::string& mountpoint, const std::string& socket) {
  return mountpoint + '\0' + socket + '\0';
}

bool Decode(const std::string& data, std::string* mountpoint, std::string* socket) {
  const size_t a = data.find('\0');
  if (a == std::string::npos) return false;
  const size_t b = data.find('\0', a + 1);
  if (b == std::string::npos || b + 1 != data.size()) return false;
  *mountpoint = data.substr(0, a);
  *socket = data.substr(a + 1, b - a - 1);
  return !mountpoint->empty() && mountpoint->front() == '/' && !socket->empty() &&
         socket->front() == '/';
}

// Label values must be UTF-8 and escaped as the text format wants.
std::string LabelValue(const std::string& s) {
  std::string out;
  for (char c : ValidUtf8(s)) {
    if (c == '\\' || c == '"') out += '\\';
    if (c == '\n') {
      out += "\\n";
      continue;
    }
    out += c;
  }
  return out;
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
  return WriteFileAtomic(JoinPath(dir, EscapePath(mountpoint)), Encode(mountpoint, socket), 0600);
}

void UnregisterFromExporter(const std::string& dir, const std::string& mountpoint) {
  ::unlink(JoinPath(dir, EscapePath(mountpoint)).c_str());
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
  std::vector<std::string> texts;
  std::string up;
  size_t mounts = 0;
  for (const std::string& name : names) {
    std::string data, mountpoint, socket;
    if (!ReadFileToString(JoinPath(dir, name), &data, O_NOFOLLOW).ok() ||
        !Decode(data, &mountpoint, &socket)) {
      continue;
    }
    auto entry = FindMount(mountpoint);
    if (!entry || entry->fstype != "fuse.tbfs") continue;  // left by a daemon that died
    ++mounts;
    auto reply = ControlRequest(socket, "metrics", kExporterMountTimeoutS);
    bool ok = false;
    if (reply.ok()) {
      auto j = nlohmann::json::parse(*reply, nullptr, false);
      if (!j.is_discarded() && j.contains("metrics") && j["metrics"].is_string()) {
        texts.push_back(j["metrics"].get<std::string>());
        ok = true;
      }
    }
    up += fmt::format("tbfs_exporter_mount_up{{mountpoint=\"{}\"}} {}\n", LabelValue(mountpoint),
                      ok ? 1 : 0);
  }
  std::string own =
      "# HELP tbfs_exporter_mount_up 1 when the mount answered this scrape, 0 when it did not "
      "within " +
      std::to_string(kExporterMountTimeoutS) +
      " s\n# TYPE tbfs_exporter_mount_up gauge\n" + up +
      "# HELP tbfs_exporter_mounts tbfs mounts of this host registered with the exporter\n"
      "# TYPE tbfs_exporter_mounts gauge\n" +
      fmt::format("tbfs_exporter_mounts {}\n", mounts) +
      "# HELP tbfs_exporter_scrape_duration_seconds How long asking every mount took\n"
      "# TYPE tbfs_exporter_scrape_duration_seconds gauge\n" +
      fmt::format("tbfs_exporter_scrape_duration_seconds {:.6f}\n",
                  std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count());
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
