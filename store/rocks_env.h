// The engine's environment, options and log for tbfs's stores; not for
// use outside store/.
#pragma once

#include <rocksdb/db.h>
#include <rocksdb/env.h>
#include <rocksdb/metadata.h>
#include <rocksdb/options.h>

#include <array>
#include <functional>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include "base/fs_util.h"
#include "base/status.h"
#include "spdlog/spdlog.h"
#include "store/backend.h"

namespace tbfs::store {

// RocksDB's Env for every store: its files made 0600 as they are created,
// whatever the process's umask (the mount runs with umask 0 so that what
// users create has exactly the mode they asked for); and, while a writer
// opens a store (OpeningWriter), the table and blob files its MANIFEST does
// not list set aside in kLostFoundName instead of deleted.
rocksdb::Env* PrivateEnv();

// The engine's options for a store opened with `options`, and for the
// column family of `space`.
rocksdb::DBOptions EngineOptions(const BackendOptions& options);
rocksdb::ColumnFamilyOptions SpaceOptions(Space space);

// The threads the engine opens a store's table files on: one but for root
// (store/rocks_threads.cc).
int FileOpeningThreads();

// Runs `open` (the engine's DB::Open or OpenForReadOnly). The engine starts
// its background threads as it opens, before it reads or writes a file, and
// throws where the system refuses one (a user's RLIMIT_NPROC): then
// *refused gets the errno, and the status says no more.
rocksdb::Status OpenUnlessThreadsRefused(const std::function<rocksdb::Status()>& open,
                                         int* refused);

// A writer opening a store, for as long as it lives (see PrivateEnv).
class OpeningWriter {
 public:
  OpeningWriter();
  ~OpeningWriter();
  OpeningWriter(const OpeningWriter&) = delete;
  OpeningWriter& operator=(const OpeningWriter&) = delete;
};

// The engine's column family of each space (the first is RocksDB's default).
inline constexpr std::array<const char*, kNumSpaces> kSpaceNames = {
    "namespace", "manifests", "chunks", "journal", "baselines", "meta"};

// The engine's spaces (column families), each with its options.
std::vector<rocksdb::ColumnFamilyDescriptor> SpaceDescriptors();

// The store folder as the engine names it: "/proc/self/fd/N" for a
// descriptor of the folder opened once (never through a symbolic link;
// made 0700 first when `create`). The engine makes its files by path: held
// so, a store folder renamed, or swapped for a symbolic link, while the
// store is open keeps every file the engine writes (a migration's chunks
// went into the link's target, its originals were deleted, and the store
// left in place no longer opened).
// A writer's hold also claims the folder in this process: the engine's own
// check for a second writer in one process goes by path, and each hold's
// path is another (Busy when another hold of this process has it).
struct EngineFolder {
  UniqueFd fd;
  std::string path;
  std::shared_ptr<void> claim;  // a writer's, given up when the hold goes
};
Result<EngineFolder> HoldEngineFolder(const std::string& dir, bool create, bool writer);
// `text` with every "/proc/self/fd/N/" of an EngineFolder written as the
// folder's own path (the engine's messages name its files by its path).
std::string WithFolderPaths(std::string text);

// Moves the engine's log files (NNNNNN.log) of the folder the engine
// names `at` into its kLostFoundName; returns each (from, to), to be
// renamed back if the open without them fails too.
std::vector<std::pair<std::string, std::string>> SetLogsAside(const std::string& at);

// The one place a rocksdb::Status becomes a tbfs::Status; `what` says
// the operation and the store.
Status FromRocks(const rocksdb::Status& s, const std::string& what);
// What it says of a store that a file its engine's MANIFEST lists
// ("000046.sst", "000059.blob") is not there.
std::string ListedFileGone(std::string_view name);
// The table files (or, when `blobs`, the blob files) `db` lists that are
// not there, by name: a stat each, nothing read.
std::vector<std::string> MissingEngineFiles(rocksdb::DB* db, bool blobs);
// The blob files in `dir` (paths) that db does not list.
std::vector<std::string> UnlistedEngineBlobs(rocksdb::DB* db, const std::string& dir);
// Has the engine open its reader of each of the newest blob files of
// `chunks`, up to 1,024 and a quarter of the descriptor limit
// (store/rocks_readers.cc); stops once `stop` says so.
void OpenBlobReaders(rocksdb::DB* db, rocksdb::ColumnFamilyHandle* chunks,
                     const std::function<bool()>& stop);

// RocksDB's own log, into tbfs's at `level` (warnings and errors only;
// RocksDB's LOG file is not used: on a full disk a write to it aborts the
// process).
std::shared_ptr<rocksdb::Logger> NewEngineLog(spdlog::level::level_enum level);

// A writer's hold of the store folder `dir` (an exclusive flock of the
// folder itself) for as long as the fd lives. Every writer of a local store
// takes it before the engine's own lock, and a LocalEngine keeps it while
// it has only a reader open, or no engine (a reopen, a full disk): the
// engine's LOCK is held only by an open writer (red team: a second mount
// took a store whose writer was reopening, and its recovery called the
// first one's files lost). Busy when another holds it; made (0700) when
// `create` and missing.
Result<UniqueFd> HoldStoreForWriting(const std::string& dir, bool create);

// OpenRocksBackend without the LocalEngine around a writer: the engine
// alone (LocalEngine's own opens).
Result<std::unique_ptr<Backend>> OpenRocksEngine(const std::string& dir,
                                                 const BackendOptions& options);

}  // namespace tbfs::store
