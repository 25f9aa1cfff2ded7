#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <string>
#include <vector>

#include "fmt/format.h"
#include "tools/bench/bench.h"
#include "tools/cli/progress.h"

namespace tbfs::bench {

void DropCaches() { std::system("sync; echo 3 > /proc/sys/vm/drop_caches"); }

double FirstByte(const std::string& path) {
  double t0 = cli::NowSeconds();
  int fd = ::open(path.c_str(), O_RDONLY);
  if (fd < 0) return -1;
  char c;
  ssize_t n = ::read(fd, &c, 1);
  double s = cli::NowSeconds() - t0;
  ::close(fd);
  return n == 1 ? s : -1;
}

double Pread4k(const std::string& path, off_t off) {
  int fd = ::open(path.c_str(), O_RDONLY);
  if (fd < 0) return -1;
  char buf[4096];
  double t0 = cli::NowSeconds();
  ssize_t n = ::pread(fd, buf, sizeof(buf), off);
  double s = cli::NowSeconds() - t0;
  ::close(fd);
  return n > 0 ? s : -1;
}

double StatSeconds(const std::string& path) {
  struct stat st;
  double t0 = cli::NowSeconds();
  int r = ::stat(path.c_str(), &st);
  return r == 0 ? cli::NowSeconds() - t0 : -1;
}

// Reads files sequentially with 1 MiB reads; returns seconds.
double ReadFiles(const std::vector<std::string>& paths, uint64_t* bytes) {
  std::vector<char> buf(1 << 20);
  *bytes = 0;
  double t0 = cli::NowSeconds();
  for (const auto& p : paths) {
    int fd = ::open(p.c_str(), O_RDONLY);
    if (fd < 0) continue;
    ssize_t n;
    while ((n = ::read(fd, buf.data(), buf.size())) > 0) *bytes += static_cast<uint64_t>(n);
    ::close(fd);
  }
  return cli::NowSeconds() - t0;
}

std::string RealKinetoTrace() {
  const std::string path = "../shared/data/kineto-resnet50/worker0.1623143089861.pt.trace.json.gz";
  if (::access(path.c_str(), R_OK) == 0) return path;
  fmt::print(stderr, "{} is missing (run from the repository's folder)\n", path);
  return "";
}

std::string CommandOutput(const std::string& command) {
  std::string out;
  FILE* p = ::popen(command.c_str(), "r");
  if (p == nullptr) return out;
  char buf[4096];
  size_t n;
  while ((n = std::fread(buf, 1, sizeof(buf), p)) > 0) out.append(buf, n);
  ::pclose(p);
  return out;
}

std::string MountStatus(const std::string& tbfs, const std::string& mnt) {
  std::string out = CommandOutput(fmt::format("{} status --json {}", tbfs, mnt));
  return out.empty() ? "{}" : out;
}

uint64_t ProcStatusKb(int pid, std::string_view field) {
  std::ifstream in("/proc/" + std::to_string(pid) + "/status");
  std::string line;
  while (std::getline(in, line)) {
    if (line.starts_with(field) && line.size() > field.size() && line[field.size()] == ':') {
      return std::stoull(line.substr(field.size() + 1));
    }
  }
  return 0;
}

uint64_t PeakRssKb(int pid) { return ProcStatusKb(pid, "VmHWM"); }

}  // namespace tbfs::bench
