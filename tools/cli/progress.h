// Progress display for long commands: a one-line bar on stderr, redrawn a
// few times a second from a counter the work advances, shown only when
// stderr is a terminal. Output helpers shared by the commands.
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <mutex>
#include <nlohmann/json.hpp>
#include <string>
#include <thread>

namespace tbfs::cli {

class Progress {
 public:
  // `label` prefixes the line; `total_bytes` may be 0 when unknown.
  Progress(std::string label, uint64_t total_bytes);
  ~Progress();  // stops and clears the line
  Progress(const Progress&) = delete;
  Progress& operator=(const Progress&) = delete;

  std::atomic<uint64_t>* counter() { return &done_; }

 private:
  void Run();
  void Draw();

  std::string label_;
  std::atomic<uint64_t> total_;
  std::atomic<uint64_t> done_{0};
  double start_s_;
  bool enabled_;
  std::mutex mu_;
  std::condition_variable cv_;
  bool stop_ = false;  // guarded by mu_
  std::thread thread_;
};

// Prints `j` indented to stdout; bytes that are not UTF-8 (file names are
// bytes) print as U+FFFD rather than aborting the dump.
void PrintJson(const nlohmann::json& j);

// "1.5 GiB", "312 KiB", "17 B".
std::string HumanBytes(uint64_t bytes);
// a / b as a compression ratio; 0 when b is 0 (nothing stored).
double Ratio(uint64_t a, uint64_t b);
// "45s", "12m", "3.5h", "2.1d".
std::string HumanDuration(double seconds);
// A rate in bytes per second as "+1.2 GiB/h" or "-3 MiB/h".
std::string HumanRate(double bytes_per_second);
// Seconds since an arbitrary fixed point (steady clock).
double NowSeconds();

}  // namespace tbfs::cli
