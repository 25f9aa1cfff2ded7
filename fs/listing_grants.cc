// ListingGrants: see listing_grants.h.
#include "fs/listing_grants.h"

#include <utility>

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

bool ListingGrants::Holds(uint64_t id, const ListingStamp& stamp, Clock::time_point now) {
  MutexLock lock(mu_);
  auto it = grants_.find(id);
  if (it == grants_.end()) return false;
  if (now < it->second.until && it->second.stamp == stamp) return true;
  grants_.erase(it);  // stale: the next full listing grants again
  return false;
}

void ListingGrants::Grant(uint64_t id, ListingStamp stamp, Clock::time_point until) {
  MutexLock lock(mu_);
  grants_[id] = Entry{std::move(stamp), until};
}

void ListingGrants::Drop(uint64_t id) {
  MutexLock lock(mu_);
  grants_.erase(id);
}

size_t ListingGrants::size() {
  MutexLock lock(mu_);
  return grants_.size();
}

}  // namespace tbfs::fs
