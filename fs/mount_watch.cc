#include "fs/mount_watch.h"

#include <poll.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include <cstring>

#include "fs/mount_table.h"
#include "spdlog/spdlog.h"

namespace tbfs::fs {

namespace {

bool HasWord(const std::string& list, std::string_view word) {
  for (size_t at = 0; at <= list.size();) {
    size_t comma = list.find(',', at);
    if (comma == std::string::npos) comma = list.size();
    if (std::string_view(list).substr(at, comma - at) == word) return true;
    at = comma + 1;
  }
  return false;
}

}  // namespace

Result<std::unique_ptr<ReadOnlyWatch>> ReadOnlyWatch::Start(const std::string& mountpoint,
                                                            std::atomic<bool>* read_only) {
  auto table = OpenFile("/proc/self/mountinfo", O_RDONLY);
  if (!table.ok()) return table.status();
  UniqueFd stop(::eventfd(0, EFD_CLOEXEC));
  if (!stop.valid()) return Status::FromErrno(errno, "eventfd", "read-only watch");
  std::unique_ptr<ReadOnlyWatch> w(
      new ReadOnlyWatch(mountpoint, read_only, std::move(table).value(), std::move(stop)));
  w->Update();
  w->thread_ = std::thread([raw = w.get()] { raw->Run(); });
  return w;
}

ReadOnlyWatch::ReadOnlyWatch(std::string mountpoint, std::atomic<bool>* read_only, UniqueFd table,
                             UniqueFd stop)
    : mountpoint_(std::move(mountpoint)),
      read_only_(read_only),
      table_(std::move(table)),
      stop_(std::move(stop)) {}

ReadOnlyWatch::~ReadOnlyWatch() {
  const uint64_t one = 1;
  if (::write(stop_.get(), &one, sizeof(one)) != sizeof(one)) spdlog::warn("read-only watch: stop");
  if (thread_.joinable()) thread_.join();
}

void ReadOnlyWatch::Update() {
  // Not found (unmounted under us): leave the flag as it was.
  if (auto entry = FindMount(mountpoint_)) {
    const bool ro = HasWord(entry->vfs_options, "ro");
    if (read_only_->exchange(ro) != ro) {
      spdlog::info("{} is {} now", mountpoint_, ro ? "read-only" : "writable");
    }
  }
}

void ReadOnlyWatch::Run() {
  for (;;) {
    struct pollfd fds[2] = {{table_.get(), POLLPRI, 0}, {stop_.get(), POLLIN, 0}};
    if (::poll(fds, 2, -1) < 0) {
      if (errno == EINTR) continue;
      spdlog::warn("read-only watch of {}: poll: {}", mountpoint_, std::strerror(errno));
      return;
    }
    if (fds[1].revents != 0) return;
    // (poll itself takes the mark away: the next change marks it again)
    Update();
  }
}

}  // namespace tbfs::fs
