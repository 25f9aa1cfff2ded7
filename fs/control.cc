#include "fs/control.h"

#include <fcntl.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <chrono>
#include <cstring>
#include <thread>

#include "fmt/format.h"
#include "spdlog/spdlog.h"

namespace tbfs::fs {

namespace {

constexpr size_t kMaxRequestBytes = 4096;

// A sockaddr_un for `name` inside the folder open as dir_fd, through
// /proc/self/fd: short whatever the folder's path (sun_path holds 108 bytes).
struct sockaddr_un AddressIn(int dir_fd, const char* name) {
  struct sockaddr_un addr {};
  addr.sun_family = AF_UNIX;
  std::string p = fmt::format("/proc/self/fd/{}/{}", dir_fd, name);
  std::memcpy(addr.sun_path, p.data(), std::min(p.size(), sizeof(addr.sun_path) - 1));
  return addr;
}

// Reads one line (without its newline), at most kMaxRequestBytes.
bool ReadLine(int fd, std::string* line) {
  line->clear();
  char c;
  while (line->size() < kMaxRequestBytes) {
    ssize_t n = ::read(fd, &c, 1);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return !line->empty();
    if (c == '\n') return true;
    line->push_back(c);
  }
  return false;
}

}  // namespace

Result<std::unique_ptr<ControlServer>> ControlServer::Start(const std::string& store_dir,
                                                            uid_t owner, Handler handler) {
  std::unique_ptr<ControlServer> s(new ControlServer());
  s->path_ = JoinPath(store_dir, kControlSocketName);
  s->owner_ = owner;
  s->handler_ = std::move(handler);
  auto dir = OpenFile(store_dir, O_PATH | O_DIRECTORY | O_NOFOLLOW);
  if (!dir.ok()) return dir.status();
  s->dir_ = std::move(dir).value();
  s->listen_.reset(::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0));
  if (!s->listen_.valid()) return Status::FromErrno(errno, "socket", s->path_);
  ::unlinkat(s->dir_.get(), kControlSocketName, 0);  // a stale one, from a daemon that died
  struct sockaddr_un addr = AddressIn(s->dir_.get(), kControlSocketName);
  if (::bind(s->listen_.get(), reinterpret_cast<struct sockaddr*>(&addr), sizeof(addr)) != 0) {
    return Status::FromErrno(errno, "bind", s->path_);
  }
  // Not yet listening: nobody can have connected before this.
  if (::fchmodat(s->dir_.get(), kControlSocketName, 0600, 0) != 0) {
    return Status::FromErrno(errno, "chmod", s->path_);
  }
  if (::listen(s->listen_.get(), 16) != 0) return Status::FromErrno(errno, "listen", s->path_);
  int fds[2];
  if (::pipe2(fds, O_CLOEXEC) != 0) return Status::FromErrno(errno, "pipe", s->path_);
  s->wake_[0].reset(fds[0]);
  s->wake_[1].reset(fds[1]);
  s->spare_.reset(::open("/dev/null", O_RDONLY | O_CLOEXEC));
  s->loop_ = std::thread([raw = s.get()] { raw->Loop(); });
  return s;
}

ControlServer::~ControlServer() {
  if (loop_.joinable()) {
    (void)!::write(wake_[1].get(), "x", 1);
    loop_.join();
  }
  std::vector<Connection> connections;
  {
    MutexLock lock(mu_);
    connections.swap(connections_);
  }
  for (auto& c : connections) c.thread.join();
  if (dir_.valid()) ::unlinkat(dir_.get(), kControlSocketName, 0);
}

void ControlServer::Loop() {
  for (;;) {
    struct pollfd p[2] = {{listen_.get(), POLLIN, 0}, {wake_[0].get(), POLLIN, 0}};
    if (::poll(p, 2, -1) < 0) {
      if (errno == EINTR) continue;
      spdlog::error("control socket {}: poll: {}", path_, std::strerror(errno));
      return;
    }
    if (p[1].revents) return;
    if (!(p[0].revents & POLLIN)) continue;
    int conn = ::accept4(listen_.get(), nullptr, nullptr, SOCK_CLOEXEC);
    if (conn < 0 && (errno == EMFILE || errno == ENFILE)) TurnAwayOne();
    if (conn < 0) continue;
    out_of_fds_ = false;
    MutexLock lock(mu_);
    std::erase_if(connections_, [](Connection& c) {
      if (!c.done->load()) return false;
      c.thread.join();
      return true;
    });
    auto done = std::make_shared<std::atomic<bool>>(false);
    connections_.push_back({std::thread([this, conn, done] {
                              Serve(conn);
                              *done = true;
                            }),
                            done});
  }
}

// No file descriptor left for a connection: it would stay queued and
// every poll return at once (a core spinning, the client waiting for its
// whole timeout; red team). The spare descriptor makes room to take it and
// answer why; without even that, the loop waits before it tries again.
void ControlServer::TurnAwayOne() {
  if (!out_of_fds_) {
    spdlog::error("control socket {}: accept: {} (the daemon's RLIMIT_NOFILE is reached)", path_,
                  std::strerror(errno));
    out_of_fds_ = true;
  }
  spare_.reset();
  UniqueFd conn(::accept4(listen_.get(), nullptr, nullptr, SOCK_CLOEXEC));
  if (conn.valid()) {
    // Its request read first: a close with it unread resets the connection
    // before the client reads the answer.
    struct timeval timeout = {1, 0};
    ::setsockopt(conn.get(), SOL_SOCKET, SO_RCVTIMEO, &timeout, sizeof(timeout));
    std::string request;
    (void)ReadLine(conn.get(), &request);
    const std::string reply =
        R"({"error": "the mount's daemon has no file descriptor left (RLIMIT_NOFILE); its log says more"})"
        "\n";
    (void)WriteAll(conn.get(), reply.data(), reply.size(), path_);
    conn.reset();
  }
  spare_.reset(::open("/dev/null", O_RDONLY | O_CLOEXEC));
  if (!spare_.valid()) std::this_thread::sleep_for(std::chrono::milliseconds(100));
}

void ControlServer::Serve(int fd) {
  UniqueFd conn(fd);
  struct timeval timeout = {5, 0};  // a client that sends nothing does not hold a thread
  ::setsockopt(conn.get(), SOL_SOCKET, SO_RCVTIMEO, &timeout, sizeof(timeout));
  std::string request, reply;
  struct ucred peer {};
  socklen_t len = sizeof(peer);
  if (::getsockopt(conn.get(), SOL_SOCKET, SO_PEERCRED, &peer, &len) != 0 ||
      (peer.uid != 0 && peer.uid != owner_)) {
    reply = R"({"error": "permission denied"})";
  } else if (!ReadLine(conn.get(), &request)) {
    reply = R"({"error": "no request"})";
  } else {
    reply = handler_(request);
  }
  reply.push_back('\n');
  (void)WriteAll(conn.get(), reply.data(), reply.size(), path_);
}

Result<std::string> ControlRequest(const std::string& socket_path, const std::string& request,
                                   const ControlCall& call) {
  using Clock = std::chrono::steady_clock;
  const Clock::time_point deadline = Clock::now() + std::chrono::seconds(call.timeout_s);
  auto timed_out = [&] {
    return Status::FromErrno(EAGAIN, "read " + socket_path,
                             fmt::format("no whole answer within {} s", call.timeout_s));
  };
  auto dir = OpenFile(ParentPath(socket_path), O_PATH | O_DIRECTORY);
  if (!dir.ok()) return dir.status();
  UniqueFd sock(::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0));
  if (!sock.valid()) return Status::FromErrno(errno, "socket", socket_path);
  // Each send and read may take what is left of the deadline, no more.
  auto limit = [&]() -> bool {
    if (call.timeout_s <= 0) return true;
    const auto left =
        std::chrono::duration_cast<std::chrono::microseconds>(deadline - Clock::now()).count();
    if (left <= 0) return false;
    struct timeval tv = {static_cast<time_t>(left / 1000000),
                         static_cast<suseconds_t>(left % 1000000)};
    ::setsockopt(sock.get(), SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
    ::setsockopt(sock.get(), SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof(tv));
    return true;
  };
  struct sockaddr_un addr = AddressIn(dir->get(), std::string(BaseName(socket_path)).c_str());
  if (!limit()) return timed_out();
  if (::connect(sock.get(), reinterpret_cast<struct sockaddr*>(&addr), sizeof(addr)) != 0) {
    return Status::FromErrno(errno, "connect", socket_path);
  }
  if (call.peer_pid > 0) {
    struct ucred peer {};
    socklen_t len = sizeof(peer);
    if (::getsockopt(sock.get(), SOL_SOCKET, SO_PEERCRED, &peer, &len) != 0 ||
        peer.pid != call.peer_pid || peer.uid != 0) {
      return Status::FromErrno(EPERM, "connect " + socket_path,
                               fmt::format("answered by pid {} uid {}, not the mount's daemon "
                                           "(pid {}, root)",
                                           peer.pid, peer.uid, call.peer_pid));
    }
  }
  std::string line = request + "\n";
  if (!limit()) return timed_out();
  TBFS_RETURN_IF_ERROR(WriteAll(sock.get(), line.data(), line.size(), socket_path));
  std::string reply;
  char buf[4096];
  for (;;) {
    if (!limit()) return timed_out();
    ssize_t n = ::read(sock.get(), buf, sizeof(buf));
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) return timed_out();
    if (n < 0) return Status::FromErrno(errno, "read", socket_path);
    if (n == 0) break;
    reply.append(buf, static_cast<size_t>(n));
    if (reply.size() > kMaxControlReplyBytes) {
      return Status::FromErrno(EMSGSIZE, "read " + socket_path,
                               fmt::format("an answer over {} bytes", kMaxControlReplyBytes));
    }
  }
  // Every answer ends in a newline: without one the daemon went away.
  if (reply.empty() || reply.back() != '\n') {
    return Status::FromErrno(EPIPE, "read " + socket_path,
                             "the mount closed the connection without an answer (its daemon "
                             "stopped or died: its log says why)");
  }
  while (!reply.empty() && reply.back() == '\n') reply.pop_back();
  return reply;
}

}  // namespace tbfs::fs
