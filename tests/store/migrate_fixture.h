// A generated logdir with a fresh store beside it, for the tests of
// migration and of what undoes it (restore, export).
#pragma once

#include <gtest/gtest.h>
#include <sys/stat.h>

#include <map>
#include <memory>
#include <string>
#include <vector>

#include "events/verifier.h"
#include "store/cold_store.h"
#include "store/migrate.h"
#include "store/store_dir.h"
#include "tests/test_util.h"
#include "tools/gen/gen.h"

namespace tbfs::store {

struct FileState {
  std::string bytes;
  mode_t mode;
  int64_t mtime_ns;
};

inline std::map<std::string, FileState> Snapshot(const std::string& logdir) {
  std::map<std::string, FileState> out;
  WalkOptions w;
  w.skip_dirs = {kStoreDirName};
  EXPECT_TRUE(WalkTree(logdir, w, [&](const WalkEntry& e) {
                out[e.rel] = {tbfs::testing::ReadBytes(JoinPath(logdir, e.rel)), e.st.st_mode,
                              static_cast<int64_t>(e.st.st_mtim.tv_sec) * 1'000'000'000 +
                                  e.st.st_mtim.tv_nsec};
              }).ok());
  return out;
}

inline std::vector<events::FileDigest> Baseline(const std::string& logdir) {
  events::VerifyOptions o;
  o.walk.skip_dirs = {kStoreDirName};
  auto r = events::VerifyLogdir(logdir, o);
  EXPECT_TRUE(r.ok());
  return r->digest.files;
}

class MigrateTest : public ::testing::Test {
 protected:
  void SetUp() override {
    gen::GenOptions g;
    g.runs = 2;
    g.steps = 100;
    g.trace_mb = 2;
    gen::GenReport report;
    ASSERT_TRUE(gen::GenerateLogdir(logdir_, g, &report).ok());
    before_ = Snapshot(logdir_);
    baseline_ = Baseline(logdir_);
    OpenOptions o;
    o.create_if_missing = true;
    auto s = ColdStore::Open(JoinPath(logdir_, kStoreDirName), o);
    ASSERT_TRUE(s.ok());
    store_ = std::move(s).value();
  }

  // Every trace, however recent; what is skipped (and why) into *skipped.
  std::vector<Candidate> Candidates(std::vector<Skipped>* skipped = nullptr) {
    CandidateOptions c;
    c.older_than_s = 0;
    c.walk.skip_dirs = {kStoreDirName};
    std::vector<Candidate> out;
    std::vector<Skipped> ignored;
    EXPECT_TRUE(FindCandidates(logdir_, c, &out, skipped ? skipped : &ignored).ok());
    return out;
  }

  MigrateOptions Options() {
    MigrateOptions o;
    o.chunk_bytes = 64 << 10;
    o.level = 3;
    o.walk.skip_dirs = {kStoreDirName};
    return o;
  }

  tbfs::testing::TempDir dir_;
  std::string logdir_ = dir_ / "logdir";
  std::map<std::string, FileState> before_;
  std::vector<events::FileDigest> baseline_;
  std::unique_ptr<ColdStore> store_;
};

}  // namespace tbfs::store
