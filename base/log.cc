#include "base/log.h"

#include <spdlog/details/log_msg.h>
#include <spdlog/sinks/base_sink.h>
#include <spdlog/sinks/rotating_file_sink.h>
#include <spdlog/sinks/stdout_color_sinks.h>
#include <spdlog/spdlog.h>
#include <sys/stat.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <mutex>

#include "base/text.h"
#include "fmt/format.h"

namespace tbfs {

namespace {

bool NeedsEscaping(std::string_view s) {
  for (unsigned char c : s) {
    if (c < 0x20 || c >= 0x7F) return true;  // controls, and anything not ASCII to check
  }
  return false;
}

class Escaping final : public spdlog::sinks::base_sink<std::mutex> {
 public:
  explicit Escaping(spdlog::sink_ptr inner) : inner_(std::move(inner)) {}

 protected:
  void sink_it_(const spdlog::details::log_msg& msg) override {
    const std::string_view payload(msg.payload.data(), msg.payload.size());
    if (!NeedsEscaping(payload)) return inner_->log(msg);
    const std::string escaped = EscapeControls(payload);
    spdlog::details::log_msg copy = msg;
    copy.payload = spdlog::string_view_t(escaped.data(), escaped.size());
    inner_->log(copy);
  }
  void flush_() override { inner_->flush(); }
  void set_pattern_(const std::string& pattern) override { inner_->set_pattern(pattern); }
  void set_formatter_(std::unique_ptr<spdlog::formatter> f) override {
    inner_->set_formatter(std::move(f));
  }

 private:
  spdlog::sink_ptr inner_;
};

}  // namespace

std::string EscapeControls(std::string_view s) {
  // Printable, with its doubled backslashes undone: "\\" is the only
  // sequence it writes that starts with two of them.
  const std::string p = Printable(s);
  std::string out;
  out.reserve(p.size());
  for (size_t i = 0; i < p.size(); ++i) {
    out += p[i];
    if (p[i] == '\\' && i + 1 < p.size() && p[i + 1] == '\\') ++i;
  }
  return out;
}

spdlog::sink_ptr EscapingSink(spdlog::sink_ptr inner) {
  return std::make_shared<Escaping>(std::move(inner));
}

std::shared_ptr<spdlog::logger> RotatingFileLogger(const std::string& name, const std::string& path,
                                                   uint64_t max_bytes, size_t keep) {
  // The first file is private; those a rotation makes later sit in the
  // same folder (the store's, 0700).
  const mode_t old = ::umask(077);
  auto file = std::make_shared<spdlog::sinks::rotating_file_sink_mt>(path, max_bytes, keep);
  ::umask(old);
  ::chmod(path.c_str(), 0600);
  auto logger = std::make_shared<spdlog::logger>(name, EscapingSink(std::move(file)));
  spdlog::register_logger(logger);
  return logger;
}

std::shared_ptr<spdlog::logger> StderrLogger(const std::string& name) {
  auto sink = std::make_shared<spdlog::sinks::stderr_color_sink_mt>();
  auto logger = std::make_shared<spdlog::logger>(name, EscapingSink(std::move(sink)));
  spdlog::register_logger(logger);
  return logger;
}

bool StderrIsJournal() {
  const char* stream = std::getenv("JOURNAL_STREAM");
  if (stream == nullptr) return false;
  unsigned long long dev = 0, ino = 0;
  char tail = 0;
  if (std::sscanf(stream, "%llu:%llu%c", &dev, &ino, &tail) != 2) return false;
  struct stat st;
  return ::fstat(STDERR_FILENO, &st) == 0 && static_cast<unsigned long long>(st.st_dev) == dev &&
         static_cast<unsigned long long>(st.st_ino) == ino;
}

bool LogLimiter::Allow(uint64_t* held_back) {
  const auto now = std::chrono::steady_clock::now().time_since_epoch();
  return Allow(std::chrono::duration_cast<std::chrono::nanoseconds>(now).count(), held_back);
}

bool LogLimiter::Allow(int64_t now_ns, uint64_t* held_back) {
  std::lock_guard<std::mutex> lock(mu_);
  const int64_t window = now_ns / 1'000'000'000;
  if (window != window_) {
    window_ = window;
    in_window_ = 0;
  }
  if (in_window_ >= per_second_) {
    held_back_++;
    return false;
  }
  in_window_++;
  *held_back = held_back_;
  held_back_ = 0;
  return true;
}

std::string HeldBack(uint64_t n) {
  return n == 0 ? std::string() : fmt::format(" ({} more like it held back)", n);
}

std::string Shorten(std::string_view s, size_t max) {
  if (s.size() <= max) return std::string(s);
  const size_t half = max > 3 ? (max - 3) / 2 : 0;
  return std::string(s.substr(0, half)) + "..." + std::string(s.substr(s.size() - half));
}

}  // namespace tbfs
