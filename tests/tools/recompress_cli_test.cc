// `tbfs recompress` as an admin runs it: every file intact after it, after
// a crash in the middle of it, and after the run that finishes it.
#include <gtest/gtest.h>

#include <filesystem>
#include <map>
#include <nlohmann/json.hpp>

#include "base/fs_util.h"
#include "tests/test_util.h"

namespace tbfs {
namespace {

using namespace tbfs::testing;

// path -> content of every file beneath root.
std::map<std::string, std::string> Files(const std::string& root) {
  std::map<std::string, std::string> out;
  for (const auto& e : std::filesystem::recursive_directory_iterator(root)) {
    if (e.is_regular_file()) {
      out[std::filesystem::relative(e.path(), root).string()] = ReadBytes(e.path().string());
    }
  }
  return out;
}

TEST(RecompressCli, AKilledRunLeavesEveryFileReadableAndTheNextFinishesIt) {
  TempDir dir;
  const std::string logdir = dir / "logdir";
  ASSERT_EQ(
      RunCommand(Tbfs("gen " + logdir + " --runs 1 --steps 50 --trace-mb 12 >/dev/null")).exit_code,
      0);
  auto r = RunCommand(
      Tbfs("migrate " + logdir + " --apply --older-than 0 --level 3 --no-dictionaries --json"));
  ASSERT_EQ(r.exit_code, 0) << r.out;
  ASSERT_EQ(
      RunCommand(Tbfs("export " + logdir + " --to " + (dir / "before") + " >/dev/null")).exit_code,
      0);
  const auto before = Files(dir / "before");
  ASSERT_GT(before.size(), 1u);

  // Bad input changes nothing.
  r = RunCommand(Tbfs("recompress " + logdir + " --level 40 2>&1"));
  EXPECT_EQ(r.exit_code, 2) << r.out;
  EXPECT_NE(r.out.find("--level must be 1..22"), std::string::npos) << r.out;
  r = RunCommand(Tbfs("recompress " + (dir / "missing") + " 2>&1"));
  EXPECT_EQ(r.exit_code, 2) << r.out;
  // A folder with no store: nothing is cold, as restore says; nothing made.
  r = RunCommand(Tbfs("recompress " + (dir / "before") + " 2>&1"));
  EXPECT_EQ(r.exit_code, 0) << r.out;
  EXPECT_NE(r.out.find("nothing is cold"), std::string::npos) << r.out;
  EXPECT_FALSE(std::filesystem::exists(dir / "before/.tbfs"));

  r = RunCommand("TBFS_FAILPOINT=recompress.chunks_synced " +
                 Tbfs("recompress " + logdir + " --level 6 2>&1"));
  ASSERT_EQ(r.exit_code, 86) << "the crash point was reached: " << r.out;
  r = RunCommand(Tbfs("fsck " + logdir + " 2>&1"));
  EXPECT_EQ(r.exit_code, 0) << r.out;

  r = RunCommand(Tbfs("recompress " + logdir + " --level 6 --json"));
  ASSERT_EQ(r.exit_code, 0) << r.out;
  auto j = nlohmann::json::parse(r.out);
  EXPECT_EQ(j["files"].get<size_t>(), before.size()) << r.out;
  EXPECT_TRUE(j["failed"].empty());
  EXPECT_LT(j["stored_after"].get<uint64_t>(), j["stored_before"].get<uint64_t>());
  // The replaced chunks left the disk: the store takes less room than it did.
  EXPECT_LT(j["disk_after"].get<uint64_t>(), j["disk_before"].get<uint64_t>()) << r.out;
  r = RunCommand(Tbfs("recompress " + logdir + " --level 6 --json"));
  ASSERT_EQ(r.exit_code, 0) << r.out;
  EXPECT_EQ(nlohmann::json::parse(r.out)["unchanged"].get<size_t>(), before.size());

  ASSERT_EQ(
      RunCommand(Tbfs("export " + logdir + " --to " + (dir / "after") + " >/dev/null")).exit_code,
      0);
  EXPECT_EQ(Files(dir / "after"), before);
  r = RunCommand(Tbfs("fsck " + logdir + " 2>&1"));
  EXPECT_EQ(r.exit_code, 0) << r.out;
}

}  // namespace
}  // namespace tbfs
