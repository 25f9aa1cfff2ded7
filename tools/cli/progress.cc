#include "tools/cli/progress.h"

#include <unistd.h>

#include <chrono>
#include <cmath>
#include <cstdio>
#include <system_error>

#include "fmt/format.h"
#include "tools/cli/commands.h"

namespace tbfs::cli {

void PrintJson(const nlohmann::json& j) {
  PrintJsonText(j.dump(2, ' ', false, nlohmann::json::error_handler_t::replace));
}

double NowSeconds() {
  using namespace std::chrono;
  return duration<double>(steady_clock::now().time_since_epoch()).count();
}

std::string HumanDuration(double s) {
  if (s < 120) return fmt::format("{:.0f}s", s);
  if (s < 7200) return fmt::format("{:.0f}m", s / 60);
  if (s < 2 * 86400) return fmt::format("{:.1f}h", s / 3600);
  return fmt::format("{:.1f}d", s / 86400);
}

std::string HumanRate(double bytes_per_second) {
  const double h = bytes_per_second * 3600;
  return (h <= -1 ? "-" : "+") + HumanBytes(static_cast<uint64_t>(std::fabs(h))) + "/h";
}

double Ratio(uint64_t a, uint64_t b) { return b == 0 ? 0.0 : static_cast<double>(a) / b; }

std::string HumanBytes(uint64_t bytes) {
  const char* units[] = {"B", "KiB", "MiB", "GiB", "TiB"};
  double v = static_cast<double>(bytes);
  int u = 0;
  while (v >= 1024 && u < 4) {
    v /= 1024;
    ++u;
  }
  if (u == 0) return fmt::format("{} B", bytes);
  return fmt::format("{:.{}f} {}", v, v < 10 ? 2 : (v < 100 ? 1 : 0), units[u]);
}

Progress::Progress(std::string label, uint64_t total_bytes)
    : label_(std::move(label)), total_(total_bytes), start_s_(NowSeconds()) {
  enabled_ = ::isatty(STDERR_FILENO) == 1;
  if (!enabled_) return;
  try {
    thread_ = std::thread([this] { Run(); });
  } catch (const std::system_error&) {
    enabled_ = false;  // no thread to be had: the work goes on without the line
  }
}

Progress::~Progress() {
  if (!enabled_) return;
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  thread_.join();
  std::fputs("\r\033[K", stderr);
  std::fflush(stderr);
}

void Progress::Run() {
  std::unique_lock<std::mutex> lock(mu_);
  while (!cv_.wait_for(lock, std::chrono::milliseconds(250), [this] { return stop_; })) {
    Draw();
  }
}

void Progress::Draw() {
  uint64_t done = done_.load(std::memory_order_relaxed);
  uint64_t total = total_.load(std::memory_order_relaxed);
  double elapsed = NowSeconds() - start_s_;
  double rate = elapsed > 0 ? static_cast<double>(done) / elapsed : 0;
  std::string line = fmt::format("{}: {}", label_, HumanBytes(done));
  if (total > 0) {
    double frac = std::min(1.0, static_cast<double>(done) / static_cast<double>(total));
    int filled = static_cast<int>(frac * 24);
    line =
        fmt::format("{}: [{}{}] {:5.1f}% {} / {}", label_, std::string(filled, '#'),
                    std::string(24 - filled, '.'), frac * 100, HumanBytes(done), HumanBytes(total));
    if (rate > 0 && done < total) {
      line += fmt::format("  ETA {:.0f}s", static_cast<double>(total - done) / rate);
    }
  }
  line += fmt::format("  {:.1f} MB/s", rate / 1e6);
  std::fprintf(stderr, "\r\033[K%s", line.c_str());
  std::fflush(stderr);
}

}  // namespace tbfs::cli
