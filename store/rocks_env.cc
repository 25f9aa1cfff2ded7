// The engine's environment for tbfs's stores (store/rocks_env.h).
#include "store/rocks_env.h"

#include <fcntl.h>
#include <rocksdb/cache.h>
#include <rocksdb/file_system.h>
#include <rocksdb/listener.h>
#include <rocksdb/metadata.h>
#include <rocksdb/sst_file_reader.h>
#include <rocksdb/table.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include <atomic>
#include <cctype>
#include <chrono>
#include <climits>
#include <cstdarg>
#include <cstdio>
#include <cstring>
#include <mutex>
#include <set>
#include <thread>

#include "base/time_util.h"
#include "fmt/format.h"
#include "store/store_dir.h"

namespace tbfs::store {

namespace {

// Writers opening a store in this process now (OpeningWriter).
std::atomic<int> g_opening_writers{0};

// A file read with the kernel's readahead, whatever the engine hints.
class KernelReadahead final : public rocksdb::FSRandomAccessFileOwnerWrapper {
 public:
  using rocksdb::FSRandomAccessFileOwnerWrapper::FSRandomAccessFileOwnerWrapper;
  void Hint(AccessPattern pattern) override {
    if (pattern != kRandom) target()->Hint(pattern);
  }
};

// RocksDB's files, made 0600 as they are created, whatever the process's
// umask (the mount runs with umask 0 so that what users create has exactly
// the mode they asked for).
class PrivateFileSystem final : public rocksdb::FileSystemWrapper {
 public:
  explicit PrivateFileSystem(const std::shared_ptr<rocksdb::FileSystem>& target)
      : rocksdb::FileSystemWrapper(target) {}
  static const char* kClassName() { return "TbfsPrivateFileSystem"; }
  const char* Name() const override { return kClassName(); }

  rocksdb::IOStatus NewWritableFile(const std::string& f, const rocksdb::FileOptions& o,
                                    std::unique_ptr<rocksdb::FSWritableFile>* r,
                                    rocksdb::IODebugContext* dbg) override {
    return Private(f, target()->NewWritableFile(f, o, r, dbg));
  }
  rocksdb::IOStatus ReopenWritableFile(const std::string& f, const rocksdb::FileOptions& o,
                                       std::unique_ptr<rocksdb::FSWritableFile>* r,
                                       rocksdb::IODebugContext* dbg) override {
    return Private(f, target()->ReopenWritableFile(f, o, r, dbg));
  }
  rocksdb::IOStatus ReuseWritableFile(const std::string& f, const std::string& old,
                                      const rocksdb::FileOptions& o,
                                      std::unique_ptr<rocksdb::FSWritableFile>* r,
                                      rocksdb::IODebugContext* dbg) override {
    return Private(f, target()->ReuseWritableFile(f, old, o, r, dbg));
  }
  rocksdb::IOStatus NewRandomRWFile(const std::string& f, const rocksdb::FileOptions& o,
                                    std::unique_ptr<rocksdb::FSRandomRWFile>* r,
                                    rocksdb::IODebugContext* dbg) override {
    return Private(f, target()->NewRandomRWFile(f, o, r, dbg));
  }
  // The engine asks the kernel for no readahead on every file it reads
  // (advise_random_on_open). A cold file's chunks lie one after another in
  // its blob file, and a sequential reader of the file reads them in that
  // order: the kernel's readahead keeps the disk's latency off those reads,
  // so a blob file keeps it. Table files are asked for at random: theirs
  // stays off.
  rocksdb::IOStatus NewRandomAccessFile(const std::string& f, const rocksdb::FileOptions& o,
                                        std::unique_ptr<rocksdb::FSRandomAccessFile>* r,
                                        rocksdb::IODebugContext* dbg) override {
    rocksdb::IOStatus s = target()->NewRandomAccessFile(f, o, r, dbg);
    if (s.ok() && std::string_view(f).ends_with(".blob")) {
      *r = std::make_unique<KernelReadahead>(std::move(*r));
    }
    return s;
  }
  // While a writer opens the store, the engine deletes the table and blob
  // files its MANIFEST does not list. After a crash those are leftovers;
  // after damage to the MANIFEST they are the store's data. Either way they
  // are set aside (kLostFoundName), never deleted, during an open.
  rocksdb::IOStatus DeleteFile(const std::string& f, const rocksdb::IOOptions& o,
                               rocksdb::IODebugContext* dbg) override {
    std::string_view name(f);
    struct stat st;
    // (The engine also deletes files already gone: no folder for those.)
    if (g_opening_writers.load() > 0 && (name.ends_with(".sst") || name.ends_with(".blob")) &&
        ::lstat(f.c_str(), &st) == 0) {
      const size_t slash = f.find_last_of('/');
      const std::string folder =
          (slash == std::string::npos ? std::string(".") : f.substr(0, slash)) + "/" +
          kLostFoundName;
      // Numbers repeat after such damage (the engine counts on from what its
      // MANIFEST says): a unique name, the suffix kept.
      const std::string to = fmt::format("{}/{}-{}", folder, NowNs(), f.substr(slash + 1));
      if ((::mkdir(folder.c_str(), 0700) == 0 || errno == EEXIST) &&
          ::rename(f.c_str(), to.c_str()) == 0) {
        spdlog::warn(
            "store: {} is not in the engine's MANIFEST; set aside in {} (a leftover of a "
            "crash, or data a damaged MANIFEST lost: tbfs salvage reads it)",
            WithFolderPaths(f), WithFolderPaths(folder));
        return rocksdb::IOStatus::OK();
      }
    }
    return target()->DeleteFile(f, o, dbg);
  }

  rocksdb::IOStatus LockFile(const std::string& f, const rocksdb::IOOptions& o,
                             rocksdb::FileLock** l, rocksdb::IODebugContext* dbg) override {
    return Private(f, target()->LockFile(f, o, l, dbg));
  }
  rocksdb::IOStatus NewLogger(const std::string& f, const rocksdb::IOOptions& o,
                              std::shared_ptr<rocksdb::Logger>* r,
                              rocksdb::IODebugContext* dbg) override {
    return Private(f, target()->NewLogger(f, o, r, dbg));
  }

 private:
  static rocksdb::IOStatus Private(const std::string& f, rocksdb::IOStatus s) {
    if (s.ok()) ::chmod(f.c_str(), 0600);
    return s;
  }
};

// RocksDB's own log, into tbfs's (warnings and errors only). RocksDB's LOG
// file is not used: on a full disk a write to it aborts the process.
// A reader (fsck, salvage, ls) reports damage itself, one line per problem:
// the engine's own account of it goes to the debug level there. A merge
// of table files cut short by the store's close ("Shutdown in progress")
// is no problem (the next open merges again): debug too, or a command that
// did all it should would end with a warning.
class EngineLog final : public rocksdb::Logger {
 public:
  explicit EngineLog(spdlog::level::level_enum level)
      : rocksdb::Logger(rocksdb::InfoLogLevel::WARN_LEVEL), level_(level) {}
  using rocksdb::Logger::Logv;
  void Logv(const char* format, va_list ap) override {
    char line[1024];
    std::vsnprintf(line, sizeof(line), format, ap);
    // Not warnings: a merge cut short by the close, a table opened outside
    // the engine's manifest (a merge's check of a table, DB::VerifyChecksum
    // at fsck), which has no unique id to check, and a failed open (its
    // caller says why, naming the store).
    const bool routine = std::strstr(line, "Shutdown in progress") != nullptr ||
                         std::strstr(line, "opened without unique ID to verify") != nullptr ||
                         std::strstr(line, "DB::Open() failed") != nullptr;
    // One line: what follows the first is a dump of the engine's records
    // (a failed MANIFEST write lists every edit it held).
    std::string text = WithFolderPaths(line);
    if (size_t nl = text.find('\n'); nl != std::string::npos) {
      text.resize(nl);
      while (!text.empty() && (text.back() == ':' || text.back() == ' ')) text.pop_back();
    }
    spdlog::log(routine ? spdlog::level::debug : level_, "store engine: {}", text);
  }

 private:
  spdlog::level::level_enum level_;
};

// One block cache for every space of every store the process opens. Left
// alone, each space makes an 8 MiB cache of its own: 56 MiB for seven.
// The records it holds are small, and the chunk values live in blob files
// it does not cache.
std::shared_ptr<rocksdb::Cache> SharedBlockCache() {
  static const std::shared_ptr<rocksdb::Cache> cache = rocksdb::NewLRUCache(8 << 20);
  return cache;
}

}  // namespace

rocksdb::Env* PrivateEnv() {
  static const std::unique_ptr<rocksdb::Env> env =
      rocksdb::NewCompositeEnv(std::make_shared<PrivateFileSystem>(rocksdb::FileSystem::Default()));
  return env.get();
}

rocksdb::ColumnFamilyOptions SpaceOptions(Space space) {
  rocksdb::ColumnFamilyOptions o;
  rocksdb::BlockBasedTableOptions table;
  table.block_cache = SharedBlockCache();
  o.table_factory.reset(rocksdb::NewBlockBasedTableFactory(table));
  // The small records need little memtable; the mount's RSS counts it.
  o.write_buffer_size = 4 << 20;
  if (space == Space::kChunks) {
    // Chunk values are zstd frames already: keep them out of the LSM
    // (blob files) and do not compress them again.
    o.enable_blob_files = true;
    o.min_blob_size = 0;
    o.blob_file_size = 256 << 20;
    o.blob_compression_type = rocksdb::kNoCompression;
    o.compression = rocksdb::kNoCompression;
    o.enable_blob_garbage_collection = false;  // see Compact()
    // Chunk values go to blob files at flush, and every migration batch
    // flushes before it commits (I2): a batch bigger than this is only
    // flushed in more steps, and the memtables (two at most) stay a small
    // part of the daemon's memory.
    o.write_buffer_size = 8 << 20;
  }
  return o;
}

namespace {

// A compaction that fails (on damage the checks before it could not see,
// since it came after them, or on an I/O error: a blob file gone or
// unreadable at that instant) drops what it wrote and leaves the files it
// read as they were: nothing is lost, and its caller hears of the failure.
// RocksDB would also refuse every write from then on, an error it cannot
// recover from short of opening the store again: in a mount, every
// migration, chmod and unlink of cold files. This keeps the writes going,
// as RocksDB itself does when its paranoid checks are off. A full disk is
// left to RocksDB: it recovers from that on its own.
class FailedCompactionStopsNoWrite final : public rocksdb::EventListener {
 public:
  void OnBackgroundError(rocksdb::BackgroundErrorReason reason, rocksdb::Status* error) override {
    if (reason != rocksdb::BackgroundErrorReason::kCompaction || error->IsNoSpace() ||
        error->IsShutdownInProgress()) {  // a merge the store's close cut short
      return;
    }
    spdlog::warn("store: a compaction failed; writes go on ({}; tbfs fsck names damaged files)",
                 WithFolderPaths(error->ToString()));
    *error = rocksdb::Status::OK();
  }
};

}  // namespace

rocksdb::DBOptions EngineOptions(const BackendOptions& options) {
  rocksdb::DBOptions db_options;
  // The store's files are 0600, its folder 0700 (MakeStorePrivate).
  db_options.env = PrivateEnv();
  db_options.create_if_missing = options.create_if_missing;
  db_options.create_missing_column_families = options.create_if_missing;
  db_options.max_background_jobs = 2;
  db_options.max_file_opening_threads = FileOpeningThreads();
  // No fallocate ahead of writes: the log's (1.1 times the largest memtable,
  // 35 MiB) made a small store filesystem look full before anything was
  // written, and the free space CheckRoom sees is the truth without it.
  db_options.allow_fallocate = false;
  db_options.keep_log_file_num = 4;
  // Every flush (Flush(), or a full memtable) takes every space at once, so
  // that all of them always describe the same point of the log: damage to
  // the log after a crash then loses only what came after the last flush,
  // and never leaves one space ahead of the others (which no writer can
  // open: "SST file is ahead of WALs").
  // (RocksDB's best-efforts recovery, salvage's, refuses atomic flush: a
  // scratch copy only reads what the flushes left.)
  db_options.atomic_flush = !options.best_efforts;
  db_options.info_log_level = rocksdb::InfoLogLevel::WARN_LEVEL;
  db_options.info_log = NewEngineLog(
      options.read_only || options.best_efforts ? spdlog::level::debug : spdlog::level::warn);
  // A writer checks every table file as it opens; a reader lets a damaged
  // one fail only the reads that need it.
  db_options.paranoid_checks = !options.read_only;
  db_options.best_efforts_recovery = options.best_efforts;
  db_options.listeners.push_back(std::make_shared<FailedCompactionStopsNoWrite>());
  return db_options;
}

namespace {
std::mutex claims_mu;
std::set<std::pair<dev_t, ino_t>> claims;  // under claims_mu: folders a writer holds

// The store folder `dir` opened with `flags` (never through a symbolic
// link), made first (0700) when `create`.
Result<UniqueFd> OpenStoreFolder(const std::string& dir, bool create, int flags) {
  if (create && ::mkdir(dir.c_str(), 0700) != 0 && errno != EEXIST) {
    return Status::FromErrno(errno, "mkdir", dir);
  }
  UniqueFd fd(::open(dir.c_str(), flags | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC));
  if (fd.valid()) return fd;
  if (errno == ELOOP || errno == ENOTDIR) {
    struct stat st;
    if (::lstat(dir.c_str(), &st) == 0 && S_ISLNK(st.st_mode)) {
      return Status::InvalidArgument("store " + dir +
                                     " is a symbolic link: name the folder it points to");
    }
  }
  return Status::FromErrno(errno, "open", dir);
}
}  // namespace

Result<EngineFolder> HoldEngineFolder(const std::string& dir, bool create, bool writer) {
  auto opened = OpenStoreFolder(dir, create, O_PATH);
  if (!opened.ok()) return opened.status();
  EngineFolder folder;
  folder.fd = std::move(opened).value();
  folder.path = fmt::format("/proc/self/fd/{}", folder.fd.get());
  if (!writer) return folder;
  struct stat st;
  if (::fstat(folder.fd.get(), &st) != 0) return Status::FromErrno(errno, "stat", dir);
  const std::pair<dev_t, ino_t> key{st.st_dev, st.st_ino};
  std::lock_guard<std::mutex> lock(claims_mu);
  if (!claims.insert(key).second) {
    return Status::Busy("open store " + dir +
                        ": the store is in use by another tbfs process (its writer is open in "
                        "this one)");
  }
  folder.claim = std::shared_ptr<void>(nullptr, [key](void*) {
    std::lock_guard<std::mutex> lock(claims_mu);
    claims.erase(key);
  });
  return folder;
}

Result<UniqueFd> HoldStoreForWriting(const std::string& dir, bool create) {
  auto opened = OpenStoreFolder(dir, create, O_RDONLY);
  if (!opened.ok()) return opened.status();
  UniqueFd fd = std::move(opened).value();
  if (::flock(fd.get(), LOCK_EX | LOCK_NB) != 0) {
    if (errno != EWOULDBLOCK) return Status::FromErrno(errno, "lock", dir);
    return Status::Busy("open store " + dir +
                        ": the store is in use by another tbfs process (its writer, or one "
                        "waiting for room to write)");
  }
  return fd;
}

std::string WithFolderPaths(std::string text) {
  static constexpr std::string_view kProc = "/proc/self/fd/";
  for (size_t at = text.find(kProc); at != std::string::npos; at = text.find(kProc, at + 1)) {
    size_t end = at + kProc.size();
    while (end < text.size() && text[end] >= '0' && text[end] <= '9') ++end;
    if (end == at + kProc.size()) continue;
    char real[PATH_MAX];
    const std::string link = text.substr(at, end - at);
    const ssize_t n = ::readlink(link.c_str(), real, sizeof(real) - 1);
    if (n <= 0) continue;
    text.replace(at, end - at, std::string(real, static_cast<size_t>(n)));
  }
  return text;
}

std::vector<std::pair<std::string, std::string>> SetLogsAside(const std::string& at) {
  std::vector<std::pair<std::string, std::string>> moved;
  const std::string aside = at + "/" + kLostFoundName;
  std::vector<std::string> names;
  (void)PrivateEnv()->GetChildren(at, &names);
  for (const auto& n : names) {
    if (!n.ends_with(".log") || n.find_first_not_of("0123456789") != n.size() - 4) continue;
    const std::string to = fmt::format("{}/{}-{}", aside, NowNs(), n);
    if ((::mkdir(aside.c_str(), 0700) == 0 || errno == EEXIST) &&
        ::rename((at + "/" + n).c_str(), to.c_str()) == 0) {
      moved.emplace_back(at + "/" + n, to);
    }
  }
  return moved;
}

namespace {

// What an engine error that a file of the store is missing says of the
// store's damage: a table or blob file its MANIFEST lists ("No such file
// or directory: While open a file for random read: DIR/000027.ldb", named
// as the store names it: the engine tries the old suffix last), or the
// MANIFEST its CURRENT file names; "" for other errors.
std::string GoneFileDamage(const std::string& error) {
  if (error.find("No such file or directory") == std::string::npos) return "";
  for (const std::string_view suffix : {".sst", ".ldb", ".blob"}) {
    const size_t end = error.find(suffix);
    if (end == std::string::npos) continue;
    size_t begin = end;
    while (begin > 0 && std::isdigit(static_cast<unsigned char>(error[begin - 1]))) --begin;
    if (begin == end || (begin > 0 && error[begin - 1] != '/')) continue;
    const std::string number = error.substr(begin, end - begin);
    return ListedFileGone(number + (suffix == ".blob" ? ".blob" : ".sst"));
  }
  const size_t at = error.find("/MANIFEST-");
  if (at == std::string::npos) return "";
  const size_t end = error.find_first_not_of("0123456789", at + 10);
  return fmt::format(
      "its CURRENT file names {}, which is not there (CURRENT damaged, or the MANIFEST removed "
      "by hand)",
      error.substr(at + 1, end == std::string::npos ? std::string::npos : end - at - 1));
}

}  // namespace

std::string ListedFileGone(std::string_view name) {
  return fmt::format(
      "its engine's MANIFEST lists {} file {}, which is not there (a MANIFEST cut back by a crash "
      "or damage, or a file or the store's folder removed by hand)",
      name.ends_with(".blob") ? "blob" : "table", name);
}

std::vector<std::string> MissingEngineFiles(rocksdb::DB* db, bool blobs) {
  std::vector<std::string> gone;
  auto check = [&](const std::string& folder, const std::string& name) {
    const std::string file = name.substr(name.find_last_of('/') + 1);
    struct stat st;
    if (::stat((folder + "/" + file).c_str(), &st) != 0) gone.push_back(file);
  };
  if (!blobs) {
    std::vector<rocksdb::LiveFileMetaData> tables;
    db->GetLiveFilesMetaData(&tables);
    for (const auto& t : tables) check(t.db_path, t.name);
    return gone;
  }
  std::vector<rocksdb::ColumnFamilyMetaData> spaces;
  db->GetAllColumnFamilyMetaData(&spaces);
  for (const auto& space : spaces) {
    for (const auto& b : space.blob_files) check(b.blob_file_path, b.blob_file_name);
  }
  return gone;
}

std::vector<std::string> UnlistedEngineBlobs(rocksdb::DB* db, const std::string& dir) {
  std::set<std::string> listed;
  std::vector<rocksdb::ColumnFamilyMetaData> spaces;
  db->GetAllColumnFamilyMetaData(&spaces);
  for (const auto& space : spaces) {
    for (const auto& b : space.blob_files)
      listed.insert(b.blob_file_name.substr(b.blob_file_name.find_last_of('/') + 1));
  }
  std::vector<std::string> names, unlisted;
  (void)PrivateEnv()->GetChildren(dir, &names);
  for (const auto& n : names) {
    if (n.ends_with(".blob") && !listed.count(n)) unlisted.push_back(dir + "/" + n);
  }
  return unlisted;
}

Status FromRocks(const rocksdb::Status& s, const std::string& what) {
  if (s.ok()) return Status::OK();
  std::string msg = what + ": " + WithFolderPaths(s.ToString());
  if (s.IsNotFound()) return Status::NotFound(msg);
  // (The engine's open says it as Corruption around the I/O error.)
  if (const std::string gone = GoneFileDamage(s.ToString()); !gone.empty()) {
    return Status::Corruption(
        fmt::format("{}: the store is damaged: {}; {}", what, gone, WithFolderPaths(s.ToString())));
  }
  if (s.IsCorruption()) return Status::Corruption(msg);
  if (s.IsInvalidArgument()) return Status::InvalidArgument(msg);
  if (s.IsNotSupported()) return Status::NotSupported(msg);
  // A store on a filesystem mounted read-only fails at its lock file
  // first: that is no other process holding it (red team).
  if (s.ToString().find("Read-only file system") != std::string::npos) {
    return Status::FromErrno(EROFS, what + ":", "the store's filesystem is read-only");
  }
  if (s.IsIOError() && s.ToString().find("lock") != std::string::npos) {
    return Status::Busy(what + ": the store is in use by another tbfs process (" +
                        WithFolderPaths(s.ToString()) + ")");
  }
  if (s.IsNoSpace() || s.ToString().find("No space left") != std::string::npos) {
    return Status::FromErrno(ENOSPC, what + ":", "its filesystem is full");
  }
  return Status::FromErrno(EIO, what + ":", WithFolderPaths(s.ToString()));
}

OpeningWriter::OpeningWriter() { g_opening_writers++; }
OpeningWriter::~OpeningWriter() { g_opening_writers--; }

std::shared_ptr<rocksdb::Logger> NewEngineLog(spdlog::level::level_enum level) {
  return std::make_shared<EngineLog>(level);
}

bool LooksLikeLogDamage(std::string_view error) {
  return error.find("Write batch") != std::string_view::npos ||
         error.find("WriteBatch") != std::string_view::npos ||
         error.find("ahead of WAL") != std::string_view::npos ||
         error.find(".log") != std::string_view::npos;
}

std::vector<rocksdb::ColumnFamilyDescriptor> SpaceDescriptors() {
  std::vector<rocksdb::ColumnFamilyDescriptor> cfs;
  for (int i = 0; i < kNumSpaces; ++i) {
    std::string name = i == 0 ? rocksdb::kDefaultColumnFamilyName : kSpaceNames[i];
    cfs.emplace_back(name, SpaceOptions(static_cast<Space>(i)));
  }
  return cfs;
}

}  // namespace tbfs::store
