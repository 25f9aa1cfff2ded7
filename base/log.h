// Log lines no file name can break, forge or flood.
//
// A name is bytes a user chose: it may hold a newline and a fake
// "[info] retention: deleted ..." after it, or escape sequences for the
// terminal that shows the log. Every logger tbfs makes writes through an
// escaping sink: control characters in a message become \xNN and bytes
// that are not UTF-8 become U+FFFD (EscapeControls), so one message is one
// line whatever it names. The mount's log file is size-capped and rotated.
#pragma once

#include <spdlog/logger.h>

#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>

namespace tbfs {

// Printable(s) (controls as \xNN, separators and bidirectional controls
// as \uNNNN, not UTF-8 as U+FFFD), except that
// a backslash stays as it is: a message that already printed a name with
// Printable is not escaped twice.
std::string EscapeControls(std::string_view s);

// `inner`, behind a sink that escapes each message (EscapeControls).
spdlog::sink_ptr EscapingSink(spdlog::sink_ptr inner);

// A logger named `name` writing to `path` (mode 0600): at most max_bytes
// per file, the `keep` files before it kept ("x.log" rotates to "x.1.log",
// "x.1.log" to "x.2.log" ...).
std::shared_ptr<spdlog::logger> RotatingFileLogger(const std::string& name, const std::string& path,
                                                   uint64_t max_bytes, size_t keep);
// A logger named `name` writing to stderr (in colour on a terminal).
std::shared_ptr<spdlog::logger> StderrLogger(const std::string& name);

// True when stderr is systemd's journal: JOURNAL_STREAM ("DEV:INO", set by
// systemd for a service whose output goes to the journal) names the file
// that fd 2 is (a child whose stderr was redirected inherits the variable,
// not the stream).
bool StderrIsJournal();

// Keeps one kind of line (a failing request's, which a loop of requests
// repeats) to at most `per_second` a second: the rest are held back and
// counted, and the next line let through says how many. What the line
// counts is counted elsewhere, in full (tbfs status, metrics).
class LogLimiter {
 public:
  explicit LogLimiter(int per_second = 10) : per_second_(per_second) {}
  // Whether to log a line at monotonic time `now_ns` (default: now);
  // *held_back is then the number of lines held back since the last one.
  bool Allow(uint64_t* held_back);
  bool Allow(int64_t now_ns, uint64_t* held_back);

 private:
  const int per_second_;
  std::mutex mu_;
  int64_t window_ = -1;     // under mu_: the second being counted
  int in_window_ = 0;       // under mu_
  uint64_t held_back_ = 0;  // under mu_
};

// " (N more like it held back)" when n > 0, else "".
std::string HeldBack(uint64_t n);

// s cut to at most `max` bytes (its head and tail, "..." between), for a
// name quoted as an example in an aggregated line.
std::string Shorten(std::string_view s, size_t max);

}  // namespace tbfs
