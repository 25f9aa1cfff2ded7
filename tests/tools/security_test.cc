// Nothing escapes the logdir (issue 8), offline: symlinks swapped in under
// paths tbfs checked, one tbfs writer per logdir, paths longer than
// PATH_MAX, a private store and backups, and configuration that tries to
// be clever. Root runs these commands; an ordinary user (uid 65534) owns
// run folders.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <thread>

#include "base/fs_util.h"
#include "fmt/format.h"
#include "tests/test_util.h"

namespace tbfs {
namespace {

using namespace tbfs::testing;

constexpr uid_t kUser = 65534;  // an ordinary user

// A logdir with one run owned by the user: a tfevents file and traces.
class Escapes : public ::testing::Test {
 protected:
  void SetUp() override {
    WriteBytes(L("u/events.out.tfevents.1.host"), "");
    for (int i = 0; i < 3; ++i) {
      WriteBytes(L(fmt::format("u/plugins/profile/t{}.pt.trace.json", i)),
                 fmt::format("{{\"trace\": {}}}\n", i) + std::string(20000, 'x'));
    }
    ASSERT_EQ(RunCommand("chown -R " + std::to_string(kUser) + " " + L("u")).exit_code, 0);
    std::filesystem::create_directories(outside_);
  }
  std::string L(const std::string& rel) const { return logdir_ + "/" + rel; }
  int Migrate(const std::string& extra = "") {
    return RunCommand(
               Tbfs("migrate " + logdir_ + " --older-than 0 --apply " + extra + " >/dev/null 2>&1"))
        .exit_code;
  }
  // What the user does: the folder they own becomes a symlink elsewhere.
  void SwapForSymlink(const std::string& rel_dir) {
    std::filesystem::rename(L(rel_dir), L(rel_dir + ".moved"));
    std::filesystem::create_directory_symlink(outside_, L(rel_dir));
  }
  TempDir dir_;
  std::string logdir_ = dir_ / "logdir";
  std::string outside_ = dir_ / "outside";  // say, /etc
};

TEST_F(Escapes, RestoreNeverWritesThroughASymlinkedFolder) {
  ASSERT_EQ(Migrate(), 0);
  ASSERT_FALSE(std::filesystem::exists(L("u/plugins/profile/t0.pt.trace.json")));
  SwapForSymlink("u/plugins/profile");
  auto r = RunCommand(Tbfs("restore " + logdir_ + " --all --apply 2>&1"));
  EXPECT_NE(r.exit_code, 0) << r.out;
  EXPECT_TRUE(std::filesystem::is_empty(outside_)) << "restore wrote outside the logdir";
  // Nothing was lost: the files are still cold, and come back once the
  // folder is a folder again.
  std::filesystem::remove(L("u/plugins/profile"));
  ASSERT_EQ(RunCommand(Tbfs("restore " + logdir_ + " --all --apply >/dev/null 2>&1")).exit_code, 0);
  EXPECT_TRUE(std::filesystem::exists(L("u/plugins/profile/t0.pt.trace.json")));
}

TEST_F(Escapes, MigrationNeverUnlinksThroughASymlinkedFolder) {
  // The file outside has a candidate's name; the user swaps the folder
  // while the batch is held between its journal and its copies.
  WriteBytes(outside_ + "/t1.pt.trace.json", "root's file");
  ::chmod((outside_ + "/t1.pt.trace.json").c_str(), 0600);
  std::string marker = dir_ / "pause";
  WriteBytes(marker, "");
  std::thread migrate([&] {
    RunCommand("TBFS_PAUSE=migrate.batch:" + marker + " " +
               Tbfs("migrate " + logdir_ + " --older-than 0 --apply >/dev/null 2>&1"));
  });
  WaitUntil([&] { return std::filesystem::exists(marker + ".reached"); },
            std::chrono::milliseconds(30000));
  ASSERT_TRUE(std::filesystem::exists(marker + ".reached"));
  SwapForSymlink("u/plugins/profile");
  std::filesystem::remove(marker);
  migrate.join();
  EXPECT_EQ(ReadBytes(outside_ + "/t1.pt.trace.json"), "root's file");
  auto ls = RunCommand(Tbfs("ls " + logdir_));
  EXPECT_EQ(ls.out.find("root's file"), std::string::npos);
  for (int i = 0; i < 3; ++i) {
    EXPECT_TRUE(
        std::filesystem::exists(L(fmt::format("u/plugins/profile.moved/t{}.pt.trace.json", i))));
  }
}

TEST_F(Escapes, OneTbfsWriterPerLogdirWhateverTheStore) {
  // A migration held in the middle, with its store elsewhere.
  std::string marker = dir_ / "pause";
  WriteBytes(marker, "");
  std::thread first([&] {
    RunCommand("TBFS_PAUSE=migrate.batch:" + marker + " " +
               Tbfs("migrate " + logdir_ + " --older-than 0 --apply --store " + (dir_ / "s1") +
                    " >/dev/null 2>&1"));
  });
  WaitUntil([&] { return std::filesystem::exists(marker + ".reached"); },
            std::chrono::milliseconds(30000));
  auto second = RunCommand(
      Tbfs("migrate " + logdir_ + " --older-than 0 --apply --store " + (dir_ / "s2") + " 2>&1"));
  std::filesystem::remove(marker);
  first.join();
  EXPECT_EQ(second.exit_code, 2) << second.out;
  EXPECT_NE(second.out.find("in use"), std::string::npos) << second.out;
  EXPECT_EQ(std::count(second.out.begin(), second.out.end(), '\n'), 1) << second.out;
  EXPECT_FALSE(std::filesystem::exists(dir_ / "s2/CURRENT"));
}

TEST_F(Escapes, APathLongerThanPathMaxBlocksNothing) {
  std::string deep = "u/deep";
  while (deep.size() < PATH_MAX + 200) deep += "/" + std::string(200, 'd');
  // Made one folder at a time, as a user would (the whole path is too long
  // for mkdir(2) itself), with a trace at the bottom.
  UniqueFd dir(::open(L("u").c_str(), O_PATH | O_DIRECTORY));
  for (const auto& part : std::filesystem::path(deep.substr(2))) {
    ASSERT_EQ(::mkdirat(dir.get(), part.c_str(), 0755), 0);
    dir.reset(::openat(dir.get(), part.c_str(), O_PATH | O_DIRECTORY));
    ASSERT_TRUE(dir.valid());
  }
  UniqueFd leaf(::openat(dir.get(), "t.pt.trace.json", O_WRONLY | O_CREAT, 0644));
  ASSERT_TRUE(leaf.valid());
  ASSERT_EQ(::write(leaf.get(), "{}", 2), 2);
  leaf.reset();
  for (const std::string& cmd : {"scan " + logdir_, "verify " + logdir_}) {
    auto r = RunCommand(Tbfs(cmd + " 2>&1"));
    EXPECT_EQ(r.exit_code, 0) << cmd << ": " << r.out;
  }
  auto r = RunCommand(Tbfs("migrate " + logdir_ + " --older-than 0 --apply --json 2>/dev/null"));
  EXPECT_EQ(r.exit_code, 0) << r.out;
  auto j = nlohmann::json::parse(r.out, nullptr, false);
  ASSERT_FALSE(j.is_discarded()) << r.out;
  EXPECT_EQ(j["files_moved"].get<int>(), 4) << r.out;  // the deep one too
}

TEST_F(Escapes, AFolderTooDeepToWalkIsSkippedNotFatal) {
  // Deeper than a walk enters (and than a recursive walk's stack allows).
  UniqueFd dir(::open(L("u").c_str(), O_PATH | O_DIRECTORY));
  for (int level = 0; level < 3000; ++level) {
    ASSERT_EQ(::mkdirat(dir.get(), "d", 0755), 0);
    dir.reset(::openat(dir.get(), "d", O_PATH | O_DIRECTORY));
    ASSERT_TRUE(dir.valid());
  }
  UniqueFd leaf(::openat(dir.get(), "t.pt.trace.json", O_WRONLY | O_CREAT, 0644));
  ASSERT_TRUE(leaf.valid());
  for (const std::string& cmd : {"scan " + logdir_, "migrate " + logdir_ + " --older-than 0"}) {
    auto r = RunCommand(Tbfs(cmd + " 2>&1"));
    EXPECT_EQ(r.exit_code, 0) << cmd << ": " << r.out.substr(0, 500);
    EXPECT_NE(r.out.find("deep"), std::string::npos) << cmd << ": " << r.out.substr(0, 500);
  }
  EXPECT_EQ(Migrate(), 0);
  EXPECT_FALSE(std::filesystem::exists(L("u/plugins/profile/t0.pt.trace.json")));  // the rest moved
}

TEST_F(Escapes, AStoreFolderThatIsNotAStoreIsLeftAlone) {
  WriteBytes(dir_ / "notastore/data.txt", "someone's");
  ::chmod((dir_ / "notastore/data.txt").c_str(), 0644);
  auto r = RunCommand(Tbfs("migrate " + logdir_ + " --older-than 0 --apply --store " +
                           (dir_ / "notastore") + " --backup " + (dir_ / "backups") + " 2>&1"));
  EXPECT_EQ(r.exit_code, 2) << r.out;
  struct stat st;
  ASSERT_EQ(::stat((dir_ / "notastore/data.txt").c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 07777, 0644u);
  EXPECT_FALSE(std::filesystem::exists(dir_ / "backups"));
  EXPECT_TRUE(std::filesystem::exists(L("u/plugins/profile/t0.pt.trace.json")));
}

TEST_F(Escapes, TheStoreAndBackupsArePrivate) {
  std::filesystem::create_directories(L(".tbfs"));
  ::chmod(L(".tbfs").c_str(), 0755);  // made beforehand, readable by all
  ::chmod(L("u/plugins/profile/t0.pt.trace.json").c_str(), 0600);
  ASSERT_EQ(Migrate("--backup " + (dir_ / "backups")), 0);
  struct stat st;
  ASSERT_EQ(::stat(L(".tbfs").c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 07777, 0700u);
  for (const auto& e : std::filesystem::directory_iterator(L(".tbfs"))) {
    ASSERT_EQ(::lstat(e.path().c_str(), &st), 0);
    if (S_ISREG(st.st_mode)) {
      EXPECT_EQ(st.st_mode & 077, 0u) << e.path();
    }
  }
  int backups = 0;
  for (const auto& e : std::filesystem::directory_iterator(dir_ / "backups")) {
    ASSERT_EQ(::stat(e.path().c_str(), &st), 0);
    EXPECT_EQ(st.st_mode & 07777, 0600u) << e.path();
    backups++;
  }
  EXPECT_EQ(backups, 1);
}

TEST(Config, DuplicateKeysAndDeepNestingAreOneLineErrors) {
  TempDir dir;
  WriteBytes(dir / "logdir/r/events.out.tfevents.1.h", "");
  struct Case {
    std::string yaml, expect;
  };
  std::string deep = "validate: " + std::string(2000, '[') + std::string(2000, ']') + "\n";
  for (const Case& c : {Case{"criteria:\n  trace_marker: [a]\n  trace_marker: [b]\n", "line 3"},
                        Case{"dry_run: true\ndry_run: false\n", "line 2"}, Case{deep, "deep"}}) {
    WriteBytes(dir / "c.yaml", c.yaml);
    auto r =
        RunCommand(Tbfs("migrate " + (dir / "logdir") + " --config " + (dir / "c.yaml") + " 2>&1"));
    EXPECT_EQ(r.exit_code, 2) << r.out;
    EXPECT_EQ(std::count(r.out.begin(), r.out.end(), '\n'), 1) << r.out;
    EXPECT_NE(r.out.find(c.expect), std::string::npos) << r.out;
  }
}

TEST(Config, ManyDoubleStarsMatchInTimeLinearInThePath) {
  TempDir dir;
  std::string rel = "r";
  for (int i = 0; i < 40; ++i) rel += "/d";
  WriteBytes(dir / ("logdir/" + rel + "/x.bin"), "x");
  WriteBytes(dir / "logdir/r/events.out.tfevents.1.h", "");
  std::string marker = "**";
  for (int i = 0; i < 18; ++i) marker += "/d/**";
  marker += "/nomatch";
  WriteBytes(dir / "c.yaml", "criteria:\n  trace_marker: [\"" + marker + "\"]\n");
  // Backtracking over 18 '**' between 40 folders would not end in a lifetime.
  auto r =
      RunCommand("timeout 60 " + Tbfs("migrate " + (dir / "logdir") + " --older-than 0 --config " +
                                      (dir / "c.yaml") + " >/dev/null 2>&1"));
  EXPECT_EQ(r.exit_code, 0);
}

}  // namespace
}  // namespace tbfs
