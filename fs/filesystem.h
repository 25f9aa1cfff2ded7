// The mounted filesystem's core: the union of the backing logdir (hot) and
// the cold store, operation by operation, with no FUSE types. The adapters
// in fuse_ops.cc turn each FUSE request into one call here and one reply.
//
// Error convention (one, everywhere): methods return 0 or -errno.
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
#include <memory>
#include <shared_mutex>
#include <string>
#include <vector>

#include "base/fs_util.h"
#include "fs/chunk_cache.h"
#include "fs/inode_table.h"
#include "store/cold_store.h"

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
// On the mount's root only: JSON status; writing migrate_now runs a
// migration pass and returns when it is done.
inline constexpr char kStatusXattr[] = "user.tbfs.status";
inline constexpr char kMigrateNowXattr[] = "user.tbfs.migrate_now";

struct FsConfig {
  std::string logdir;                   // backing folder (absolute)
  std::string store_skip;               // relative path of the store inside it, or ""
  uint64_t cache_bytes = 256ull << 20;  // cold chunk cache
  bool as_root_owner_fixup = false;     // chown what callers create to them
};

struct Caller {
  uid_t uid = 0;
  gid_t gid = 0;
};

struct EntryOut {
  uint64_t id = 0;
  struct stat attr {};
};

struct DirEntryOut {
  std::string name;
  mode_t type = 0;  // S_IFMT bits
  ino_t ino = 0;
};

// An open file: a real fd for hot files, the manifest for cold ones.
struct FileHandle {
  uint64_t inode = 0;
  int fd = -1;
  bool cold = false;
  bool writable = false;
  std::shared_ptr<const storepb::Manifest> manifest;
  std::atomic<uint64_t> next_offset{0};  // where a sequential reader goes next
  ~FileHandle();
};

struct DirHandle {
  std::vector<DirEntryOut> entries;  // snapshot taken at offset 0
};

struct Counters {
  std::atomic<uint64_t> rehydrations{0};
  std::atomic<uint64_t> cold_reads{0};
  std::atomic<uint64_t> eio_cold_chunk{0};
  std::atomic<uint64_t> eio_rehydrate{0};
  std::atomic<uint64_t> eio_store{0};
};

class Filesystem {
 public:
  Filesystem(const FsConfig& config, store::ColdStore* store, UniqueFd root_fd);

  int Lookup(uint64_t parent, const char* name, EntryOut* out);
  void Forget(uint64_t ino, uint64_t nlookup);
  // With an open handle of the file (fstat on a deleted-but-open file).
  int GetAttr(uint64_t ino, struct stat* st, FileHandle* fh = nullptr);
  // to_set: FUSE_SET_ATTR_* bits (same values as the kernel's FATTR_*).
  int SetAttr(uint64_t ino, const struct stat& attr, int to_set, FileHandle* fh,
              struct stat* out);
  int ReadLink(uint64_t ino, std::string* target);
  int MkNod(uint64_t parent, const char* name, mode_t mode, dev_t rdev, const Caller& c,
            EntryOut* out);
  int Mkdir(uint64_t parent, const char* name, mode_t mode, const Caller& c, EntryOut* out);
  int Symlink(const char* target, uint64_t parent, const char* name, const Caller& c,
              EntryOut* out);
  int Link(uint64_t ino, uint64_t parent, const char* name, EntryOut* out);
  int Unlink(uint64_t parent, const char* name);
  int Rmdir(uint64_t parent, const char* name);
  int Rename(uint64_t parent, const char* name, uint64_t newparent, const char* newname,
             unsigned flags);

  int Open(uint64_t ino, int flags, std::unique_ptr<FileHandle>* out);
  int Create(uint64_t parent, const char* name, mode_t mode, int flags, const Caller& c,
             EntryOut* entry, std::unique_ptr<FileHandle>* out);
  // Cold reads: the pieces of cached chunks that hold up to size bytes at
  // off, in order (no copy); returns the byte count or -errno.
  struct ColdSlice {
    std::shared_ptr<const Chunk> chunk;
    size_t offset = 0;
    size_t length = 0;
  };
  ssize_t ReadCold(FileHandle* fh, size_t size, off_t off, std::vector<ColdSlice>* slices);
  void Release(std::unique_ptr<FileHandle> fh);

  int OpenDir(uint64_t ino, std::unique_ptr<DirHandle>* out);
  int FillDir(uint64_t ino, DirHandle* dh);
  int StatFs(struct statvfs* st);

  int GetXattr(uint64_t ino, const char* name, std::string* value);
  int SetXattr(uint64_t ino, const char* name, const char* value, size_t size, int flags);
  int ListXattr(uint64_t ino, std::string* names);
  int RemoveXattr(uint64_t ino, const char* name);

  // Seconds the kernel may cache this inode's entry and attributes.
  double CacheTtl(uint64_t ino) {
    return inodes_.VolatileAttrs(ino) ? kFreshTtlS : kStableTtlS;
  }
  InodeTable& inodes() { return inodes_; }
  ChunkCache& cache() { return cache_; }
  Counters& counters() { return counters_; }
  store::ColdStore& store() { return *store_; }
  const FsConfig& config() const { return config_; }
  // Taken shared by the migrator around each batch, exclusive by renames and
  // rmdir: namespace moves never interleave with a migration batch.
  std::shared_mutex& namespace_lock() { return ns_mu_; }
  // Set once the kernel's INIT has been answered.
  std::atomic<bool> initialized{false};
  // The status and migrate-now hooks of the root's control xattrs.
  std::function<std::string()> status_provider;
  std::function<int()> migrate_now;

 private:
  // The path of an inode relative to the logdir ("" for the root), or
  // -errno (a hot folder removed behind our back).
  int RelPath(uint64_t ino, std::string* rel);
  int LookupCold(const std::string& rel, EntryOut* out);
  int HotLookupAt(int dir_fd, const char* name, EntryOut* out);
  // Makes sure a backing folder exists for a cold-only folder inode, and
  // returns an fd of it (O_PATH). Converts the inode to hot.
  int EnsureBackingDir(uint64_t ino, std::shared_ptr<UniqueFd>* fd);
  // Rehydrates a cold file inode into the backing folder (then it is hot).
  int Rehydrate(uint64_t ino);
  void ColdAttr(const storepb::Manifest& m, ino_t shown_ino, struct stat* st);
  void ColdDirAttr(const std::string& rel, ino_t shown_ino, struct stat* st);
  bool IsHidden(uint64_t parent, const char* name);
  int StoreError(const Status& st, const char* tag);
  int UnlinkCold(const std::string& rel);
  void FixOwner(int dir_fd, const char* name, const Caller& c);

  FsConfig config_;
  store::ColdStore* store_;
  InodeTable inodes_;
  ChunkCache cache_;
  Counters counters_;
  std::shared_mutex ns_mu_;
  std::mutex rehydrate_mu_;  // one rehydration at a time (they are rare)
};

// "/proc/self/fd/N": how O_PATH fds are turned back into paths.
std::string ProcPath(int fd);

}  // namespace tbfs::fs
