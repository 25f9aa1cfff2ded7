// The compaction after a change (restore, gc): when it fails, the command
// says what it did, then that the space is still on disk, and exits 1 (a
// restore that restored its files said only the compaction's error and
// exited 2, as if nothing had been done).
#include <gtest/gtest.h>
#include <sys/stat.h>

#include <nlohmann/json.hpp>

#include "base/fs_util.h"
#include "tests/test_util.h"

namespace tbfs {
namespace {

using namespace tbfs::testing;

class CompactionCli : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_EQ(RunCommand(Tbfs("gen " + logdir_ + " --runs 2 --steps 50 --trace-mb 4 >/dev/null"))
                  .exit_code,
              0);
    auto r = RunCommand(Tbfs("migrate " + logdir_ + " --apply --older-than 0 --json"));
    ASSERT_EQ(r.exit_code, 0) << r.out;
    r = RunCommand(Tbfs("ls " + logdir_ + " --json"));
    ASSERT_EQ(r.exit_code, 0) << r.out;
    for (const auto& f : nlohmann::json::parse(r.out)) cold_.push_back(f["path"]);
    ASSERT_GE(cold_.size(), 2u);
  }
  // The command with the store's compaction failing as on a full disk.
  CommandResult Failing(const std::string& args) {
    return RunCommand("TBFS_FAIL=store.compact " + Tbfs(args));
  }

  TempDir dir_;
  const std::string logdir_ = dir_ / "logdir";
  std::vector<std::string> cold_;
};

TEST_F(CompactionCli, ARestoreWhoseCompactionFailsSaysItRestoredAndExitsOne) {
  auto r = Failing("restore " + logdir_ + " '" + cold_[0] + "' --apply 2>&1");
  EXPECT_EQ(r.exit_code, 1) << r.out;
  EXPECT_NE(r.out.find("restored 1 files"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("warning: the space of what was deleted or replaced is still on disk"),
            std::string::npos)
      << r.out;
  EXPECT_NE(r.out.find("failpoint store.compact"), std::string::npos) << r.out;
  struct stat st;
  EXPECT_EQ(::lstat(JoinPath(logdir_, cold_[0]).c_str(), &st), 0) << "not restored";
  EXPECT_TRUE(S_ISREG(st.st_mode));

  r = Failing("restore " + logdir_ + " '" + cold_[1] + "' --apply --json");
  EXPECT_EQ(r.exit_code, 1) << r.out;
  const auto j = nlohmann::json::parse(r.out);
  EXPECT_EQ(j["files"], 1);
  EXPECT_NE(j["compact_error"].get<std::string>().find("store.compact"), std::string::npos);
  // The next change compacts.
  r = RunCommand(Tbfs("gc " + logdir_ + " --keep-last 1 --apply --json"));
  EXPECT_EQ(r.exit_code, 0) << r.out;
  EXPECT_EQ(nlohmann::json::parse(r.out)["compact_error"], "");
}

TEST_F(CompactionCli, AGcWhoseCompactionFailsSaysWhatItDeletedAndExitsOne) {
  auto dry = RunCommand(Tbfs("gc " + logdir_ + " --older-than 0s --json"));
  ASSERT_EQ(dry.exit_code, 0) << dry.out;
  const size_t doomed = nlohmann::json::parse(dry.out)["files"].get<size_t>();
  ASSERT_GE(doomed, 1u) << dry.out;
  auto r = Failing("gc " + logdir_ + " --older-than 0s --apply --json");
  EXPECT_EQ(r.exit_code, 1) << r.out;
  const auto j = nlohmann::json::parse(r.out);
  EXPECT_EQ(j["files"], doomed);
  EXPECT_NE(j["compact_error"].get<std::string>().find("store.compact"), std::string::npos);
  r = RunCommand(Tbfs("gc " + logdir_ + " --older-than 0s --json"));
  EXPECT_EQ(nlohmann::json::parse(r.out)["files"], 0) << "the files were not deleted";
  // As the warning says, the next gc compacts, even with nothing to delete
  // (red team: it compacted only after a deletion): every file is gone,
  // and what they held is worth a compaction.
  auto disk = [&] {
    auto du = RunCommand(Tbfs("du " + logdir_ + " --json"));
    return nlohmann::json::parse(du.out)["store_disk_bytes"].get<uint64_t>();
  };
  const uint64_t before = disk();
  r = RunCommand(Tbfs("gc " + logdir_ + " --older-than 0s --apply --json"));
  EXPECT_EQ(r.exit_code, 0) << r.out;
  EXPECT_EQ(nlohmann::json::parse(r.out)["compact_error"], "");
  EXPECT_LT(disk(), before) << "not compacted";
}

}  // namespace
}  // namespace tbfs
