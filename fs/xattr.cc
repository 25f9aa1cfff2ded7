// Filesystem: extended attributes, including user.tbfs.state and the control socket's path on the
// root.
#include <fcntl.h>
#include <sys/xattr.h>
#include <unistd.h>

#include <cstring>

#include "base/time_util.h"
#include "fs/filesystem.h"
#include "store/xattrs.h"

namespace tbfs::fs {

int Filesystem::GetXattr(uint64_t ino, const char* name, std::string* value) {
  InodeView v = inodes_.View(ino);
  if (v.stale()) return -ESTALE;  // never /proc/self/fd/-1
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
  if (v.kind == Kind::kColdFile) {
    // Its attributes, its ACL among them (the kernel asks for it to check
    // a permission), as the file had them.
    auto m = store_->GetManifest(v.file_id);
    if (!m.ok())
      return m.status().IsNotFound() ? -ENODATA : StoreError(m.status(), EioSite::kXattr);
    const std::string* found = store::FindXattr(*m, name);
    if (found == nullptr) return -ENODATA;
    *value = *found;
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
    if (errno != ERANGE || cap > (1 << 20)) return -errno;
  }
}

// user.tbfs.state is read by name, not listed: copy tools (rsync -X, tar
// --xattrs) would copy it and fail to set it (EPERM) on the copy. trusted.*
// names are listed to root only (`trusted`).
int Filesystem::ListXattr(uint64_t ino, bool trusted, std::string* names) {
  InodeView v = inodes_.View(ino);
  if (v.stale()) return -ESTALE;
  names->clear();
  auto shown = [&](std::string_view name) { return trusted || !name.starts_with("trusted."); };
  if (v.kind == Kind::kColdFile) {
    auto m = store_->GetManifest(v.file_id);
    if (!m.ok()) return m.status().IsNotFound() ? 0 : StoreError(m.status(), EioSite::kXattr);
    for (const auto& x : m->xattrs()) {
      if (shown(x.name())) names->append(x.name()).push_back('\0');
    }
    return 0;
  }
  if (v.kind != Kind::kHot) return 0;
  // Through the fd's /proc link, a symlink's own names (the link names the
  // symlink, never its target), as GetXattr reads them.
  const std::string proc = ProcPath(v.fd->get());
  // The list may grow between asking its size and reading it (another
  // process setting a name): ask again, never answer with a short list.
  for (int attempt = 0;; ++attempt) {
    const ssize_t size = ::listxattr(proc.c_str(), nullptr, 0);
    if (size < 0) return -errno;
    names->resize(static_cast<size_t>(size));
    if (size == 0) break;
    const ssize_t n = ::listxattr(proc.c_str(), names->data(), names->size());
    if (n >= 0) {
      names->resize(static_cast<size_t>(n));
      break;
    }
    if (errno != ERANGE || attempt == 16) return -errno;
  }
  if (!trusted) {
    std::string kept;
    for (size_t at = 0; at < names->size();) {
      const size_t end = names->find('\0', at);
      const std::string_view name(names->data() + at,
                                  (end == std::string::npos ? names->size() : end) - at);
      if (shown(name)) kept.append(name).push_back('\0');
      at = end == std::string::npos ? names->size() : end + 1;
    }
    *names = std::move(kept);
  }
  return 0;
}

int Filesystem::SetXattr(uint64_t ino, const char* name, const char* value, size_t size,
                         int flags) {
  if (std::strcmp(name, kStateXattr) == 0 || std::strcmp(name, kControlXattr) == 0) return -EPERM;
  InodeView v = inodes_.View(ino);
  if (v.kind == Kind::kColdFile) {
    const std::string bytes(value, size);
    return SetColdXattr(ino, v, name, &bytes, flags);
  }
  if (v.kind != Kind::kHot) return -ENOTSUP;
  if (v.stale()) return -ESTALE;
  if (::setxattr(ProcPath(v.fd->get()).c_str(), name, value, size, flags) != 0) return -errno;
  return 0;
}

int Filesystem::RemoveXattr(uint64_t ino, const char* name) {
  if (std::strcmp(name, kStateXattr) == 0) return -EPERM;
  InodeView v = inodes_.View(ino);
  if (v.kind == Kind::kColdFile) return SetColdXattr(ino, v, name, nullptr, 0);
  if (v.kind != Kind::kHot) return -ENODATA;
  if (v.stale()) return -ESTALE;
  if (::removexattr(ProcPath(v.fd->get()).c_str(), name) != 0) return -errno;
  return 0;
}

// A cold file's attributes change in its manifest, as its mode does
// (SetAttr): the kernel checked the caller's right to change them.
int Filesystem::SetColdXattr(uint64_t ino, const InodeView& v, const char* name,
                             const std::string* value, int flags) {
  ReaderMutexLock ns(ns_mu_);
  auto m = store_->GetManifest(v.file_id);
  if (!m.ok()) return m.status().IsNotFound() ? -ENOENT : StoreError(m.status(), EioSite::kXattr);
  if (int r = store::SetXattr(&*m, name, value, flags); r != 0) return r;
  m->set_ctime_ns(NowNs());
  store::WriteBatch batch;
  store_->UpdateManifest(&batch, *m);
  Status st = store_->Commit(batch, true);
  if (!st.ok()) return StoreError(st, EioSite::kXattr, m->path());
  inodes_.UpdateManifest(*m);
  Invalidate(ino);  // an ACL changes the mode
  return 0;
}

}  // namespace tbfs::fs
