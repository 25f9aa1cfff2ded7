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
//
// One cached handle per folder at a time. The kernel appends to a folder's
// cache from any handle opened with FOPEN_CACHE_DIR that reads at the
// cache's end, and entry offsets (name cookies) are the same in every
// snapshot: two such handles with snapshots of different moments would
// splice them into one cache. So while a handle of a folder is open with
// the cache, other handles of it read from the daemon, uncached (and
// leave the cache alone: keep_cache), and only what that one handle
// served can be in the cache or be granted.
//
// A copy the kernel has not completed is never dropped. The kernel resets
// a copy only when it finds a complete one stale or missing a page, and
// appends only at a copy's end, to a page still there: an incomplete copy
// whose pages are dropped would stay incomplete for good, and the folder
// be listed by the daemon until the kernel forgets its inode. A holder let
// go partway (a program that stops reading, or is killed) leaves such a
// copy; the next holder keeps it (keep_cache) and completes it as it
// lists. What it completes may join two snapshots: the folder changed
// between them, a holder rewound, an entry was left out of a reply, or a
// change through the mount came while it was filled (Changed). The daemon
// keeps a fingerprint of the snapshot each holder lists and drops a copy
// that joins different ones just before the reply that completes it, so
// the kernel resets it before it answers anything from it.
//
// What the daemon cannot see is where the kernel's copy ends: a holder
// that seeks forward and reaches the end may or may not have completed
// it, and one that completes it from two snapshots must have it dropped.
// Dropped when it was not complete after all (a seek forward and a change
// of the folder, together), or when its pages are reclaimed or the entry
// it ends at is removed, an incomplete copy leaves the folder listed by
// the daemon until the kernel forgets the folder's inode.
//
// Limit: a holder that rewinds once the cache is complete is answered
// from it until the kernel refreshes the folder's attributes (kFreshTtlS)
// and sees its new mtime; a change shows in a rewound listing after at
// most 0.5 s, as it does in the folder's stat.
//
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

  struct Admission {
    bool cache = false;  // FOPEN_CACHE_DIR: the kernel may fill and use its cache
    bool keep = false;   // keep_cache: what the kernel holds stands
  };
  // At an OPENDIR of settled folder `id`, stamped `stamp` at `now`: the
  // cache when no other handle of the folder holds it (Close when this one
  // is released), kept when a grant with this very stamp has not expired
  // or the kernel may hold an incomplete copy (the holder completes it).
  Admission Open(uint64_t id, const ListingStamp& stamp, Clock::time_point now);
  // The handle Open gave the cache is released.
  void Close(uint64_t id);
  // The holder of folder `id`'s cache took a snapshot whose entries, as
  // the kernel would cache them, have fingerprint `fingerprint`: the
  // kernel may be filling its copy from it now.
  // `from_start`: the snapshot's first READDIR was at offset 0, which the
  // kernel sends the daemon only when it holds no complete copy.
  void Filled(uint64_t id, uint64_t fingerprint, bool from_start);
  // What the kernel caches of folder `id` may not be one snapshot's start
  // any more: an entry was left out of a reply, or the folder changed
  // through the mount. True when the kernel's copy may be dropped at once
  // (it has none, or a complete one); false when one is being filled: it
  // is dropped when complete (Ended).
  bool Changed(uint64_t id);
  // The holder served the end of folder `id`'s listing, stamped `stamp`:
  // `gapless` when it served every entry since its snapshot, which then
  // completes the kernel's copy (unless an entry that copy ends at is
  // gone); `clean` when in order, none left out, none short-lived. True
  // when the copy must be dropped before the reply reaches the kernel (it
  // may join two snapshots). A gapless, clean one is granted: the kernel
  // holds the listing as of `stamp`, good until `until` (Filesystem: the
  // OPENDIR's time + kStableTtlS - 1 s).
  bool Ended(uint64_t id, const ListingStamp& stamp, bool gapless, bool clean,
             Clock::time_point until);
  // The kernel forgot the folder (or any inode: a no-op for files).
  void Drop(uint64_t id);
  size_t size();  // folders with a grant or a cached handle

 private:
  struct Folder {
    bool granted = false;
    ListingStamp stamp;
    Clock::time_point until;
    bool held = false;  // a handle holds the cache
    // The kernel may hold an incomplete copy, filled from snapshots with
    // fingerprint `fingerprint` (or several different ones: mixed).
    bool partial = false;
    bool mixed = false;
    uint64_t fingerprint = 0;
    // ... or a complete one, for all we know, of the folder as stamped
    // `partial_stamp` (a holder reached the end with a gap: Ended).
    bool maybe_complete = false;
    ListingStamp partial_stamp;
    // The kernel holds no copy, or a complete one (or no longer matters).
    void ForgetCopy() {
      partial = false;
      mixed = false;
      maybe_complete = false;
    }
  };
  Mutex mu_;
  std::unordered_map<uint64_t, Folder> folders_ TBFS_GUARDED_BY(mu_);
};

}  // namespace tbfs::fs
