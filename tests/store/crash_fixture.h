// Crashing a real `tbfs migrate` at a failpoint, and what must hold after
// recovery: the helpers of the crash tests (store/migrate, store/recovery).
#pragma once

#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <filesystem>
#include <map>
#include <string>
#include <vector>

#include "base/failpoint.h"
#include "events/verifier.h"
#include "store/file_io.h"
#include "store/maintenance.h"
#include "tests/store/migrate_fixture.h"
#include "tests/test_util.h"
#include "tools/gen/gen.h"

namespace tbfs::store {

// After recovery: no journal record, every file of `before` exactly once (in
// the logdir or in the store) with its bytes, no stray file, the scalars
// intact, and a clean fsck.
inline void ExpectEveryFileOnce(ColdStore& store, const std::string& logdir,
                                const std::map<std::string, FileState>& before,
                                const std::vector<events::FileDigest>& baseline,
                                const std::string& scratch, const std::string& label) {
  std::vector<storepb::JournalRecord> journal;
  ASSERT_TRUE(store.ListJournal(&journal).ok());
  EXPECT_TRUE(journal.empty()) << label;
  auto after = Snapshot(logdir);
  WorkPool pool(2);
  for (const auto& [path, state] : before) {
    bool hot = after.count(path) > 0;
    auto cold = store.Lookup(path);
    ASSERT_NE(hot, cold.ok()) << label << ": " << path << (hot ? " in both places" : " lost");
    if (hot) {
      EXPECT_TRUE(after[path].bytes == state.bytes) << label << ": " << path;
      struct stat st;
      if (path.ends_with("holes.pt.trace.json") &&
          ::stat(JoinPath(logdir, path).c_str(), &st) == 0) {
        EXPECT_LT(st.st_blocks * 512, st.st_size / 4) << label << ": " << path << " is dense";
      }
    } else {
      MaterializeOptions mo;
      mo.pool = &pool;
      std::filesystem::create_directories(scratch);
      ASSERT_TRUE(MaterializeFile(store, *cold, scratch, path, mo).ok());
      EXPECT_TRUE(tbfs::testing::ReadBytes(JoinPath(scratch, path)) == state.bytes)
          << label << ": " << path;
    }
  }
  for (const auto& [path, state] : after) {
    EXPECT_TRUE(before.count(path)) << label << ": stray file " << path;
  }
  EXPECT_TRUE(events::CheckBaseline(logdir, baseline).empty()) << label;
  auto fsck = Fsck(store, &pool, nullptr);
  ASSERT_TRUE(fsck.ok());
  EXPECT_TRUE(fsck->clean()) << label;
  EXPECT_EQ(fsck->orphan_chunk_files, 0u) << label;
}

// A generated logdir (2 runs, 3 MiB of traces) whose `tbfs migrate
// --apply` the failpoint in `env` ends; *before and *baseline: the logdir's
// files and scalars before it ran.
inline void GenerateAndCrash(const std::string& logdir, const std::string& env,
                             std::map<std::string, FileState>* before,
                             std::vector<events::FileDigest>* baseline) {
  gen::GenOptions g;
  g.runs = 2;
  g.steps = 100;
  g.trace_mb = 3;
  gen::GenReport report;
  ASSERT_TRUE(gen::GenerateLogdir(logdir, g, &report).ok());
  // And a sparse trace beside a run's tfevents: 64 MiB, three places with
  // data, holes between (stored as holes, written back as holes).
  std::string run_dir;
  for (const auto& e : std::filesystem::recursive_directory_iterator(logdir)) {
    if (e.path().filename().string().find("tfevents") != std::string::npos) {
      run_dir = e.path().parent_path().string();
      break;
    }
  }
  ASSERT_FALSE(run_dir.empty());
  {
    const std::string sparse = run_dir + "/holes.pt.trace.json";
    UniqueFd fd(::open(sparse.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644));
    ASSERT_TRUE(fd.valid());
    ASSERT_EQ(::ftruncate(fd.get(), off_t{64} << 20), 0);
    for (off_t at : {off_t{0}, (off_t{20} << 20) + 777, (off_t{64} << 20) - 100000}) {
      const std::string bytes = tbfs::testing::RandomBytes(90000, static_cast<uint64_t>(at));
      ASSERT_EQ(::pwrite(fd.get(), bytes.data(), bytes.size(), at),
                static_cast<ssize_t>(bytes.size()));
    }
  }
  *before = Snapshot(logdir);
  *baseline = Baseline(logdir);
  auto run = tbfs::testing::RunCommand(env + " " + TBFS_BINARY + " migrate " + logdir +
                                       " --older-than 0 --apply --chunk-size 64K >/dev/null 2>&1");
  ASSERT_EQ(run.exit_code, kFailpointExitCode) << env << ": the failpoint was not reached";
}

}  // namespace tbfs::store
