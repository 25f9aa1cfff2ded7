// The RocksDB engine behind store/backend.h: one column family per Space.
// Chunk values (already zstd) live in integrated BlobDB blob files with
// RocksDB's own compression off; the small records use RocksDB's defaults.
#include <rocksdb/db.h>
#include <rocksdb/env.h>
#include <rocksdb/options.h>
#include <rocksdb/table_properties.h>
#include <sys/stat.h>
#include <sys/statvfs.h>

#include <algorithm>
#include <mutex>
#include <optional>
#include <set>

#include "base/time_util.h"
#include "fmt/format.h"
#include "spdlog/spdlog.h"
#include "store/backend.h"
#include "store/rocks_compact.h"
#include "store/rocks_env.h"
#include "store/store_dir.h"

#if defined(__SANITIZE_THREAD__)
// ThreadSanitizer's runtime exports these (its dynamic annotations).
extern "C" void AnnotateIgnoreReadsBegin(const char* file, int line);
extern "C" void AnnotateIgnoreReadsEnd(const char* file, int line);
extern "C" void AnnotateIgnoreWritesBegin(const char* file, int line);
extern "C" void AnnotateIgnoreWritesEnd(const char* file, int line);
#endif

namespace tbfs::store {

namespace {

// Inside DB::Write, RocksDB's group commit has one thread (the leader)
// copy the batches of the threads waiting behind it into one; they hand
// their batches over through RocksDB's own atomics, in an uninstrumented
// library, so ThreadSanitizer reports the leader's copy (a memcpy it does
// see) as racing the batch's owner, which built it just before. Under TSan,
// the memory accesses made inside DB::Write are not checked; everything
// this file does before and after is.
class EngineAccessesUnchecked {
 public:
#if defined(__SANITIZE_THREAD__)
  EngineAccessesUnchecked() {
    AnnotateIgnoreReadsBegin(__FILE__, __LINE__);
    AnnotateIgnoreWritesBegin(__FILE__, __LINE__);
  }
  ~EngineAccessesUnchecked() {
    AnnotateIgnoreWritesEnd(__FILE__, __LINE__);
    AnnotateIgnoreReadsEnd(__FILE__, __LINE__);
  }
#else
  EngineAccessesUnchecked() = default;
#endif
  EngineAccessesUnchecked(const EngineAccessesUnchecked&) = delete;
  EngineAccessesUnchecked& operator=(const EngineAccessesUnchecked&) = delete;
};

rocksdb::Slice ToSlice(std::string_view v) { return rocksdb::Slice(v.data(), v.size()); }

class RocksBackend final : public Backend {
 public:
  RocksBackend(std::string dir, EngineFolder folder, std::unique_ptr<rocksdb::DB> db,
               std::vector<rocksdb::ColumnFamilyHandle*> handles)
      : dir_(std::move(dir)),
        folder_(std::move(folder)),
        db_(std::move(db)),
        handles_(std::move(handles)) {}

  ~RocksBackend() override {
    for (auto* h : handles_) (void)db_->DestroyColumnFamilyHandle(h);
    (void)db_->Close();
  }

  // The engine's write: LocalEngine's checks come first (room in the
  // engine's log; never a write after one that failed).
  Status Commit(const WriteBatch& batch, bool sync) override {
    rocksdb::WriteBatch wb(batch.bytes() + 24 * batch.ops().size() + 64);  // one allocation
    for (const auto& op : batch.ops()) {
      if (op.is_delete) {
        wb.Delete(cf(op.space), ToSlice(op.key));
      } else {
        wb.Put(cf(op.space), ToSlice(op.key), ToSlice(op.value));
      }
    }
    rocksdb::WriteOptions wo;
    wo.sync = sync;
    rocksdb::Status written;
    {
      [[maybe_unused]] EngineAccessesUnchecked unchecked;
      written = db_->Write(wo, &wb);
    }
    return FromRocks(written, "write to store " + dir_);
  }

  uint64_t UnflushedBytes() override {
    uint64_t total = 0;
    for (auto* h : handles_) {
      uint64_t v = 0;
      if (db_->GetIntProperty(h, "rocksdb.cur-size-all-mem-tables", &v)) total += v;
    }
    return total;
  }

  Memory MemoryUse() override {
    Memory m;
    for (auto* h : handles_) {
      uint64_t v = 0;
      if (db_->GetIntProperty(h, rocksdb::DB::Properties::kCurSizeAllMemTables, &v)) {
        m.memtables += v;
      }
      if (db_->GetIntProperty(h, rocksdb::DB::Properties::kEstimateTableReadersMem, &v)) {
        m.table_readers += v;
      }
    }
    // One cache for every space (SpaceOptions): asked of one.
    if (!handles_.empty()) {
      db_->GetIntProperty(handles_[0], rocksdb::DB::Properties::kBlockCacheUsage, &m.block_cache);
      db_->GetIntProperty(handles_[0], rocksdb::DB::Properties::kBlockCacheCapacity,
                          &m.block_cache_capacity);
    }
    return m;
  }

  Status FreeBytes(uint64_t* free, uint64_t* size) override {
    struct statvfs vfs;  // on the folder held (an O_PATH fd: fstatfs works on it)
    if (::fstatvfs(folder_.fd.get(), &vfs) != 0) return Status::FromErrno(errno, "statvfs", dir_);
    *free = static_cast<uint64_t>(vfs.f_bavail) * vfs.f_frsize;
    *size = static_cast<uint64_t>(vfs.f_blocks) * vfs.f_frsize;
    return Status::OK();
  }

  Status Get(Space space, std::string_view key, std::string* value) override {
    // The engine checks its block and blob checksums on every read: a
    // damaged block it parsed unchecked can abort the process (an assertion
    // of this RocksDB build), where a checked one is Corruption.
    rocksdb::ReadOptions ro;
    return FromRocks(db_->Get(ro, cf(space), ToSlice(key), value), "read from store " + dir_);
  }

  Status Scan(Space space, std::string_view prefix,
              const std::function<bool(std::string_view, std::string_view)>& fn) override {
    rocksdb::ReadOptions ro;  // checksums checked, as in Get
    std::unique_ptr<rocksdb::Iterator> it(db_->NewIterator(ro, cf(space)));
    for (it->Seek(ToSlice(prefix)); it->Valid(); it->Next()) {
      rocksdb::Slice k = it->key();
      if (!k.starts_with(ToSlice(prefix))) break;
      rocksdb::Slice v = it->value();
      if (!fn(std::string_view(k.data(), k.size()), std::string_view(v.data(), v.size()))) break;
    }
    return FromRocks(it->status(), "scan store " + dir_);
  }

  Status LastKey(Space space, std::string* key) override {
    std::unique_ptr<rocksdb::Iterator> it(db_->NewIterator(rocksdb::ReadOptions(), cf(space)));
    it->SeekToLast();
    if (!it->Valid()) {
      Status st = FromRocks(it->status(), "scan store " + dir_);
      return st.ok() ? Status::NotFound("empty") : st;
    }
    key->assign(it->key().data(), it->key().size());
    return Status::OK();
  }

  uint64_t DiskBytes() override {
    uint64_t total = 0;
    std::vector<std::string> files;
    if (!db_->GetEnv()->GetChildren(folder_.path, &files).ok()) return 0;
    for (const auto& f : files) {
      struct stat st;
      if (::stat((folder_.path + "/" + f).c_str(), &st) == 0 && S_ISREG(st.st_mode)) {
        total += static_cast<uint64_t>(st.st_blocks) * 512;
      }
    }
    return total;
  }

  Status Flush() override {
    rocksdb::FlushOptions options;
    options.wait = true;
    TBFS_RETURN_IF_ERROR(FromRocks(db_->Flush(options, handles_), "flush store " + dir_));
    std::lock_guard<std::mutex> lock(merge_mu_);  // one merge at a time
    MergeSmallTables(db_.get(), handles_, folder_.path, &unmergeable_);
    return Status::OK();
  }

  std::string LogDamage() override { return log_damage_; }
  void OpenReaders(const std::function<bool()>& stop) override {
    OpenBlobReaders(db_.get(), cf(Space::kChunks), stop);
  }
  void set_log_damage(std::string what) { log_damage_ = std::move(what); }

  Status VerifyTables() override {
    return FromRocks(db_->VerifyChecksum(), "verify the table files of store " + dir_);
  }

  std::vector<std::string> MissingBlobFiles() { return MissingEngineFiles(db_.get(), true); }
  std::vector<std::string> UnlistedBlobFiles() override {
    return UnlistedEngineBlobs(db_.get(), dir_);
  }

  Status CheckTablesPresent() override {
    const std::vector<std::string> gone = MissingEngineFiles(db_.get(), false);
    if (gone.empty()) return Status::OK();
    // A writer at work may have merged a table away since this engine's
    // look at the MANIFEST: the store is then in use, not damaged.
    if (auto held = HoldStoreForWriting(dir_, false); held.status().code() == Code::kBusy) {
      return held.status();
    }
    return Status::Corruption(
        fmt::format("store {}: the store is damaged: {}", dir_, ListedFileGone(gone[0])));
  }

  // Compacts each space whose table files hold a range deletion (a store
  // written before they were given up: docs/format.md, "No range
  // deletions") down to its last level, where RocksDB drops them. The
  // chunks space's tables hold keys only (the chunks are in blob files,
  // which stay): cheap. Returns how many spaces were compacted.
  Result<int> DropRangeDeletions() {
    int compacted = 0;
    for (int i = 0; i < kNumSpaces; ++i) {
      rocksdb::TablePropertiesCollection tables;
      TBFS_RETURN_IF_ERROR(FromRocks(db_->GetPropertiesOfAllTables(handles_[i], &tables),
                                     "read the table properties of store " + dir_));
      const bool any = std::any_of(tables.begin(), tables.end(),
                                   [](const auto& t) { return t.second->num_range_deletions > 0; });
      if (!any) continue;
      rocksdb::CompactRangeOptions options;
      options.bottommost_level_compaction = rocksdb::BottommostLevelCompaction::kForce;
      TBFS_RETURN_IF_ERROR(FromRocks(db_->CompactRange(options, handles_[i], nullptr, nullptr),
                                     "compact store " + dir_));
      compacted++;
    }
    return compacted;
  }

  Status Compact() override {
    uint64_t free = 0, size = 0;
    TBFS_RETURN_IF_ERROR(FreeBytes(&free, &size));
    Status st;
    {
      std::lock_guard<std::mutex> lock(merge_mu_);  // shares the damaged tables' set
      st = CompactStore(db_.get(), handles_, cf(Space::kChunks), folder_.path, free, &unmergeable_);
    }
    DeleteReplacedFiles(db_.get(), handles_);
    return st;
  }

 private:
  rocksdb::ColumnFamilyHandle* cf(Space s) { return handles_[static_cast<int>(s)]; }

  std::string dir_;      // for messages
  EngineFolder folder_;  // where the engine works (closed after it)
  std::unique_ptr<rocksdb::DB> db_;
  std::mutex merge_mu_;
  std::set<uint64_t>
      unmergeable_;  // damaged table files (MergeSmallTables, Compact), under merge_mu_
  std::vector<rocksdb::ColumnFamilyHandle*> handles_;
  std::string log_damage_;  // set once, before the backend is shared
};

Result<std::unique_ptr<RocksBackend>> OpenEngine(const std::string& dir,
                                                 const BackendOptions& options) {
  auto folder =
      HoldEngineFolder(dir, options.create_if_missing && !options.read_only, !options.read_only);
  if (!folder.ok()) return folder.status();
  const std::string& at = folder->path;  // the engine's name for dir
  rocksdb::DBOptions db_options = EngineOptions(options);
  const std::vector<rocksdb::ColumnFamilyDescriptor> cfs = SpaceDescriptors();
  std::vector<rocksdb::ColumnFamilyHandle*> handles;
  rocksdb::DB* raw = nullptr;
  int refused = 0;
  auto open = [&] {
    return OpenUnlessThreadsRefused(
        [&] {
          if (options.read_only)
            return rocksdb::DB::OpenForReadOnly(db_options, at, cfs, &handles, &raw);
          std::optional<OpeningWriter> opening;
          if (!options.after_failed_write) opening.emplace();
          return rocksdb::DB::Open(db_options, at, cfs, &handles, &raw);
        },
        &refused);
  };
  rocksdb::Status s = open();
  if (refused != 0)
    return Status::FromErrno(refused, "open store", dir + " (the engine cannot start its threads)");
  std::string log_damage;
  if (s.IsCorruption() && LooksLikeLogDamage(s.ToString()))
    log_damage = WithFolderPaths(s.ToString());
  if (!log_damage.empty() && options.read_only) {
    // A damaged record in the engine's log that its point-in-time replay
    // refuses: a reader skips what is damaged and replays the rest. The log
    // holds only what came after the last flush, and every moved file's
    // copy, every journal record and the format record are flushed before
    // they count (docs/format.md): what goes is a change made since (a
    // cold file's name or attributes) or the copy of a file still in place.
    db_options.wal_recovery_mode = rocksdb::WALRecoveryMode::kSkipAnyCorruptedRecords;
    handles.clear();
    raw = nullptr;
    s = open();
    if (s.ok()) {
      spdlog::log(options.read_only ? spdlog::level::debug : spdlog::level::warn,
                  "store {}: the engine's log has damaged records ({}): skipped; what they held "
                  "since the last flush is gone",
                  dir, log_damage);
    }
  }
  if (s.IsCorruption() && !log_damage.empty() && !options.best_efforts && !options.read_only) {
    // A record whose fragments each check but do not form a batch stops
    // even that replay. A writer then sets the logs aside (kLostFoundName)
    // and opens at the last flush; it puts them back if that fails too.
    const auto moved = SetLogsAside(at);
    handles.clear();
    raw = nullptr;
    const rocksdb::Status without = moved.empty() ? s : open();
    if (without.ok()) {
      s = without;
      spdlog::warn(
          "store {}: the engine's log is damaged ({}): set aside in {}; the store opens as its "
          "last flush left it (every moved file's copy is there; changes made through a mount "
          "since, and copies of files still in place, are not)",
          dir, log_damage, dir + "/" + kLostFoundName);
    } else {
      for (const auto& [from, to] : moved) (void)::rename(to.c_str(), from.c_str());
    }
  }
  if (!s.ok()) {
    if (!log_damage.empty()) {
      s = rocksdb::Status::Corruption(log_damage + "; and replaying around its damaged records: " +
                                      WithFolderPaths(s.ToString()));
    }
    if (s.IsInvalidArgument() &&
        s.ToString().find("Column family not found") != std::string::npos) {
      // A store has all its spaces from its creation on.
      return Status::Corruption("open store " + dir +
                                ": its engine MANIFEST lacks some of the store's spaces (damaged, "
                                "cut short, or its creation was cut short by a crash): " +
                                WithFolderPaths(s.ToString()));
    }
    Status st = FromRocks(s, "open store " + dir);
    if (st.code() == Code::kInvalidArgument) {
      return Status::NotSupported("open store " + dir + ": not a tbfs store of a known layout (" +
                                  WithFolderPaths(s.ToString()) + ")");
    }
    return st;
  }
  auto backend = std::make_unique<RocksBackend>(
      dir, std::move(folder).value(), std::unique_ptr<rocksdb::DB>(raw), std::move(handles));
  backend->set_log_damage(std::move(log_damage));
  // The engine opens without its blob files: one gone is found by the
  // first read that needs it. Said at once (red team: ls and du were
  // silent while fsck named lost files); salvage says it its own way.
  if (!options.best_efforts) {
    for (const std::string& gone : backend->MissingBlobFiles()) {
      spdlog::warn(
          "store {}: the store is damaged: {}: the cold files whose chunks it held do not read "
          "(tbfs fsck names them, and tbfs salvage writes out every intact file)",
          dir, ListedFileGone(gone));
    }
  }
  return backend;
}

// A space whose records are derived (the baselines: the last batch's
// verifier summary) is not worth a store writers cannot open. When `damage`
// (the error of a writer's open or of a read of `space`; `known`: of a
// read of it) names one of its table files, every table file of the space
// is set aside in kLostFoundName (hard links: the engine drops its own
// names) and the space is dropped and made anew, empty. True when it was.
bool RebuildDerivedSpace(const std::string& dir, const BackendOptions& options, Space space,
                         const std::string& damage, bool known) {
  const std::string name = kSpaceNames[static_cast<int>(space)];
  // An open that checks no table as it loads (so the damaged one cannot
  // refuse it) and compacts nothing while the space is replaced.
  rocksdb::DBOptions db_options = EngineOptions(options);
  db_options.paranoid_checks = false;
  db_options.info_log = NewEngineLog(spdlog::level::debug);
  std::vector<rocksdb::ColumnFamilyDescriptor> cfs = SpaceDescriptors();
  for (auto& cf : cfs) cf.options.disable_auto_compactions = true;
  std::vector<rocksdb::ColumnFamilyHandle*> handles;
  rocksdb::DB* raw = nullptr;
  rocksdb::Status s;
  auto folder = HoldEngineFolder(dir, false, true);
  if (!folder.ok()) return false;
  const std::string& at = folder->path;
  {
    OpeningWriter opening;
    s = rocksdb::DB::Open(db_options, at, cfs, &handles, &raw);
  }
  if (!s.ok()) return false;
  std::unique_ptr<rocksdb::DB> db(raw);
  std::vector<rocksdb::LiveFileMetaData> live;
  db->GetLiveFilesMetaData(&live);
  std::vector<std::string> tables;  // file names, "000031.sst"
  for (const auto& f : live) {
    if (f.column_family_name != name) continue;
    std::string file = f.name.substr(f.name.find_last_of('/') + 1);
    if (damage.find(file) != std::string::npos) known = true;
    tables.push_back(std::move(file));
  }
  bool rebuilt = false;
  if (known) {
    const std::string aside = at + "/" + kLostFoundName;
    const uint64_t now = NowNs();
    bool kept = ::mkdir(aside.c_str(), 0700) == 0 || errno == EEXIST;
    for (const auto& t : tables) {
      kept = kept &&
             ::link((at + "/" + t).c_str(), fmt::format("{}/{}-{}", aside, now, t).c_str()) == 0;
    }
    rocksdb::ColumnFamilyHandle* fresh = nullptr;
    rebuilt = kept && db->DropColumnFamily(handles[static_cast<int>(space)]).ok() &&
              db->CreateColumnFamily(SpaceOptions(space), name, &fresh).ok();
    if (fresh) (void)db->DestroyColumnFamilyHandle(fresh);
    if (rebuilt) {
      spdlog::warn(
          "store {}: the {} space is damaged ({}): its {} table file(s) set aside in {}, the "
          "space rebuilt empty (it holds only the last batch's verifier summary)",
          dir, name, damage, tables.size(), dir + "/" + kLostFoundName);
    }
  }
  for (auto* h : handles) (void)db->DestroyColumnFamilyHandle(h);
  (void)db->Close();
  return rebuilt;
}

}  // namespace

Result<std::unique_ptr<Backend>> OpenRocksBackend(const std::string& dir,
                                                  const BackendOptions& options) {
  if (options.read_only || options.best_efforts) return OpenRocksEngine(dir, options);
  struct stat st;
  if (!options.create_if_missing && ::stat(dir.c_str(), &st) != 0) {
    return OpenRocksEngine(dir, options);  // says what is missing
  }
  auto hold = HoldStoreForWriting(dir, options.create_if_missing);
  if (!hold.ok()) return hold.status();
  auto engine = OpenRocksEngine(dir, options);
  if (!engine.ok()) return engine.status();
  return std::unique_ptr<Backend>(
      LocalEngine::Writing(dir, std::move(hold).value(), std::move(engine).value()));
}

Result<std::unique_ptr<Backend>> OpenRocksEngine(const std::string& dir,
                                                 const BackendOptions& options) {
  struct stat st;
  bool exists = ::stat((dir + "/CURRENT").c_str(), &st) == 0;
  if (!exists && ::stat(dir.c_str(), &st) == 0) {
    // A store that lost its CURRENT file is damaged, not missing; any other
    // folder but an empty one is not a store.
    TBFS_RETURN_IF_ERROR(CheckStoreFolder(dir));
  }
  if (!exists && !options.create_if_missing) {
    return Status::NotFound("no cold store at " + dir + " (nothing has been migrated yet)");
  }
  auto opened = OpenEngine(dir, options);
  if (options.read_only || options.best_efforts) {
    if (!opened.ok()) return opened.status();
    return std::unique_ptr<Backend>(std::move(*opened));
  }
  // A writer reads the derived spaces whole (a few records): damage there,
  // or a refused open that names one of their tables, rebuilds them.
  std::string damage;
  bool known = false;
  if (!opened.ok()) {
    if (!opened.status().IsCorruption()) return opened.status();
    damage = opened.status().message();
  } else {
    Status scan = (*opened)->Scan(Space::kBaselines, "",
                                  [](std::string_view, std::string_view) { return true; });
    if (!scan.IsCorruption()) {
      // No range deletion may stay where a scan can meet it (RocksDB 7.8
      // aborts a scan that meets one and a table file it cannot read).
      // Best effort: a full disk or a damaged table must not keep a writer
      // out; the next open tries again.
      auto dropped = (*opened)->DropRangeDeletions();
      if (!dropped.ok()) {
        spdlog::warn("store {}: old range deletions stay for now: {}", dir,
                     dropped.status().message());
      } else if (*dropped > 0) {
        spdlog::info("store {}: compacted {} space(s) to drop old range deletions", dir, *dropped);
      }
      return std::unique_ptr<Backend>(std::move(*opened));
    }
    damage = scan.message();
    known = true;
    opened->reset();
  }
  if (!RebuildDerivedSpace(dir, options, Space::kBaselines, damage, known)) {
    if (!opened.ok()) return opened.status();
    return Status::Corruption(damage);
  }
  auto reopened = OpenEngine(dir, options);
  if (!reopened.ok()) return reopened.status();
  return std::unique_ptr<Backend>(std::move(*reopened));
}

}  // namespace tbfs::store
