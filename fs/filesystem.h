// The mounted filesystem's core: the union of the backing logdir (hot) and
// the cold store, operation by operation, with no FUSE types and no
// accessor to its parts. The adapters in fuse_ops.cc turn each FUSE request
// into one call here and one reply. Implemented by concern in
// filesystem.cc (paths of inodes, store errors), lookup.cc (names and
// attributes), namespace_ops.cc (create, unlink, rename, ...), open_files.cc
// (open files, cold reads, rehydration, files changing place), readdir.cc
// and xattr.cc. Error convention (one, everywhere): methods return 0 or -errno.
//
// Semantics worth knowing:
//  - a hot entry wins over a cold entry of the same path;
//  - the store's own folder (LOGDIR/.tbfs) is invisible;
//  - opening a cold file for writing (or truncating it) first rehydrates it
//    into the backing folder (journaled), then it is an ordinary hot file;
//  - unlink / rename / rmdir work on cold entries and on folders mixing
//    both; RENAME_EXCHANGE involving a cold entry is EINVAL;
//  - every regular file has the xattr user.tbfs.state = "hot" | "cold".
// Thread-safe: FUSE calls these from many threads.
#pragma once

#include <sys/stat.h>
#include <sys/statvfs.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <functional>
#include <iterator>
#include <memory>
#include <mutex>
#include <shared_mutex>
#include <string>
#include <string_view>
#include <vector>

#include "base/fs_util.h"
#include "base/log.h"
#include "base/thread_annotations.h"
#include "fs/chunk_cache.h"
#include "fs/inode_table.h"
#include "fs/listing_grants.h"
#include "fs/placements.h"
#include "store/cold_store.h"
#include "store/migrate.h"

namespace tbfs::fs {

inline constexpr char kStateXattr[] = "user.tbfs.state";

// How long the kernel may cache entries and attributes. Folders and tfevents
// files: short, so that a file created or appended to directly in the
// logdir is seen through the mount within a second. Everything else (traces
// written once, cold files that change only through the mount): longer,
// which keeps metadata walks near native speed; a change made to such a file
// directly in the logdir shows after at most kStableTtlS.
inline constexpr double kFreshTtlS = 0.5;
inline constexpr double kStableTtlS = 10.0;
// On the mount's root only: the path of the control socket (fs/control.h),
// through which `tbfs status` and `tbfs migrate MOUNTPOINT --now` talk to
// the daemon. Reading it reveals a path, nothing else: the socket lives in
// the store's private folder and answers root and the mount's owner only.
inline constexpr char kControlXattr[] = "user.tbfs.control";

struct FsOptions {
  std::string logdir;                   // backing folder (absolute)
  std::string store_skip;               // relative path of the store inside it, or ""
  uint64_t cache_bytes = 256ull << 20;  // cold chunk cache
  bool as_root_owner_fixup = false;     // chown what callers create to them
  std::string control_socket;           // shown by kControlXattr; "" for none
  // The daemon's reads of backing files (noatime) and folders (nodiratime)
  // leave access times as they were (O_NOATIME): -o noatime, nodiratime;
  // and every one while *read_only (the mount is ro now; fs/mount_watch.h).
  bool noatime = false, nodiratime = false;
  const std::atomic<bool>* read_only = nullptr;
};

struct Caller {
  uid_t uid = 0;
  gid_t gid = 0;
  mode_t umask = 0;
  // `mode` less the umask, unless the folder dir_fd has a default ACL: the
  // backing filesystem applies that instead, as a kernel filesystem does.
  mode_t ModeIn(int dir_fd, mode_t mode) const;
};

struct EntryOut {
  uint64_t id = 0;
  struct stat attr {};
};

struct DirEntryOut {
  std::string name;
  mode_t type = 0;  // S_IFMT bits
  ino_t ino = 0;
  uint64_t cookie = 0;        // the listing's offset right after this entry (DirHandle)
  uint64_t cold_file_id = 0;  // a cold file's, as the store's listing said
};

// An open file. Reads and writes go to `fd`: the backing file, or -1 for a
// handle on a cold file, whose reads come from the store's chunks. An
// inode can start serving another file while a handle is open on it (a
// cold file rehydrated, a file moved out and back): the handle notices by
// the inode's generation and follows (IoFd), so it reads what a handle on
// the same file of a disk would. Moving to the store does not change what
// a handle reads: a handle that had a backing file keeps it.
struct FileHandle {
  uint64_t inode = 0;
  bool cold = false;  // opened on a cold file
  bool writable = false;
  std::shared_ptr<const storepb::Manifest> manifest;  // cold handles: the chunks read
  const std::atomic<uint32_t>* generation = nullptr;  // the inode's (InodeTable::Generation)
  std::atomic<uint32_t> seen{0};                      // the generation fd was chosen at
  std::atomic<int> fd{-1};
  Mutex mu;                           // a change of fd; a leaf
  dev_t dev TBFS_GUARDED_BY(mu) = 0;  // fd's file
  ino_t ino TBFS_GUARDED_BY(mu) = 0;
  // Closed with the handle (reads may use them still).
  std::vector<int> earlier_fds TBFS_GUARDED_BY(mu);
  std::atomic<uint64_t> next_offset{0};   // where a sequential reader goes next
  std::atomic<uint64_t> let_go_below{0};  // chunks the cache was told it was past
  bool direct = false;                    // O_DIRECT: its reads bypass the kernel's page cache
  std::atomic<bool> noatime{false};       // fd has O_NOATIME (IoFd keeps it as the mount says)
  ~FileHandle();
};

// An open folder. A listing is in cookie order: an entry's cookie (its
// d_off, where a listing resumes after it) is a 63-bit hash of its name
// under a seed drawn at start-up ("." is 1, ".." 2), so it does not depend
// on the handle, on what else the folder holds, or on whether the entry is
// hot or cold (names sharing a hash: readdir.cc, SortByCookie). A READDIR
// at offset `off` answers the entries whose cookie is above off. The
// kernel may serve the start of a listing from its cache and ask for the
// rest on a handle that never listed (after reclaiming a cached page), or
// a program may seekdir to an offset another handle gave it: either way
// the listing goes on exactly where it stopped, each name once.
// `entries` is this handle's snapshot, sorted by (cookie, name): taken at
// its first READDIR, whatever the offset, and again at every READDIR from
// 0 (a rewind). The kernel sends one READDIR of a handle at a time (its
// per-file readdir lock), so the handle needs no lock of its own.
//
// The kernel's own cache of the listing (listing_grants.h): cache_listing
// when the folder was settled at OPENDIR and no other handle holds its
// cache (ReleaseDir lets go), keep_listing when a grant holds (or, for a
// handle without the cache, always: it leaves the holder's cache alone).
// A handle that serves the whole listing in order, cleanly, grants it.
struct DirHandle {
  std::vector<DirEntryOut> entries;
  bool filled = false;
  uint64_t store_commits = 0;  // ColdStore::commits() before the snapshot's store listing
  std::string rel;             // the folder's path in the logdir then

  bool cache_listing = false;  // FOPEN_CACHE_DIR
  bool keep_listing = false;   // keep_cache: the kernel's listing stands
  ListingStamp stamp;          // taken at OPENDIR, before any listing
  ListingGrants::Clock::time_point opened;
  off_t served_to = 0;       // where the next in-order READDIRPLUS starts
  bool served_clean = true;  // so far: in order, no entry left out, none short-lived
  off_t covered_to = 0;      // since the snapshot, every entry up to here was served
  bool gapless = true;       // ... and none after it yet
};

// Each place an operation can answer EIO: its tag in the log ("[EIO:tag]")
// and its own counter (status: eio.by_site; metrics: tbfs_eio_sites_total).
enum class EioSite {
  kLookup,
  kLookupManifest,
  kSetattr,
  kUnlink,
  kRetention,
  kRmdir,
  kRename,
  kRenameReplace,
  kRenameColdChildren,
  kRehydrate,
  kOpen,
  kReaddir,
  kColdChunk,
  kBackingDir,
  kInodeKind,
  kXattr,
  kCount,  // not a site: the number of them
};
// clang-format off
inline constexpr const char* kEioSiteNames[] = {
    "lookup", "lookup-manifest", "setattr", "unlink", "retention", "rmdir", "rename",
    "rename-replace", "rename-cold-children", "rehydrate", "open", "readdir", "cold-chunk",
    "backing-dir", "inode-kind", "xattr"};
// clang-format on
inline constexpr int kNumEioSites = static_cast<int>(std::size(kEioSiteNames));
static_assert(kNumEioSites == static_cast<int>(EioSite::kCount),
              "every EioSite needs its name in kEioSiteNames, in order");

struct Counters {
  std::atomic<uint64_t> rehydrations{0};
  std::atomic<uint64_t> cold_reads{0};
  std::atomic<uint64_t> eio_cold_chunk{0};
  std::atomic<uint64_t> eio_cold_chunk_by[kNumStoreFaults] = {};  // indexed by StoreFault
  std::atomic<uint64_t> eio_rehydrate{0};
  std::atomic<uint64_t> eio_store{0};
  std::atomic<uint64_t> eio_store_by[kNumStoreFaults] = {};  // indexed by StoreFault
  std::atomic<uint64_t> eio_by_site[kNumEioSites] = {};      // indexed by EioSite
};

class Filesystem : public store::MoveObserver {
 public:
  // `namespace_lock` (the caller's, shared with the migrator, which takes
  // it shared step by step and exclusive for recovery) is taken shared by
  // rehydrations and most namespace changes, exclusive by renames and
  // rmdir. Lock order: Migrator's pass lock -> rehydrate_mu_ ->
  // namespace_lock -> InodeTable's mutex; the chunk cache's is a leaf.
  // root_st: fstat of root_fd (the logdir), taken by the caller.
  Filesystem(const FsOptions& options, store::ColdStore* store, UniqueFd root_fd,
             const struct stat& root_st, SharedMutex* namespace_lock);

  int Lookup(uint64_t parent, const char* name, EntryOut* out);
  void Forget(uint64_t ino, uint64_t nlookup);
  // With an open handle of the file (fstat on a deleted-but-open file).
  int GetAttr(uint64_t ino, struct stat* st, FileHandle* fh = nullptr);
  // to_set: FUSE_SET_ATTR_* bits (same values as the kernel's FATTR_*).
  // A truncate of a file in transition (a move, a rehydration) is answered
  // EAGAIN at once, as is a hard link of one: the kernel holds the file's
  // and the folder's locks through them, and a wait held other users'
  // lookups in the folder, unkillable (red team).
  int SetAttr(uint64_t ino, const struct stat& attr, int to_set, FileHandle* fh, struct stat* out);
  int ReadLink(uint64_t ino, std::string* target);
  int MkNod(uint64_t parent, const char* name, mode_t mode, dev_t rdev, const Caller& c,
            EntryOut* out);
  int Mkdir(uint64_t parent, const char* name, mode_t mode, const Caller& c, EntryOut* out);
  int Symlink(const char* target, uint64_t parent, const char* name, const Caller& c,
              EntryOut* out);
  int Link(uint64_t ino, uint64_t parent, const char* name, EntryOut* out);
  int Unlink(uint64_t parent, const char* name);
  // A folder whose backing copy holds only files a batch holds aside, all
  // deleted through the mount meanwhile, is removed with them, not refused
  // as not empty (fs/folder_removal.cc).
  int Rmdir(uint64_t parent, const char* name);
  int Rename(uint64_t parent, const char* name, uint64_t newparent, const char* newname,
             unsigned flags);

  // Opens; a writable open of a cold file rehydrates it first, and one of a
  // file in transition waits for the transition's end (one file's copy).
  // `interrupted`: set when the caller got a signal (FUSE_INTERRUPT, then
  // WakeWaiters); the wait then ends in EINTR.
  int Open(uint64_t ino, int flags, std::unique_ptr<FileHandle>* out,
           const std::atomic<bool>* interrupted = nullptr);
  // Every wait of Open looks at its `interrupted` again.
  void WakeWaiters() { inodes_.WakeWaiters(); }
  int Create(uint64_t parent, const char* name, mode_t mode, int flags, const Caller& c,
             EntryOut* entry, std::unique_ptr<FileHandle>* out);
  // The fd this handle's reads and writes go to now (see FileHandle); -1
  // for the store (ReadCold).
  int IoFd(FileHandle* fh);
  // Cold reads: the pieces of cached chunks that hold up to size bytes at
  // off, in order (no copy); returns the byte count or -errno.
  struct ColdSlice {
    std::shared_ptr<const Chunk> chunk;
    size_t offset = 0;
    size_t length = 0;
  };
  // `stopping` is asked between chunk loads: when it says the mount is
  // going, the read ends with EINTR instead of loading the rest.
  ssize_t ReadCold(FileHandle* fh, size_t size, off_t off, std::vector<ColdSlice>* slices,
                   const std::function<bool()>& stopping = nullptr);
  void Release(std::unique_ptr<FileHandle> fh);
  int Fsync(FileHandle* fh, bool datasync);
  // fallocate(2) on the handle's backing file; EBADF for a cold handle.
  int Fallocate(FileHandle* fh, int mode, off_t offset, off_t length);
  int FsyncDir(uint64_t ino, bool datasync);

  int OpenDir(uint64_t ino, std::unique_ptr<DirHandle>* out);
  void ReleaseDir(uint64_t ino, std::unique_ptr<DirHandle> dh);
  // The entries of the listing from offset `off` on (see DirHandle): *first
  // is the index in dh->entries of the first one; the snapshot is taken
  // when off is 0 or the handle has none yet.
  int ReadDir(uint64_t ino, DirHandle* dh, off_t off, size_t* first);
  // Readdirplus: looks entries [first, first + count) of dh's snapshot up
  // in folder ino, as Lookup would one by one, looking at the folder once.
  // (*out)[i].id is 0 for "." and "..", and for a name gone since.
  void LookupListed(uint64_t ino, const DirHandle& dh, size_t first, size_t count,
                    std::vector<EntryOut>* out);
  // After a READDIRPLUS reply of dh from offset `off` whose last entry had
  // cookie `last` (off when it had none): `intact` when no entry of it was
  // left out (gone since the snapshot, or failed), `long_lived` when each
  // has long-lived attributes; `end` when it was the end of the listing.
  // A handle that served its whole listing so grants it (ListingGrants).
  // Called before the reply is sent: it may drop the kernel's copy.
  void ListingServed(uint64_t ino, DirHandle* dh, off_t off, off_t last, bool intact,
                     bool long_lived, bool end);
  int StatFs(struct statvfs* st);

  int GetXattr(uint64_t ino, const char* name, std::string* value);
  int SetXattr(uint64_t ino, const char* name, const char* value, size_t size, int flags);
  int ListXattr(uint64_t ino, bool trusted, std::string* names);
  int RemoveXattr(uint64_t ino, const char* name);

  // Seconds the kernel may cache this inode's entry and attributes.
  double CacheTtl(uint64_t ino) { return inodes_.VolatileAttrs(ino) ? kFreshTtlS : kStableTtlS; }

  // Where the kernel hears that an inode's attributes changed behind its
  // back (a file turning cold or hot shows another st_ino): the FUSE
  // session, set once before serving.
  class KernelCache {
   public:
    virtual ~KernelCache() = default;
    virtual void InvalidateAttrs(uint64_t ino) = 0;
    // The name `name` in folder `parent` is gone (the folder's cached
    // listing is InvalidateListing's). Never called with a lock of ours held.
    virtual void InvalidateEntry(uint64_t parent, const std::string& name) = 0;
    // Drops the folder's cached listing (cache_readdir). Safe to call while
    // serving a READDIR of that folder: the kernel holds no page of the
    // listing while it waits for the reply.
    virtual void InvalidateListing(uint64_t folder) = 0;
  };
  void SetKernelCache(KernelCache* kernel) { kernel_ = kernel; }

  // store::MoveObserver: the migrator's files in transition.
  bool BeginMove(int fd, const struct stat& st, const storepb::Manifest& m) override;
  void EndMove(uint64_t file_id, bool moved) override;
  void PutBack(uint64_t file_id, int fd, const struct stat& st) override;
  void Retired() override;

  // Deletes the chunks of retired files that no open handle reads (of
  // file_id only, when not 0).
  void ReapRetired(uint64_t file_id = 0);

  // For the status report.
  struct Stats {
    ChunkCache::Stats cache;
    uint64_t rehydrations = 0;
    uint64_t cold_reads = 0;
    uint64_t eio_cold_chunk = 0;
    uint64_t eio_cold_chunk_by[kNumStoreFaults] = {};
    uint64_t eio_rehydrate = 0;
    uint64_t eio_store = 0;
    uint64_t eio_store_by[kNumStoreFaults] = {};
    uint64_t eio_by_site[kNumEioSites] = {};
    size_t inodes = 0;
  };
  // Retention (the daemon's own gc): deletes the cold file `m` names if its
  // path still holds that very file (not rehydrated, renamed or replaced
  // since it was chosen). Open handles keep reading it until their release;
  // the kernel forgets the name at once. 0, -ENOENT when gone, or -errno.
  int DeleteColdFile(const storepb::Manifest& m);
  // Tells the kernel to forget the name `rel` (relative to the logdir): the
  // file there changed behind the mount's back (recovery made it hot, or
  // dropped its cold copy). Not under the namespace lock.
  void ForgetName(const std::string& rel);
  ChunkCache& chunk_cache() { return cache_; }  // thread-safe; lends to a recompress

  Stats stats();
  const FsOptions& options() const { return options_; }

 private:
  // Opens (as openat) what `dir_fd` and `name` name for the daemon's own
  // reads and writes: with O_NOATIME where the mount says reads leave
  // access times alone (FsOptions), and without it where the kernel
  // refuses it to this process (not the file's owner, no CAP_FOWNER).
  int OpenBacking(int dir_fd, const char* name, int flags, mode_t mode = 0);
  // Sets (value) or removes (nullptr) attribute `name` of cold file ino, v.
  int SetColdXattr(uint64_t ino, const InodeView& v, const char* name, const std::string* value,
                   int flags);
  // The path of an inode relative to the logdir ("" for the root), or
  // -errno (a hot folder removed behind our back).
  int RelPath(uint64_t ino, std::string* rel);
  // RelPath of a hot folder whose path is longer than the kernel will name
  // (PATH_MAX): found by climbing its parents.
  int RelPathByWalk(int fd, std::string* rel);
  // The folder a lookup looks in: its inode's state, and its path, found
  // once a lookup needs it (RelPath costs a readlink).
  struct Folder {
    uint64_t ino = 0;
    InodeView view;
    int rel_status = 1;  // 1: not asked yet; then RelPath's answer
    std::string rel;
  };
  Folder FolderOf(uint64_t ino) { return {ino, inodes_.View(ino)}; }
  int FolderRel(Folder* f) {
    if (f->rel_status == 1) f->rel_status = RelPath(f->ino, &f->rel);
    return f->rel_status;
  }
  // Lookup with the folder looked at already; the namespace lock held
  // shared, so that a rename (exclusive) never shows the store's entries
  // of a folder at its old path while the folder is at its new one.
  int LookupIn(Folder* f, const char* name, EntryOut* out) TBFS_REQUIRES_SHARED(ns_mu_);
  // A cold entry found as `file_id` (by ListChildren, or the store's
  // namespace entry): its inode, serving the file's manifest.
  int LookupColdFile(uint64_t file_id, EntryOut* out);
  int LookupCold(const std::string& rel, EntryOut* out);
  int HotLookupAt(int dir_fd, const char* name, EntryOut* out, int made_fd = -1);  // or this fd's
  // The folder's entries, hot and cold, into dh (sorted by cookie), under
  // the namespace lock; again when a file was put in place meanwhile.
  int FillDir(uint64_t ino, DirHandle* dh);
  int FillDirOnce(uint64_t ino, DirHandle* dh) TBFS_REQUIRES_SHARED(ns_mu_);
  uint64_t DirCookie(std::string_view name) const;
  // Makes sure a backing folder exists for a cold-only folder inode, and
  // returns an fd of it (O_PATH). Converts the inode to hot.
  int EnsureBackingDir(uint64_t ino, std::shared_ptr<UniqueFd>* fd);
  // Rehydrates a cold file inode into the backing folder (then it is hot).
  // Waits for a transition in flight to end (`wait`), or answers EAGAIN.
  int Rehydrate(uint64_t ino, bool wait, const std::atomic<bool>* interrupted = nullptr);
  // Rmdir's one attempt; *hot_not_empty when the backing folder was not
  // empty (Rmdir then looks at what it holds, without the lock).
  int RemoveFolder(uint64_t parent, const char* name, bool* hot_not_empty);
  // Unlinks what the folder `name` of parent_fd holds when that is only
  // files of moves in flight deleted through the mount; whether it did.
  bool UnlinkDeletedAside(int parent_fd, const char* name);
  // Waits, on a caller's behalf, for the inode's transition to end: 0;
  // -EINTR when the caller got a signal; -EAGAIN when kMaxWaiting threads
  // wait already (fs/open_files.cc).
  int WaitSettled(uint64_t ino, const std::atomic<bool>* interrupted);
  std::atomic<int> waiting_{0};  // threads in WaitSettled
  void ColdAttr(const ColdAttrs& a, ino_t shown_ino, struct stat* st);
  void ColdDirAttr(const std::string& rel, ino_t shown_ino, struct stat* st);
  bool IsHidden(Folder* parent, const char* name);  // uses parent's ino and path only
  bool IsHidden(uint64_t parent, const char* name) {
    Folder f{parent, {}};
    return IsHidden(&f, name);
  }
  bool Unmakeable(uint64_t parent, const char* name);  // hidden, or a temporary name of tbfs's
  // The answer to a failed store operation at `site`: ENOENT, EROFS (a
  // shared store this mount only reads), or an error counted and logged.
  int StoreError(const Status& st, EioSite site, std::string_view path = {});  // path: in the log
  // Logs "[EIO:site] what" (a few lines a second per site at most: a loop of
  // failing requests does not flood the log), counts it, returns -EIO.
  int Eio(EioSite site, std::string_view what);
  int UnlinkCold(const std::string& rel);
  // Rename's two cases, under the namespace lock held exclusively: the
  // source is hot (sst: its stat), or only the store has it.
  struct RenameArgs {
    uint64_t parent;
    const char* name;
    uint64_t newparent;
    const char* newname;
    unsigned flags;
    std::string src, dst;              // the paths beneath the logdir
    Result<storepb::Entry> dst_entry;  // the store's entry at dst, if any
    bool dst_cold;                     // dst_entry.ok()
  };
  int RenameHot(const RenameArgs& a, const struct stat& sst) TBFS_REQUIRES(ns_mu_);
  int RenameCold(const RenameArgs& a) TBFS_REQUIRES(ns_mu_);
  // -ENOTEMPTY when the store holds entries beneath dst, 0 when it holds none.
  int ColdChildren(const std::string& dst);
  // After the hot file at `rel` left the path (unlinked, renamed away): the
  // cold file its presence hid there leaves too. The hot change stands
  // whatever happens; a failure is logged.
  // dir_fd and hot: the folder the hot file was in and its stat, for the
  // sticky-folder rule (store::MayReplaceInFolder); unknown: dropped.
  void DropShadowed(const std::string& rel, int dir_fd = -1, const struct stat* hot = nullptr);
  // Gives what a caller created to the caller, keeping its mode as made (a
  // chown clears set-id bits). It is open as fd, or (fd < 0) is opened
  // O_PATH by name and must be of mode's type.
  void FixOwner(int dir_fd, const char* name, int fd, const Caller& c, mode_t mode);

  // Tells the kernel (when there is one) that node `id` changed.
  void Invalidate(uint64_t id) {
    if (id != 0 && kernel_ != nullptr) kernel_->InvalidateAttrs(id);
  }
  // A new FileHandle on inode `ino` serving the backing file open as fd (or
  // the store, fd -1), chosen when the inode's generation was `generation`.
  std::unique_ptr<FileHandle> NewHandle(uint64_t ino, uint32_t generation, int fd, bool writable);

  const FsOptions options_;
  // Drawn at start-up: no name can be made ahead to collide (DirHandle).
  const uint64_t cookie_seed_;
  // Tests: hashes of 8 bits, so that many names share one (failpoint
  // "readdir.colliding_cookies").
  const bool colliding_cookies_;
  KernelCache* kernel_ = nullptr;
  store::ColdStore* const store_;
  InodeTable inodes_;
  ChunkCache cache_;
  Counters counters_;
  LogLimiter eio_log_[kNumEioSites];  // StoreError's and Eio's lines, by site
  Placements placements_;
  ListingGrants listing_grants_;
  // Lock order: see the constructor. None is held across a FUSE reply.
  // One rehydration at a time (they are rare). Held across the file's copy
  // out of the store and the commits that follow, on purpose: a second
  // writable open of the same cold file must find it rehydrated, not start
  // a second copy. Reads of other files take neither lock.
  Mutex rehydrate_mu_ TBFS_ACQUIRED_BEFORE(ns_mu_);
  // Shared across a rehydration's copy and commits (a rename must not move
  // the folder beneath it); exclusive only for renames and rmdir.
  SharedMutex& ns_mu_;
};

// "/proc/self/fd/N": how O_PATH fds are turned back into paths.
std::string ProcPath(int fd);
// A name tbfs gives a file for a moment (a file moving aside during its
// migration, a copy being written back): never shown through the mount.
bool IsTransientName(std::string_view name);

}  // namespace tbfs::fs
