// The inode table of the mount: every inode the kernel knows, hot or cold.
//
// A hot inode is a file or folder of the backing logdir, indexed by its
// backing (st_dev, st_ino), so hard links share one inode. Folders are held
// by an O_PATH fd; other files by a kernel file handle (name_to_handle_at),
// reopened on use, so that a walk over millions of files does not need an
// fd each (the fd limit is often 20,000 or less). Where file handles are not
// available (no CAP_DAC_READ_SEARCH, or the backing filesystem lacks them)
// every inode keeps an O_PATH fd. A cold inode is a file of the cold store (indexed by file id) or a
// folder that exists only in the cold namespace (indexed by path). An inode
// can change kind in place (hot -> cold when the migrator moves its file,
// cold -> hot when it is rehydrated): its node id, and the st_ino it shows,
// stay the same, so the kernel's caches and open handles never see a
// different file.
//
// Lookup counts: every reply that hands an inode to the kernel (lookup,
// create, mkdir, mknod, symlink, link, readdirplus entries) adds one;
// forget subtracts what the kernel says; an inode is freed at zero. The root
// is never freed.
//
// Locking: one mutex (mu_) guards the indexes, the lookup counts and every
// mutable field of every inode. It is never held across a syscall, a store
// call or a FUSE reply: callers copy what they need (the fd is shared
// through a shared_ptr, so a conversion cannot close it under a user).
#pragma once

#include <sys/stat.h>

#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <unordered_map>

#include "base/fs_util.h"
#include "store.pb.h"

namespace tbfs::fs {

enum class Kind { kHot, kColdFile, kColdDir };

struct Inode {
  Kind kind = Kind::kHot;
  std::shared_ptr<UniqueFd> fd;                  // kHot: O_PATH (folders)
  std::shared_ptr<const std::string> handle;     // kHot: file handle (the rest)
  dev_t dev = 0;                                 // kHot: backing identity
  ino_t ino = 0;
  std::shared_ptr<const storepb::Manifest> manifest;  // kColdFile
  std::string cold_path;                         // kColdDir
  ino_t shown_ino = 0;                           // st_ino shown through the mount
  uint64_t nlookup = 0;
  int open_handles = 0;                          // open file handles
  int write_handles = 0;                         // ... of them writable
  bool unlinked = false;                         // kColdFile deleted while open
  bool migrating = false;                        // kHot being unlinked by the migrator
  bool volatile_attrs = false;                   // a folder or a tfevents file: short TTL
};

// A consistent copy of an inode's state, for use outside the lock.
struct InodeView {
  Kind kind;
  std::shared_ptr<UniqueFd> fd;  // kHot: always set; invalid (-1) when the file is gone
  std::shared_ptr<const storepb::Manifest> manifest;
  std::string cold_path;
  ino_t shown_ino;
  bool unlinked;
};

class InodeTable {
 public:
  static constexpr uint64_t kRootId = 1;

  // The root is the backing logdir, open as root_fd (O_PATH).
  explicit InodeTable(UniqueFd root_fd);

  // Node ids are inode addresses (the root is 1).
  Inode* Get(uint64_t id);
  static uint64_t IdOf(Inode* inode, Inode* root);
  uint64_t Id(Inode* inode) { return IdOf(inode, &root_); }

  InodeView View(uint64_t id);
  // Just the st_ino to show (no fd is opened).
  ino_t ShownIno(uint64_t id);
  int RootFd() const { return root_.fd->get(); }

  // Finds or adds the hot inode for (st.st_dev, st.st_ino) and counts one
  // lookup. Takes ownership of fd when a new inode is made. volatile_attrs
  // marks an inode whose attributes the kernel may cache only briefly.
  uint64_t AddHot(UniqueFd fd, const struct stat& st, bool volatile_attrs = false);
  bool VolatileAttrs(uint64_t id);
  // Counts one more lookup of the hot inode (dev, ino) if the table has it
  // and it is the same file (`handle`, from HandleAt, matches: inode numbers
  // of deleted files are reused, and a file handle, unlike an fd, does not
  // pin the inode); returns its id, or 0.
  // *shown_ino receives the st_ino to show for it.
  uint64_t RefHot(const struct stat& st, const std::string& handle, bool volatile_attrs,
                  ino_t* shown_ino);
  // The file handle of dir_fd/name (st is its lstat), or "" where the inode
  // is held by an fd (folders, or no file handles here).
  std::string HandleAt(int dir_fd, const char* name, const struct stat& st);
  // Finds or adds the cold file inode of m and counts one lookup.
  uint64_t AddColdFile(std::shared_ptr<const storepb::Manifest> m);
  // Finds or adds the cold-only folder inode of rel_path and counts one lookup.
  uint64_t AddColdDir(const std::string& rel_path, ino_t shown_ino);

  // Subtracts n lookups; frees the inode at zero.
  void Forget(uint64_t id, uint64_t n);

  // Converts in place. ToCold: the hot file (dev, ino) moved to the store.
  void ToCold(dev_t dev, ino_t ino, std::shared_ptr<const storepb::Manifest> m);
  // ToHot: a cold file or folder now has a backing entry open as fd.
  void ToHot(uint64_t id, UniqueFd fd, const struct stat& st);
  // A hot file put back by a rollback has a new backing inode: the inode that
  // showed (dev, old_ino) now points at it.
  void Repoint(dev_t dev, ino_t old_ino, UniqueFd fd, const struct stat& st);
  // A cold file's manifest changed (renamed); updates whoever holds it.
  void UpdateManifest(std::shared_ptr<const storepb::Manifest> m);

  // Open handle accounting; false from OpenHandle when a writable open must
  // wait because the migrator is unlinking this file.
  bool OpenHandle(uint64_t id, bool writable);
  // Returns true when this was the last handle of an unlinked cold file
  // (whose chunks may now go).
  bool CloseHandle(uint64_t id, bool writable);
  // Marks a cold file deleted; true when handles are still open (its chunks
  // must wait for the last release).
  bool MarkUnlinked(uint64_t file_id);
  // Cold-only folder inodes at or below `from` move to `to`.
  void RenameColdDirs(const std::string& from, const std::string& to);

  // The migrator's hooks: may (dev, ino) be unlinked now? (no open handle;
  // marks it so writable opens wait), and the end of that window.
  bool BeginUnlink(dev_t dev, ino_t ino);
  void EndUnlink(dev_t dev, ino_t ino);
  // True when some handle of the backing file (dev, ino) is open.
  bool IsOpen(dev_t dev, ino_t ino);

  size_t size();

 private:
  using HotKey = std::pair<dev_t, ino_t>;
  struct HotKeyHash {
    size_t operator()(const HotKey& k) const {  // splitmix64 finalizer
      uint64_t x = static_cast<uint64_t>(k.first) * 0x9e3779b97f4a7c15ull ^ k.second;
      x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
      x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
      return static_cast<size_t>(x ^ (x >> 31));
    }
  };
  Inode* NewLocked();
  // The indexed hot inode of (dev, ino) if it is the file with `handle`; a
  // stale one (a reused inode number) is dropped from the index.
  Inode* FindHotLocked(dev_t dev, ino_t ino, const std::string& handle);
  // The file handle for a hot non-folder entry open as fd ("" to keep the fd).
  std::string HandleOf(int fd, const struct stat& st);
  void SetHotLocked(Inode* inode, UniqueFd fd, std::string handle, const struct stat& st);
  void UnindexLocked(Inode* inode);
  void IndexLocked(Inode* inode);

  std::mutex mu_;
  Inode root_;
  bool use_handles_ = false;  // set once at construction
  UniqueFd mount_fd_;         // the root, opened O_RDONLY, for open_by_handle_at
  int mount_id_ = -1;
  // Owners of every inode but the root; the indexes point into them.
  std::unordered_map<Inode*, std::unique_ptr<Inode>> all_;             // guarded by mu_
  std::unordered_map<HotKey, Inode*, HotKeyHash> hot_;                 // guarded by mu_
  std::unordered_map<uint64_t, Inode*> cold_files_;                    // guarded by mu_
  std::map<std::string, Inode*> cold_dirs_;                            // guarded by mu_
};

}  // namespace tbfs::fs
