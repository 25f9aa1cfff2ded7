#include "fs/fuse_session.h"

#include <string>
#include <vector>

namespace tbfs::fs {

Result<std::unique_ptr<FuseSession>> FuseSession::Create(const std::string& opts,
                                                         FuseContext* context) {
  std::vector<std::string> argv_s = {"tbfs", "-o", opts};
  std::vector<char*> argv;
  for (auto& s : argv_s) argv.push_back(s.data());
  struct fuse_args args = FUSE_ARGS_INIT(static_cast<int>(argv.size()), argv.data());
  struct fuse_session* se =
      fuse_session_new(&args, TbfsOps(), sizeof(struct fuse_lowlevel_ops), context);
  fuse_opt_free_args(&args);
  if (se == nullptr) return Status::InvalidArgument("bad FUSE options: " + opts);
  std::unique_ptr<FuseSession> session(new FuseSession(se));
  if (fuse_set_signal_handlers(se) != 0) return Status::Aborted("cannot install signal handlers");
  session->handlers_ = true;
  return session;
}

FuseSession::~FuseSession() {
  Unmount();
  if (handlers_) fuse_remove_signal_handlers(se_);
  fuse_session_destroy(se_);
}

Status FuseSession::Mount(const std::string& mountpoint) {
  if (fuse_session_mount(se_, mountpoint.c_str()) != 0) {
    return Status::Aborted("cannot mount on " + mountpoint + " (see above; is /dev/fuse usable?)");
  }
  mounted_ = true;
  return Status::OK();
}

int FuseSession::Loop(unsigned max_threads) {
  struct fuse_loop_config* loop = fuse_loop_cfg_create();
  fuse_loop_cfg_set_clone_fd(loop, 0);
  fuse_loop_cfg_set_max_threads(loop, max_threads);
  const int rc = fuse_session_loop_mt(se_, loop);
  fuse_loop_cfg_destroy(loop);
  return rc;
}

void FuseSession::Unmount() {
  if (!mounted_) return;
  fuse_session_unmount(se_);
  mounted_ = false;
}

void SessionCache::InvalidateAttrs(uint64_t ino) {
  // Attributes only (offset < 0): the content of a file is the same hot
  // or cold. ENOENT: the kernel does not hold the inode; nothing to do.
  if (struct fuse_session* se = se_.load()) fuse_lowlevel_notify_inval_inode(se, ino, -1, 0);
}

void SessionCache::InvalidateEntry(uint64_t parent, const std::string& name) {
  if (struct fuse_session* se = se_.load())
    fuse_lowlevel_notify_inval_entry(se, parent, name.data(), name.size());
}

void SessionCache::InvalidateListing(uint64_t folder) {
  if (struct fuse_session* se = se_.load()) fuse_lowlevel_notify_inval_inode(se, folder, 0, 0);
}

}  // namespace tbfs::fs
