// Filesystem: extended attributes, including user.tbfs.state and the control socket's path on the
// root.
#include <fcntl.h>
#include <sys/xattr.h>
#include <unistd.h>

#include <cstring>

#include "base/time_util.h"
#include "fs/filesystem.h"
#include "fs/filesystem_internal.h"

namespace tbfs::fs {

int Filesystem::GetXattr(uint64_t ino, const char* name, std::string* value) {
  InodeView v = inodes_.View(ino);
  if (std::strcmp(name, kStateXattr) == 0) {
    if (v.kind == Kind::kColdFile) {
      *value = "cold";
      return 0;
    }
    struct stat st;
    if (v.kind == Kind::kHot &&
        ::fstatat(v.fd->get(), "", &st, AT_EMPTY_PATH | AT_SYMLINK_NOFOLLOW) == 0 &&
        S_ISREG(st.st_mode)) {
      *value = "hot";
      return 0;
    }
    return -ENODATA;
  }
  if (ino == InodeTable::kRootId && std::strcmp(name, kControlXattr) == 0 &&
      !options_.control_socket.empty()) {
    *value = options_.control_socket;
    return 0;
  }
  if (v.kind != Kind::kHot) return -ENODATA;
  std::string proc = ProcPath(v.fd->get());
  for (size_t cap = 256;; cap *= 4) {
    value->resize(cap);
    ssize_t n = ::getxattr(proc.c_str(), name, value->data(), cap);
    if (n >= 0) {
      value->resize(static_cast<size_t>(n));
      return 0;
    }
    if (errno != ERANGE || cap > (1 << 20)) return Errno();
  }
}

// user.tbfs.state is read by name, not listed: copy tools (rsync -X, tar
// --xattrs) would copy it and fail to set it (EPERM) on the copy.
int Filesystem::ListXattr(uint64_t ino, std::string* names) {
  InodeView v = inodes_.View(ino);
  names->clear();
  if (v.kind != Kind::kHot) return 0;
  struct stat st;
  if (::fstatat(v.fd->get(), "", &st, AT_EMPTY_PATH | AT_SYMLINK_NOFOLLOW) != 0 ||
      S_ISLNK(st.st_mode)) {
    return 0;
  }
  const std::string proc = ProcPath(v.fd->get());
  ssize_t n = ::listxattr(proc.c_str(), nullptr, 0);
  if (n > 0) {
    names->resize(static_cast<size_t>(n));
    n = ::listxattr(proc.c_str(), names->data(), names->size());
    names->resize(n > 0 ? static_cast<size_t>(n) : 0);
  }
  return 0;
}

int Filesystem::SetXattr(uint64_t ino, const char* name, const char* value, size_t size,
                         int flags) {
  if (std::strcmp(name, kStateXattr) == 0 || std::strcmp(name, kControlXattr) == 0) return -EPERM;
  InodeView v = inodes_.View(ino);
  if (v.kind != Kind::kHot) return -ENOTSUP;
  if (::setxattr(ProcPath(v.fd->get()).c_str(), name, value, size, flags) != 0) return Errno();
  return 0;
}

int Filesystem::RemoveXattr(uint64_t ino, const char* name) {
  if (std::strcmp(name, kStateXattr) == 0) return -EPERM;
  InodeView v = inodes_.View(ino);
  if (v.kind != Kind::kHot) return -ENODATA;
  if (::removexattr(ProcPath(v.fd->get()).c_str(), name) != 0) return Errno();
  return 0;
}

}  // namespace tbfs::fs
