#include "fs/mount_watch.h"

#include <poll.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include <chrono>
#include <cstring>
#include <vector>

#include "spdlog/spdlog.h"

namespace tbfs::fs {

namespace {

// At most this often a mount table is read again: a host mounting and
// unmounting all the time costs the watch no more (a change in between is
// read at the end of the wait).
constexpr auto kMinInterval = std::chrono::milliseconds(50);

bool HasWord(std::string_view list, std::string_view word) {
  for (size_t at = 0; at <= list.size();) {
    size_t comma = list.find(',', at);
    if (comma == std::string_view::npos) comma = list.size();
    if (list.substr(at, comma - at) == word) return true;
    at = comma + 1;
  }
  return false;
}

// A mount point as /proc/self/mountinfo writes it: space, tab, newline and
// backslash as \ and three octal digits.
std::string Unescape(std::string_view s) {
  std::string out;
  for (size_t i = 0; i < s.size(); ++i) {
    if (s[i] == '\\' && i + 3 < s.size() && s[i + 1] >= '0' && s[i + 1] <= '3') {
      out += static_cast<char>((s[i + 1] - '0') * 64 + (s[i + 2] - '0') * 8 + (s[i + 3] - '0'));
      i += 3;
    } else {
      out += s[i];
    }
  }
  return out;
}

// One line of mountinfo: "ID PARENT MAJ:MIN ROOT MOUNTPOINT OPTIONS
// [OPTIONAL...] - FSTYPE SOURCE SUPER_OPTIONS".
struct Line {
  std::string_view id, mountpoint, options, fstype, super_options;
};

bool Parse(std::string_view text, Line* l) {
  std::vector<std::string_view> f;
  for (size_t at = 0; at < text.size();) {
    size_t sp = text.find(' ', at);
    if (sp == std::string_view::npos) sp = text.size();
    f.push_back(text.substr(at, sp - at));
    at = sp + 1;
  }
  size_t dash = 6;
  while (dash < f.size() && f[dash] != "-") ++dash;
  if (f.size() < 6 || dash + 3 >= f.size()) return false;
  l->id = f[0];
  l->mountpoint = f[4];
  l->options = f[5];
  l->fstype = f[dash + 1];
  l->super_options = f[dash + 3];
  return true;
}

// Calls on(line) for each line of the table open as fd, read from the start.
template <typename F>
bool ForEachLine(int fd, F on) {
  std::string text;
  char buf[16384];
  for (off_t at = 0;;) {
    const ssize_t n = ::pread(fd, buf, sizeof(buf), at);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return false;
    if (n == 0) break;
    text.append(buf, static_cast<size_t>(n));
    at += n;
  }
  for (size_t at = 0; at < text.size();) {
    size_t nl = text.find('\n', at);
    if (nl == std::string::npos) nl = text.size();
    Line l;
    if (Parse(std::string_view(text).substr(at, nl - at), &l)) on(l);
    at = nl + 1;
  }
  return true;
}

}  // namespace

Result<std::unique_ptr<ReadOnlyWatch>> ReadOnlyWatch::Start(const std::string& mountpoint,
                                                            std::atomic<bool>* read_only) {
  auto table = OpenFile("/proc/self/mountinfo", O_RDONLY);
  if (!table.ok()) return table.status();
  // Ours: the topmost tbfs mount at `mountpoint` now, just after the mount.
  // Followed by its id from here on, whatever else is mounted there later.
  std::string id;
  ForEachLine(table->get(), [&](const Line& l) {
    if (l.fstype == "fuse.tbfs" && Unescape(l.mountpoint) == mountpoint) id = l.id;
  });
  if (id.empty()) return Status::NotFound(mountpoint + ": not in /proc/self/mountinfo");
  UniqueFd stop(::eventfd(0, EFD_CLOEXEC));
  if (!stop.valid()) return Status::FromErrno(errno, "eventfd", "read-only watch");
  std::unique_ptr<ReadOnlyWatch> w(new ReadOnlyWatch(mountpoint, std::move(id), read_only,
                                                     std::move(table).value(), std::move(stop)));
  w->Update();
  w->thread_ = std::thread([raw = w.get()] { raw->Run(); });
  return w;
}

ReadOnlyWatch::ReadOnlyWatch(std::string mountpoint, std::string id, std::atomic<bool>* read_only,
                             UniqueFd table, UniqueFd stop)
    : mountpoint_(std::move(mountpoint)),
      id_(std::move(id)),
      read_only_(read_only),
      table_(std::move(table)),
      stop_(std::move(stop)) {}

ReadOnlyWatch::~ReadOnlyWatch() {
  const uint64_t one = 1;
  if (::write(stop_.get(), &one, sizeof(one)) != sizeof(one)) spdlog::warn("read-only watch: stop");
  if (thread_.joinable()) thread_.join();
}

void ReadOnlyWatch::Update() {
  // Gone from the table (unmounted lazily): the flag stays as it was.
  ForEachLine(table_.get(), [&](const Line& l) {
    if (l.id != id_) return;
    // Read-only, this mount or the filesystem under every mount of it.
    const bool ro = HasWord(l.options, "ro") || HasWord(l.super_options, "ro");
    if (read_only_->exchange(ro) != ro) {
      spdlog::info("{} is {} now", mountpoint_, ro ? "read-only" : "writable");
    }
  });
}

void ReadOnlyWatch::Run() {
  auto last = std::chrono::steady_clock::now() - kMinInterval;
  for (;;) {
    // The kernel marks the table POLLPRI on every change of a mount in this
    // namespace; poll itself takes the mark away.
    struct pollfd fds[2] = {{table_.get(), POLLPRI, 0}, {stop_.get(), POLLIN, 0}};
    if (::poll(fds, 2, -1) < 0) {
      if (errno == EINTR) continue;
      spdlog::warn("read-only watch of {}: poll: {}", mountpoint_, std::strerror(errno));
      return;
    }
    if (fds[1].revents != 0) return;
    const auto wait = last + kMinInterval - std::chrono::steady_clock::now();
    if (wait > wait.zero()) {
      const int ms = static_cast<int>(std::chrono::ceil<std::chrono::milliseconds>(wait).count());
      if (::poll(&fds[1], 1, ms) > 0) return;
    }
    Update();
    last = std::chrono::steady_clock::now();
  }
}

}  // namespace tbfs::fs
