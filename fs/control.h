// The mount's control channel: a Unix socket in the store's folder, through
// which `tbfs status` and `tbfs migrate MOUNTPOINT --now` talk to the
// daemon. Nothing of the mounted tree is touched on the way, so no inode
// lock of the mount is held while a migration runs, and the tree stays
// usable meanwhile.
//
// Protocol: one request line ("status", "migrate-now", "gc-garbage[-apply]",
// "recompress LEVEL DICTIONARIES"), one reply line of JSON, then the server
// closes the connection. Access: the socket is
// mode 0600 in the store's 0700 folder, and the server also checks the
// peer's credentials (SO_PEERCRED): root and the mount's owner only; any
// other peer gets {"error": "permission denied"}.
//
// The server runs each connection on a thread of its own, so a status
// request is answered while a migrate-now request is being served.
#pragma once

#include <sys/types.h>

#include <atomic>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "base/fs_util.h"
#include "base/status.h"
#include "base/thread_annotations.h"

namespace tbfs::fs {

inline constexpr char kControlSocketName[] = "control.sock";

class ControlServer {
 public:
  // Answers one request line with one line of JSON.
  using Handler = std::function<std::string(const std::string& request)>;

  // Binds STORE_DIR/control.sock (replacing a stale one) and starts
  // serving. owner: the uid allowed besides root.
  static Result<std::unique_ptr<ControlServer>> Start(const std::string& store_dir, uid_t owner,
                                                      Handler handler);
  ~ControlServer();  // stops, waits for the connections in flight, unlinks the socket

  const std::string& path() const { return path_; }

 private:
  ControlServer() = default;
  void Loop();
  void Serve(int conn);
  void TurnAwayOne();

  std::string path_;
  UniqueFd dir_;  // the store folder (O_PATH): binds and unlinks go through it
  UniqueFd listen_;
  UniqueFd wake_[2];         // a pipe that ends Loop
  UniqueFd spare_;           // given up to take a connection when no descriptor is left
  bool out_of_fds_ = false;  // Loop's: said in the log for this episode
  uid_t owner_ = 0;
  Handler handler_;
  std::thread loop_;
  struct Connection {
    std::thread thread;
    std::shared_ptr<std::atomic<bool>> done;
  };
  Mutex mu_;  // a leaf
  std::vector<Connection> connections_ TBFS_GUARDED_BY(mu_);
};

// How a ControlRequest may go.
struct ControlCall {
  // > 0: the whole answer must be in within this many seconds (EAGAIN
  // otherwise, however slowly it trickles in); 0 waits as long as the
  // request takes (migrate-now).
  int timeout_s = 0;
  // > 0: the peer must be this process, run by root (SO_PEERCRED): what
  // answers at a path beneath folders a user owns may be the user's own
  // server (EPERM otherwise).
  pid_t peer_pid = 0;
};
inline constexpr size_t kMaxControlReplyBytes = 16u << 20;  // longer is an error (EMSGSIZE)

// Sends one request to the control socket at socket_path and returns the
// reply. PermissionDenied-like failures come back as IOError with EACCES.
Result<std::string> ControlRequest(const std::string& socket_path, const std::string& request,
                                   const ControlCall& call = {});

}  // namespace tbfs::fs
