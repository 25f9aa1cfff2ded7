#include "fs/fuse_xattr_ops.h"

#include <cstring>
#include <string>

#include "fs/filesystem.h"
#include "fs/fuse_ops.h"
#include "fs/setid_drop.h"

namespace tbfs::fs {

namespace {

void ReplyXattr(fuse_req_t req, int err, const std::string& value, size_t size) {
  if (err != 0) {
    fuse_reply_err(req, -err);
  } else if (size == 0) {
    fuse_reply_xattr(req, value.size());
  } else if (size < value.size()) {
    fuse_reply_err(req, ERANGE);
  } else {
    fuse_reply_buf(req, value.data(), value.size());
  }
}

void OpGetXattr(fuse_req_t req, fuse_ino_t ino, const char* name, size_t size) {
  std::string value;
  int err = FsOf(req).GetXattr(ino, name, &value);
  ReplyXattr(req, err, value, size);
}

void OpListXattr(fuse_req_t req, fuse_ino_t ino, size_t size) {
  std::string names;
  // trusted.* is for root (CAP_SYS_ADMIN) only, as on ext4: the kernel
  // refuses others its values but leaves listing to the filesystem.
  const bool trusted = fuse_req_ctx(req)->uid == 0;
  int err = FsOf(req).ListXattr(ino, trusted, &names);
  ReplyXattr(req, err, names, size);
}

void OpSetXattr(fuse_req_t req, fuse_ino_t ino, const char* name, const char* value, size_t size,
                int flags) {
  const int err = FsOf(req).SetXattr(ino, name, value, size, flags);
  if (err == 0 && std::strcmp(name, "system.posix_acl_access") == 0) {
    DropSetId(req, FsOf(req), ino, nullptr, SetIdCause::kAcl);
  }
  fuse_reply_err(req, -err);
}

void OpRemoveXattr(fuse_req_t req, fuse_ino_t ino, const char* name) {
  fuse_reply_err(req, -FsOf(req).RemoveXattr(ino, name));
}

}  // namespace

void AddXattrOps(struct fuse_lowlevel_ops* ops) {
  ops->getxattr = OpGetXattr;
  ops->listxattr = OpListXattr;
  ops->setxattr = OpSetXattr;
  ops->removexattr = OpRemoveXattr;
}

}  // namespace tbfs::fs
