#include "fs/setid_drop.h"

#include <sys/stat.h>

#include <cstring>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "fmt/format.h"
#include "fs/filesystem.h"
#include "fs/fuse_ops.h"
#include "fs/setattr_bits.h"
#include "spdlog/spdlog.h"

namespace tbfs::fs {

namespace {

// Whether the caller of `req` is in group `gid`: their own, or one of the
// supplementary groups libfuse reads from /proc for the calling thread.
bool InGroup(fuse_req_t req, gid_t gid) {
  const struct fuse_ctx* ctx = fuse_req_ctx(req);
  if (ctx->gid == gid) return true;
  // The calling thread's supplementary groups, from /proc (libfuse 3.14's
  // fuse_req_getgroups reads past its buffer when the file fills it).
  std::ifstream status(fmt::format("/proc/{}/task/{}/status", ctx->pid, ctx->pid));
  for (std::string line; std::getline(status, line);) {
    if (!line.starts_with("Groups:")) continue;
    std::istringstream ids(line.substr(7));
    for (unsigned long id; ids >> id;) {
      if (id == gid) return true;
    }
    return false;
  }
  return false;  // the caller is gone, or no /proc: as outside
}

}  // namespace

void DropSetId(fuse_req_t req, Filesystem& fs, uint64_t ino, FileHandle* fh, SetIdCause cause) {
  if (fuse_req_ctx(req)->uid == 0) return;  // CAP_FSETID
  struct stat st;
  if (fs.GetAttr(ino, &st, fh) != 0 || !(st.st_mode & (S_ISUID | S_ISGID))) return;
  if (cause == SetIdCause::kData && !S_ISREG(st.st_mode)) return;
  mode_t mode = st.st_mode;
  if (cause == SetIdCause::kData) mode &= ~S_ISUID;
  if ((mode & S_ISGID) &&
      ((cause == SetIdCause::kData && (mode & S_IXGRP)) || !InGroup(req, st.st_gid))) {
    mode &= ~S_ISGID;
  }
  if (mode == st.st_mode) return;
  struct stat attr {};
  attr.st_mode = mode;
  struct stat out;
  if (int r = fs.SetAttr(ino, attr, kSetMode, fh, &out); r != 0) {
    spdlog::warn("inode {}: clearing set-ID bits after a change by uid {}: {}", ino,
                 fuse_req_ctx(req)->uid, std::strerror(-r));
    return;
  }
  // The kernel may hold the mode from before (a write that changed no size
  // leaves it cached): the attributes only, which takes no inode lock the
  // request in flight may hold.
  if (struct fuse_session* se = static_cast<FuseContext*>(fuse_req_userdata(req))->session) {
    fuse_lowlevel_notify_inval_inode(se, ino, -1, 0);
  }
}

}  // namespace tbfs::fs
