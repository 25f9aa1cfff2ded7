// The cold store of one logdir: manifests, the cold namespace, chunks and
// the journal, over a Backend (RocksDB by default).
//
// Open() checks the store's format version and refuses one it does not
// know. A store has one writer at a time: the engine's lock makes a second
// read-write Open fail with Busy. All methods are thread-safe; reads see
// every committed WriteBatch.
//
// A store is a folder (RocksDB, one host) or a rados:// address (Ceph
// RADOS, shared by the mounts of many hosts; store/rados_backend.h). On a
// shared store the writer is whoever holds its lease: Open as a writer
// takes it (Busy, naming the holder, when another has it); a reader may
// take it later (TakeWriterRole, the mounts' election). Without the lease
// every commit fails with EROFS and writes nothing.
//
// Paths are relative to the logdir, '/'-separated, and always pass
// IsSafeRelativePath (a record that does not is Corruption).
#pragma once

#include <sys/stat.h>

#include <atomic>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <set>
#include <string>
#include <unordered_map>
#include <vector>

#include "base/fs_util.h"
#include "base/status.h"
#include "base/thread_annotations.h"
#include "store/backend.h"
#include "store/chunk.h"
#include "store/gzip_pieces.h"
#include "store/journal_index.h"
#include "store/manifest.h"
#include "store/proto/store.pb.h"
#include "store/rados_backend.h"

namespace tbfs::store {

// Defaults for new files; chosen by `tbfs-bench migrate` (see README).
inline constexpr uint32_t kDefaultChunkBytes = 1 << 20;
inline constexpr int kDefaultZstdLevel = 9;
// Chunk 0 of a new file larger than this holds only this much (format 7,
// store/manifest.h; why: docs/format.md, "head chunk").
inline constexpr uint32_t kHeadChunkBytes = 128 << 10;

struct OpenOptions {
  bool create_if_missing = false;
  bool read_only = false;
  // Writers: the logdir whose lock the store holds while it is open (see
  // store/store_dir.h; one tbfs writer per logdir, whatever its store), and
  // how the lock names this process to whoever is refused. Writers also
  // make the store's folder private. Default: no lock (tests, tools).
  std::string logdir;
  std::string holder;
  // How long a writer waits for the lock a process going away still holds
  // (a mount just unmounted takes a moment, its metrics server up to 2 s).
  int lock_wait_ms = 0;
  // Shared stores: a writer's Open whose lease another holds opens the
  // store as a reader instead of failing (refusal() says who writes it).
  bool reader_if_busy = false;
  // Local stores (the mount): a writer's open that fails for want of room
  // (the engine writes as it opens) opens the store read-only instead,
  // still holding the logdir's lock: writer() is false and refusal() says
  // why, until TakeWriterRole finds room and reopens it read-write.
  bool read_only_when_full = false;
  uint32_t chunk_bytes = kDefaultChunkBytes;  // recorded at creation
  int level = kDefaultZstdLevel;              // recorded at creation
};

// How the caller sees a folder of the logdir (rel: its path in the logdir):
// fills *st and returns true, or false when there is none. The namespace's
// folder entries take mode, owner and mtime from it; the store never looks
// at the logdir itself (LogdirFolders in store/file_io.h does, beneath it).
using FolderAttrs = std::function<bool(const std::string& rel, struct stat* st)>;

struct ChildEntry {
  std::string name;
  storepb::Entry entry;
};

class ColdStore {
 public:
  // NotFound when there is no store and !create_if_missing; NotSupported
  // for an unknown format version; Busy when another process holds it, or
  // holds options.logdir. `dir` is a folder or a rados:// address.
  static Result<std::unique_ptr<ColdStore>> Open(const std::string& dir,
                                                 const OpenOptions& options);
  ~ColdStore();

  // The folder, or the rados:// address as given.
  const std::string& dir() const { return dir_; }
  // A RADOS store: no folder of its own, and shared with other hosts.
  bool shared() const { return fence_ != nullptr; }
  // Whether this process may write: a local store opened for writing, or
  // the live lease of a shared one.
  bool writer() const;
  // Shared stores: takes the writer's lease (and options.logdir's lock,
  // which keeps a local-store writer of the same logdir off it), then reads
  // where the last writer left the file and batch ids. Busy, naming the
  // holder, while another has it. A local store opened read-only for want
  // of room (OpenOptions::read_only_when_full): reopens it read-write once
  // its filesystem has room, ENOSPC until then. NotSupported for any other
  // local store. The caller runs recovery (store::Recover) next, before
  // any other write.
  Status TakeWriterRole(const OpenOptions& options);
  // Gives the lease back (a writer that lost it, or one shutting down).
  void DropWriterRole();
  // Why a shared store's last TakeWriterRole was refused (names the
  // holder); "" for a writer or a local store.
  std::string refusal() const;
  const storepb::StoreInfo& info() const { return info_; }

  // --- reading the namespace and manifests
  Result<storepb::Manifest> GetManifest(uint64_t file_id);
  // The entry at rel_path (a file or a folder); NotFound when none.
  Result<storepb::Entry> GetEntry(std::string_view rel_path);
  // The manifest of the cold file at rel_path; NotFound when none.
  Result<storepb::Manifest> Lookup(std::string_view rel_path);
  // Direct children of a folder ("" for the top), in name order.
  Status ListChildren(std::string_view folder, std::vector<ChildEntry>* out);
  // Every manifest, in file id order, until fn returns false.
  Status ForEachManifest(const std::function<bool(const storepb::Manifest&)>& fn);
  // The same from the manifests' second copies, kept with the chunks (for
  // fsck when the manifests space is damaged). Copies that do not verify
  // are skipped. Reads every chunk value: slow.
  Status ForEachManifestCopy(const std::function<bool(const storepb::Manifest&)>& fn);
  // Every chunk key (file id, index; manifest copies left out), in order.
  Status ForEachChunkKey(const std::function<bool(uint64_t file_id, uint64_t index)>& fn);
  // Every namespace entry with its path, a folder before what it holds;
  // entries that do not parse are Corruption.
  Status ForEachEntry(
      const std::function<bool(const std::string& path, const storepb::Entry&)>& fn);
  bool IsRetired(uint64_t file_id);  // whether a retired file's mark is still there

  // --- writing (through batches the caller commits)
  uint64_t NewFileId() { return next_file_id_.fetch_add(1); }
  uint64_t next_file_id() const { return next_file_id_.load(); }  // what NewFileId gives next
  uint64_t NewBatchId() { return next_batch_id_.fetch_add(1); }
  // Adds the manifest, its namespace entry, and folder entries for every
  // ancestor not in the namespace yet (mode, owner, mtime from `folders`;
  // 0755 root for a folder it does not know). One version per
  // path: a cold file already at m.path() (an older version, shadowed by
  // the hot file being added) or at an ancestor's path leaves the store in
  // the same batch (retired with `retire_replaced`, removed otherwise).
  // Aborted when a cold folder has m.path(). Then commits `batch`, synced,
  // under journal_mu_: two adders at once never make one folder twice.
  // *m gets its folder's id (Manifest.parent_dir), as the store keeps it.
  Status AddFile(WriteBatch* batch, storepb::Manifest* m, const FolderAttrs& folders,
                 bool retire_replaced = false);
  // Writes a cold file's changed manifest (attributes; a recompress's
  // level, codec), both copies. `m` as the store gave it (GetManifest,
  // Lookup, AddFile): its folder's id is where the store keeps the file.
  void UpdateManifest(WriteBatch* batch, const storepb::Manifest& m);
  // Puts the store's format record, at `version` or at the highest any
  // batch of this process has put, whichever is higher: a version is
  // never put lower than one a batch may already have committed.
  void PutFormat(WriteBatch* batch, uint32_t version);
  // Removes a file's chunks, manifest and namespace entry. Folders stay.
  // The entry at m.path() goes only when it names this file: a manifest
  // read before a rename, or a journal's stub, may name a path that another
  // file holds now, and that file keeps it. Reads the entry (hence the
  // Status); the caller keeps the namespace still until the commit (the
  // mount's namespace lock).
  Status RemoveFile(WriteBatch* batch, const storepb::Manifest& m);
  // Removes a file's manifest and namespace entry (as RemoveFile) and marks
  // it retired: its chunks stay for the open handles that still read it,
  // until DropRetired. A mount removes files this way; recovery drops every
  // retired file's chunks (no reader outlives a restart).
  Status Retire(WriteBatch* batch, const storepb::Manifest& m);
  // RemoveFile, or Retire when `retire`.
  Status Drop(WriteBatch* batch, const storepb::Manifest& m, bool retire) {
    return retire ? Retire(batch, m) : RemoveFile(batch, m);
  }
  // Deletes the chunks of `runs` of a file and its manifest copy, one key
  // at a time (the store never holds a range deletion: docs/format.md).
  void RemoveChunks(WriteBatch* batch, uint64_t file_id, const std::vector<ChunkRun>& runs);
  // The runs of chunks of m that have values in the store: its manifest's
  // (the content's for gzip files; holes have none), or for a manifest of
  // no chunks (a stub of a copy given up or cut short) ScanRuns.
  std::vector<ChunkRun> StoredRuns(const storepb::Manifest& m);
  // The runs of chunk keys the store holds for a file, from a scan (which
  // reads their values too; a damaged one ends it, with a warning: what it
  // did not reach stays, as garbage).
  std::vector<ChunkRun> ScanRuns(uint64_t file_id);
  // The runs a retired mark holds, when it is well formed and each run's
  // first and last chunk are in the store; false otherwise (empty: a mark
  // of before the runs were kept).
  bool RunsOfMark(uint64_t file_id, std::string_view mark, std::vector<ChunkRun>* runs);
  // Deletes a retired file's chunks and its mark (reads the mark: the runs
  // of chunks with values). A mark already gone adds nothing.
  Status DropRetired(WriteBatch* batch, uint64_t file_id);
  // The retired file ids, in order.
  Status ListRetired(std::vector<uint64_t>* ids);
  // Drops the chunks of every retired file (synced).
  Status DropAllRetired();
  // Removes one namespace entry (an empty folder, or a file's entry);
  // nothing when there is none. Reads the entry.
  Status RemoveEntry(WriteBatch* batch, std::string_view rel_path);
  // Removes the entry at m.path() if it is m's file (see RemoveFile).
  Status RemoveEntryOf(WriteBatch* batch, const storepb::Manifest& m);
  // Moves the entry at `from` (a file or a folder with everything below it)
  // to `to`: the entry, and a folder's link or a file's manifest (a file
  // moved itself gets a new ctime), whatever the folder holds (format 4).
  // Ancestors of `to` get folder entries (attributes from `folders`) where
  // missing. InvalidArgument for a folder into itself.
  Status Rename(WriteBatch* batch, const std::string& from, const std::string& to,
                const FolderAttrs& folders);
  // True when the folder has at least one cold entry below it.
  Result<bool> HasChildren(std::string_view folder);
  // Commits a batch (synced to the engine's log when `sync`) and keeps the
  // totals (Totals()) in step with the manifests it writes and deletes.
  Status Commit(const WriteBatch& batch, bool sync);
  // Commits made through this object so far (Commit: every change of the
  // namespace, manifests and chunks). Read before a read of the store, an
  // unchanged count after it means no record it read has changed since,
  // unless another process writes the store too (shared()).
  uint64_t commits() const { return commits_.load(std::memory_order_acquire); }
  // OK when the store's filesystem has room for `bytes` more, twice (the
  // log, then the engine's files), plus what the log holds unflushed, plus a
  // margin (5% of its size, at least 2 MiB, at most 64 MiB) that keeps the
  // engine's own writes (flushes, opening it again) clear of a full disk.
  // IOError with ENOSPC otherwise; nothing is written either way.
  Status CheckRoom(uint64_t bytes);

  // --- content
  // Chunk `index` of the file, decoded and checked (I5). Corruption names the
  // file and the chunk. For a gzip file stored by its content, the piece
  // `index` of its bytes, made again (store/gzip_pieces.h); the content's
  // chunks are ReadChunk(ContentManifest(m), ...).
  Status ReadChunk(const storepb::Manifest& m, uint64_t index, ChunkCodec* codec, std::string* raw);
  // Pieces of gzip files stored by their content made so far (the cost of
  // their reads; tests and metrics).
  uint64_t gzip_pieces_made() const { return gzip_pieces_made_.load(); }
  // The bytes of pieces each remaker made from now on keeps behind it
  // (kGzipWindowBytes; tests make it smaller).
  void SetGzipWindowBytes(size_t bytes) { gzip_window_bytes_ = bytes; }
  // Same, into out, which holds ChunkLength(m, index) bytes.
  Status ReadChunkInto(const storepb::Manifest& m, uint64_t index, ChunkCodec* codec, char* out);
  // Up to `length` bytes at `offset`; *got is short only at end of file.
  // Decompresses only the chunks the range touches.
  Status ReadRange(const storepb::Manifest& m, uint64_t offset, size_t length, char* out,
                   size_t* got, ChunkCodec* codec);

  // --- dictionaries (store/store_dictionaries.cc; format 5)
  // The dictionary with zstd id `id`, or null when the store holds none
  // (never had it, or its records are damaged: CheckDictionaries). Loaded at
  // open; a shared store's reader looks again for one added since.
  std::shared_ptr<const Dictionary> FindDictionary(uint32_t id);
  // The newest dictionary of `family` (store/dictionary.h), or null.
  std::shared_ptr<const Dictionary> DictionaryOf(std::string_view family) {
    return dicts_.NewestOf(family);
  }
  // The dictionary a file of `file_class` at `rel_path` is compressed
  // with: its family's newest, or one trained on the file's chunks with
  // data (`data`, `data_bytes` of them, read with `read`: ChunkReader) when
  // the family has none, or its is due to be trained again (RetrainPolicy)
  // and the new one does better. Null for none (no family, too little
  // data, or the samples taught nothing worth keeping). A training runs on
  // `threads` threads. Errors: `read`'s, and the store's own.
  using ChunkReader = std::function<Status(uint64_t index, std::string* raw)>;
  Result<std::shared_ptr<const Dictionary>> DictionaryForFile(std::string_view rel_path,
                                                              std::string_view file_class,
                                                              const std::vector<ChunkRun>& data,
                                                              uint64_t data_bytes, int level,
                                                              int threads, const ChunkReader& read);
  // Trains a dictionary for `family` on `samples` for zstd `level` and keeps
  // it (synced; the store becomes format 5); the family's newest instead
  // when it is not `replacing` (another came meanwhile). InvalidArgument
  // when the samples teach none, or none that does better on the held-out
  // samples than `replacing` (or than none, when null).
  Result<std::shared_ptr<const Dictionary>> AddDictionary(
      std::string_view family, int level, const TrainingSamples& samples,
      const std::shared_ptr<const Dictionary>& replacing = nullptr);
  // When families are trained again (tests make it sooner).
  void SetRetrainPolicy(RetrainPolicy p) {
    MutexLock lock(dict_mu_);
    retrain_ = p;
  }
  std::vector<std::shared_ptr<const Dictionary>> Dictionaries() const { return dicts_.All(); }
  DictionaryTrainings Trainings() TBFS_EXCLUDES(dict_mu_);
  // Whether no dictionary is to be trained for `family` while the store is
  // open: kTrainingAttempts files of it taught none (one odd file, say of
  // random bytes, does not decide for the family), or the store's
  // dictionary records do not all read.
  bool Untrainable(std::string_view family);
  // Counts `data_bytes` more of the family; true (and the count starts
  // again) when `current` is due to be trained again and `can_train`.
  bool RetrainDue(std::string_view family, const Dictionary& current, uint64_t data_bytes,
                  bool can_train);
  // A line for each dictionary that could not be loaded from either copy
  // of its record at open, and for each copy found damaged now (fsck).
  std::vector<std::string> CheckDictionaries();

  // --- the engine
  // Moves what only the engine's log holds into its files.
  Status Flush() { return backend_->Flush(); }
  // Backend's VerifyTables, LogDamage, UnlistedBlobFiles, OpenReaders:
  Status VerifyTables() { return backend_->VerifyTables(); }
  std::string LogDamage() { return backend_->LogDamage(); }
  std::vector<std::string> UnlistedBlobFiles() { return backend_->UnlistedBlobFiles(); }
  void OpenReaders(const std::function<bool()>& stop) { backend_->OpenReaders(stop); }
  // Returns the space of deleted data (compaction, blob garbage collection).
  // (Tests: the failpoint store.compact fails it as a full disk would.)
  Status Compact();
  uint64_t DiskBytes() { return backend_->DiskBytes(); }  // of the store's files
  // What the engine holds in memory, by holder.
  Backend::Memory EngineMemory() { return backend_->MemoryUse(); }

  // --- journal (invariant I4)
  Status PutJournal(const storepb::JournalRecord& record);  // synced
  Status DeleteJournal(uint64_t batch_id);                  // synced
  Status ListJournal(std::vector<storepb::JournalRecord>* out);
  // The files of unfinished batches, and their marks (store/journal_index.h).
  JournalIndex& journal_index() { return journal_index_; }
  Status ListBatchMarks(std::map<uint64_t, Mark>* marks);  // by file id
  // A batch's final commit (deleting its record) that the engine refused:
  // kept, and written with the next commit that succeeds, in the same
  // atomic write (every write of this object: Commit, PutJournal,
  // DeleteJournal). Nothing then lands in the store on top of a batch that
  // a restart's recovery would undo (a cold file of it deleted meanwhile
  // would be called lost). Kept in memory only: a restart undoes the batch.
  // Returns deferred_landed() as it was then.
  uint64_t Defer(const WriteBatch& batch);
  // Writes what was deferred, alone; OK when nothing is.
  Status CommitDeferred();
  // Deferred writes that have landed so far (grows by one each time).
  uint64_t deferred_landed() const { return deferred_landed_.load(); }

  // --- losses (store/lost.cc): files recovery found neither in the logdir
  // nor in the store. Recorded, never turned into a success; reported by
  // fsck, status and the metrics until ClearLost (or found again).
  struct LostFile {
    uint64_t file_id = 0;
    std::string path;  // relative to the logdir
    uint64_t batch_id = 0, found_ns = 0;
    std::string why;
  };
  Status RecordLost(const LostFile& f) { return RecordLost(std::vector<LostFile>{f}); }
  // Synced, with the next file id raised to at least `next_file_id`.
  Status RecordLost(const std::vector<LostFile>& files, uint64_t next_file_id = 0);
  Status ListLost(std::vector<LostFile>* out);
  Status ClearLost(uint64_t* cleared);  // synced; *cleared: how many went
  // Set-aside blob files a recovery has read (store/set_aside.h), by name.
  Status ListSetAsideRead(std::set<std::string>* names);
  static void MarkSetAsideRead(WriteBatch* batch, std::string_view name);

  // --- accounting (store/totals.cc)
  struct Totals {
    uint64_t files = 0;
    uint64_t logical_bytes = 0;
    uint64_t stored_bytes = 0;
    // Logical bytes by the first component of their path ("." for a file
    // at the top): what growth samples call a run.
    std::map<std::string, uint64_t> top_folder_bytes;
  };
  // The cold files' totals: counted by one scan of the manifests the first
  // time, then kept by every Commit, which reads the manifests a batch
  // replaces or deletes before it commits. Scanned afresh when the last
  // count is in doubt (a commit that failed, a manifest that does not
  // parse), and always for a shared store, whose other writers' commits
  // this object does not see. Errors as ForEachManifest.
  Result<Totals> GetTotals();
  Result<Totals> ComputeTotals();  // always a scan of every manifest (fsck)

 private:
  friend struct StoreInternals;  // tests: damage records through the engine
  Backend& backend() { return *backend_; }
  ColdStore(std::string dir, std::unique_ptr<Backend> backend)
      : dir_(std::move(dir)), backend_(std::move(backend)) {}
  static Result<std::unique_ptr<ColdStore>> OpenShared(const std::string& url,
                                                       const OpenOptions& options);
  Status Init(const OpenOptions& options, bool existed);
  Status OpenWriterWhenRoom();  // TakeWriterRole of a local store
  // Next file and batch ids after what the store holds (and kMetaNextFileIdKey).
  Status LoadIds();
  Status UpgradeFromV1();
  // Format 2 or 3 to 4 (store/namespace.cc): folder ids, every entry under
  // its parent's id, every manifest naming its folder; the version last.
  // `info` is the store's format record as it stands; info_ is not
  // changed (Init does, alone).
  Status ConvertToTree(const storepb::StoreInfo& info);
  // A writer: converts the store when it is older than format 4, and drops
  // old keys a conversion left.
  Status ConvertIfOlder();
  // The namespace keys of formats 2 and 3 left after a conversion.
  Status DropPathKeys();
  // --- the tree (format 4; store/namespace.cc)
  // The id of the cold folder at `folder` ("" is the top), or NotFound.
  Result<uint64_t> ResolveDir(std::string_view folder);
  Result<uint64_t> WalkToDir(std::string_view folder);  // ResolveDir, uncached
  // A shared store read by path keys that its writer has converted since
  // this process opened it: true, and read as the tree from now on. (A
  // local store has one writer, which converts it as it opens.)
  bool TreeSinceOpen();
  // The path of folder `dir`, from its links; Corruption when one is
  // missing or they loop. `memo` (may be null) keeps paths across calls;
  // without one, a local store's cache does.
  Result<std::string> DirPath(uint64_t dir, std::map<uint64_t, std::string>* memo);
  Result<std::string> WalkUpFrom(uint64_t dir, std::map<uint64_t, std::string>* memo);
  // The folder cache as of `commits` (emptied first when it is older).
  void SyncDirCache(uint64_t commits) TBFS_REQUIRES(dir_cache_mu_);
  // Sets m's path from its folder's (format 4; nothing before).
  Status DerivePath(storepb::Manifest* m, std::map<uint64_t, std::string>* memo);
  // fn(name, entry bytes) for each child of a folder, in name order.
  Status ScanChildren(std::string_view folder,
                      const std::function<bool(std::string_view, std::string_view)>& fn);
  // Drops (Drop) the file an entry about to be overwritten names, if any.
  Status DropReplaced(WriteBatch* batch, uint64_t file_id, bool retire);
  // The folder's link and its copy with the chunks.
  void PutDirLink(WriteBatch* batch, uint64_t dir, uint64_t parent, std::string_view name);
  // The id of `folder`, with entries made for it and any missing ancestor (a
  // cold file in the way leaves the store, retired with `retire_replaced`).
  Status MakeFolders(WriteBatch* batch, const std::string& folder, const FolderAttrs& folders,
                     int64_t mtime_ns, bool retire_replaced, uint64_t* dir);
  // The remaker that makes piece `index` of a gzip file stored by its content the cheapest, kept
  // across reads: several per file, so that readers of different parts of one file (threads,
  // readahead, mmap) each keep their place instead of starting one another again from the top.
  std::shared_ptr<GzipPieces> PiecesOf(const storepb::Manifest& m, uint64_t index);
  // The manifest and its copy in the chunks space (store/format.h).
  void PutManifest(WriteBatch* batch, const storepb::Manifest& m);
  // Reads every dictionary record (either copy), replacing what is held.
  Status LoadDictionaries() TBFS_REQUIRES(dict_mu_);
  // One copy of a dictionary: its record (kMeta) or its copy (kChunks).
  Result<std::shared_ptr<const Dictionary>> ReadDictionary(uint64_t key_id, Space space);

  // The engine's commit of `batch`, with what was deferred (Defer) before it.
  Status Write(const WriteBatch& batch, bool sync);

  // Locks: journal_mu_ and role_mu_ are never held together. journal_mu_ is held across
  // the commits of next-file-id records (PutJournal, AddFile, RecordLost): increasing.
  Mutex journal_mu_;
  JournalIndex journal_index_;
  // Taken last (inside journal_mu_ and totals_mu_), held across a commit
  // that carries deferred writes; has_deferred_ spares the others the lock.
  Mutex deferred_mu_;
  WriteBatch deferred_ TBFS_GUARDED_BY(deferred_mu_);
  std::atomic<bool> has_deferred_{false};
  std::atomic<uint64_t> deferred_landed_{0};
  mutable Mutex role_mu_;  // the writer's role of a shared store
  // Held while open (OpenOptions::logdir) or, shared, while the writer.
  UniqueFd logdir_lock_ TBFS_GUARDED_BY(role_mu_);
  std::atomic<bool> read_only_{false};  // local stores: opened read-only
  // Local stores opened read-only for want of room: the backend, which
  // becomes writable in place (owned by backend_).
  LocalEngine* until_room_ = nullptr;
  std::shared_ptr<RadosFence> fence_;  // shared stores: the writer's lease, when held
  RadosLocation rados_;
  std::string refusal_ TBFS_GUARDED_BY(role_mu_);
  std::string dir_;
  std::unique_ptr<Backend> backend_;
  storepb::StoreInfo info_;
  std::atomic<uint64_t> next_file_id_{1};
  // Format 4: the namespace is the tree (set once, at open or conversion).
  std::atomic<bool> tree_{false};
  // Format 4, local stores: folder ids by path (ResolveDir) and paths by
  // id (DirPath), so that the lookups beneath a folder, and the paths of
  // its cold files, read its ancestors once. Both are emptied when a
  // commit has been made since they were filled (commits_), or when full;
  // a leaf.
  Mutex dir_cache_mu_;
  std::unordered_map<std::string, uint64_t> dir_ids_ TBFS_GUARDED_BY(dir_cache_mu_);
  std::unordered_map<uint64_t, std::string> dir_paths_ TBFS_GUARDED_BY(dir_cache_mu_);
  uint64_t dir_cache_commits_ TBFS_GUARDED_BY(dir_cache_mu_) = 0;
  std::atomic<uint64_t> commits_{0};
  // Held across the commit of a batch that writes manifests, and the reads
  // of what it replaces just before (no two such commits interleave); a
  // leaf.
  Mutex totals_mu_;
  std::optional<Totals> totals_ TBFS_GUARDED_BY(totals_mu_);  // none: not counted, or in doubt
  uint64_t manifest_commits_ TBFS_GUARDED_BY(totals_mu_) = 0;
  std::atomic<uint64_t> next_batch_id_{1};
  // Format 5. dict_mu_ is held across AddDictionary's training and commit
  // and across LoadDictionaries; a leaf but for the commit's locks.
  DictionarySet dicts_;
  DictionaryFinder find_dict_ = [this](uint32_t id) { return FindDictionary(id); };
  Mutex dict_mu_;
  std::vector<std::string> dict_damage_ TBFS_GUARDED_BY(dict_mu_);
  std::map<std::string, int, std::less<>> untrainable_ TBFS_GUARDED_BY(dict_mu_);  // failures
  bool records_unreadable_ TBFS_GUARDED_BY(dict_mu_) = false;
  RetrainPolicy retrain_ TBFS_GUARDED_BY(dict_mu_);
  std::map<std::string, FamilyGrowth, std::less<>> growth_ TBFS_GUARDED_BY(dict_mu_);
  DictionaryTrainings trainings_ TBFS_GUARDED_BY(dict_mu_);
  std::atomic<bool> dict_format_{false};  // format 5 is recorded
  std::atomic<uint32_t> format_put_{0};   // the highest PutFormat has put
  // Remakers of gzip files, most recently used first; a leaf (never held
  // while a remaker's own lock is taken).
  Mutex pieces_mu_;
  std::vector<std::shared_ptr<GzipPieces>> pieces_ TBFS_GUARDED_BY(pieces_mu_);
  std::atomic<uint64_t> gzip_pieces_made_{0};
  std::atomic<size_t> gzip_window_bytes_{kGzipWindowBytes};
};

}  // namespace tbfs::store
