// What the store commands share: where a logdir's store is, opening it for
// reading or for writing (with crash recovery first), and the folders a
// walk of the logdir must skip.
#pragma once

#include <memory>
#include <string>

#include "base/fs_util.h"
#include "store/cold_store.h"

namespace tbfs::cli {

// What --store says in every command's help.
inline constexpr char kStoreOptionHelp[] =
    "store folder (default LOGDIR/.tbfs), or a shared store on Ceph: "
    "rados://POOL[/PREFIX]?conf=FILE";

struct StoreLocation {
  std::string logdir;   // as given
  std::string dir;      // the store folder, or its rados:// address
  std::string own_dir;  // where tbfs keeps files of its own: the store folder, or LOGDIR/.tbfs
  bool given = false;   // named by --store (not the default)
  WalkOptions walk;     // skips the store when it lies inside the logdir
};

// OK for "" (the default), a folder, or a rados:// address that parses;
// InvalidArgument, one line, for a mistyped address.
Status CheckStoreFlag(const std::string& store_flag);

// --store DIR (or rados://...), or LOGDIR/.tbfs. InvalidArgument when LOGDIR is not a folder.
Result<StoreLocation> LocateStore(const std::string& logdir, const std::string& store_flag);

// True when `path` (which need not exist yet) is `dir` or lies inside it,
// after resolving symlinks and "..".
bool IsInside(const std::string& path, const std::string& dir);

// Opens the store read-only. A missing store yields nullptr (nothing cold),
// but a --store folder that does not exist, or a store folder this user
// cannot reach, is InvalidArgument (a mistyped path would otherwise read as
// "nothing cold", exit 0).
Result<std::unique_ptr<store::ColdStore>> OpenStoreForRead(const StoreLocation& loc);

// Opens the store for writing (creating it when `create`), then resolves any
// journal a crash left (I4), printing what recovery did on stderr. A missing
// store yields nullptr when !create (InvalidArgument as above for a --store
// folder that does not exist).
// True once a writer's open in this process ran a recovery that found
// files lost (neither in the logdir nor in the store): the command then
// exits 1 however the rest went (tools/cli/main.cc).
bool RecoveryFoundLosses();
Result<std::unique_ptr<store::ColdStore>> OpenStoreForWrite(const StoreLocation& loc, bool create,
                                                            const std::string& command);

}  // namespace tbfs::cli
