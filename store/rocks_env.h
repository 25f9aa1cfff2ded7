// The engine's environment, options and log for tbfs's stores; not for
// use outside store/.
#pragma once

#include <rocksdb/env.h>
#include <rocksdb/options.h>

#include <memory>

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

// A writer opening a store, for as long as it lives (see PrivateEnv).
class OpeningWriter {
 public:
  OpeningWriter();
  ~OpeningWriter();
  OpeningWriter(const OpeningWriter&) = delete;
  OpeningWriter& operator=(const OpeningWriter&) = delete;
};

// RocksDB's own log, into tbfs's at `level` (warnings and errors only;
// RocksDB's LOG file is not used: on a full disk a write to it aborts the
// process).
std::shared_ptr<rocksdb::Logger> NewEngineLog(spdlog::level::level_enum level);

}  // namespace tbfs::store
