// Filesystem: looking names up, attributes (hot, cold, folders mixing both), links, statfs.
#include <fcntl.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include <cstring>

#include "base/time_util.h"
#include "fmt/format.h"
#include "fs/filesystem.h"
#include "fs/setattr_bits.h"
#include "spdlog/spdlog.h"
#include "store/classify.h"
#include "store/xattrs.h"

namespace tbfs::fs {

void Filesystem::ColdAttr(const ColdAttrs& a, ino_t shown_ino, struct stat* st) {
  *st = {};
  st->st_ino = shown_ino;
  st->st_mode = a.mode;
  st->st_nlink = 1;
  st->st_uid = a.uid;
  st->st_gid = a.gid;
  st->st_size = static_cast<off_t>(a.size);
  st->st_blksize = 1 << 16;
  st->st_blocks = static_cast<blkcnt_t>(a.stored_4k) * 8;
  st->st_atim = FromNs(a.atime_ns);
  st->st_mtim = FromNs(a.mtime_ns);
  st->st_ctim = FromNs(a.ctime_ns);
}

void Filesystem::ColdDirAttr(const std::string& rel, ino_t shown_ino, struct stat* st) {
  *st = {};
  st->st_ino = shown_ino;
  st->st_mode = S_IFDIR | 0755;
  st->st_nlink = 2;
  auto entry = store_->GetEntry(rel);
  if (entry.ok()) {
    st->st_mode = S_IFDIR | (entry->mode() & 07777);
    st->st_uid = entry->uid();
    st->st_gid = entry->gid();
    st->st_mtim = st->st_ctim = st->st_atim = FromNs(entry->mtime_ns());
  }
}

// made_fd: a file just made at the name, looked up by that fd (another
// process may have removed or replaced the name since).
int Filesystem::HotLookupAt(int dir_fd, const char* name, EntryOut* out, int made_fd) {
  // One stat finds an inode the table already holds (a walk of a known tree);
  // only a new one is opened.
  struct stat st;
  if ((made_fd >= 0 ? ::fstat(made_fd, &st) : ::fstatat(dir_fd, name, &st, AT_SYMLINK_NOFOLLOW)) !=
      0) {
    return -errno;
  }
  // Folders (whose listings TensorBoard polls) and tfevents files (which grow
  // in place) must look fresh; the rest may be cached longer.
  const bool fresh = S_ISDIR(st.st_mode) || events::IsEventsFileName(name);
  std::string handle =
      made_fd >= 0 ? inodes_.HandleOf(made_fd, st) : inodes_.HandleAt(dir_fd, name, st);
  InodeRef ref = inodes_.RefHot(st, handle, fresh);
  // A new file with a handle needs no fd: a second stat shows that st and
  // handle are of one file (no rename at the name between the two stats:
  // a rename changes the file's ctime).
  struct stat again;
  if (ref.id == 0 && !handle.empty() && made_fd >= 0) {
    ref = inodes_.AddHotByHandle(st, std::move(handle), fresh);
  } else if (ref.id == 0 && !handle.empty() &&
             ::fstatat(dir_fd, name, &again, AT_SYMLINK_NOFOLLOW) == 0 &&
             again.st_dev == st.st_dev && again.st_ino == st.st_ino &&
             again.st_ctim.tv_sec == st.st_ctim.tv_sec &&
             again.st_ctim.tv_nsec == st.st_ctim.tv_nsec) {
    ref = inodes_.AddHotByHandle(again, std::move(handle), fresh);
    st = again;
  }
  if (ref.id == 0) {
    int fd = made_fd >= 0 ? ::open(ProcPath(made_fd).c_str(), O_PATH | O_CLOEXEC)
                          : ::openat(dir_fd, name, O_PATH | O_NOFOLLOW | O_CLOEXEC);
    if (fd < 0) return -errno;
    UniqueFd owned(fd);
    if (::fstatat(fd, "", &st, AT_EMPTY_PATH | AT_SYMLINK_NOFOLLOW) != 0) return -errno;
    ref = inodes_.AddHot(std::move(owned), st, fresh);
  }
  out->id = ref.id;
  if (ref.cold) {
    ColdAttr(*ref.cold, ref.shown_ino, &out->attr);  // on its way to the store
  } else {
    out->attr = st;
    out->attr.st_ino = ref.shown_ino;
  }
  return 0;
}

int Filesystem::LookupCold(const std::string& rel, EntryOut* out) {
  auto entry = store_->GetEntry(rel);
  if (!entry.ok()) return StoreError(entry.status(), EioSite::kLookup);
  if (entry->kind() == storepb::Entry::DIR) {
    out->id = inodes_.AddColdDir(rel);
    ColdDirAttr(rel, inodes_.ShownIno(out->id), &out->attr);
    return 0;
  }
  return LookupColdFile(entry->file_id(), out);
}

int Filesystem::LookupColdFile(uint64_t file_id, EntryOut* out) {
  auto m = store_->GetManifest(file_id);
  if (!m.ok()) return StoreError(m.status(), EioSite::kLookupManifest);
  InodeRef ref = inodes_.AddColdFile(*m);
  out->id = ref.id;
  if (ref.cold) {
    ColdAttr(*ref.cold, ref.shown_ino, &out->attr);
    return 0;
  }
  // Back in the logdir since the store was asked: the inode serves it there.
  int r = GetAttr(ref.id, &out->attr);
  if (r != 0) inodes_.Forget(ref.id, 1);
  return r;
}

int Filesystem::Lookup(uint64_t parent, const char* name, EntryOut* out) {
  ReaderMutexLock ns(ns_mu_);
  Folder f = FolderOf(parent);
  return LookupIn(&f, name, out);
}

int Filesystem::LookupIn(Folder* f, const char* name, EntryOut* out) {
  if (IsHidden(f, name) || IsTransientName(name)) return -ENOENT;
  if (f->view.kind == Kind::kColdFile) return -ENOTDIR;
  const Placements::Mark mark = placements_.Now();
  if (f->view.kind == Kind::kHot) {
    int r = HotLookupAt(f->view.fd->get(), name, out);
    if (r != -ENOENT) return r;
  }
  if (int r = FolderRel(f); r != 0) return r;
  int r = LookupCold(JoinPath(f->rel, name), out);
  // Neither hot nor cold: unless a file was put in place meanwhile (a
  // rehydration lands in the folder before it leaves the store).
  if (r == -ENOENT && f->view.kind == Kind::kHot && placements_.Moved(mark)) {
    r = HotLookupAt(f->view.fd->get(), name, out);
  }
  return r;
}

void Filesystem::Forget(uint64_t ino, uint64_t nlookup) {
  // The kernel's listing goes with its inode, not with a lookup of ours
  // balanced (ForgetName).
  if (inodes_.Forget(ino, nlookup)) listing_grants_.Drop(ino);
}

int Filesystem::GetAttr(uint64_t ino, struct stat* st, FileHandle* fh) {
  // A handle's own fd: the only way to a file deleted while open.
  int hfd = fh != nullptr && inodes_.KindOf(ino) == Kind::kHot ? IoFd(fh) : -1;
  if (hfd >= 0) {
    if (::fstat(hfd, st) != 0) return -errno;
    st->st_ino = inodes_.ShownIno(ino);
    return 0;
  }
  InodeView v = inodes_.View(ino);
  switch (v.kind) {
    case Kind::kColdFile:
      ColdAttr(v.cold, v.shown_ino, st);
      return 0;
    case Kind::kColdDir:
      ColdDirAttr(v.cold_path, v.shown_ino, st);
      return 0;
    case Kind::kHot:
      // A file handle whose file is gone: ESTALE has the kernel look the
      // name up again (another host may have moved the file to the store).
      if (v.stale()) return -ESTALE;
      if (::fstatat(v.fd->get(), "", st, AT_EMPTY_PATH | AT_SYMLINK_NOFOLLOW) != 0) return -errno;
      st->st_ino = v.shown_ino;
      return 0;
  }
  return Eio(EioSite::kInodeKind, fmt::format("getattr: inode {} of no known kind", ino));
}

int Filesystem::SetAttr(uint64_t ino, const struct stat& attr, int to_set, FileHandle* fh,
                        struct stat* out) {
  InodeView v = inodes_.View(ino);
  if (v.kind == Kind::kColdFile && !(to_set & kSetSize)) {
    // Metadata of a cold file changes in its manifest; no rehydration.
    ReaderMutexLock ns(ns_mu_);
    auto m = store_->GetManifest(v.file_id);
    if (!m.ok()) return StoreError(m.status(), EioSite::kSetattr);
    if (to_set & kSetMode) {
      m->set_mode((m->mode() & S_IFMT) | (attr.st_mode & 07777));
      store::ChmodXattrs(&*m, attr.st_mode);  // its ACL takes the new bits
    }
    if (to_set & kSetUid) m->set_uid(attr.st_uid);
    if (to_set & kSetGid) m->set_gid(attr.st_gid);
    const int64_t now = NowNs();
    if (to_set & kSetAtimeNow)
      m->set_atime_ns(now);
    else if (to_set & kSetAtime)
      m->set_atime_ns(ToNs(attr.st_atim));
    if (to_set & kSetMtimeNow)
      m->set_mtime_ns(now);
    else if (to_set & kSetMtime)
      m->set_mtime_ns(ToNs(attr.st_mtim));
    m->set_ctime_ns(now);
    store::WriteBatch batch;
    store_->UpdateManifest(&batch, *m);
    Status st = store_->Commit(batch, true);
    if (!st.ok()) return StoreError(st, EioSite::kSetattr, m->path());
    inodes_.UpdateManifest(*m);
    ColdAttr(ColdAttrs::Of(*m), v.shown_ino, out);
    return 0;
  }
  if (v.kind == Kind::kColdFile) {
    if (int r = Rehydrate(ino, /*wait=*/false); r != 0) return r;
  } else if (v.kind == Kind::kColdDir) {
    std::shared_ptr<UniqueFd> ignored;
    if (int r = EnsureBackingDir(ino, &ignored); r != 0) return r;
  }
  v = inodes_.View(ino);
  if (v.stale()) return -ESTALE;
  const int fd = v.fd->get();
  const std::string proc = ProcPath(fd);
  const int hfd = fh != nullptr ? IoFd(fh) : -1;
  const bool have_fh = hfd >= 0;
  if (to_set & kSetMode) {
    int r =
        have_fh ? ::fchmod(hfd, attr.st_mode & 07777) : ::chmod(proc.c_str(), attr.st_mode & 07777);
    if (r != 0) return -errno;
  }
  if (to_set & (kSetUid | kSetGid)) {
    uid_t uid = (to_set & kSetUid) ? attr.st_uid : static_cast<uid_t>(-1);
    gid_t gid = (to_set & kSetGid) ? attr.st_gid : static_cast<gid_t>(-1);
    if (::fchownat(fd, "", uid, gid, AT_EMPTY_PATH | AT_SYMLINK_NOFOLLOW) != 0) return -errno;
  }
  if (to_set & kSetSize) {
    int r = have_fh && fh->writable ? ::ftruncate(hfd, attr.st_size)
                                    : ::truncate(proc.c_str(), attr.st_size);
    if (r != 0) return -errno;
  }
  if (to_set & (kSetAtime | kSetMtime | kSetAtimeNow | kSetMtimeNow)) {
    struct timespec tv[2] = {{0, UTIME_OMIT}, {0, UTIME_OMIT}};
    if (to_set & kSetAtimeNow)
      tv[0].tv_nsec = UTIME_NOW;
    else if (to_set & kSetAtime)
      tv[0] = attr.st_atim;
    if (to_set & kSetMtimeNow)
      tv[1].tv_nsec = UTIME_NOW;
    else if (to_set & kSetMtime)
      tv[1] = attr.st_mtim;
    int r = have_fh ? ::futimens(hfd, tv) : ::utimensat(AT_FDCWD, proc.c_str(), tv, 0);
    if (r != 0) return -errno;
  }
  return GetAttr(ino, out);
}

int Filesystem::ReadLink(uint64_t ino, std::string* target) {
  InodeView v = inodes_.View(ino);
  if (v.kind != Kind::kHot) return -EINVAL;
  if (v.stale()) return -ESTALE;
  char buf[PATH_MAX + 1];
  ssize_t n = ::readlinkat(v.fd->get(), "", buf, sizeof(buf));
  if (n < 0) return -errno;
  target->assign(buf, static_cast<size_t>(n));
  return 0;
}

int Filesystem::StatFs(struct statvfs* st) {
  if (::fstatvfs(inodes_.RootFd(), st) != 0) {
    if (::statvfs(ProcPath(inodes_.RootFd()).c_str(), st) != 0) return -errno;
  }
  return 0;
}

}  // namespace tbfs::fs
