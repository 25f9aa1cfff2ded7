#include "fs/fuse_ops.h"

#include <fcntl.h>
#include <unistd.h>

#include <cstring>
#include <memory>
#include <new>
#include <vector>

#include "base/failpoint.h"
#include "fs/filesystem.h"
#include "fs/fuse_interrupt.h"
#include "fs/fuse_xattr_ops.h"
#include "fs/setattr_bits.h"
#include "fs/setid_drop.h"

namespace tbfs::fs {

namespace {

static_assert(kSetMode == FUSE_SET_ATTR_MODE && kSetUid == FUSE_SET_ATTR_UID &&
              kSetGid == FUSE_SET_ATTR_GID && kSetSize == FUSE_SET_ATTR_SIZE &&
              kSetAtime == FUSE_SET_ATTR_ATIME && kSetMtime == FUSE_SET_ATTR_MTIME &&
              kSetAtimeNow == FUSE_SET_ATTR_ATIME_NOW && kSetMtimeNow == FUSE_SET_ATTR_MTIME_NOW);

OpLatency& Latency(fuse_req_t req) { return *ContextOf(req).latency; }

Caller CallerOf(fuse_req_t req) {
  const struct fuse_ctx* ctx = fuse_req_ctx(req);
  return {ctx->uid, ctx->gid, ctx->umask};
}

FileHandle* Fh(struct fuse_file_info* fi) {
  return reinterpret_cast<FileHandle*>(static_cast<uintptr_t>(fi->fh));
}

DirHandle* Dh(struct fuse_file_info* fi) {
  return reinterpret_cast<DirHandle*>(static_cast<uintptr_t>(fi->fh));
}

void ReplyEntry(fuse_req_t req, int err, const EntryOut& out) {
  if (err != 0) {
    fuse_reply_err(req, -err);
    return;
  }
  struct fuse_entry_param e {};
  e.ino = out.id;
  e.attr = out.attr;
  e.attr_timeout = e.entry_timeout = FsOf(req).CacheTtl(out.id);
  fuse_reply_entry(req, &e);
}

void OpInit(void* userdata, struct fuse_conn_info* conn) {
  if (conn->capable & FUSE_CAP_SPLICE_WRITE) conn->want |= FUSE_CAP_SPLICE_WRITE;
  if (conn->capable & FUSE_CAP_SPLICE_MOVE) conn->want |= FUSE_CAP_SPLICE_MOVE;
  if (conn->capable & FUSE_CAP_SPLICE_READ) conn->want |= FUSE_CAP_SPLICE_READ;
  if (conn->capable & FUSE_CAP_AUTO_INVAL_DATA) conn->want |= FUSE_CAP_AUTO_INVAL_DATA;
  if (conn->capable & FUSE_CAP_PARALLEL_DIROPS) conn->want |= FUSE_CAP_PARALLEL_DIROPS;
  // The kernel enforces POSIX ACLs (it asks for system.posix_acl_access:
  // the backing file's, or a cold file's from its manifest) and leaves
  // applying a folder's default ACL to the backing filesystem.
  if (conn->capable & FUSE_CAP_POSIX_ACL) conn->want |= FUSE_CAP_POSIX_ACL;
  // The umask too: the kernel would apply it before a folder's default
  // ACL could say otherwise (Caller::ModeIn).
  if (conn->capable & FUSE_CAP_DONT_MASK) conn->want |= FUSE_CAP_DONT_MASK;
  conn->want &= ~FUSE_CAP_WRITEBACK_CACHE;  // writes reach the backing file at once
  // An asynchronous O_DIRECT write (io_submit) is then one the kernel waits
  // for: it drops the cached pages it covers when it completes, so a
  // buffered read racing it cannot leave stale bytes cached (generic/451).
  conn->want &= ~FUSE_CAP_ASYNC_DIO;
  // Every READDIR is readdirplus. In the auto mode the kernel asks plain
  // READDIR after the first page unless lookups came in between, and a
  // walk that lists a whole folder before it stats (find, ls -l, fts) then
  // pays one LOOKUP round trip per entry.
  conn->want &= ~FUSE_CAP_READDIRPLUS_AUTO;
  static_cast<FuseContext*>(userdata)->initialized.set_value();  // INIT comes once
}

void OpLookup(fuse_req_t req, fuse_ino_t parent, const char* name) {
  OpLatency::Timer timer(Latency(req), FuseOp::kLookup);
  EntryOut out;
  int err = FsOf(req).Lookup(parent, name, &out);
  if (err == -ENOENT) {
    fuse_reply_err(req, ENOENT);  // no negative caching: new files show up at once
    return;
  }
  ReplyEntry(req, err, out);
}

void OpForget(fuse_req_t req, fuse_ino_t ino, uint64_t nlookup) {
  FsOf(req).Forget(ino, nlookup);
  fuse_reply_none(req);
}

void OpForgetMulti(fuse_req_t req, size_t count, struct fuse_forget_data* forgets) {
  for (size_t i = 0; i < count; ++i) FsOf(req).Forget(forgets[i].ino, forgets[i].nlookup);
  fuse_reply_none(req);
}

void OpGetAttr(fuse_req_t req, fuse_ino_t ino, struct fuse_file_info* fi) {
  OpLatency::Timer timer(Latency(req), FuseOp::kGetAttr);
  struct stat st;
  int err = FsOf(req).GetAttr(ino, &st, fi ? Fh(fi) : nullptr);
  if (err != 0) {
    fuse_reply_err(req, -err);
    return;
  }
  fuse_reply_attr(req, &st, FsOf(req).CacheTtl(ino));
}

void OpSetAttr(fuse_req_t req, fuse_ino_t ino, struct stat* attr, int to_set,
               struct fuse_file_info* fi) {
  struct stat out;
  FileHandle* fh = fi ? Fh(fi) : nullptr;
  int err = FsOf(req).SetAttr(ino, *attr, to_set, fh, &out);
  if (err == 0 && (to_set & FUSE_SET_ATTR_SIZE)) {
    DropSetId(req, FsOf(req), ino, fh, SetIdCause::kData);
    err = FsOf(req).GetAttr(ino, &out, fh);
  }
  if (err != 0) {
    fuse_reply_err(req, -err);
    return;
  }
  fuse_reply_attr(req, &out, FsOf(req).CacheTtl(ino));
}

void OpReadLink(fuse_req_t req, fuse_ino_t ino) {
  std::string target;
  int err = FsOf(req).ReadLink(ino, &target);
  if (err != 0) {
    fuse_reply_err(req, -err);
    return;
  }
  fuse_reply_readlink(req, target.c_str());
}

void OpMkNod(fuse_req_t req, fuse_ino_t parent, const char* name, mode_t mode, dev_t rdev) {
  EntryOut out;
  ReplyEntry(req, FsOf(req).MkNod(parent, name, mode, rdev, CallerOf(req), &out), out);
}

void OpMkdir(fuse_req_t req, fuse_ino_t parent, const char* name, mode_t mode) {
  EntryOut out;
  ReplyEntry(req, FsOf(req).Mkdir(parent, name, mode, CallerOf(req), &out), out);
}

void OpSymlink(fuse_req_t req, const char* link, fuse_ino_t parent, const char* name) {
  EntryOut out;
  ReplyEntry(req, FsOf(req).Symlink(link, parent, name, CallerOf(req), &out), out);
}

void OpLink(fuse_req_t req, fuse_ino_t ino, fuse_ino_t parent, const char* name) {
  EntryOut out;
  ReplyEntry(req, FsOf(req).Link(ino, parent, name, &out), out);
}

void OpUnlink(fuse_req_t req, fuse_ino_t parent, const char* name) {
  fuse_reply_err(req, -FsOf(req).Unlink(parent, name));
}

void OpRmdir(fuse_req_t req, fuse_ino_t parent, const char* name) {
  fuse_reply_err(req, -FsOf(req).Rmdir(parent, name));
}

void OpRename(fuse_req_t req, fuse_ino_t parent, const char* name, fuse_ino_t newparent,
              const char* newname, unsigned int flags) {
  fuse_reply_err(req, -FsOf(req).Rename(parent, name, newparent, newname, flags));
}

void SetOpenFlags(const FileHandle& h, int flags, struct fuse_file_info* fi) {
  fi->fh = reinterpret_cast<uintptr_t>(&h);
  // Cold content cannot change while cold; hot files are re-validated by
  // mtime (auto_inval_data) whenever their attributes are refreshed.
  fi->keep_cache = h.cold || (flags & O_ACCMODE) == O_RDONLY;
  // No direct_io, not even for O_DIRECT (docs/format.md, "The kernel's page
  // cache"): the kernel then does O_DIRECT itself, writing back and
  // invalidating the cached range around each direct read and write, so
  // buffered readers of other handles never see stale bytes, and a shared
  // mmap of an O_DIRECT handle works.
}

// The handles the kernel holds, by kind (see FuseContext::files).
std::set<FileHandle*>& Held(FuseContext& c, FileHandle*) TBFS_REQUIRES(c.handles_mu) {
  return c.files;
}
std::set<DirHandle*>& Held(FuseContext& c, DirHandle*) TBFS_REQUIRES(c.handles_mu) {
  return c.dirs;
}

// The kernel holds h from here.
template <typename Handle>
Handle* HandOver(fuse_req_t req, std::unique_ptr<Handle> h) {
  FuseContext& c = ContextOf(req);
  MutexLock lock(c.handles_mu);
  Held(c, h.get()).insert(h.get());
  return h.release();
}

template <typename Handle>
std::unique_ptr<Handle> TakeBack(fuse_req_t req, Handle* h) {
  FuseContext& c = ContextOf(req);
  MutexLock lock(c.handles_mu);
  Held(c, h).erase(h);
  return std::unique_ptr<Handle>(h);
}

void OpOpen(fuse_req_t req, fuse_ino_t ino, struct fuse_file_info* fi) {
  if (ShouldFail("open.throws")) throw std::bad_alloc();  // tests: the daemon's last words
  std::unique_ptr<FileHandle> fh;
  int err;
  if ((fi->flags & O_ACCMODE) == O_RDONLY && !(fi->flags & O_TRUNC)) {
    err = FsOf(req).Open(ino, fi->flags, &fh);  // never waits
  } else {
    Interruptible intr(req);
    err = FsOf(req).Open(ino, fi->flags, &fh, intr.get());
  }
  if (err != 0) {
    fuse_reply_err(req, -err);
    return;
  }
  // An O_TRUNC open truncates here (atomic O_TRUNC), not through setattr.
  if (fi->flags & O_TRUNC) DropSetId(req, FsOf(req), ino, fh.get(), SetIdCause::kData);
  SetOpenFlags(*fh, fi->flags, fi);
  FileHandle* h = HandOver(req, std::move(fh));
  if (fuse_reply_open(req, fi) != 0) FsOf(req).Release(TakeBack(req, h));  // the opener is gone
}

void OpCreate(fuse_req_t req, fuse_ino_t parent, const char* name, mode_t mode,
              struct fuse_file_info* fi) {
  std::unique_ptr<FileHandle> fh;
  EntryOut out;
  int err = FsOf(req).Create(parent, name, mode, fi->flags, CallerOf(req), &out, &fh);
  if (err != 0) {
    fuse_reply_err(req, -err);
    return;
  }
  SetOpenFlags(*fh, fi->flags, fi);
  struct fuse_entry_param e {};
  e.ino = out.id;
  e.attr = out.attr;
  e.attr_timeout = e.entry_timeout = FsOf(req).CacheTtl(out.id);
  FileHandle* h = HandOver(req, std::move(fh));
  if (fuse_reply_create(req, &e, fi) != 0) {
    FsOf(req).Release(TakeBack(req, h));
    FsOf(req).Forget(out.id, 1);
  }
}

void OpRead(fuse_req_t req, fuse_ino_t, size_t size, off_t off, struct fuse_file_info* fi) {
  OpLatency::Timer timer(Latency(req), FuseOp::kRead);
  FileHandle* h = Fh(fi);
  const int fd = FsOf(req).IoFd(h);
  if (fd < 0) {
    // Straight from the cached chunks: no copy before the kernel's.
    std::vector<Filesystem::ColdSlice> slices;
    struct fuse_session* se = ContextOf(req).session;
    ssize_t n = FsOf(req).ReadCold(h, size, off, &slices,
                                   [se] { return se != nullptr && fuse_session_exited(se) != 0; });
    if (n < 0) {
      fuse_reply_err(req, static_cast<int>(-n));
      return;
    }
    std::vector<struct iovec> iov;
    for (const auto& s : slices) {
      iov.push_back({const_cast<char*>(s.chunk->data.get()) + s.offset, s.length});
    }
    fuse_reply_iov(req, iov.data(), static_cast<int>(iov.size()));
    return;
  }
  // Zero-copy: the kernel splices straight from the backing file.
  struct fuse_bufvec bv = FUSE_BUFVEC_INIT(size);
  bv.buf[0].flags = static_cast<fuse_buf_flags>(FUSE_BUF_IS_FD | FUSE_BUF_FD_SEEK);
  bv.buf[0].fd = fd;
  bv.buf[0].pos = off;
  fuse_reply_data(req, &bv, FUSE_BUF_SPLICE_MOVE);
}

void OpWriteBuf(fuse_req_t req, fuse_ino_t ino, struct fuse_bufvec* in, off_t off,
                struct fuse_file_info* fi) {
  OpLatency::Timer timer(Latency(req), FuseOp::kWrite);
  FileHandle* h = Fh(fi);
  const int fd = FsOf(req).IoFd(h);
  if (!h->writable || fd < 0) {
    fuse_reply_err(req, EBADF);
    return;
  }
  struct fuse_bufvec out = FUSE_BUFVEC_INIT(fuse_buf_size(in));
  out.buf[0].flags = static_cast<fuse_buf_flags>(FUSE_BUF_IS_FD | FUSE_BUF_FD_SEEK);
  out.buf[0].fd = fd;
  out.buf[0].pos = off;
  ssize_t n = fuse_buf_copy(&out, in, static_cast<fuse_buf_copy_flags>(0));
  if (n < 0) {
    fuse_reply_err(req, static_cast<int>(-n));
    return;
  }
  DropSetId(req, FsOf(req), ino, h, SetIdCause::kData);
  fuse_reply_write(req, static_cast<size_t>(n));
}

void OpFsync(fuse_req_t req, fuse_ino_t, int datasync, struct fuse_file_info* fi) {
  fuse_reply_err(req, -FsOf(req).Fsync(Fh(fi), datasync != 0));
}

void OpRelease(fuse_req_t req, fuse_ino_t, struct fuse_file_info* fi) {
  FsOf(req).Release(TakeBack(req, Fh(fi)));
  fuse_reply_err(req, 0);
}

void OpOpenDir(fuse_req_t req, fuse_ino_t ino, struct fuse_file_info* fi) {
  std::unique_ptr<DirHandle> dh;
  int err = FsOf(req).OpenDir(ino, &dh);
  if (err != 0) {
    fuse_reply_err(req, -err);
    return;
  }
  fi->fh = reinterpret_cast<uintptr_t>(dh.get());
  // The kernel caches the listing of a settled folder, and answers from
  // that cache while the daemon's grant holds (fs/listing_grants.h).
  fi->cache_readdir = dh->cache_listing;
  fi->keep_cache = dh->keep_listing;
  DirHandle* h = HandOver(req, std::move(dh));
  if (fuse_reply_open(req, fi) != 0) FsOf(req).ReleaseDir(ino, TakeBack(req, h));  // opener gone
}

void DoReadDir(fuse_req_t req, fuse_ino_t ino, size_t size, off_t off, struct fuse_file_info* fi,
               bool plus) {
  OpLatency::Timer timer(Latency(req), FuseOp::kReadDir);
  DirHandle* dh = Dh(fi);
  Filesystem& fs = FsOf(req);
  size_t first = 0;
  if (int err = fs.ReadDir(ino, dh, off, &first); err != 0) {
    fuse_reply_err(req, -err);
    return;
  }
  std::vector<char> buf(size);
  const auto& entries = dh->entries;
  size_t used = 0;
  bool intact = true;      // no entry of the reply left out
  bool long_lived = plus;  // each entry's attributes given, for kStableTtlS
  off_t last = off;
  // Batches until one has an entry to send or the listing ends: a reply
  // with none would end the listing for the kernel, even when only the
  // names of this batch are gone since the snapshot.
  while (used == 0 && first < entries.size()) {
    // The entries that fit (their size depends on their names only),
    // looked up together for readdirplus.
    size_t count = 0;
    for (size_t fit = 0; first + count < entries.size(); ++count) {
      const char* name = entries[first + count].name.c_str();
      fit += plus ? fuse_add_direntry_plus(req, nullptr, 0, name, nullptr, 0)
                  : fuse_add_direntry(req, nullptr, 0, name, nullptr, 0);
      if (fit > size) break;
    }
    if (count == 0) break;  // a buffer too small for the next entry
    std::vector<EntryOut> looked_up;
    if (plus) fs.LookupListed(ino, *dh, first, count, &looked_up);
    for (size_t i = 0; i < count; ++i) {
      const DirEntryOut& d = entries[first + i];
      const size_t rem = size - used;
      if (plus) {
        struct fuse_entry_param e {};
        if (d.name == "." || d.name == "..") {
          e.attr.st_ino = d.ino;
          e.attr.st_mode = d.type;
        } else if (looked_up[i].id == 0) {
          intact = false;  // gone since the snapshot, or failed
          continue;
        } else {
          e.ino = looked_up[i].id;
          e.attr = looked_up[i].attr;
          e.attr_timeout = e.entry_timeout = fs.CacheTtl(e.ino);
          if (e.attr_timeout < kStableTtlS) long_lived = false;
        }
        used += fuse_add_direntry_plus(req, buf.data() + used, rem, d.name.c_str(), &e,
                                       static_cast<off_t>(d.cookie));
      } else {
        struct stat st {};
        st.st_ino = d.ino;
        st.st_mode = d.type;
        used += fuse_add_direntry(req, buf.data() + used, rem, d.name.c_str(), &st,
                                  static_cast<off_t>(d.cookie));
      }
      last = static_cast<off_t>(d.cookie);
    }
    first += count;
  }
  fs.ListingServed(ino, dh, off, last, intact, long_lived, used == 0 && first == entries.size());
  fuse_reply_buf(req, buf.data(), used);
}

void OpReadDir(fuse_req_t req, fuse_ino_t ino, size_t size, off_t off, struct fuse_file_info* fi) {
  DoReadDir(req, ino, size, off, fi, false);
}

void OpReadDirPlus(fuse_req_t req, fuse_ino_t ino, size_t size, off_t off,
                   struct fuse_file_info* fi) {
  DoReadDir(req, ino, size, off, fi, true);
}

void OpReleaseDir(fuse_req_t req, fuse_ino_t ino, struct fuse_file_info* fi) {
  FsOf(req).ReleaseDir(ino, TakeBack(req, Dh(fi)));
  fuse_reply_err(req, 0);
}

void OpFsyncDir(fuse_req_t req, fuse_ino_t ino, int datasync, struct fuse_file_info*) {
  fuse_reply_err(req, -FsOf(req).FsyncDir(ino, datasync != 0));
}

void OpStatFs(fuse_req_t req, fuse_ino_t) {
  struct statvfs st;
  int err = FsOf(req).StatFs(&st);
  if (err != 0) {
    fuse_reply_err(req, -err);
    return;
  }
  fuse_reply_statfs(req, &st);
}

void OpFallocate(fuse_req_t req, fuse_ino_t ino, int mode, off_t offset, off_t length,
                 struct fuse_file_info* fi) {
  const int err = FsOf(req).Fallocate(Fh(fi), mode, offset, length);
  if (err == 0) DropSetId(req, FsOf(req), ino, Fh(fi), SetIdCause::kData);
  fuse_reply_err(req, -err);
}

const struct fuse_lowlevel_ops kOps = [] {
  struct fuse_lowlevel_ops ops {};
  ops.init = OpInit;
  ops.lookup = OpLookup;
  ops.forget = OpForget;
  ops.forget_multi = OpForgetMulti;
  ops.getattr = OpGetAttr;
  ops.setattr = OpSetAttr;
  ops.readlink = OpReadLink;
  ops.mknod = OpMkNod;
  ops.mkdir = OpMkdir;
  ops.symlink = OpSymlink;
  ops.link = OpLink;
  ops.unlink = OpUnlink;
  ops.rmdir = OpRmdir;
  ops.rename = OpRename;
  ops.open = OpOpen;
  ops.create = OpCreate;
  ops.read = OpRead;
  ops.write_buf = OpWriteBuf;
  // No flush: writes reach the backing file synchronously (no writeback
  // cache), so close(2) has no delayed error to report, and without the op
  // the kernel skips a round trip on every close.
  ops.fsync = OpFsync;
  ops.release = OpRelease;
  ops.opendir = OpOpenDir;
  ops.readdir = OpReadDir;
  ops.readdirplus = OpReadDirPlus;
  ops.releasedir = OpReleaseDir;
  ops.fsyncdir = OpFsyncDir;
  ops.statfs = OpStatFs;
  AddXattrOps(&ops);
  ops.fallocate = OpFallocate;
  return ops;
}();

}  // namespace

void FuseContext::CloseHandles() {
  std::set<FileHandle*> f;
  std::set<DirHandle*> d;
  {
    MutexLock lock(handles_mu);
    f.swap(files);
    d.swap(dirs);
  }
  for (FileHandle* h : f) fs->Release(std::unique_ptr<FileHandle>(h));
  for (DirHandle* h : d) delete h;
}

const struct fuse_lowlevel_ops* TbfsOps() { return &kOps; }

}  // namespace tbfs::fs
