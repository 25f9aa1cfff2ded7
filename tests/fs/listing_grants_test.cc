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

// A holder lists folder `id` whole, in order, cleanly: granted until `until`.
void ListWhole(ListingGrants* g, uint64_t id, const ListingStamp& stamp, Clock::time_point until) {
  ASSERT_TRUE(g->Open(id, stamp, Clock::now()).cache);
  g->Filled(id, 0xaa, true);
  EXPECT_FALSE(g->Ended(id, stamp, true, true, until));
  g->Close(id);
}

// The first Open of a folder may cache; a grant makes the next one keep
// what the kernel holds, until it expires.
TEST(ListingGrantsTest, AGrantKeepsTheCacheForTheSameStampUntilItExpires) {
  ListingGrants g;
  const Clock::time_point t0 = Clock::now();
  auto a = g.Open(5, Stamp(), t0);
  EXPECT_TRUE(a.cache);
  EXPECT_FALSE(a.keep) << "no grant yet";
  g.Filled(5, 0xaa, true);
  EXPECT_FALSE(g.Ended(5, Stamp(), true, true, t0 + std::chrono::seconds(9)));
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
  ListWhole(&g, 1, Stamp(), t0 + std::chrono::seconds(9));
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
    ListWhole(&g, 1, Stamp(), t0 + std::chrono::seconds(9));
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
  ListWhole(&g, 1, Stamp(), t0 + std::chrono::seconds(9));
  ListWhole(&g, 2, Stamp(), t0 + std::chrono::seconds(9));
  g.Drop(1);
  EXPECT_FALSE(g.Open(1, Stamp(), t0).keep);
  EXPECT_TRUE(g.Open(2, Stamp(), t0).keep);
}

// A copy the kernel has not completed is kept for the next holder to
// complete; completed from one snapshot it may be granted, from two it is
// dropped instead.
TEST(ListingGrantsTest, AnIncompleteCopyIsCompletedAndDroppedOnlyWhenItJoinsTwoSnapshots) {
  ListingGrants g;
  const Clock::time_point t0 = Clock::now();
  const Clock::time_point until = t0 + std::chrono::seconds(9);
  const ListingStamp s = Stamp();
  // Left partway, then completed from the same snapshot: granted.
  EXPECT_FALSE(g.Open(1, s, t0).keep);
  g.Filled(1, 0xaa, true);
  g.Close(1);
  auto next = g.Open(1, s, t0);
  EXPECT_TRUE(next.cache && next.keep) << "an incomplete copy is never dropped";
  g.Filled(1, 0xaa, true);
  EXPECT_FALSE(g.Ended(1, s, true, true, until)) << "one snapshot throughout";
  g.Close(1);
  EXPECT_TRUE(g.Open(1, s, t0).keep) << "granted";
  g.Close(1);
  // Left partway, completed from another snapshot: dropped, not granted.
  g.Open(2, s, t0);
  g.Filled(2, 0xaa, true);
  g.Close(2);
  EXPECT_TRUE(g.Open(2, s, t0).keep);
  g.Filled(2, 0xbb, true);
  EXPECT_TRUE(g.Ended(2, s, true, true, until)) << "two snapshots joined";
  g.Close(2);
  EXPECT_FALSE(g.Open(2, s, t0).keep) << "a dropped copy is not granted";
  g.Close(2);
  // A holder that rewinds before the end: the same, within one handle.
  g.Open(3, s, t0);
  g.Filled(3, 0xaa, true);
  g.Filled(3, 0xcc, true);
  EXPECT_TRUE(g.Ended(3, s, true, false, until));
  g.Close(3);
  EXPECT_EQ(g.size(), 1u) << "only folder 1's grant is kept";
}

// A change while the kernel fills a copy marks it to be dropped when
// complete; with no copy being filled it may be dropped at once.
TEST(ListingGrantsTest, AChangeWhileACopyIsFilledDropsItWhenComplete) {
  ListingGrants g;
  const Clock::time_point t0 = Clock::now();
  const ListingStamp s = Stamp();
  EXPECT_TRUE(g.Changed(1)) << "unknown folder: nothing is being filled";
  g.Open(1, s, t0);
  g.Filled(1, 0xaa, true);
  EXPECT_FALSE(g.Changed(1)) << "being filled: its pages must stay";
  EXPECT_TRUE(g.Ended(1, s, true, true, t0 + std::chrono::seconds(9)));
  EXPECT_TRUE(g.Changed(1)) << "complete: droppable";
  g.Close(1);
  g.Open(1, s, t0);
  g.Filled(1, 0xaa, true);
  EXPECT_FALSE(g.Ended(1, s, true, true, t0 + std::chrono::seconds(9)))
      << "a fresh copy, unchanged";
  g.Close(1);
  EXPECT_TRUE(g.Open(1, s, t0).keep);
  g.Close(1);
  g.Drop(1);
  EXPECT_EQ(g.size(), 0u) << "forgotten with its inode";
}

// A holder that reached the end with a gap (a seek forward) may or may
// not have completed the kernel's copy: kept for the next holder of the
// same folder, dropped at the open of a changed one.
TEST(ListingGrantsTest, ACopyThatMayBeCompleteIsKeptOnlyForTheSameStamp) {
  ListingGrants g;
  const Clock::time_point t0 = Clock::now();
  const Clock::time_point until = t0 + std::chrono::seconds(9);
  const ListingStamp s = Stamp();
  ListingStamp changed = Stamp();
  changed.mtime_ns++;
  for (int id : {1, 2}) {
    g.Open(id, s, t0);
    g.Filled(id, 0xaa, true);
    EXPECT_FALSE(g.Ended(id, s, /*gapless=*/false, /*clean=*/false, until));
    g.Close(id);
  }
  auto same = g.Open(1, s, t0);
  EXPECT_TRUE(same.cache && same.keep) << "the same folder: complete or not, it stands";
  g.Filled(1, 0xaa, true);
  EXPECT_FALSE(g.Ended(1, s, true, true, until));
  g.Close(1);
  EXPECT_TRUE(g.Open(1, s, t0).keep) << "completed and granted";
  g.Close(1);
  auto other = g.Open(2, changed, t0);
  EXPECT_TRUE(other.cache);
  EXPECT_FALSE(other.keep) << "a complete copy of the folder before its change must go";
  g.Close(2);
  // A listing from the start reached the daemon: the kernel held no
  // complete copy, so the one it holds now is incomplete, for sure.
  g.Open(3, s, t0);
  g.Filled(3, 0xaa, true);
  g.Ended(3, s, false, false, until);
  g.Close(3);
  g.Open(3, s, t0);
  g.Filled(3, 0xaa, /*from_start=*/true);
  g.Close(3);
  EXPECT_TRUE(g.Open(3, changed, t0).keep) << "incomplete: kept to be completed";
  g.Close(3);
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
