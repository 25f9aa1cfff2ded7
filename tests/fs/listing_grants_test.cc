// ListingGrants: a grant holds for its exact stamp until it expires.
#include "fs/listing_grants.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <utility>
#include <vector>

namespace tbfs::fs {
namespace {

using Clock = ListingGrants::Clock;

ListingStamp Stamp() {
  ListingStamp s;
  s.dev = 2049;
  s.ino = 77;
  s.mtime_ns = 1'700'000'000'000'000'000;
  s.ctime_ns = 1'700'000'000'500'000'000;
  s.size = 4096;
  s.nlink = 2;
  s.store_commits = 12;
  s.rel = "run/plugins/profile/1";
  return s;
}

// The first Open of a folder may cache; a grant makes the next one keep
// what the kernel holds, until it expires.
TEST(ListingGrantsTest, AGrantKeepsTheCacheForTheSameStampUntilItExpires) {
  ListingGrants g;
  const Clock::time_point t0 = Clock::now();
  auto a = g.Open(5, Stamp(), t0);
  EXPECT_TRUE(a.cache);
  EXPECT_FALSE(a.keep) << "no grant yet";
  g.Grant(5, Stamp(), t0 + std::chrono::seconds(9));
  g.Close(5);
  a = g.Open(5, Stamp(), t0 + std::chrono::seconds(8));
  EXPECT_TRUE(a.cache);
  EXPECT_TRUE(a.keep);
  g.Close(5);
  a = g.Open(6, Stamp(), t0);
  EXPECT_FALSE(a.keep) << "another folder";
  g.Close(6);
  a = g.Open(5, Stamp(), t0 + std::chrono::seconds(9));
  EXPECT_FALSE(a.keep) << "expired";
  g.Close(5);
  EXPECT_EQ(g.size(), 0u) << "nothing kept for folders without a grant or a holder";
}

// While one handle holds a folder's cache, others get none and leave it be.
TEST(ListingGrantsTest, OneHandleAtATimeHoldsAFoldersCache) {
  ListingGrants g;
  const Clock::time_point t0 = Clock::now();
  g.Grant(1, Stamp(), t0 + std::chrono::seconds(9));
  auto first = g.Open(1, Stamp(), t0);
  EXPECT_TRUE(first.cache && first.keep);
  auto second = g.Open(1, Stamp(), t0);
  EXPECT_FALSE(second.cache);
  EXPECT_TRUE(second.keep) << "an uncached handle must not drop the holder's cache";
  auto other = g.Open(2, Stamp(), t0);
  EXPECT_TRUE(other.cache) << "another folder";
  g.Close(1);
  auto third = g.Open(1, Stamp(), t0);
  EXPECT_TRUE(third.cache && third.keep) << "the holder let go";
  g.Drop(1);  // a partial forget while it is open: still held
  EXPECT_FALSE(g.Open(1, Stamp(), t0).cache);
}

TEST(ListingGrantsTest, AnyChangeOfTheStampEndsTheGrant) {
  const std::vector<std::pair<const char*, void (*)(ListingStamp*)>> changes = {
      {"dev", [](ListingStamp* s) { s->dev++; }},
      {"ino", [](ListingStamp* s) { s->ino++; }},
      {"mtime", [](ListingStamp* s) { s->mtime_ns++; }},
      {"ctime", [](ListingStamp* s) { s->ctime_ns++; }},
      {"size", [](ListingStamp* s) { s->size++; }},
      {"nlink", [](ListingStamp* s) { s->nlink++; }},
      {"store commits", [](ListingStamp* s) { s->store_commits++; }},
      {"path", [](ListingStamp* s) { s->rel += "x"; }},
  };
  for (const auto& [what, change] : changes) {
    ListingGrants g;
    const Clock::time_point t0 = Clock::now();
    g.Grant(1, Stamp(), t0 + std::chrono::seconds(9));
    ListingStamp now = Stamp();
    change(&now);
    EXPECT_FALSE(g.Open(1, now, t0).keep) << what;
    g.Close(1);
    EXPECT_FALSE(g.Open(1, Stamp(), t0).keep) << what << ": a stale grant stays dropped";
    g.Close(1);
  }
}

TEST(ListingGrantsTest, DropForgetsTheGrant) {
  ListingGrants g;
  const Clock::time_point t0 = Clock::now();
  g.Grant(1, Stamp(), t0 + std::chrono::seconds(9));
  g.Grant(2, Stamp(), t0 + std::chrono::seconds(9));
  g.Drop(1);
  EXPECT_FALSE(g.Open(1, Stamp(), t0).keep);
  EXPECT_TRUE(g.Open(2, Stamp(), t0).keep);
}

TEST(ListingGrantsTest, SettledOnlyWhenMtimeAndCtimeAreOldEnough) {
  ListingStamp s = Stamp();
  const int64_t newest = std::max(s.mtime_ns, s.ctime_ns);
  const auto settle = static_cast<int64_t>(kSettledS * 1e9);
  EXPECT_TRUE(Settled(s, newest + settle));
  EXPECT_FALSE(Settled(s, newest + settle - 1));
  s.ctime_ns = s.mtime_ns - 5;  // now the mtime is the newer
  EXPECT_FALSE(Settled(s, s.mtime_ns + settle - 1));
  EXPECT_FALSE(Settled(s, s.mtime_ns)) << "a change this very tick";
  EXPECT_FALSE(Settled(s, s.mtime_ns - 1'000'000'000)) << "a timestamp in the future";
}

}  // namespace
}  // namespace tbfs::fs
