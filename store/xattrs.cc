#include "store/xattrs.h"

#include <sys/stat.h>
#include <sys/xattr.h>

#include <cstring>

#include "base/time_util.h"
#include "spdlog/spdlog.h"

namespace tbfs::store {

namespace {

constexpr uint32_t kAclVersion = 2;
constexpr uint16_t kUserObj = 0x01, kUser = 0x02, kGroupObj = 0x04, kGroup = 0x08, kMask = 0x10,
                   kOther = 0x20;
constexpr size_t kAclHeader = 4, kAclEntry = 8;

uint16_t Le16(const char* p) {
  return static_cast<uint16_t>(static_cast<uint8_t>(p[0]) | static_cast<uint8_t>(p[1]) << 8);
}
uint32_t Le32(const char* p) {
  return static_cast<uint32_t>(Le16(p)) | static_cast<uint32_t>(Le16(p + 2)) << 16;
}

size_t XattrBytes(const storepb::Manifest& m) {
  size_t total = 0;
  for (const auto& x : m.xattrs()) total += x.name().size() + 1 + x.value().size();
  return total;
}

}  // namespace

bool AclModeBits(std::string_view acl, mode_t* bits, bool* minimal) {
  if (acl.size() < kAclHeader || (acl.size() - kAclHeader) % kAclEntry != 0 ||
      Le32(acl.data()) != kAclVersion) {
    return false;
  }
  int user_obj = -1, group_obj = -1, mask = -1, other = -1;
  bool named = false;
  for (size_t at = kAclHeader; at < acl.size(); at += kAclEntry) {
    const uint16_t tag = Le16(acl.data() + at), perm = Le16(acl.data() + at + 2);
    if (perm > 7) return false;
    switch (tag) {
      case kUserObj:
        user_obj = perm;
        break;
      case kGroupObj:
        group_obj = perm;
        break;
      case kMask:
        mask = perm;
        break;
      case kOther:
        other = perm;
        break;
      case kUser:
      case kGroup:
        named = true;
        break;
      default:
        return false;
    }
  }
  if (user_obj < 0 || group_obj < 0 || other < 0 || (named && mask < 0)) return false;
  *bits = static_cast<mode_t>(user_obj << 6 | (mask >= 0 ? mask : group_obj) << 3 | other);
  *minimal = !named && mask < 0;
  return true;
}

size_t XattrBytesAt(int dir_fd, const char* name) {
  // The l* calls do not follow a symlink at `name`; the folder is the fd's.
  const std::string path = fmt::format("/proc/self/fd/{}/{}", dir_fd, name);
  const ssize_t n = ::llistxattr(path.c_str(), nullptr, 0);
  if (n <= 0) return 0;
  std::string names(static_cast<size_t>(n), '\0');
  const ssize_t got = ::llistxattr(path.c_str(), names.data(), names.size());
  if (got <= 0) return 0;
  names.resize(static_cast<size_t>(got));
  size_t total = 0;
  for (size_t at = 0; at < names.size();) {
    const std::string attr(names.c_str() + at);
    at += attr.size() + 1;
    const ssize_t v = ::lgetxattr(path.c_str(), attr.c_str(), nullptr, 0);
    if (v >= 0) total += attr.size() + 1 + static_cast<size_t>(v);
  }
  return total;
}

Status ReadXattrs(int fd, const std::string& path, storepb::Manifest* m) {
  m->clear_xattrs();
  std::string names(256, '\0');
  ssize_t n;
  while ((n = ::flistxattr(fd, names.data(), names.size())) < 0 && errno == ERANGE) {
    n = ::flistxattr(fd, nullptr, 0);
    if (n < 0) break;
    names.resize(static_cast<size_t>(n) + 256);
  }
  if (n < 0) {
    if (errno == ENOTSUP) return Status::OK();  // a filesystem without them
    return Status::FromErrno(errno, "list the extended attributes of", path);
  }
  names.resize(static_cast<size_t>(n));
  size_t total = 0;
  for (size_t at = 0; at < names.size();) {
    const std::string name(names.c_str() + at);
    at += name.size() + 1;
    if (name.empty()) continue;
    std::string value(256, '\0');
    ssize_t v;
    while ((v = ::fgetxattr(fd, name.c_str(), value.data(), value.size())) < 0 && errno == ERANGE &&
           value.size() <= kMaxXattrBytes) {
      value.resize(value.size() * 4);
    }
    if (v < 0 && errno == ENODATA) continue;  // removed since the list
    if (v < 0) return Status::FromErrno(errno, "read extended attribute " + name + " of", path);
    value.resize(static_cast<size_t>(v));
    total += name.size() + 1 + value.size();
    if (total > kMaxXattrBytes) {
      return Status::FromErrno(E2BIG, "read the extended attributes (over 64 KiB) of", path);
    }
    storepb::Xattr* x = m->add_xattrs();
    x->set_name(name);
    x->set_value(std::move(value));
  }
  return Status::OK();
}

Status ApplyXattrs(int fd, const std::string& path, const storepb::Manifest& m) {
  // The new file may have inherited its folder's default ACL: a file that
  // had no ACL must not come back with one (it could grant what the mode
  // does not).
  if (FindXattr(m, kAclAccessXattr) == nullptr && ::fremovexattr(fd, kAclAccessXattr) != 0 &&
      errno != ENODATA && errno != ENOTSUP) {
    return Status::FromErrno(errno, "remove the inherited ACL of", path);
  }
  for (const auto& x : m.xattrs()) {
    if (::fsetxattr(fd, x.name().c_str(), x.value().data(), x.value().size(), 0) == 0) continue;
    const int err = errno;
    // An ACL that cannot be set is a permission lost: the write-back fails
    // (the file stays cold, its ACL in force). Another attribute the
    // filesystem refuses (security.*, trusted.* elsewhere) is logged.
    if (x.name() == kAclAccessXattr || x.name().starts_with("user.")) {
      return Status::FromErrno(err, "set extended attribute " + x.name() + " of", path);
    }
    spdlog::warn("{}: extended attribute {} not kept: {}", path, x.name(), std::strerror(err));
  }
  return Status::OK();
}

void CarryChanges(int fd, const storepb::Manifest& was, const storepb::Manifest& now) {
  auto warn = [&](const char* op) {
    spdlog::warn("{}: {} as it was changed through the mount: {}", now.path(), op,
                 std::strerror(errno));
  };
  const bool owner = now.uid() != was.uid() || now.gid() != was.gid();
  if (owner && ::fchown(fd, now.uid(), now.gid()) != 0) warn("chown");
  bool xattrs = now.xattrs_size() != was.xattrs_size();
  for (int i = 0; !xattrs && i < now.xattrs_size(); ++i) {
    xattrs = now.xattrs(i).name() != was.xattrs(i).name() ||
             now.xattrs(i).value() != was.xattrs(i).value();
  }
  if (xattrs) {
    for (const auto& x : was.xattrs()) {
      if (FindXattr(now, x.name()) == nullptr && ::fremovexattr(fd, x.name().c_str()) != 0)
        warn("remove an extended attribute");
    }
    if (!ApplyXattrs(fd, now.path(), now).ok()) warn("set the extended attributes");
  }
  if ((owner || xattrs || (now.mode() & 07777) != (was.mode() & 07777)) &&
      ::fchmod(fd, now.mode() & 07777) != 0) {
    warn("chmod");
  }
  if (now.atime_ns() != was.atime_ns() || now.mtime_ns() != was.mtime_ns()) {
    struct timespec times[2] = {FromNs(now.atime_ns()), FromNs(now.mtime_ns())};
    if (::futimens(fd, times) != 0) warn("set the times");
  }
}

const std::string* FindXattr(const storepb::Manifest& m, std::string_view name) {
  for (const auto& x : m.xattrs()) {
    if (x.name() == name) return &x.value();
  }
  return nullptr;
}

int SetXattr(storepb::Manifest* m, std::string_view name, const std::string* value, int flags) {
  // As a disk filesystem: no system.* name but the access ACL (the kernel
  // checks none of the others' callers), no empty name in a namespace.
  if (name.starts_with("system.") && name != kAclAccessXattr) return -EOPNOTSUPP;
  if (name == "user." || name == "trusted." || name == "security.") return -EINVAL;
  int at = -1;
  for (int i = 0; i < m->xattrs_size(); ++i) {
    if (m->xattrs(i).name() == name) at = i;
  }
  if (value == nullptr || (flags & XATTR_REPLACE)) {
    if (at < 0) return -ENODATA;
  }
  if (value != nullptr && (flags & XATTR_CREATE) && at >= 0) return -EEXIST;
  auto remove = [&] {
    if (at < 0) return;
    m->mutable_xattrs()->DeleteSubrange(at, 1);
  };
  if (value == nullptr) {
    remove();
    return 0;
  }
  if (name == kAclAccessXattr) {
    mode_t bits = 0;
    bool minimal = false;
    if (!AclModeBits(*value, &bits, &minimal)) return -EINVAL;
    m->set_mode((m->mode() & ~static_cast<uint32_t>(0777)) | bits);
    if (minimal) {  // the mode says it all
      remove();
      return 0;
    }
  }
  // No more than a disk filesystem's one attribute block holds, so that the
  // file can always be written back (a file that came with more may keep
  // what it had).
  const size_t before = XattrBytes(*m);
  const size_t old = at >= 0 ? name.size() + 1 + m->xattrs(at).value().size() : 0;
  const size_t after = before - old + name.size() + 1 + value->size();
  if (after > kMaxXattrBytes || (after > kMaxNewXattrBytes && after > before)) return -ENOSPC;
  storepb::Xattr* x = at >= 0 ? m->mutable_xattrs(at) : m->add_xattrs();
  x->set_name(std::string(name));
  x->set_value(*value);
  return 0;
}

void ChmodXattrs(storepb::Manifest* m, mode_t mode) {
  for (auto& x : *m->mutable_xattrs()) {
    if (x.name() != kAclAccessXattr) continue;
    mode_t bits;
    bool minimal;
    if (!AclModeBits(x.value(), &bits, &minimal)) return;
    bool has_mask = false;
    for (size_t at = kAclHeader; at < x.value().size(); at += kAclEntry) {
      has_mask = has_mask || Le16(x.value().data() + at) == kMask;
    }
    std::string& acl = *x.mutable_value();
    for (size_t at = kAclHeader; at < acl.size(); at += kAclEntry) {
      const uint16_t tag = Le16(acl.data() + at);
      int perm = -1;
      if (tag == kUserObj) perm = (mode >> 6) & 7;
      if (tag == kMask || (tag == kGroupObj && !has_mask)) perm = (mode >> 3) & 7;
      if (tag == kOther) perm = mode & 7;
      if (perm >= 0) {
        acl[at + 2] = static_cast<char>(perm);
        acl[at + 3] = 0;
      }
    }
  }
}

}  // namespace tbfs::store
