// The checks a store's open makes before it changes anything: a command
// refused its store leaves the store and the logdir as they were
// (store/cold_store_open.cc). Not for use outside store/.
#pragma once

#include <string>
#include <string_view>

#include "base/status.h"
#include "store/cold_store.h"

namespace tbfs::store {

// Damage gets the way out with it: fsck names what is damaged, salvage
// writes out every file that verifies.
Status Damaged(const Status& st);

// What a local writer checks before it takes the logdir's lock, so that a
// command refused its store (none there and none to make, a folder of
// other files, a damaged one) leaves the logdir as it was. Open checks
// again under the lock.
Status CheckBeforeLock(const std::string& dir, const OpenOptions& options);

// A writer's open changes the store (the engine may write a new MANIFEST
// and drop files it does not list): first make sure, read-only, that the
// store at `dir` opens to a store at all, of a format this tbfs knows. An
// engine view without the format record is a damaged MANIFEST describing
// an older, emptier store.
Status CheckBeforeWriterOpen(const std::string& dir);

// The store's format record (`bytes`) into *info: Corruption when it does
// not parse, NotSupported when this tbfs does not read its format.
Status ParseInfo(std::string_view bytes, const std::string& dir, storepb::StoreInfo* info);

}  // namespace tbfs::store
