// The narrow interface between the cold store and its storage engine.
//
// Keys and values are bytes in one of a few key spaces (Space). Writes go in
// atomic batches; a synced batch is durable when Commit returns. Reads see
// every committed batch. RocksDB is the embedded engine (rocks_backend.cc);
// anything that offers these operations (Ceph RADOS: chunks as objects,
// the other spaces in omap) can take its place.
//
// Implementations are thread-safe. Errors come back as tbfs::Status; the
// engine's own status types never leave the implementation.
#pragma once

#include <chrono>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "base/fs_util.h"
#include "base/status.h"
#include "base/thread_annotations.h"

namespace tbfs::store {

enum class Space : int {
  kNamespace = 0,  // parent + '\0' + name -> Entry
  kManifests,      // file id (8 bytes BE) -> Manifest
  kChunks,         // file id + chunk index (8 + 8 bytes BE) -> chunk value
  kJournal,        // batch id (8 bytes BE) -> JournalRecord
  kBaselines,      // name -> verifier baseline (JSON)
  kMeta,           // "info" -> StoreInfo
};
inline constexpr int kNumSpaces = 6;

// An atomic group of writes.
class WriteBatch {
 public:
  void Put(Space space, std::string_view key, std::string_view value) {
    ops_.push_back({space, std::string(key), std::string(value), false});
    bytes_ += key.size() + value.size();
  }
  void Delete(Space space, std::string_view key) {
    ops_.push_back({space, std::string(key), std::string(), true});
    bytes_ += key.size();
  }
  // other's operations, after these.
  void Append(const WriteBatch& other) {
    for (const Op& op : other.ops_) {
      if (op.is_delete) {
        Delete(op.space, op.key);
      } else {
        Put(op.space, op.key, op.value);
      }
    }
  }
  size_t bytes() const { return bytes_; }
  bool empty() const { return ops_.empty(); }
  void Clear() {
    ops_.clear();
    bytes_ = 0;
    new_folders.clear();
    totals_in_doubt = false;
  }

  // For the ColdStore that builds the batch, not the backend: the folders
  // it makes (path -> id; a second file in one of them finds it here, not
  // in the store), and whether its commit leaves the cold files' totals in
  // doubt (a top folder renamed moves bytes between top folders unseen).
  std::map<std::string, uint64_t> new_folders;
  bool totals_in_doubt = false;

  struct Op {
    Space space;
    std::string key;
    std::string value;
    bool is_delete;
  };
  const std::vector<Op>& ops() const { return ops_; }

 private:
  std::vector<Op> ops_;
  size_t bytes_ = 0;
};

class Backend {
 public:
  virtual ~Backend() = default;

  // Applies the batch atomically; with sync, durably (WAL synced) on return.
  // After a failed write (no space, an I/O error) the engine takes no more
  // writes until it has recovered (LocalEngine: reopened): Commit tries that
  // first, and fails with the first error (ENOSPC for no space) while it
  // cannot. Reads go on.
  virtual Status Commit(const WriteBatch& batch, bool sync) = 0;
  // NotFound when the key is absent.
  virtual Status Get(Space space, std::string_view key, std::string* value) = 0;
  // Calls fn on every key starting with prefix, in key order, until it
  // returns false.
  virtual Status Scan(
      Space space, std::string_view prefix,
      const std::function<bool(std::string_view key, std::string_view value)>& fn) = 0;
  // The largest key of the space; NotFound when it is empty.
  virtual Status LastKey(Space space, std::string* key) = 0;
  // Bytes the engine uses on disk (live and obsolete files).
  virtual uint64_t DiskBytes() = 0;
  // Bytes free for it on its filesystem, and that filesystem's size;
  // NotSupported when the engine cannot tell (its writes fail with ENOSPC).
  virtual Status FreeBytes(uint64_t* free, uint64_t* size) = 0;
  // Bytes written but not yet in the engine's files (its write-ahead log):
  // moving them there takes as much room again.
  virtual uint64_t UnflushedBytes() = 0;
  // Reclaims space of deleted data where the engine can (compaction).
  virtual Status Compact() = 0;
  // Moves what is only in the write-ahead log into the store's files, so
  // the log can go (after a migration, the log holds a copy of every chunk).
  virtual Status Flush() = 0;
  // Reads every table file whole and checks its checksums: what a writer's
  // open needs intact, beyond what the reads of the files touch (fsck).
  virtual Status VerifyTables() { return Status::OK(); }
  // Whether every table file the engine lists is there (stat, nothing
  // read): Corruption naming the first one missing. A reader's engine
  // opens without them; a writer's finds one gone only after it wrote.
  // (A blob file gone keeps no writer out: the files whose chunks it held
  // fail their reads, and fsck names them.)
  virtual Status CheckTablesPresent() { return Status::OK(); }
  // The blob files in the store's folder that the engine does not list
  // (paths): a crash's leftovers, a writer's files newer than this view, or
  // data a damaged MANIFEST no longer lists. None for other engines.
  virtual std::vector<std::string> UnlistedBlobFiles() { return {}; }
  // Damaged records of the engine's log that its open skipped (what they
  // held since the last flush is gone); "" when there were none.
  virtual std::string LogDamage() { return ""; }
  // Opens now what the engine would open at the first read of each of its
  // data files (a cold file's first byte after a start then does not wait
  // for it); reads only, changes nothing, and stops early once `stop` says
  // so. Nothing for engines that open everything up front.
  virtual void OpenReaders(const std::function<bool()>& stop) { (void)stop; }

  // What the engine holds in memory, by holder (tbfs status): zero where
  // an engine holds nothing of the kind.
  struct Memory {
    uint64_t memtables = 0;      // records not yet in table files
    uint64_t table_readers = 0;  // open table files, outside the block cache
    uint64_t block_cache = 0;    // the shared block cache, bounded by:
    uint64_t block_cache_capacity = 0;
  };
  virtual Memory MemoryUse() { return {}; }
};

struct BackendOptions {
  bool create_if_missing = false;  // default: a missing store is NotFound
  // Read-only opens do not check every table file up front: a damaged one
  // fails the reads that need it (Corruption), not the open.
  bool read_only = false;
  // Salvage only, on a scratch copy of a store that does not open: recover
  // to the newest state the engine's files still describe, leaving out
  // table files it cannot read. Writes to the folder.
  bool best_efforts = false;
  // A writer's reopen of an engine this process closed after a write it
  // failed (LocalEngine): the table and blob files its MANIFEST does not
  // list are that engine's cut-short flushes and merges, deleted as RocksDB
  // does, not set aside as a crash's leftovers (red team: lost+found grew
  // at each reopen, on a store short of room).
  bool after_failed_write = false;
};

// Opens (or creates) the RocksDB store in `dir`. Busy when another process
// holds it; NotFound when missing and !create_if_missing. A writer's (not
// read-only, not best efforts) is a LocalEngine.
Result<std::unique_ptr<Backend>> OpenRocksBackend(const std::string& dir,
                                                  const BackendOptions& options);

// Whether an engine's open error is damage to its write-ahead log (a
// record, a write batch), as opposed to its tables or MANIFEST: a writer's
// open then sets the log aside and opens at the last flush.
bool LooksLikeLogDamage(std::string_view error);

// The RocksDB store in `dir` as a writer holds it (OpenRocksBackend's, for
// a writer): writable while its filesystem has room.
//
// - A write the engine fails (its log could not take it: a full disk, an
//   I/O error) leaves RocksDB's log writer broken: another write into it
//   aborts the process (an assertion of RocksDB 7.8, whose own recovery
//   from a full disk keeps that writer). No write goes into that engine
//   again: the next Commit, Flush or Compact reopens the engine first, once
//   its filesystem has room for that (a reader in its place meanwhile, so
//   that reads go on), and fails with the write's error until then.
// - No write goes into the engine's log without room for it (RoomForLog):
//   ENOSPC before the log is touched.
// - OpenReader: opened read-only because its filesystem had no room for a
//   writer's open (the engine writes as it opens): reads go on, writes fail
//   with EROFS, until OpenWriter() opens it read-write and puts that in the
//   reader's place. Calls in flight finish first.
class LocalEngine final : public Backend {
 public:
  // `hold`: HoldStoreForWriting's, kept for the LocalEngine's life.
  static std::unique_ptr<LocalEngine> Writing(std::string dir, UniqueFd hold,
                                              std::unique_ptr<Backend> writer);
  static Result<std::unique_ptr<LocalEngine>> OpenReader(const std::string& dir);
  // ENOSPC (no room yet) or the engine's error; OK once writable.
  Status OpenWriter();
  bool writable() const;

  Status Commit(const WriteBatch& batch, bool sync) override;
  Status Get(Space space, std::string_view key, std::string* value) override;
  Status Scan(Space space, std::string_view prefix,
              const std::function<bool(std::string_view, std::string_view)>& fn) override;
  Status LastKey(Space space, std::string* key) override;
  uint64_t DiskBytes() override;
  Status FreeBytes(uint64_t* free, uint64_t* size) override;
  uint64_t UnflushedBytes() override;
  Status Compact() override;
  Status Flush() override;
  Status VerifyTables() override;
  std::string LogDamage() override;
  std::vector<std::string> UnlistedBlobFiles() override;
  Memory MemoryUse() override;
  void OpenReaders(const std::function<bool()>& stop) override;

 private:
  LocalEngine(std::string dir, UniqueFd hold, std::unique_ptr<Backend> engine, bool writable)
      : dir_(std::move(dir)),
        hold_(std::move(hold)),
        inner_(std::move(engine)),
        writable_(writable) {}
  Status ReadOnly() const;
  Status RoomForLog(uint64_t bytes);
  Status Failed() const;
  // Reopens the engine after a failed write; the write's error while it
  // cannot.
  Status Renew();
  // `failed`, after saying why the reopen did not happen (once a minute
  // for one reason).
  Status StaysFailed(const Status& failed, const std::string& why,
                     std::chrono::steady_clock::time_point now) TBFS_REQUIRES(renew_mu_);
  // Puts `next` in the engine's place (the one it replaces comes back in
  // it, to be closed outside the lock); false when calls in flight kept
  // the engine for 5 s (a caller inside a Scan's callback would wait on
  // itself).
  bool Replace(std::unique_ptr<Backend>* next, bool writable);
  // Opens the engine with `options` and puts it in the one's place (Replace).
  Status OpenInPlace(const BackendOptions& options, bool writable);

  const std::string dir_;
  // The store held for this writer while it has a reader, or no engine,
  // open (a reopen's window, a full disk): no other writer takes it then.
  const UniqueFd hold_;
  mutable SharedMutex mu_;  // shared by every call, exclusive for a switch
  std::unique_ptr<Backend> inner_ TBFS_GUARDED_BY(mu_);
  bool writable_ TBFS_GUARDED_BY(mu_) = false;
  Mutex renew_mu_;  // one renewal (or OpenWriter) at a time
  // A renewal that failed is not tried again before this (each try opens
  // the engine: red team, a disk out of inodes, not bytes, had every write
  // try it), nor its reason said again within a minute.
  std::chrono::steady_clock::time_point next_renewal_ TBFS_GUARDED_BY(renew_mu_);
  std::string said_ TBFS_GUARDED_BY(renew_mu_);
  std::chrono::steady_clock::time_point said_at_ TBFS_GUARDED_BY(renew_mu_);
  mutable Mutex failed_mu_;
  Status failed_ TBFS_GUARDED_BY(failed_mu_);  // a failed write's, until renewed
};

}  // namespace tbfs::store
