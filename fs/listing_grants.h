// Which folder listings the kernel may answer from its own cache.
//
// A walk (find, ls -R, TensorBoard's poll of a logdir) opens every folder
// and reads its listing. Read from the daemon, that is two READDIRPLUS
// round trips per folder and an fstatat and a name_to_handle_at per entry;
// read from the kernel's cache (FOPEN_CACHE_DIR, kept across opens by
// keep_cache), none of that. The kernel keeps a cached listing until a
// change through the mount or a newer mtime of the folder in its attributes;
// it cannot see a change made in the logdir, or in the store, until the
// folder's attributes are refreshed, and a change within the same clock
// tick as the cached mtime it never sees. So the daemon decides, at every
// OPENDIR, whether the cached listing may stand (a grant):
//
//  - The listing the kernel cached was served to the end, in order, by one
//    handle, after the folder's stamp was taken at that handle's OPENDIR;
//    every entry was looked up (none skipped by a failed lookup) and none
//    has short-lived attributes (folders, tfevents: kFreshTtlS).
//  - The stamp is the same now: the backing folder's identity, mtime, ctime,
//    size and link count, the store's commit count (local stores only: a
//    shared store changes behind our back) and the folder's path in the
//    logdir (a cold folder's entries are found by it).
//  - The folder was settled when its stamp was taken: mtime and ctime at
//    least kSettledS in the past. A change after the stamp then gets a
//    timestamp that differs from the stamp's even on a filesystem with a
//    coarse clock (the "racy" problem: a change in the same tick as the
//    cached mtime would keep it).
//  - The grant is younger than its entries' attributes (kStableTtlS less a
//    second): a walk served from the cache finds every entry's attributes
//    still valid, where a cached listing of expired entries would cost a
//    LOOKUP per entry (a second walk of 100k entries: 4.3 s with an
//    unconditional cache, 1.7 s with none).
//
// A folder that fails any of these is listed by the daemon as before.
// Thread-safe.
#pragma once

#include <sys/stat.h>
#include <time.h>

#include <chrono>
#include <cstdint>
#include <string>
#include <unordered_map>

#include "base/thread_annotations.h"

namespace tbfs::fs {

// Minimum age of a folder's mtime and ctime before its listing may be kept.
inline constexpr double kSettledS = 1.0;

struct ListingStamp {
  dev_t dev = 0;  // the backing folder; all 0 for a folder only in the store
  ino_t ino = 0;
  int64_t mtime_ns = 0;
  int64_t ctime_ns = 0;
  off_t size = 0;
  nlink_t nlink = 0;
  uint64_t store_commits = 0;
  std::string rel;  // the folder's path in the logdir
  bool operator==(const ListingStamp&) const = default;
};

// The stamp's backing fields from the folder's fstat.
void StampBacking(const struct stat& st, ListingStamp* stamp);

// Whether a folder stamped `stamp` is settled at wall-clock time now_ns.
bool Settled(const ListingStamp& stamp, int64_t now_ns);

class ListingGrants {
 public:
  using Clock = std::chrono::steady_clock;

  // Whether folder `id`'s cached listing may stand: a grant was recorded
  // with this very stamp and has not expired at `now`.
  bool Holds(uint64_t id, const ListingStamp& stamp, Clock::time_point now);
  // Records that the kernel holds folder `id`'s listing as of `stamp`,
  // good until `until` (Filesystem: the OPENDIR's time + kStableTtlS - 1 s).
  void Grant(uint64_t id, ListingStamp stamp, Clock::time_point until);
  // The kernel forgot the folder (or any inode: a no-op for files).
  void Drop(uint64_t id);
  size_t size();

 private:
  struct Entry {
    ListingStamp stamp;
    Clock::time_point until;
  };
  Mutex mu_;
  std::unordered_map<uint64_t, Entry> grants_ TBFS_GUARDED_BY(mu_);
};

}  // namespace tbfs::fs
