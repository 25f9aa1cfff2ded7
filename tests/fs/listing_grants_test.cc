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

TEST(ListingGrantsTest, HoldsForTheSameStampUntilItExpires) {
  ListingGrants g;
  const Clock::time_point t0 = Clock::now();
  EXPECT_FALSE(g.Holds(5, Stamp(), t0)) << "no grant yet";
  g.Grant(5, Stamp(), t0 + std::chrono::seconds(9));
  EXPECT_TRUE(g.Holds(5, Stamp(), t0 + std::chrono::seconds(8)));
  EXPECT_FALSE(g.Holds(6, Stamp(), t0)) << "another folder";
  EXPECT_FALSE(g.Holds(5, Stamp(), t0 + std::chrono::seconds(9))) << "expired";
  EXPECT_EQ(g.size(), 0u) << "an expired grant is dropped";
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
    EXPECT_FALSE(g.Holds(1, now, t0)) << what;
    EXPECT_FALSE(g.Holds(1, Stamp(), t0)) << what << ": a stale grant stays dropped";
  }
}

TEST(ListingGrantsTest, DropForgetsTheFolder) {
  ListingGrants g;
  const Clock::time_point t0 = Clock::now();
  g.Grant(1, Stamp(), t0 + std::chrono::seconds(9));
  g.Grant(2, Stamp(), t0 + std::chrono::seconds(9));
  g.Drop(1);
  EXPECT_FALSE(g.Holds(1, Stamp(), t0));
  EXPECT_TRUE(g.Holds(2, Stamp(), t0));
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
