// Moving bytes between files and the cold store, streaming, a few chunks in
// memory at a time whatever the file size.
//
// IngestFile copies an open file into the store; VerifyStoredFile reads a
// stored file back and checks its hash (invariant I2 needs both before an
// unlink); MaterializeFile writes a cold file back out as an ordinary file
// (restore, export, rollback, recovery). Chunks are compressed and checked
// on the workers of a WorkPool. Thread-safe as far as the store is.
#pragma once

#include <sys/stat.h>

#include <atomic>
#include <functional>
#include <shared_mutex>
#include <string>

#include "base/status.h"
#include "base/thread_annotations.h"
#include "base/work_pool.h"
#include "store/cold_store.h"

namespace tbfs::store {

struct IngestOptions {
  uint32_t chunk_bytes = kDefaultChunkBytes;
  // Chunk 0's bytes when the file is longer (NewGeometry); 0: as the rest.
  // A gzip file stored by its content has none.
  uint32_t head_chunk_bytes = kHeadChunkBytes;
  int level = kDefaultZstdLevel;
  std::string file_class;
  // Compress with the dictionary of the file's family (store/dictionary.h),
  // training one on this file when the family has none and the file holds
  // kMinTrainingBytes of data or more.
  bool dictionaries = true;
  // A gzip file (its name ends in ".gz") that zlib makes again bit for bit
  // is stored by its content (store/gzip_pieces.h); others as they are.
  bool gzip_by_content = true;
  WorkPool* pool = nullptr;                   // required
  std::atomic<uint64_t>* progress = nullptr;  // bytes read, optional
  // Asked between groups of chunks; true abandons the copy (Aborted).
  std::function<bool()> should_stop;
  // Held shared while the manifest and namespace entries are committed
  // (the mount's namespace lock: renames never see half a file).
  SharedMutex* commit_lock = nullptr;
  // The logdir's folder: when given, the file is committed only if rel_path
  // beneath it still names the file (checked under commit_lock). A file
  // renamed, or whose folder was renamed, while it was copied is Aborted:
  // committed, its entry would show it at a path it has left.
  int root_fd = -1;
  // An older cold file at the same path is retired, not removed (a mount's
  // open handles may still read it). See ColdStore::AddFile.
  bool retire_replaced = false;
};

// The folders of `logdir` as FolderAttrs: each stat'ed through an fd opened
// beneath the logdir, never through a symlink.
FolderAttrs LogdirFolders(const std::string& logdir);

// Copies the file open as `fd`, whose identity was `st` when the copy
// began, into the store as file_id at rel_path. Chunks are written as they
// are compressed; the manifest and namespace entries go last, in a synced
// batch, so a manifest implies every chunk is durable. Holes are found with
// SEEK_DATA/SEEK_HOLE on fd: a chunk with no data is a hole, neither read
// nor stored (Manifest.hole_runs). Aborted when the file is not st.st_size
// bytes long (it changed under the copy) or should_stop said so.
Result<storepb::Manifest> IngestFile(ColdStore& store, const std::string& logdir,
                                     const std::string& rel_path, int fd, const struct stat& st,
                                     uint64_t file_id, const IngestOptions& options);

// Where a file's chunks come from: chunk `index` decoded and checked into
// *raw. Called from a WorkPool's workers (each with its own codec): must be
// thread-safe.
using ChunkSource = std::function<Status(uint64_t index, ChunkCodec* codec, std::string* raw)>;

// The file's own bytes, in m's chunks, from the chunks in the store
// (`stored`, those of ContentManifest(m)): `stored` itself, or for a gzip
// file stored by its content its pieces made again (store/gzip_pieces.h),
// `window` of them kept for callers that read a little out of order.
ChunkSource FileSource(const storepb::Manifest& m, const ChunkSource& stored, size_t window);

// Reads every chunk of m that has a value back (checksums checked) and
// compares their XXH3-128 with the manifest's. Corruption on any difference.
Status VerifyStoredFile(ColdStore& store, const storepb::Manifest& m, WorkPool* pool);
// The same with the chunks in the store (of ContentManifest(m)) from
// `stored`.
Status VerifyFrom(const storepb::Manifest& m, const ChunkSource& stored, WorkPool* pool);
// The read-back of what IngestFile just stored (I2): VerifyStoredFile,
// except that a gzip file stored by its content has its content read back
// and compared with the content's hash. Its own bytes are not made again:
// the copy found its recipe by deflating that very content (the same
// hash) in the calls a remaker makes, output byte for byte equal to the
// file's (store/gzip_recipe.h). fsck, restore and every reader still make
// them and check each piece.
Status VerifyCopiedFile(ColdStore& store, const storepb::Manifest& m, WorkPool* pool);

struct MaterializeOptions {
  // chown to the manifest's uid/gid (EPERM ignored when not root), and
  // put its extended attributes (ACLs too) back on the file
  bool keep_owner = true;
  bool replace = false;  // replace an existing file at the destination
  bool sync = true;      // fsync the file and its folder (export does not need it)
  // Folders missing on the way are made as the store's namespace remembers
  // them (mode, owner); otherwise 0755, owned by whoever runs tbfs.
  bool folders_as_stored = false;
  WorkPool* pool = nullptr;  // required
  std::atomic<uint64_t>* progress = nullptr;
  // Called with the finished temporary file (content, mode and times in
  // place, synced) just before it takes its name.
  std::function<void(int fd)> before_rename;
  // The destination folder, already open (O_PATH | O_DIRECTORY): the
  // `root` argument then only names it in messages. A caller writing many
  // files under a folder someone else could rename or swap for a symlink
  // (export, salvage) opens it once and passes it here; otherwise each call
  // opens `root` by its path.
  int root_fd = -1;
};

// Writes m's content to `rel` beneath the folder `root`, never following a
// symlink (a folder swapped for one fails the write with ELOOP or ENOTDIR;
// nothing is written elsewhere): into a temporary file beside it
// (TempNameFor), fsynced, with the manifest's mode and times, then renamed
// into place (refusing to replace an existing file unless asked) and the
// folder fsynced. The content hash is checked on the way; on any error the
// temporary file is removed and nothing is left at the destination.
Status MaterializeFile(ColdStore& store, const storepb::Manifest& m, const std::string& root,
                       const std::string& rel, const MaterializeOptions& options);

// MaterializeFile with the chunks in the store (of ContentManifest(m))
// from `stored`, and `made` called for every
// folder made on the way (MakeDirsBeneath); options.folders_as_stored is
// `made`'s business.
Status MaterializeFrom(const storepb::Manifest& m, const ChunkSource& stored,
                       const std::function<void(const std::string& rel, int fd)>& made,
                       const std::string& root, const std::string& rel,
                       const MaterializeOptions& options);

// The `made` of MaterializeFile: with options.folders_as_stored, each
// folder made gets its mode and owner from the store's namespace.
std::function<void(const std::string& folder, int fd)> FoldersAsStored(
    ColdStore& store, const std::string& root, const MaterializeOptions& options);

// Whether the file open as fd holds m's content: m's size, m's hash over
// the chunks that have values, and holes (no data) where m has them.
bool SameContent(int fd, const std::string& path, const storepb::Manifest& m);

// The temporary name MaterializeFile uses for a destination named `name`.
std::string TempNameFor(std::string_view name, uint64_t file_id);

}  // namespace tbfs::store
