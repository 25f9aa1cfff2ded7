// The inode table of the mount: every inode the kernel knows, hot or cold.
//
// A hot inode is a file or folder of the backing logdir, indexed by its
// backing (st_dev, st_ino), so hard links share one inode. Folders are held
// by an O_PATH fd; other files by a kernel file handle (name_to_handle_at),
// reopened on use, so that a walk over millions of files does not need an
// fd each (the fd limit is often 20,000 or less). A file handle names one
// file for good: a reused inode number has another handle, so no lookup
// keyed by a backing inode number reaches an inode whose file is gone.
// Where file handles are not available (no CAP_DAC_READ_SEARCH, or the
// backing filesystem lacks them) every inode keeps an O_PATH fd, which pins
// its file. A cold inode is a file of the cold store (indexed by file id) or
// a folder that exists only in the cold namespace (indexed by path).
//
// Inode numbers (st_ino) are the mount's own, in three ranges that never
// overlap (docs/format.md): a hot file of the logdir's filesystem shows its
// backing number; a cold file shows kColdInoBase + its file id, unique for
// the store's life; folders only the store has, and files of other
// filesystems mounted inside the logdir, get numbers the mount hands out.
// A file's number changes when it turns cold or hot (the kernel's node id
// does not): two files never share one, at any moment or across remounts.
//
// Transitions keep the node id, so the kernel's caches and open handles
// never see a different file:
//  - BeginMove / EndMove: the migrator moves a hot file to the store. From
//    BeginMove on, the inode serves the store's copy; it stays findable by
//    its backing identity until EndMove, so a lookup that still finds the
//    backing file reaches it too.
//  - BeginRehydrate / RehydrateTarget / EndRehydrate: a cold file becomes a
//    backing file. The new backing file finds the inode from before it has
//    its name, so no lookup ever makes a second inode for it.
//  - PutBackHot: a rolled-back file is a backing file again.
// A cold file id keeps finding its inode after it turned hot: a lookup that
// still found the store's entry (committed away just after) gets the inode
// that serves the file now.
// While an inode is in transition, writable opens wait (WaitSettled); the
// wait ends early when the request's caller gets a signal (`stop`, set by
// FUSE_INTERRUPT; WakeWaiters).
//
// Lookup counts: every reply that hands an inode to the kernel (lookup,
// create, mkdir, mknod, symlink, link, readdirplus entries) adds one;
// forget subtracts what the kernel says. An inode is freed when it has no
// lookups, no open handles and no transition holding it. The root is never
// freed. Open cold handles are counted per file id (Readers): a file's
// chunks stay in the store while someone reads them.
//
// Memory: an inode the kernel holds costs about 120 bytes, whatever the
// logdir's size: a slot of a slab (no allocation of its own), a file
// handle held inline, a cold file's attributes (not its manifest, which is
// read from the store when a handle is opened), and one slot of a flat
// hash index. Folders, and files without a usable handle, add an O_PATH
// fd; cold-only folders their path (InodeExtra). Slots are reused.
//
// Locking: one mutex (mu_) guards the indexes, the counts and every
// mutable field of every inode. It is the innermost lock of the daemon
// (Filesystem::rehydrate_mu_ -> Filesystem::ns_mu_ -> InodeTable::mu_), and
// is never held across a syscall, a store call or a FUSE reply: callers
// copy what they need (the fd is shared through a shared_ptr, so a
// conversion cannot close it under a user).
#pragma once

#include <absl/container/flat_hash_set.h>
#include <sys/stat.h>

#include <atomic>
#include <condition_variable>
#include <deque>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <unordered_map>
#include <vector>

#include "base/fs_util.h"
#include "base/thread_annotations.h"
#include "store/proto/store.pb.h"

namespace tbfs::fs {

// The three ranges of st_ino shown through the mount.
inline constexpr ino_t kAssignedInoBase = ino_t{1} << 48;  // numbers the mount hands out
inline constexpr ino_t kColdInoBase = ino_t{3} << 47;      // + cold file id
inline ino_t ColdIno(uint64_t file_id) { return kColdInoBase + file_id; }

enum class Kind : uint8_t { kHot, kColdFile, kColdDir };

// A kernel file handle (struct file_handle's type and bytes), inline. The
// handles of ext4, xfs, btrfs and tmpfs fit; a file whose handle does not
// is held by an fd, as where there are no handles.
struct InlineHandle {
  static constexpr size_t kMaxBytes = 24;
  int32_t type = 0;
  uint8_t size = 0;  // 0: none
  uint8_t bytes[kMaxBytes] = {};
  bool empty() const { return size == 0; }
  bool operator==(const InlineHandle&) const = default;
  // The raw struct file_handle bytes `raw` as an InlineHandle; empty when
  // there are none or they do not fit.
  static InlineHandle Of(const std::string& raw);
};

// A cold file's attributes, as its manifest has them: what getattr shows.
struct ColdAttrs {
  uint64_t size = 0;
  int64_t atime_ns = 0;
  int64_t mtime_ns = 0;
  int64_t ctime_ns = 0;
  uint32_t mode = 0;
  uint32_t uid = 0;
  uint32_t gid = 0;
  uint32_t stored_4k = 0;  // what it takes in the store, in 4 KiB blocks, rounded up
  static ColdAttrs Of(const storepb::Manifest& m);
};

// What few inodes need: allocated for those only.
struct InodeExtra {
  // O_PATH: folders, files on filesystems without (inline) file handles,
  // a kColdFile moving out without a handle, and a file rehydrated while
  // open (beside its handle: see RehydrateTarget).
  std::shared_ptr<UniqueFd> fd;
  std::string cold_path;   // kColdDir
  ino_t assigned_ino = 0;  // a number the mount handed out (other filesystems, cold-only folders)
  InlineHandle backing;    // kColdFile: the backing file it still has (moving out, rehydrating)
};

struct Inode {
  Inode() : handle() {}
  uint64_t nlookup = 0;
  uint64_t file_id = 0;  // the cold file id that finds it (kept when it turns hot)
  // The backing file: of a kHot inode, and of a kColdFile still moving out
  // or being rehydrated.
  dev_t dev = 0;
  ino_t ino = 0;
  // Bumped at every change of what the inode serves (Generation). Read
  // without the lock by open handles.
  std::atomic<uint32_t> generation{0};
  uint32_t open_handles = 0;
  uint16_t write_handles = 0;  // ... of them writable
  uint16_t pins = 0;           // transitions holding it
  Kind kind = Kind::kHot;
  bool in_transition = false;   // writable opens wait
  bool volatile_attrs = false;  // a folder or a tfevents file: short TTL
  union {
    InlineHandle handle;  // kHot: the file (empty: held by extra->fd)
    ColdAttrs cold;       // kColdFile
  };
  std::unique_ptr<InodeExtra> extra;
};

// A consistent copy of an inode's state, for use outside the lock.
struct InodeView {
  Kind kind;
  std::shared_ptr<UniqueFd> fd;  // kHot: always set; invalid (-1) when the file is gone
  ColdAttrs cold;                // kColdFile
  uint64_t file_id;              // kColdFile
  std::string cold_path;         // kColdDir
  ino_t shown_ino;
  // A hot file whose handle no longer opens (gone from the backing
  // filesystem): ESTALE has the kernel look its name up again.
  bool stale() const { return kind == Kind::kHot && !fd->valid(); }
};

// What a lookup found: the node id, the st_ino to show, and, for an inode
// that serves the store's copy already (moving), its attributes.
struct InodeRef {
  uint64_t id = 0;
  ino_t shown_ino = 0;
  std::optional<ColdAttrs> cold;
};

class InodeTable {
 public:
  static constexpr uint64_t kRootId = 1;

  // The root is the backing logdir, open as root_fd (O_PATH); root_st is
  // its fstat, taken (and checked) by the caller.
  InodeTable(UniqueFd root_fd, const struct stat& root_st);

  // Node ids are inode addresses (the root is 1).
  InodeView View(uint64_t id);
  Kind KindOf(uint64_t id);
  // A counter bumped whenever the inode starts serving another file (a
  // move, a rehydration, a put-back): an open handle compares it with the
  // value it saw to know when to look again. Valid while the inode lives
  // (an open handle keeps it alive).
  const std::atomic<uint32_t>* Generation(uint64_t id) { return &Get(id)->generation; }
  ino_t ShownIno(uint64_t id);
  int RootFd() const { return root_.extra->fd->get(); }
  bool VolatileAttrs(uint64_t id);

  // --- lookups: each counts one lookup of the inode it returns.
  // Finds or adds the hot inode of the file open as fd (lstat st). Takes
  // ownership of fd when a new inode is made. volatile_attrs marks an
  // inode whose attributes the kernel may cache only briefly.
  InodeRef AddHot(UniqueFd fd, const struct stat& st, bool volatile_attrs = false);
  // The known inode of (st.st_dev, st.st_ino) if it is the same file
  // (`handle`, from HandleAt, matches); id 0 when there is none.
  InodeRef RefHot(const struct stat& st, const std::string& handle, bool volatile_attrs);
  // RefHot, or a new inode held by `handle` (not empty), with no fd: the
  // caller made sure st and handle are of one file.
  InodeRef AddHotByHandle(const struct stat& st, const std::string& handle, bool volatile_attrs);
  // The file handle of dir_fd/name (st is its lstat), or "" where the inode
  // is held by an fd (folders, no file handles here, or one too long).
  std::string HandleAt(int dir_fd, const char* name, const struct stat& st);
  // The same for a hot non-folder entry open as fd ("" to keep the fd).
  std::string HandleOf(int fd, const struct stat& st);
  // Finds or adds the inode of cold file m; `cold` is empty in the result
  // when that inode serves the file from the logdir by now.
  InodeRef AddColdFile(const storepb::Manifest& m);
  // Finds or adds the inode of the cold-only folder rel_path.
  uint64_t AddColdDir(const std::string& rel_path);
  // The st_ino of the cold-only folder rel_path (stable for the mount's life).
  ino_t ColdDirIno(const std::string& rel_path);
  // The st_ino a readdir entry of a hot folder on device dev shows.
  ino_t HotDirentIno(dev_t dev, ino_t ino);
  // Subtracts n lookups; frees the inode when nothing holds it. True when
  // no lookup of it is left: the kernel has forgotten it.
  bool Forget(uint64_t id, uint64_t n);

  // --- open handles
  enum class Open { kOk, kRetry, kWait };
  // Counts an open handle. Hot (cold_file_id 0): kRetry when the inode is
  // not hot any more, kWait when a writable open must wait for a
  // transition. Cold: a reader of that file id's chunks; kRetry when the
  // inode no longer serves that file.
  Open OpenHandle(uint64_t id, bool writable, uint64_t cold_file_id);
  // Returns the readers cold_file_id has left (0 for hot handles).
  int CloseHandle(uint64_t id, bool writable, uint64_t cold_file_id);
  // Open cold handles of a file id.
  int Readers(uint64_t file_id);
  // Returns once the inode is in no transition (true), or once *stop is
  // set (false).
  bool WaitSettled(uint64_t id, const std::atomic<bool>* stop = nullptr);
  // Whether cold file `file_id` is in a transition now, its backing file
  // the file (dev, ino).
  bool InTransition(uint64_t file_id, dev_t dev, ino_t ino);
  // Whether the inode is in no transition now.
  bool Settled(uint64_t id);
  // Wakes every WaitSettled to look at its `stop` again.
  void WakeWaiters();

  // --- transitions (see the header comment). Each returns the node id
  // whose attributes changed (0 for none): the caller tells the kernel.
  // BeginMove returns 0 (nothing changes) when the file is open for
  // writing through the mount or in another transition.
  uint64_t BeginMove(int fd, const struct stat& st, const storepb::Manifest& m);
  uint64_t EndMove(uint64_t file_id, bool moved);
  enum class Rehydrate { kStarted, kNotCold, kBusy };
  Rehydrate BeginRehydrate(uint64_t id);
  // The backing file being written for it (open as fd, identity st), before
  // it takes the file's name: lookups that find it find this inode, still
  // serving the store's copy.
  void RehydrateTarget(uint64_t id, int fd, const struct stat& st);
  // Ends it: the inode is that backing file (placed), or stays cold.
  void EndRehydrate(uint64_t id, bool placed);
  // A file id's inode is the backing file open as fd (again, if it was).
  uint64_t PutBackHot(uint64_t file_id, UniqueFd fd, const struct stat& st);
  // A cold-only folder now exists in the backing folder, open as fd.
  void ColdDirToHot(uint64_t id, UniqueFd fd, const struct stat& st);
  // A cold file's manifest changed (renamed, chmod); updates whoever holds it.
  void UpdateManifest(const storepb::Manifest& m);
  // Cold-only folder inodes at or below `from` move to `to`.
  void RenameColdDirs(const std::string& from, const std::string& to);

  size_t size();

 private:
  // The flat indexes hold inode pointers and hash the inode's own key
  // fields: an inode's (dev, ino) or file_id never changes while it is
  // indexed by it.
  struct HotKey {
    dev_t dev;
    ino_t ino;
  };
  struct HotHash {
    using is_transparent = void;
    size_t operator()(const HotKey& k) const;
    size_t operator()(const Inode* i) const { return (*this)(HotKey{i->dev, i->ino}); }
  };
  struct HotEq {
    using is_transparent = void;
    static HotKey Key(const HotKey& k) { return k; }
    static HotKey Key(const Inode* i) { return {i->dev, i->ino}; }
    template <typename A, typename B>
    bool operator()(const A& a, const B& b) const {
      return Key(a).dev == Key(b).dev && Key(a).ino == Key(b).ino;
    }
  };
  struct ColdHash {
    using is_transparent = void;
    size_t operator()(uint64_t id) const { return absl::Hash<uint64_t>()(id); }
    size_t operator()(const Inode* i) const { return (*this)(i->file_id); }
  };
  struct ColdEq {
    using is_transparent = void;
    static uint64_t Key(uint64_t id) { return id; }
    static uint64_t Key(const Inode* i) { return i->file_id; }
    template <typename A, typename B>
    bool operator()(const A& a, const B& b) const {
      return Key(a) == Key(b);
    }
  };

  Inode* Get(uint64_t id);
  uint64_t Id(Inode* inode) {
    return inode == &root_ ? kRootId : reinterpret_cast<uintptr_t>(inode);
  }
  Inode* NewLocked() TBFS_REQUIRES(mu_);
  static InodeExtra& Extra(Inode* inode);
  // The st_ino shown now; a hot file's number.
  ino_t ShownLocked(const Inode* inode) const TBFS_REQUIRES(mu_);
  ino_t HotNumberLocked(const Inode* inode) const TBFS_REQUIRES(mu_);
  // Gives a hot inode its own number where the backing one cannot be shown.
  void AssignHotNumberLocked(Inode* inode) TBFS_REQUIRES(mu_);
  // The handle a lookup compares: a hot file's, or a cold file's backing one.
  static const InlineHandle& BackingHandle(const Inode* inode);
  InodeRef RefLocked(Inode* inode) TBFS_REQUIRES(mu_);
  // The indexed hot inode of (dev, ino) if it is the file with `handle`; a
  // stale one (a reused inode number) is dropped from the index.
  Inode* FindHotLocked(dev_t dev, ino_t ino, const InlineHandle& handle) TBFS_REQUIRES(mu_);
  // Makes the inode the hot file (fd, or handle when not empty) with
  // identity st, indexed.
  void SetHotLocked(Inode* inode, UniqueFd fd, const InlineHandle& handle, const struct stat& st)
      TBFS_REQUIRES(mu_);
  void IndexHotLocked(Inode* inode) TBFS_REQUIRES(mu_);
  void UnindexHotLocked(Inode* inode) TBFS_REQUIRES(mu_);
  void IndexColdLocked(Inode* inode, uint64_t file_id) TBFS_REQUIRES(mu_);
  void UnindexColdLocked(Inode* inode) TBFS_REQUIRES(mu_);
  // When nothing holds the inode any more: back to the free slots; returns
  // what it held (closed by the caller, outside the lock).
  std::unique_ptr<InodeExtra> ReleaseIfUnusedLocked(Inode* inode) TBFS_REQUIRES(mu_);

  Mutex mu_;
  std::condition_variable_any settled_;  // an inode's transition ended
  // A member, not in the slab: never freed, whatever the kernel forgets of it.
  Inode root_;
  dev_t root_dev_ = 0;
  bool use_handles_ = false;  // set once at construction
  UniqueFd mount_fd_;         // the root, opened O_RDONLY, for open_by_handle_at
  int mount_id_ = -1;
  uint64_t next_assigned_ TBFS_GUARDED_BY(mu_) = 0;
  // Every inode but the root, at a fixed address (a deque never moves its
  // elements); free_ lists the slots to use again.
  std::deque<Inode> slab_ TBFS_GUARDED_BY(mu_);
  std::vector<Inode*> free_ TBFS_GUARDED_BY(mu_);
  absl::flat_hash_set<Inode*, HotHash, HotEq> hot_ TBFS_GUARDED_BY(mu_);
  absl::flat_hash_set<Inode*, ColdHash, ColdEq> cold_files_ TBFS_GUARDED_BY(mu_);
  std::map<std::string, Inode*> cold_dirs_ TBFS_GUARDED_BY(mu_);
  std::map<std::string, ino_t> cold_dir_inos_ TBFS_GUARDED_BY(mu_);  // for the mount's life
  std::unordered_map<uint64_t, int> readers_ TBFS_GUARDED_BY(mu_);   // file id -> open cold handles
};

}  // namespace tbfs::fs
