// ListingGrants: see listing_grants.h.
#include "fs/listing_grants.h"

#include "base/time_util.h"

namespace tbfs::fs {

void StampBacking(const struct stat& st, ListingStamp* stamp) {
  stamp->dev = st.st_dev;
  stamp->ino = st.st_ino;
  stamp->mtime_ns = ToNs(st.st_mtim);
  stamp->ctime_ns = ToNs(st.st_ctim);
  stamp->size = st.st_size;
  stamp->nlink = st.st_nlink;
}

bool Settled(const ListingStamp& stamp, int64_t now_ns) {
  const auto settled_ns = static_cast<int64_t>(kSettledS * 1e9);
  return stamp.mtime_ns <= now_ns - settled_ns && stamp.ctime_ns <= now_ns - settled_ns;
}

ListingGrants::Admission ListingGrants::Open(uint64_t id, const ListingStamp& stamp,
                                             Clock::time_point now) {
  MutexLock lock(mu_);
  Folder& f = folders_[id];
  if (f.held) return {false, true};  // uncached, and the holder's cache left alone
  f.held = true;
  if (f.maybe_complete && f.partial_stamp != stamp) f.ForgetCopy();  // stale: dropped here
  if (f.partial) return {true, true};  // to be completed, never dropped
  if (f.granted && (now >= f.until || f.stamp != stamp)) f.granted = false;
  return {true, f.granted};
}

void ListingGrants::Close(uint64_t id) {
  MutexLock lock(mu_);
  auto it = folders_.find(id);
  if (it == folders_.end()) return;
  it->second.held = false;
  if (!it->second.granted && !it->second.partial) folders_.erase(it);
}

void ListingGrants::Filled(uint64_t id, uint64_t fingerprint, bool from_start) {
  MutexLock lock(mu_);
  Folder& f = folders_[id];
  f.granted = false;  // the kernel reset its copy, or never completed it
  if (from_start) f.maybe_complete = false;
  if (!f.partial) {
    f.partial = true;
    f.mixed = false;
  } else if (f.fingerprint != fingerprint) {
    f.mixed = true;
  }
  f.fingerprint = fingerprint;
}

bool ListingGrants::Changed(uint64_t id) {
  MutexLock lock(mu_);
  auto it = folders_.find(id);
  if (it == folders_.end() || !it->second.partial) return true;
  it->second.mixed = true;
  return false;
}

bool ListingGrants::Ended(uint64_t id, const ListingStamp& stamp, bool gapless, bool clean,
                          Clock::time_point until) {
  MutexLock lock(mu_);
  Folder& f = folders_[id];
  const bool drop = f.partial && f.mixed;
  if (!drop && !gapless) {
    // Whether the kernel's copy is complete depends on where it ended; it
    // holds this snapshot's entries only, either way.
    f.maybe_complete = true;
    f.partial_stamp = stamp;
    return false;
  }
  f.ForgetCopy();
  if (!drop && clean) {
    f.granted = true;
    f.stamp = stamp;
    f.until = until;
  }
  return drop;
}

void ListingGrants::Drop(uint64_t id) {
  MutexLock lock(mu_);
  auto it = folders_.find(id);
  if (it == folders_.end()) return;
  it->second.granted = false;
  it->second.ForgetCopy();
  if (!it->second.held) folders_.erase(it);
}

size_t ListingGrants::size() {
  MutexLock lock(mu_);
  return folders_.size();
}

}  // namespace tbfs::fs
