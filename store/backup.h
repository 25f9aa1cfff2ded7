// The portable backup `tbfs migrate --backup DIR` writes before anything is
// unlinked: a pax tar of the files about to move, zstd-compressed, synced.
// It needs no tbfs to restore: `tar --zstd -xf FILE -C LOGDIR`.
#pragma once

#include <atomic>
#include <string>
#include <vector>

#include "base/status.h"

namespace tbfs::store {

// Writes DIR/tbfs-backup-<UTC time>.tar.zst holding rel_paths (relative to
// logdir, stored under those names) and returns its path in *archive.
Status WriteBackup(const std::string& logdir, const std::vector<std::string>& rel_paths,
                   const std::string& dir, std::string* archive, std::atomic<uint64_t>* progress);

// True when a and b are on the same filesystem (a backup there protects
// against mistakes, not against losing the disk).
bool SameFilesystem(const std::string& a, const std::string& b);

}  // namespace tbfs::store
