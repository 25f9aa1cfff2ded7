// Filesystem: changes of the namespace (create, link, unlink, rmdir, rename), on hot and cold
// entries and on folders mixing both.
#include <dirent.h>
#include <fcntl.h>
#include <linux/fs.h>
#include <unistd.h>

#include <cstring>
#include <set>

#include "base/failpoint.h"
#include "base/text.h"
#include "base/time_util.h"
#include "fs/filesystem.h"
#include "spdlog/spdlog.h"
#include "store/classify.h"
#include "store/file_io.h"
#include "store/restore.h"

namespace tbfs::fs {

int Filesystem::EnsureBackingDir(uint64_t ino, std::shared_ptr<UniqueFd>* fd) {
  InodeView v = inodes_.View(ino);
  if (v.kind == Kind::kHot) {
    *fd = v.fd;
    return 0;
  }
  if (v.kind != Kind::kColdDir) return -ENOTDIR;
  // Recreate the folder chain the cold namespace remembers, beneath the
  // logdir without following a symlink a user may have put on the way.
  const std::string& rel = v.cold_path;
  auto made = MakeDirsBeneath(inodes_.RootFd(), rel, 0755, [&](const std::string& folder, int fd) {
    auto entry = store_->GetEntry(folder);
    if (!entry.ok()) return;
    // The folder is made; only its owner or
    // mode could not be given back: say so.
    if (::fchown(fd, entry->uid(), entry->gid()) != 0 || ::fchmod(fd, entry->mode() & 07777) != 0) {
      spdlog::warn("backing folder {}: chown/chmod: {}", folder, std::strerror(errno));
    }
  });
  if (!made.ok()) {
    if (int err = made.status().sys_errno(); err != 0) return -err;
    return Eio(EioSite::kBackingDir, made.status().message());
  }
  auto opened = OpenBeneath(inodes_.RootFd(), rel, O_PATH | O_DIRECTORY);
  if (!opened.ok()) {
    if (int err = opened.status().sys_errno(); err != 0) return -err;
    return Eio(EioSite::kBackingDir, opened.status().message());
  }
  UniqueFd owned = std::move(opened).value();
  struct stat st;
  if (::fstat(owned.get(), &st) != 0) return -errno;
  inodes_.ColdDirToHot(ino, std::move(owned), st);
  Invalidate(ino);  // a backing folder's number now
  *fd = inodes_.View(ino).fd;
  return 0;
}

namespace {

// Whether the folder open (O_PATH will do) as fd holds nothing.
bool IsEmptyFolder(int fd) {
  const int listing =
      OpenAtOwnRead(AT_FDCWD, ProcPath(fd).c_str(), O_RDONLY | O_DIRECTORY | kOwnRead);
  std::unique_ptr<DIR, int (*)(DIR*)> d(listing < 0 ? nullptr : ::fdopendir(listing), ::closedir);
  if (!d) {
    if (listing >= 0) ::close(listing);
    return false;
  }
  while (struct dirent* e = ::readdir(d.get())) {
    if (std::strcmp(e->d_name, ".") != 0 && std::strcmp(e->d_name, "..") != 0) return false;
  }
  return true;
}

}  // namespace

void Filesystem::FixOwner(int dir_fd, const char* name, int fd, const Caller& c, mode_t mode) {
  if (!options_.as_root_owner_fixup || (c.uid == 0 && c.gid == 0)) return;
  // Everything through an fd of the object just made, never by name: the
  // caller may have swapped the name for a symlink meanwhile.
  UniqueFd path_fd;
  if (fd < 0) {
    MaybePause("fixowner.made");  // tests: made by name, not yet found again
    path_fd.reset(::openat(dir_fd, name, O_PATH | O_NOFOLLOW | O_CLOEXEC));
    fd = path_fd.get();
  }
  struct stat st;
  if (fd < 0 || ::fstat(fd, &st) != 0 || (st.st_mode & S_IFMT) != (mode & S_IFMT) ||
      st.st_uid != ::geteuid() || (S_ISDIR(st.st_mode) && !IsEmptyFolder(fd))) {
    // Found by name, it is not what was just made: another user (who may
    // write the folder) put something else there meanwhile.
    spdlog::warn("chown {} to {}:{}: it changed as it was made; left alone", name, c.uid, c.gid);
    return;
  }
  // In a set-group-ID folder the new entry keeps the folder's group.
  struct stat dir;
  gid_t gid =
      ::fstat(dir_fd, &dir) == 0 && (dir.st_mode & S_ISGID) ? static_cast<gid_t>(-1) : c.gid;
  if (::fchownat(fd, "", c.uid, gid, AT_EMPTY_PATH | AT_SYMLINK_NOFOLLOW) != 0) {
    spdlog::warn("chown {} to {}:{}: {}", name, c.uid, c.gid, std::strerror(errno));
    return;
  }
  // chown cleared the set-id bits the file was made with; give them back,
  // with the permissions as made (the umask or the folder's default ACL
  // applied), never the mode asked for. Through the fd's /proc link: the
  // same file, of any type, without opening it.
  if (!(st.st_mode & (S_ISUID | S_ISGID)) || S_ISLNK(st.st_mode)) return;
  if (::chmod(ProcPath(fd).c_str(), st.st_mode & 07777) != 0) {
    spdlog::warn("chmod {} to {:o}: {}", name, st.st_mode & 07777, std::strerror(errno));
  }
}

// Creating a name that exists cold is EEXIST, as it would be on a disk.
#define TBFS_REFUSE_IF_COLD(parent, name)                                             \
  do {                                                                                \
    std::string rel_;                                                                 \
    if (RelPath(parent, &rel_) == 0 && store_->GetEntry(JoinPath(rel_, name)).ok()) { \
      return -EEXIST;                                                                 \
    }                                                                                 \
  } while (0)

int Filesystem::MkNod(uint64_t parent, const char* name, mode_t mode, dev_t rdev, const Caller& c,
                      EntryOut* out) {
  if (Unmakeable(parent, name)) return -EPERM;
  std::shared_ptr<UniqueFd> pfd;
  if (int r = EnsureBackingDir(parent, &pfd); r != 0) return r;
  TBFS_REFUSE_IF_COLD(parent, name);
  mode = c.ModeIn(pfd->get(), mode);
  if (S_ISREG(mode)) {
    // By an fd of the file made, which FixOwner then acts on: never a name
    // another user could have swapped in meanwhile.
    UniqueFd fd(::openat(pfd->get(), name,
                         O_RDONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC,
                         mode & 07777));
    if (!fd.valid()) return -errno;
    FixOwner(pfd->get(), name, fd.get(), c, mode);
    return HotLookupAt(pfd->get(), name, out);
  }
  if (::mknodat(pfd->get(), name, mode, rdev) != 0) return -errno;
  FixOwner(pfd->get(), name, -1, c, mode);
  return HotLookupAt(pfd->get(), name, out);
}

int Filesystem::Mkdir(uint64_t parent, const char* name, mode_t mode, const Caller& c,
                      EntryOut* out) {
  if (Unmakeable(parent, name)) return -EPERM;
  std::shared_ptr<UniqueFd> pfd;
  if (int r = EnsureBackingDir(parent, &pfd); r != 0) return r;
  TBFS_REFUSE_IF_COLD(parent, name);
  mode = c.ModeIn(pfd->get(), mode);
  if (::mkdirat(pfd->get(), name, mode) != 0) return -errno;
  FixOwner(pfd->get(), name, -1, c, S_IFDIR | mode);
  return HotLookupAt(pfd->get(), name, out);
}

int Filesystem::Symlink(const char* target, uint64_t parent, const char* name, const Caller& c,
                        EntryOut* out) {
  if (Unmakeable(parent, name)) return -EPERM;
  std::shared_ptr<UniqueFd> pfd;
  if (int r = EnsureBackingDir(parent, &pfd); r != 0) return r;
  TBFS_REFUSE_IF_COLD(parent, name);
  if (::symlinkat(target, pfd->get(), name) != 0) return -errno;
  FixOwner(pfd->get(), name, -1, c, S_IFLNK | 0777);
  return HotLookupAt(pfd->get(), name, out);
}

int Filesystem::Link(uint64_t ino, uint64_t parent, const char* name, EntryOut* out) {
  if (Unmakeable(parent, name)) return -EPERM;
  if (inodes_.View(ino).kind == Kind::kColdFile) {
    if (int r = Rehydrate(ino, /*wait=*/false); r != 0) return r;
  }
  InodeView v = inodes_.View(ino);
  if (v.kind != Kind::kHot) return -EPERM;
  if (v.stale()) return -ESTALE;
  std::shared_ptr<UniqueFd> pfd;
  if (int r = EnsureBackingDir(parent, &pfd); r != 0) return r;
  TBFS_REFUSE_IF_COLD(parent, name);
  if (::linkat(AT_FDCWD, ProcPath(v.fd->get()).c_str(), pfd->get(), name, AT_SYMLINK_FOLLOW) != 0) {
    return -errno;
  }
  return HotLookupAt(pfd->get(), name, out);
}

int Filesystem::UnlinkCold(const std::string& rel) {
  auto entry = store_->GetEntry(rel);
  if (!entry.ok()) return StoreError(entry.status(), EioSite::kUnlink, rel);
  if (entry->kind() == storepb::Entry::DIR) return -EISDIR;
  auto m = store_->GetManifest(entry->file_id());
  if (!m.ok()) return StoreError(m.status(), EioSite::kUnlink, rel);
  // Open handles keep its chunks until the last release; a recovery, that it was deleted.
  store::WriteBatch batch;
  Status st = store_->Retire(&batch, *m);
  store_->journal_index().MarkDeleted(&batch, m->file_id());
  if (st.ok()) st = store_->Commit(batch, true);
  if (!st.ok()) return StoreError(st, EioSite::kUnlink, rel);
  ReapRetired(m->file_id());
  return 0;
}

int Filesystem::DeleteColdFile(const storepb::Manifest& m) {
  {
    MutexLock one(rehydrate_mu_);  // not while it is being rehydrated
    ReaderMutexLock ns(ns_mu_);
    auto entry = store_->GetEntry(m.path());
    if (!entry.ok()) return StoreError(entry.status(), EioSite::kRetention, m.path());
    if (entry->kind() != storepb::Entry::FILE || entry->file_id() != m.file_id()) return -ENOENT;
    store::WriteBatch batch;
    Status st = store_->Retire(&batch, m);
    store_->journal_index().MarkDeleted(&batch, m.file_id());
    if (st.ok()) st = store_->Commit(batch, true);
    if (!st.ok()) return StoreError(st, EioSite::kRetention, m.path());
  }
  ReapRetired(m.file_id());
  ForgetName(m.path());
  return 0;
}

void Filesystem::ForgetName(const std::string& rel) {
  if (kernel_ == nullptr) return;
  // The kernel may hold the name for up to kStableTtlS, and the folder's
  // listing until its mtime changes (a cold folder's never does): tell it.
  // Its folder's id, by the lookups the kernel would make (then forgotten).
  std::vector<uint64_t> looked_up;
  uint64_t parent = InodeTable::kRootId;
  const std::string dir = ParentPath(rel);
  for (size_t start = 0; !dir.empty() && start <= dir.size();) {
    size_t end = dir.find('/', start);
    if (end == std::string::npos) end = dir.size();
    EntryOut out;
    if (Lookup(parent, dir.substr(start, end - start).c_str(), &out) != 0) {
      parent = 0;  // the folder went too: nothing the kernel can still list
      break;
    }
    looked_up.push_back(out.id);
    parent = out.id;
    start = end + 1;
  }
  if (parent != 0) {
    kernel_->InvalidateEntry(parent, std::string(BaseName(rel)));
    // Its listing too (cache_readdir), unless the kernel is filling a copy
    // of it: that one is dropped once complete (listing_grants.h).
    if (listing_grants_.Changed(parent)) kernel_->InvalidateListing(parent);
  }
  for (uint64_t id : looked_up) Forget(id, 1);
}

int Filesystem::Unlink(uint64_t parent, const char* name) {
  if (IsHidden(parent, name)) return -EPERM;
  auto unlink_hot = [&]() TBFS_REQUIRES_SHARED(ns_mu_) {
    InodeView v = inodes_.View(parent);
    if (v.kind != Kind::kHot) return -ENOENT;
    struct stat hot;
    const bool known = ::fstatat(v.fd->get(), name, &hot, AT_SYMLINK_NOFOLLOW) == 0;
    if (::unlinkat(v.fd->get(), name, 0) != 0) return -errno;
    std::string prel;
    if (RelPath(parent, &prel) == 0)
      DropShadowed(JoinPath(prel, name), v.fd->get(), known ? &hot : nullptr);
    return 0;
  };
  {
    ReaderMutexLock ns(ns_mu_);
    if (int r = unlink_hot(); r != -ENOENT) return r;
  }
  // A cold file: not while it is being rehydrated, which would bring it
  // back; by then it may be hot.
  MutexLock one(rehydrate_mu_);
  ReaderMutexLock ns(ns_mu_);
  if (int r = unlink_hot(); r != -ENOENT) return r;
  std::string prel;
  if (int r = RelPath(parent, &prel); r != 0) return r;
  return UnlinkCold(JoinPath(prel, name));
}

void Filesystem::DropShadowed(const std::string& rel, int dir_fd, const struct stat* hot) {
  // A cold file at the path of a hot one is hidden by it: a copy the
  // migrator has committed but not yet moved aside, or an older version.
  // Once the hot file has gone from the path, it must not show there.
  auto entry = store_->GetEntry(rel);
  if (entry.status().IsNotFound() || (entry.ok() && entry->kind() != storepb::Entry::FILE)) {
    return;
  }
  // Unless it is another owner's in a sticky folder, where the hot file's
  // owner could not have replaced it (store::kStickyReason): it shows again.
  struct stat folder;
  if (entry.ok() && hot != nullptr && ::fstat(dir_fd, &folder) == 0) {
    auto m = store_->GetManifest(entry->file_id());
    if (m.ok() && !store::MayReplaceInFolder(folder, hot->st_uid, m->uid())) {
      spdlog::info("{}: uid {}'s file is gone; uid {}'s cold file at that name shows again", rel,
                   hot->st_uid, m->uid());
      return;  // (the kernel forgets the name it just unlinked by itself)
    }
  }
  if (!entry.ok() || !store_->writer()) {
    // The hot file is gone all the same; the log names what may show.
    spdlog::error("{}: the cold copy hidden by the hot file stays: {}", rel,
                  entry.ok() ? "this mount does not write the store" : entry.status().message());
    return;
  }
  if (int r = UnlinkCold(rel); r != 0) {
    spdlog::error("{}: the cold copy hidden by the hot file stays: {}", rel, std::strerror(-r));
  }
}

int Filesystem::ColdChildren(const std::string& dst) {
  auto kids = store_->HasChildren(dst);
  if (!kids.ok()) return StoreError(kids.status(), EioSite::kRename, dst);
  return *kids ? -ENOTEMPTY : 0;
}

int Filesystem::Rename(uint64_t parent, const char* name, uint64_t newparent, const char* newname,
                       unsigned flags) {
  if (IsHidden(parent, name) || Unmakeable(newparent, newname)) return -EPERM;
  if (flags & ~(RENAME_NOREPLACE | RENAME_EXCHANGE)) return -EINVAL;
  WriterMutexLock ns(ns_mu_);
  std::string prel, nrel;
  if (int r = RelPath(parent, &prel); r != 0) return r;
  if (int r = RelPath(newparent, &nrel); r != 0) return r;
  const std::string src = JoinPath(prel, name), dst = JoinPath(nrel, newname);
  if (dst.compare(0, src.size() + 1, src + "/") == 0) return -EINVAL;  // into itself

  InodeView pv = inodes_.View(parent);
  struct stat sst;
  bool src_hot =
      pv.kind == Kind::kHot && ::fstatat(pv.fd->get(), name, &sst, AT_SYMLINK_NOFOLLOW) == 0;
  auto dst_entry = store_->GetEntry(dst);
  bool dst_cold = dst_entry.ok();
  if (!store_->writer()) {
    // A mount that reads a shared store another one writes changes nothing
    // the store holds: refused before anything moves (fs/mount.h).
    const bool src_in_store = !src_hot || (S_ISDIR(sst.st_mode) && store_->GetEntry(src).ok());
    if (src_in_store || dst_cold) return -EROFS;
  }

  RenameArgs a{parent, name, newparent, newname, flags, src, dst, std::move(dst_entry), dst_cold};
  return src_hot ? RenameHot(a, sst) : RenameCold(a);
}

int Filesystem::RenameHot(const RenameArgs& a, const struct stat& sst) {
  std::shared_ptr<UniqueFd> npfd;
  if (int r = EnsureBackingDir(a.newparent, &npfd); r != 0) return r;
  struct stat dst_st;
  bool dst_hot = ::fstatat(npfd->get(), a.newname, &dst_st, AT_SYMLINK_NOFOLLOW) == 0;
  if (a.flags & RENAME_EXCHANGE) {
    if (!dst_hot) return a.dst_cold ? -EINVAL : -ENOENT;
    // Folders trade places; the store's entries below them would have to
    // trade too, in one commit: not done, so refused as an exchange with
    // a cold entry is.
    auto holds_cold = [&](const std::string& rel) {
      auto e = store_->GetEntry(rel);
      return !e.status().IsNotFound() && (!e.ok() || e->kind() == storepb::Entry::DIR);
    };
    if ((S_ISDIR(sst.st_mode) && holds_cold(a.src)) ||
        (S_ISDIR(dst_st.st_mode) && holds_cold(a.dst)))
      return -EINVAL;
  } else {
    if (a.dst_cold && !dst_hot && (a.flags & RENAME_NOREPLACE)) return -EEXIST;
    // A folder replaced must be empty, its cold files counted, as rmdir
    // says: a folder whose files are all cold has an empty backing folder,
    // and the kernel would replace it, leaving them in the new folder.
    const bool replaces_folder =
        dst_hot ? S_ISDIR(dst_st.st_mode) && S_ISDIR(sst.st_mode) && !(a.flags & RENAME_NOREPLACE)
                : a.dst_cold && a.dst_entry->kind() == storepb::Entry::DIR;
    if (replaces_folder) {
      if (int r = ColdChildren(a.dst); r != 0) return r;
    }
  }
  InodeView pv = inodes_.View(a.parent);
  if (::renameat2(pv.fd->get(), a.name, npfd->get(), a.newname, a.flags) != 0) return -errno;
  if (!(a.flags & RENAME_EXCHANGE) && a.dst_cold && !dst_hot) {
    // The hot file replaced the cold one: the cold one goes. Should that
    // fail, the hot file still wins at this path; the log says so.
    int r = 0;
    if (a.dst_entry->kind() == storepb::Entry::FILE) {
      r = UnlinkCold(a.dst);
    } else {
      store::WriteBatch b;
      Status st = store_->RemoveEntry(&b, a.dst);
      if (st.ok()) st = store_->Commit(b, true);
      if (!st.ok()) r = StoreError(st, EioSite::kRenameReplace, a.dst);
    }
    if (r != 0)
      spdlog::error("rename over cold {}: its store entry stays: {}", a.dst, std::strerror(-r));
  }
  if (!S_ISDIR(sst.st_mode) && !(a.flags & RENAME_EXCHANGE))
    DropShadowed(a.src, pv.fd->get(), &sst);
  if (S_ISDIR(sst.st_mode) && store_->GetEntry(a.src).ok()) {
    // The folder's cold contents move with it.
    store::WriteBatch b;
    Status st = store_->Rename(&b, a.src, a.dst, store::LogdirFolders(options_.logdir));
    if (st.ok()) st = store_->Commit(b, true);
    if (!st.ok()) {
      // The folder goes back, so that it stays whole where it was (red
      // team: its hot part moved, its cold files stayed at the old path,
      // the run split in two for good). An empty folder it replaced stays
      // replaced.
      if (::renameat2(npfd->get(), a.newname, pv.fd->get(), a.name, RENAME_NOREPLACE) != 0) {
        spdlog::error(
            "rename {} -> {}: the store did not take the move of its cold files, and the "
            "folder could not go back: {} (its cold files stay under {})",
            Printable(a.src), Printable(a.dst), std::strerror(errno), Printable(a.src));
      }
      return StoreError(st, EioSite::kRenameColdChildren, a.src);
    }
    inodes_.RenameColdDirs(a.src, a.dst);
  }
  return 0;
}

int Filesystem::RenameCold(const RenameArgs& a) {
  if (a.flags & RENAME_EXCHANGE) return -EINVAL;
  auto src_entry = store_->GetEntry(a.src);
  if (!src_entry.ok()) return StoreError(src_entry.status(), EioSite::kRename, a.src);
  const bool src_dir = src_entry->kind() == storepb::Entry::DIR;
  InodeView npv = inodes_.View(a.newparent);
  if (npv.kind == Kind::kColdFile) return -ENOTDIR;
  bool dst_hot_file = false;  // replaced once the store has the file at dst
  bool dst_hot_folder = false;
  if (npv.kind == Kind::kHot) {
    struct stat dst_st;
    if (::fstatat(npv.fd->get(), a.newname, &dst_st, AT_SYMLINK_NOFOLLOW) == 0) {
      if (a.flags & RENAME_NOREPLACE) return -EEXIST;
      if (S_ISDIR(dst_st.st_mode) != src_dir) return src_dir ? -ENOTDIR : -EISDIR;
      dst_hot_folder = src_dir;
      dst_hot_file = !src_dir;
    }
  }
  if (a.dst_cold) {
    if (a.flags & RENAME_NOREPLACE) return -EEXIST;
    if ((a.dst_entry->kind() == storepb::Entry::DIR) != src_dir)
      return src_dir ? -ENOTDIR : -EISDIR;
  }
  // A folder replaced must be empty, its cold files counted (as rmdir),
  // before anything changes.
  if (src_dir && (dst_hot_folder || a.dst_cold)) {
    if (int r = ColdChildren(a.dst); r != 0) return r;
  }
  // An (empty) folder goes first: should it not, nothing has changed.
  if (dst_hot_folder && ::unlinkat(npv.fd->get(), a.newname, AT_REMOVEDIR) != 0) return -errno;
  if (a.dst_cold) {
    if (src_dir) {
      store::WriteBatch b;
      Status st = store_->RemoveEntry(&b, a.dst);
      if (st.ok()) st = store_->Commit(b, true);
      if (!st.ok()) return StoreError(st, EioSite::kRename, a.src);
    } else if (int r = UnlinkCold(a.dst); r != 0) {
      return r;
    }
  }
  store::WriteBatch batch;
  Status st = store_->Rename(&batch, a.src, a.dst, store::LogdirFolders(options_.logdir));
  if (st.ok()) st = store_->Commit(batch, true);
  if (!st.ok()) return StoreError(st, EioSite::kRename, a.src);
  // The hot file it replaces goes only now: a store that failed the
  // rename has left it in place.
  if (dst_hot_file && ::unlinkat(npv.fd->get(), a.newname, 0) != 0 && errno != ENOENT) {
    const int err = errno;
    spdlog::error("rename {} -> {}: the hot file it replaces stays (and hides it): {}", a.src,
                  a.dst, std::strerror(err));
    return -err;
  }
  if (src_dir) {
    inodes_.RenameColdDirs(a.src, a.dst);
  } else {
    auto m = store_->GetManifest(src_entry->file_id());
    if (m.ok()) inodes_.UpdateManifest(*m);
  }
  return 0;
}

}  // namespace tbfs::fs
