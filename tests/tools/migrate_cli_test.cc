// The store commands as a user runs them: dry runs change nothing, bad input
// is refused with one line, the backup is a plain tar.zst.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <sys/xattr.h>

#include <filesystem>
#include <map>
#include <nlohmann/json.hpp>
#include <random>
#include <set>
#include <thread>

#include "base/fs_util.h"
#include "fmt/format.h"
#include "store/cold_store.h"
#include "store/maintenance.h"
#include "store/store_dir.h"
#include "tests/test_util.h"

namespace tbfs {
namespace {

using namespace tbfs::testing;

// path -> content, skipping the store.
std::map<std::string, std::string> Tree(const std::string& root) {
  std::map<std::string, std::string> out;
  WalkOptions w;
  w.skip_dirs = {".tbfs"};
  EXPECT_TRUE(WalkTree(root, w, [&](const WalkEntry& e) {
                out[e.rel] = ReadBytes(JoinPath(root, e.rel));
              }).ok());
  return out;
}

class MigrateCli : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_EQ(RunCommand(Tbfs("gen " + logdir_ + " --runs 2 --steps 100 --trace-mb 2 >/dev/null"))
                  .exit_code,
              0);
    before_ = Tree(logdir_);
  }
  TempDir dir_;
  std::string logdir_ = dir_ / "logdir";
  std::map<std::string, std::string> before_;
};

TEST_F(MigrateCli, DryRunChangesNothing) {
  auto r = RunCommand(Tbfs("migrate --json " + logdir_ + " --older-than 0"));
  ASSERT_EQ(r.exit_code, 0) << r.out;
  auto j = nlohmann::json::parse(r.out);
  EXPECT_TRUE(j["dry_run"].get<bool>());
  EXPECT_GT(j["files"].get<int>(), 0);
  EXPECT_GT(j["estimated_freed_bytes"].get<uint64_t>(), 0u);
  EXPECT_EQ(Tree(logdir_), before_);
  EXPECT_FALSE(std::filesystem::exists(logdir_ + "/.tbfs"));
}

// A trace whose extended attributes pass what a manifest keeps (64 KiB; a
// tmpfs takes them, ext4 does not) stays in place, said as such, pass
// after pass: not a failure of the store every time (exit 0, not 1), and
// not a batch every time either.
TEST(MigrateXattrs, ATraceWithMoreThan64KiBOfXattrsStaysInPlace) {
  TempDir shm("/dev/shm");
  const std::string logdir = shm / "logdir";
  ASSERT_EQ(
      RunCommand(Tbfs("gen " + logdir + " --runs 1 --steps 100 --trace-mb 1 >/dev/null")).exit_code,
      0);
  std::string trace;
  for (const auto& e : std::filesystem::recursive_directory_iterator(logdir)) {
    if (e.path().string().ends_with(".pt.trace.json")) trace = e.path().string();
  }
  ASSERT_FALSE(trace.empty());
  const std::string value(30000, 'x');
  for (const char* name : {"user.a", "user.b", "user.c"}) {
    ASSERT_EQ(::setxattr(trace.c_str(), name, value.data(), value.size(), 0), 0)
        << "tmpfs without user xattrs? " << std::strerror(errno);
  }
  const std::string rel = trace.substr(logdir.size() + 1);
  // Skipped with its reason before any batch (not given up in one, which
  // costs a journal record and a flush of the engine every pass).
  auto plan = RunCommand(Tbfs("migrate --json " + logdir + " --older-than 0"));
  ASSERT_EQ(plan.exit_code, 0) << plan.out;
  auto p = nlohmann::json::parse(plan.out, nullptr, false);
  ASSERT_FALSE(p.is_discarded()) << plan.out;
  bool skipped = false;
  for (const auto& s : p["skipped"]) {
    if (s["path"] != rel) continue;
    skipped = true;
    EXPECT_NE(s["reason"].get<std::string>().find("64 KiB"), std::string::npos) << s.dump();
  }
  EXPECT_TRUE(skipped) << plan.out;
  for (int pass = 0; pass < 2; ++pass) {
    auto r = RunCommand(Tbfs("migrate --json " + logdir + " --older-than 0 --apply"));
    EXPECT_EQ(r.exit_code, 0) << r.out;
    auto j = nlohmann::json::parse(r.out, nullptr, false);
    ASSERT_FALSE(j.is_discarded()) << r.out;
    for (const auto& b : j["batches"]) {
      for (const auto& f : b["files"]) EXPECT_NE(f["path"], rel) << f.dump();
    }
    EXPECT_TRUE(std::filesystem::exists(trace));
  }
}

// One run's damaged tfevents file holds that run's traces, not the whole
// offline migration (it refused the whole logdir: a cron job any user
// could stop). The report says HELD, the exit is 1.
TEST_F(MigrateCli, ADamagedRunHoldsItsTracesAndTheOthersMove) {
  const std::string run = "resnet50_lr1e-01_run0";
  const std::string events =
      logdir_ + "/" + run + "/events.out.tfevents.1786042792.gpu-node-42.54595.0";
  std::string bytes = ReadBytes(events);
  ASSERT_GT(bytes.size(), 1000u);
  bytes[bytes.size() / 2] ^= 0x40;
  WriteBytes(events, bytes);
  auto r = RunCommand(Tbfs("migrate " + logdir_ + " --older-than 0 --apply 2>&1"));
  EXPECT_EQ(r.exit_code, 1) << r.out;
  EXPECT_NE(r.out.find("HELD: run " + run + ": "), std::string::npos) << r.out;
  size_t moved_here = 0, moved_elsewhere = 0;
  for (const auto& f : nlohmann::json::parse(RunCommand(Tbfs("ls --json " + logdir_)).out)) {
    const std::string path = f["path"];
    (path.starts_with(run + "/") ? moved_here : moved_elsewhere)++;
  }
  EXPECT_EQ(moved_here, 0u);
  EXPECT_GT(moved_elsewhere, 0u);
}

// A file name is bytes a user chose: in text output it cannot start a line
// of its own (scripts read "DAMAGED:" lines) nor drive the terminal of the
// admin who runs the command; --json keeps it whole (as UTF-8).
TEST_F(MigrateCli, NamesWithControlCharactersPrintOnOneLineAndInert) {
  const std::string name = "evil\nDAMAGED: x\x1b[2J.pt.trace.json";
  WriteBytes(logdir_ + "/" + name, std::string(4096, '{'));
  for (const std::string& cmd :
       {"scan " + logdir_, "migrate " + logdir_ + " --older-than 0",
        "migrate " + logdir_ + " --older-than 0 --apply", "ls " + logdir_,
        "gc " + logdir_ + " --older-than 0", "restore " + logdir_ + " --all"}) {
    auto r = RunCommand(Tbfs(cmd));
    ASSERT_EQ(r.exit_code, 0) << cmd << "\n" << r.out;
    EXPECT_EQ(r.out.find('\x1b'), std::string::npos) << cmd << " printed an escape";
    EXPECT_EQ(r.out.find("\nDAMAGED: x"), std::string::npos) << cmd << " printed a forged line";
    if (cmd.starts_with("ls") || cmd.starts_with("gc") || cmd.starts_with("restore")) {
      EXPECT_NE(r.out.find("evil\\x0aDAMAGED: x\\x1b[2J.pt.trace.json"), std::string::npos)
          << cmd << "\n"
          << r.out;
    }
  }
  auto j = nlohmann::json::parse(RunCommand(Tbfs("ls --json " + logdir_)).out);
  bool found = false;
  for (const auto& f : j) found = found || f["path"] == name;
  EXPECT_TRUE(found) << "--json names the file as it is";
}

TEST_F(MigrateCli, ApplyThenRestoreIsByteIdentical) {
  auto r = RunCommand(Tbfs("migrate --json " + logdir_ + " --older-than 0 --apply"));
  ASSERT_EQ(r.exit_code, 0) << r.out;
  auto j = nlohmann::json::parse(r.out);
  EXPECT_GT(j["files_moved"].get<int>(), 0);
  EXPECT_LT(j["stored_bytes"].get<uint64_t>(), j["bytes_moved"].get<uint64_t>());
  EXPECT_LT(Tree(logdir_).size(), before_.size());
  EXPECT_EQ(RunCommand(Tbfs("fsck " + logdir_ + " >/dev/null")).exit_code, 0);
  auto ls = nlohmann::json::parse(RunCommand(Tbfs("ls --json " + logdir_)).out);
  EXPECT_EQ(ls.size(), j["files_moved"].get<size_t>());
  // du: each class's ratio is its logical bytes over its stored bytes, and
  // the classes add up to the totals.
  auto du = nlohmann::json::parse(RunCommand(Tbfs("du --json " + logdir_)).out);
  uint64_t bytes = 0, stored = 0;
  ASSERT_FALSE(du["classes"].empty()) << du;
  for (const auto& [cls, c] : du["classes"].items()) {
    ASSERT_GT(c["stored_bytes"].get<uint64_t>(), 0u) << cls;
    EXPECT_DOUBLE_EQ(c["ratio"].get<double>(),
                     double(c["bytes"].get<uint64_t>()) / double(c["stored_bytes"].get<uint64_t>()))
        << cls;
    bytes += c["bytes"].get<uint64_t>();
    stored += c["stored_bytes"].get<uint64_t>();
  }
  EXPECT_EQ(bytes, du["bytes"].get<uint64_t>());
  EXPECT_EQ(stored, du["stored_bytes"].get<uint64_t>());
  ASSERT_EQ(RunCommand(Tbfs("restore " + logdir_ + " --all --apply >/dev/null")).exit_code, 0);
  EXPECT_EQ(Tree(logdir_), before_);
}

constexpr int64_t kOldAtime = 978'307'200;  // 2001-01-01

int64_t AccessTime(const std::string& path) {
  struct stat st;
  EXPECT_EQ(::lstat(path.c_str(), &st), 0) << path;
  return st.st_atim.tv_sec * 1'000'000'000ll + st.st_atim.tv_nsec;
}

// Access times of the logdir's files and folders (the store aside): path
// -> st_atim in ns. The walk itself reads folders without changing theirs
// (the test runs as root); folders are those that hold the files.
std::map<std::string, int64_t> AccessTimes(const std::string& root) {
  std::map<std::string, int64_t> out;
  WalkOptions w;
  w.skip_dirs = {".tbfs"};
  EXPECT_TRUE(WalkTree(root, w, [&](const WalkEntry& e) {
                for (std::string rel = e.rel; !out.count(rel); rel = ParentPath(rel)) {
                  out[rel] = AccessTime(JoinPath(root, rel));
                  if (rel.empty()) break;
                }
              }).ok());
  return out;
}

// An access time long before the modification time, which any read moves
// (relatime).
void MakeAccessTimeOld(const std::string& path) {
  const struct timespec times[2] = {{kOldAtime, 0}, {0, UTIME_OMIT}};
  ASSERT_EQ(::utimensat(AT_FDCWD, path.c_str(), times, AT_SYMLINK_NOFOLLOW), 0) << path;
}

// tbfs's own reads (the walk, scan, verify, a migration's copy and read
// back, restore) change no access time, as backup tools keep them: a
// file's atime says when a person last read it, and a cold file keeps the
// one it had (the daemon's migrator runs the same code).
TEST_F(MigrateCli, ItsOwnReadsLeaveAccessTimesAsTheyWere) {
  // The control: on this filesystem a read moves an old access time.
  const std::string control = dir_ / "control";
  WriteBytes(control, "read me");
  MakeAccessTimeOld(control);
  (void)ReadBytes(control);
  ASSERT_NE(AccessTime(control), kOldAtime * 1'000'000'000)
      << "the test folder's filesystem keeps no access times (mounted noatime?): "
         "this test cannot tell tbfs's reads from none";
  for (const auto& [rel, atime] : AccessTimes(logdir_)) MakeAccessTimeOld(JoinPath(logdir_, rel));
  const auto before = AccessTimes(logdir_);
  ASSERT_GT(before.size(), 4u);
  for (const auto& [rel, atime] : before) ASSERT_EQ(atime, kOldAtime * 1'000'000'000) << rel;
  for (const char* cmd : {"scan ", "verify ", "migrate --older-than 0 --apply ", "verify ", "fsck ",
                          "restore --all --apply ", "verify "}) {
    ASSERT_EQ(RunCommand(Tbfs(cmd + logdir_ + " >/dev/null")).exit_code, 0) << cmd;
  }
  EXPECT_EQ(AccessTimes(logdir_), before);
  EXPECT_EQ(Tree(logdir_), before_);
}

// The store folder given where the logdir belongs: every command that
// reads or writes the store says so, changes nothing, and exits 2, never
// "no cold store there: nothing to check" with 0.
TEST_F(MigrateCli, AStoreFolderGivenAsTheLogdirIsAnErrorNamingIt) {
  ASSERT_EQ(RunCommand(Tbfs("migrate " + logdir_ + " --older-than 0 --apply >/dev/null")).exit_code,
            0);
  const std::string store = logdir_ + "/.tbfs";
  const auto tree = Tree(logdir_);
  for (const std::string cmd : {"fsck", "ls", "du", "restore --all --apply"}) {
    auto r = RunCommand(Tbfs(cmd + " " + store + " 2>&1"));
    EXPECT_EQ(r.exit_code, 2) << cmd << ": " << r.out;
    EXPECT_NE(r.out.find("is a store folder, not a logdir"), std::string::npos)
        << cmd << ": " << r.out;
    EXPECT_EQ(std::count(r.out.begin(), r.out.end(), '\n'), 1) << r.out;
  }
  EXPECT_EQ(Tree(logdir_), tree);
  // With --store it is a store folder given on purpose.
  EXPECT_EQ(RunCommand(Tbfs("fsck " + logdir_ + " --store " + store + " >/dev/null")).exit_code, 0);
}

// Candidates stream into batches (512 files each) and the report streams
// out batch by batch: one JSON document still, naming every file once.
TEST_F(MigrateCli, ApplyReportsEveryFileOfEveryBatchInOneJsonDocument) {
  for (int i = 0; i < 700; ++i) {
    WriteBytes(logdir_ + "/many/t" + std::to_string(i) + ".pt.trace.json",
               "{\"traceEvents\": [" + std::to_string(i) + "]}");
  }
  auto r = RunCommand(Tbfs("migrate --json " + logdir_ + " --older-than 0 --apply"));
  ASSERT_EQ(r.exit_code, 0) << r.out;
  auto j = nlohmann::json::parse(r.out, nullptr, false);
  ASSERT_FALSE(j.is_discarded()) << r.out;
  ASSERT_GE(j["batches"].size(), 2u);
  std::set<std::string> moved;
  for (const auto& b : j["batches"]) {
    for (const auto& f : b["files"]) {
      EXPECT_EQ(f["outcome"], "moved") << f;
      EXPECT_TRUE(moved.insert(f["path"].get<std::string>()).second) << f;
    }
  }
  EXPECT_EQ(moved.size(), j["files_moved"].get<size_t>());
  EXPECT_GE(moved.size(), 700u);
  EXPECT_TRUE(j["ok"].get<bool>());
  EXPECT_EQ(RunCommand(Tbfs("fsck " + logdir_ + " >/dev/null")).exit_code, 0);
}

// A batch whose record the engine would not commit (red team: exit 0 and
// "moved N files" before): exit 1, said in the text and the JSON, no batch
// after it; the next run's recovery puts its files back and moves them again.
TEST_F(MigrateCli, ACommitTheStoreRefusesExitsOneAndTheNextRunRecovers) {
  for (int i = 0; i < 700; ++i) {
    WriteBytes(logdir_ + "/many/t" + std::to_string(i) + ".pt.trace.json",
               "{\"traceEvents\": [" + std::to_string(i) + "]}");
  }
  const auto before = Tree(logdir_);
  const std::string fail = "TBFS_FAIL=migrate.commit ";
  auto text = RunCommand(fail + Tbfs("migrate " + logdir_ + " --older-than 0 --apply 2>&1"));
  EXPECT_EQ(text.exit_code, 1) << text.out;
  EXPECT_NE(text.out.find("NOT COMMITTED"), std::string::npos) << text.out;

  ASSERT_EQ(RunCommand(Tbfs("restore " + logdir_ + " --all --apply >/dev/null")).exit_code, 0);
  ASSERT_EQ(Tree(logdir_), before);
  auto r = RunCommand(fail + Tbfs("migrate --json " + logdir_ + " --older-than 0 --apply"));
  EXPECT_EQ(r.exit_code, 1) << r.out;
  auto j = nlohmann::json::parse(r.out, nullptr, false);
  ASSERT_FALSE(j.is_discarded()) << r.out;
  EXPECT_FALSE(j["ok"].get<bool>());
  ASSERT_EQ(j["batches"].size(), 1u) << "a batch ran after the store refused a commit";
  EXPECT_TRUE(j["batches"][0].contains("uncommitted")) << j["batches"][0];
  EXPECT_LT(j["files_moved"].get<size_t>(), 700u);
  // A run with nothing to move still recovers the batch (red team: it
  // left the record to the next run that moved something).
  auto none = RunCommand(Tbfs("migrate " + logdir_ + " --older-than 3650d --apply 2>&1"));
  EXPECT_EQ(none.exit_code, 0) << none.out;
  EXPECT_NE(none.out.find("recovered 1 unfinished batch"), std::string::npos) << none.out;
  EXPECT_EQ(Tree(logdir_), before);

  auto again = RunCommand(Tbfs("migrate --json " + logdir_ + " --older-than 0 --apply"));
  ASSERT_EQ(again.exit_code, 0) << again.out;
  EXPECT_EQ(RunCommand(Tbfs("fsck " + logdir_ + " >/dev/null")).exit_code, 0);
  ASSERT_EQ(RunCommand(Tbfs("restore " + logdir_ + " --all --apply >/dev/null")).exit_code, 0);
  EXPECT_EQ(Tree(logdir_), before);
}

TEST_F(MigrateCli, HostileConfigLeavesEveryTfeventsFileUntouched) {
  WriteBytes(dir_ / "policy.yaml",
             "criteria:\n  trace_marker: ['.tfevents.', '*tfevents*', '**']\ndry_run: false\n");
  auto r = RunCommand(Tbfs("migrate " + logdir_ + " --older-than 0 --config " +
                           (dir_ / "policy.yaml") + " >/dev/null"));
  ASSERT_EQ(r.exit_code, 0);
  auto after = Tree(logdir_);
  int events = 0;
  for (const auto& [path, bytes] : before_) {
    if (path.find("tfevents") == std::string::npos) continue;
    ++events;
    ASSERT_TRUE(after.count(path)) << path;
    EXPECT_EQ(after[path], bytes) << path;
  }
  EXPECT_GT(events, 3);
  EXPECT_LT(after.size(), before_.size());  // the traces did move
}

TEST_F(MigrateCli, MissingMustHaveTagRefusesAndChangesNothing) {
  auto r = RunCommand(
      Tbfs("migrate " + logdir_ + " --older-than 0 --apply --must-have loss/train,not_a_tag 2>&1"));
  EXPECT_EQ(r.exit_code, 1) << r.out;
  EXPECT_NE(r.out.find("not_a_tag"), std::string::npos);
  EXPECT_EQ(Tree(logdir_), before_);
}

// The check before anything moves hands its digest of every tfevents file
// to the migration, whose batches check the must-haves against it: tags
// that are there let the traces move.
TEST_F(MigrateCli, MustHaveTagsThatAreThereLetTheTracesMove) {
  auto r = RunCommand(
      Tbfs("migrate --json " + logdir_ + " --older-than 0 --apply --must-have loss/train"));
  ASSERT_EQ(r.exit_code, 0) << r.out;
  auto j = nlohmann::json::parse(r.out, nullptr, false);
  ASSERT_FALSE(j.is_discarded()) << r.out;
  EXPECT_TRUE(j["ok"].get<bool>()) << r.out;
  EXPECT_GT(j["files_moved"].get<size_t>(), 0u) << r.out;
  auto after = Tree(logdir_);
  for (const auto& [path, bytes] : before_) {
    if (path.find("tfevents") == std::string::npos) continue;
    ASSERT_TRUE(after.count(path)) << path;
    EXPECT_EQ(after[path], bytes) << path;
  }
  EXPECT_LT(after.size(), before_.size());
}

// A tfevents file swapped for a FIFO after the walk listed it and before
// the batch took its baseline: the batch does not run, and the report
// says so and why (red team: "moved 0 files", exit 1, nothing more).
TEST_F(MigrateCli, ABatchThatCannotTakeItsBaselineIsReportedWithWhy) {
  std::string events;
  for (const auto& [path, bytes] : before_) {
    if (path.find("tfevents") != std::string::npos) events = path;
  }
  ASSERT_FALSE(events.empty());
  const std::string marker = dir_ / "pause";
  WriteBytes(marker, "");
  CommandResult r;
  std::thread migrate([&] {
    r = RunCommand("TBFS_PAUSE=migrate.batch:" + marker + " " +
                   Tbfs("migrate " + logdir_ + " --older-than 0 --apply 2>&1"));
  });
  WaitUntil([&] { return std::filesystem::exists(marker + ".reached"); },
            std::chrono::milliseconds(30000));
  const bool reached = std::filesystem::exists(marker + ".reached");
  if (reached) {
    const std::string path = logdir_ + "/" + events;
    EXPECT_EQ(::unlink(path.c_str()), 0);
    EXPECT_EQ(::mkfifo(path.c_str(), 0644), 0);
  }
  std::filesystem::remove(marker);
  migrate.join();
  ASSERT_TRUE(reached);
  EXPECT_EQ(r.exit_code, 1) << r.out;
  EXPECT_NE(r.out.find("NOT RUN"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("cannot take the verifier baseline"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find(events), std::string::npos) << r.out;
}

TEST_F(MigrateCli, WrongPathsAndGarbageAreOneLineErrors) {
  TempDir empty;
  WriteBytes(empty / "x.pt.trace.json", "[]");
  for (const std::string& args : std::vector<std::string>{
           std::string("migrate /nonexistent/logdir --apply"),
           "migrate " + empty.path() + " --older-than 0 --apply",
           "migrate " + logdir_ + " --older-than soon", "migrate " + logdir_ + " --class bogus",
           "migrate " + logdir_ + " --config /nonexistent.yaml",
           "restore " + logdir_ + " ../x --all",
           "export " + logdir_ + " --to " + (dir_ / "out") + " ../../etc",
           "restore " + logdir_ + " /etc/passwd",
           "export " + logdir_ + " --to " + logdir_ + "/copies",
           // A mistyped --store is not "nothing cold" (exit 0 before).
           "ls " + logdir_ + " --store /nonexistent/store",
           "du " + logdir_ + " --store /nonexistent", "fsck " + logdir_ + " --store /nonexistent",
           "fsck --clear-lost --store /nonexistent", "fsck --store /nonexistent",
           "gc " + logdir_ + " --keep-last 1 --store /nonexistent",
           "restore " + logdir_ + " --all --apply --store /nonexistent",
           "export " + logdir_ + " --to " + (dir_ / "out2") + " --store /nonexistent"}) {
    auto r = RunCommand(Tbfs(args + " 2>&1 >/dev/null"));
    EXPECT_EQ(r.exit_code, 2) << args << ": " << r.out;
    EXPECT_EQ(std::count(r.out.begin(), r.out.end(), '\n'), 1) << args << ": " << r.out;
  }
  EXPECT_EQ(Tree(logdir_), before_);
  EXPECT_TRUE(std::filesystem::exists(empty / "x.pt.trace.json"));
  // --allow-no-events accepts a logdir without tfevents files.
  EXPECT_EQ(RunCommand(Tbfs("migrate " + empty.path() +
                            " --older-than 0 --apply --allow-no-events >/dev/null"))
                .exit_code,
            0);
  EXPECT_FALSE(std::filesystem::exists(empty / "x.pt.trace.json"));
}

// A store behind a folder this user cannot search may hold files: not
// "nothing cold", exit 0 (red team), but a one-line error naming it.
TEST_F(MigrateCli, AStoreTheUserCannotReachIsAnErrorNotNothingCold) {
  const std::string store = dir_ / "private/store";
  std::filesystem::create_directories(dir_ / "private");
  ASSERT_EQ(RunCommand(Tbfs("migrate " + logdir_ + " --older-than 0 --apply --store " + store +
                            " >/dev/null"))
                .exit_code,
            0);
  ASSERT_EQ(::chmod(dir_.path().c_str(), 0755), 0);
  ASSERT_EQ(::chmod((dir_ / "private").c_str(), 0700), 0);
  const std::string as_nobody = "setpriv --reuid 65534 --regid 65534 --clear-groups ";
  for (const std::string& cmd : {"ls " + logdir_ + " --store " + store,
                                 "du " + logdir_ + " --store " + store, "fsck --store " + store}) {
    auto r = RunCommand(as_nobody + Tbfs(cmd + " 2>&1 >/dev/null"));
    EXPECT_EQ(r.exit_code, 2) << cmd << ": " << r.out;
    EXPECT_NE(r.out.find("Permission denied"), std::string::npos) << cmd << ": " << r.out;
  }
}

TEST_F(MigrateCli, BackupIsAPlainTarZstd) {
  std::string backup = dir_ / "backup";
  auto r = RunCommand(
      Tbfs("migrate " + logdir_ + " --older-than 0 --apply --backup " + backup + " 2>/dev/null"));
  ASSERT_EQ(r.exit_code, 0) << r.out;
  std::string out = dir_ / "untar";
  std::filesystem::create_directories(out);
  auto tar = RunCommand("cd " + out + " && tar --zstd -xf " + backup +
                        "/tbfs-backup-*.tar.zst && echo ok");
  ASSERT_EQ(tar.out, "ok\n");
  auto restored = Tree(out);
  EXPECT_FALSE(restored.empty());
  for (const auto& [path, bytes] : restored) EXPECT_EQ(bytes, before_[path]) << path;
}

TEST_F(MigrateCli, GcIsADryRunUnlessApplied) {
  ASSERT_EQ(RunCommand(Tbfs("migrate " + logdir_ + " --older-than 0 --apply >/dev/null")).exit_code,
            0);
  auto dry =
      nlohmann::json::parse(RunCommand(Tbfs("gc --json " + logdir_ + " --older-than 0")).out);
  EXPECT_GT(dry["files"].get<int>(), 0);
  auto ls = nlohmann::json::parse(RunCommand(Tbfs("ls --json " + logdir_)).out);
  EXPECT_EQ(ls.size(), dry["files"].get<size_t>());
  ASSERT_EQ(RunCommand(Tbfs("gc " + logdir_ + " --older-than 0 --apply >/dev/null")).exit_code, 0);
  EXPECT_TRUE(nlohmann::json::parse(RunCommand(Tbfs("ls --json " + logdir_)).out).empty());
  EXPECT_EQ(RunCommand(Tbfs("gc " + logdir_ + " --older-than 3x 2>/dev/null")).exit_code, 2);
}

// Finding 5 as a user meets it: a damaged store is checked to the end and
// every intact file comes back out with `tbfs salvage`.
TEST_F(MigrateCli, FsckNamesDamageAndSalvageWritesEveryIntactFile) {
  ASSERT_EQ(
      RunCommand(Tbfs("migrate " + logdir_ + " --apply --older-than 0s >/dev/null")).exit_code, 0);
  const std::string store = logdir_ + "/.tbfs";
  std::string blob;
  for (const auto& e : std::filesystem::directory_iterator(store)) {
    if (e.path().extension() == ".blob") blob = e.path();
  }
  ASSERT_FALSE(blob.empty());
  // The engine's CURRENT file damaged: the store does not open at all.
  std::string current = ReadBytes(store + "/CURRENT");
  WriteBytes(store + "/CURRENT", "MANIFEST-99\n");
  CommandResult fsck = RunCommand(Tbfs("fsck " + logdir_));
  EXPECT_EQ(fsck.exit_code, 1) << fsck.out;
  EXPECT_NE(fsck.out.find("does not open"), std::string::npos) << fsck.out;
  EXPECT_NE(fsck.out.find("tbfs salvage"), std::string::npos) << fsck.out;
  CommandResult salvage = RunCommand(Tbfs("salvage " + logdir_ + " --to " + (dir_ / "out")));
  EXPECT_EQ(salvage.exit_code, 0) << salvage.out;
  for (const auto& [path, bytes] : before_) {
    if (Tree(logdir_).count(path)) continue;  // still hot
    EXPECT_EQ(ReadBytes(dir_ / ("out/" + path)), bytes) << path;
  }
  // CURRENT gone: a damaged store, not a missing one.
  std::filesystem::remove(store + "/CURRENT");
  fsck = RunCommand(Tbfs("fsck --json " + logdir_));
  EXPECT_EQ(fsck.exit_code, 1) << fsck.out;
  EXPECT_FALSE(nlohmann::json::parse(fsck.out)["opens"]);
  EXPECT_EQ(RunCommand(Tbfs("ls " + logdir_ + " 2>/dev/null")).exit_code, 2);
  WriteBytes(store + "/CURRENT", current);
  // One byte of a chunk: fsck reads on, names that one file, exits 1.
  std::string bytes = ReadBytes(blob);
  bytes[bytes.size() / 2] ^= 0x01;
  WriteBytes(blob, bytes);
  fsck = RunCommand(Tbfs("fsck --json " + logdir_));
  EXPECT_EQ(fsck.exit_code, 1) << fsck.out;
  auto j = nlohmann::json::parse(fsck.out);
  ASSERT_EQ(j["damaged"].size(), 1u) << fsck.out;
  const std::string damaged = j["damaged"][0]["path"];
  // Its only copy of that chunk is damaged: lost for salvage too, and fsck
  // says so (LOST, not DAMAGED (recoverable)).
  EXPECT_EQ(j["damaged"][0]["recoverable"], false) << fsck.out;
  fsck = RunCommand(Tbfs("fsck " + logdir_));
  EXPECT_NE(fsck.out.find("LOST: " + damaged + ": "), std::string::npos) << fsck.out;
  salvage = RunCommand(Tbfs("salvage --json " + logdir_ + " --to " + (dir_ / "out2")));
  EXPECT_EQ(salvage.exit_code, 1) << salvage.out;
  j = nlohmann::json::parse(salvage.out);
  ASSERT_EQ(j["lost"].size(), 1u);
  EXPECT_EQ(j["lost"][0]["path"], damaged);
  EXPECT_FALSE(std::filesystem::exists(dir_ / ("out2/" + damaged)));
  // Refused, one line, nothing written: a --to that is not empty.
  salvage = RunCommand(Tbfs("salvage " + logdir_ + " --to " + (dir_ / "out2") + " 2>&1"));
  EXPECT_EQ(salvage.exit_code, 2);
  EXPECT_NE(salvage.out.find("not empty"), std::string::npos) << salvage.out;
}

// fsck tells what is lost from what salvage can still write out: with the
// chunk space's table damaged, the engine cannot read the files' chunks, but
// their blob files hold them: DAMAGED (recoverable), and salvage agrees.
TEST_F(MigrateCli, FsckSaysWhichDamagedFilesSalvageRecovers) {
  ASSERT_EQ(
      RunCommand(Tbfs("migrate " + logdir_ + " --apply --older-than 0s >/dev/null")).exit_code, 0);
  const std::string store = logdir_ + "/.tbfs";
  // The chunk space's table: the one whose damage makes fsck name files.
  bool found = false;
  for (const auto& e : std::filesystem::directory_iterator(store)) {
    if (e.path().extension() != ".sst" || found) continue;
    const std::string work = dir_ / "work";
    std::filesystem::remove_all(work);
    std::filesystem::copy(store, work);
    const std::string sst = work + "/" + e.path().filename().string();
    std::string bytes = ReadBytes(sst);
    bytes[bytes.size() / 4] ^= 0x08;
    WriteBytes(sst, bytes);
    auto fsck = RunCommand(Tbfs("fsck --json --store " + work));
    auto j = nlohmann::json::parse(fsck.out, nullptr, false);
    if (j.is_discarded() || !j.contains("damaged") || j["damaged"].empty()) continue;
    found = true;
    EXPECT_EQ(fsck.exit_code, 1) << fsck.out;
    auto salvage = RunCommand(Tbfs("salvage --json --store " + work + " --to " + (dir_ / "out")));
    auto s = nlohmann::json::parse(salvage.out);
    std::set<std::string> lost;
    for (const auto& l : s["lost"]) lost.insert(l["path"].get<std::string>());
    for (const auto& d : j["damaged"]) {
      const std::string path = d["path"];
      EXPECT_EQ(d["recoverable"].get<bool>(), !lost.count(path)) << path;
      if (!lost.count(path)) {
        EXPECT_EQ(ReadBytes(dir_ / ("out/" + path)), before_[path]) << path;
      }
    }
    auto text = RunCommand(Tbfs("fsck --store " + work));
    EXPECT_NE(text.out.find("DAMAGED (recoverable): "), std::string::npos) << text.out;
  }
  EXPECT_TRUE(found) << "no table's damage made fsck name a file";
}

// tbfs watch on a logdir that grows while it samples: a positive rate, the
// growing run first, exit 1 at a threshold the growth crosses, exit 0 when
// none is. A logdir without a store folder gets none from watch (its two
// samples give the rate); once migrate made the store, the series is kept
// there.
TEST_F(MigrateCli, WatchSeesALogdirGrowAndWarns) {
  const std::string plot = logdir_ + "/../growth.svg";
  CommandResult r;
  // The warning needs the filesystem's free space to shrink over the two
  // seconds; on a shared machine another process may free more meanwhile,
  // so the logdir grows again (a larger file each time) up to three times.
  for (int attempt = 0; attempt < 3; ++attempt) {
    std::thread writer([&] {
      std::this_thread::sleep_for(std::chrono::milliseconds(500));
      WriteBytes(logdir_ + "/growing_run/blob" + std::to_string(attempt) + ".bin",
                 std::string((32u << 20) << attempt, 'x'));
    });
    r = RunCommand(
        Tbfs("watch " + logdir_ + " --interval 2s --warn-within 10000d --json --plot " + plot));
    writer.join();
    if (r.exit_code == 1) break;
  }
  EXPECT_EQ(r.exit_code, 1) << r.out;
  const std::string svg = ReadBytes(plot);
  EXPECT_EQ(svg.rfind("<svg ", 0), 0u) << svg.substr(0, 200);
  EXPECT_NE(svg.find("<polygon "), std::string::npos);
  auto j = nlohmann::json::parse(r.out);
  EXPECT_GT(j["growth_bytes_per_hour"].get<double>(), 0);
  EXPECT_EQ(j["top_runs"][0]["run"], "growing_run");
  EXPECT_GT(j["top_runs"][0]["bytes_per_hour"].get<double>(), 0);
  EXPECT_TRUE(j["warn"].get<bool>());
  EXPECT_GE(j["samples"].get<int>(), 2);
  EXPECT_FALSE(j["series_kept"].get<bool>());
  EXPECT_FALSE(std::filesystem::exists(logdir_ + "/.tbfs")) << "a read-only command made a store";
  // No growth since, no threshold crossed: exit 0.
  ASSERT_EQ(
      RunCommand(Tbfs("migrate " + logdir_ + " --apply --older-than 0s >/dev/null")).exit_code, 0);
  r = RunCommand(Tbfs("watch " + logdir_ +
                      " --interval 2s --window 1s --warn-at 100 --warn-within 0s --json"));
  EXPECT_EQ(r.exit_code, 0) << r.out;
  j = nlohmann::json::parse(r.out);
  EXPECT_GT(j["bytes"]["cold"].get<uint64_t>(), 0u);
  EXPECT_FALSE(j["warn"].get<bool>());
  EXPECT_TRUE(j["series_kept"].get<bool>());
  struct stat st;
  ASSERT_EQ(::stat((logdir_ + "/.tbfs/growth.jsonl").c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0600u);
  EXPECT_EQ(RunCommand(Tbfs("watch " + logdir_ + " --warn-at 0 2>/dev/null")).exit_code, 2);
}

// From cron: --quiet prints nothing when all is well, one line per warning,
// and the exit status says which.
TEST_F(MigrateCli, WatchQuietSpeaksOnlyToWarn) {
  auto r = RunCommand(Tbfs("watch " + logdir_ + " --quiet --interval 0 --warn-at 100 2>&1"));
  EXPECT_EQ(r.exit_code, 0) << r.out;
  EXPECT_EQ(r.out, "");
  r = RunCommand(Tbfs("watch " + logdir_ + " --quiet --interval 0 --warn-at 0.001 2>&1"));
  EXPECT_EQ(r.exit_code, 1) << r.out;
  EXPECT_EQ(r.out.rfind("tbfs watch " + logdir_ + ": the filesystem is ", 0), 0u) << r.out;
  EXPECT_EQ(std::count(r.out.begin(), r.out.end(), '\n'), 1) << r.out;
  EXPECT_NE(RunCommand(Tbfs("watch " + logdir_ + " --quiet --json 2>&1")).exit_code, 0);
}

// Any user who can read the logdir may watch it: root's private store is
// left out (said so), nothing is written, and the rate comes from the
// run's own two samples.
TEST_F(MigrateCli, WatchByAnotherUserReadsAndWritesNothingOfTheStore) {
  ASSERT_EQ(
      RunCommand(Tbfs("migrate " + logdir_ + " --apply --older-than 0s >/dev/null")).exit_code, 0);
  ASSERT_EQ(::chmod(dir_.path().c_str(), 0755), 0);
  const auto before = ReadBytes(logdir_ + "/.tbfs/growth.jsonl");  // none yet: ""
  auto r = RunCommand("setpriv --reuid 65534 --regid 65534 --clear-groups " +
                      Tbfs("watch " + logdir_ + " --interval 1s --warn-within 0s --json"));
  ASSERT_EQ(r.exit_code, 0) << r.out;  // (other processes may fill the disk meanwhile)
  auto j = nlohmann::json::parse(r.out);
  EXPECT_FALSE(j["series_kept"].get<bool>());
  EXPECT_FALSE(j["cold_bytes_known"].get<bool>());
  EXPECT_EQ(j["samples"].get<int>(), 2);
  EXPECT_GT(j["bytes"]["tfevents"].get<uint64_t>(), 0u);
  EXPECT_EQ(ReadBytes(logdir_ + "/.tbfs/growth.jsonl"), before);
}

// Red team: watch kept its series in a folder of other files named as the
// store, and made it and the user's files private (0644 -> 0600). The
// series is not kept there now, and the folder is left as it was.
TEST_F(MigrateCli, WatchLeavesAFolderOfOtherFilesAsItWas) {
  const std::string other = dir_ / "other";
  WriteBytes(other + "/notes.txt", "mine");
  ASSERT_EQ(::chmod(other.c_str(), 0755), 0);
  ASSERT_EQ(::chmod((other + "/notes.txt").c_str(), 0644), 0);
  auto r = RunCommand(Tbfs("watch " + logdir_ + " --store " + other + " --interval 0 --json"));
  ASSERT_EQ(r.exit_code, 0) << r.out;
  EXPECT_FALSE(nlohmann::json::parse(r.out)["series_kept"].get<bool>()) << r.out;
  struct stat st;
  ASSERT_EQ(::stat(other.c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 07777, 0755u);
  ASSERT_EQ(::stat((other + "/notes.txt").c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 07777, 0644u);
  std::vector<std::string> names;
  for (const auto& e : std::filesystem::directory_iterator(other))
    names.push_back(e.path().filename());
  EXPECT_EQ(names, std::vector<std::string>{"notes.txt"});
}

// fsck of a damaged store named by --store advised `tbfs salvage LOGDIR
// --to DIR`, which salvages LOGDIR/.tbfs, another store (or none).
TEST_F(MigrateCli, FsckAdvisesTheSalvageOfTheStoreItChecked) {
  const std::string store = dir_ / "elsewhere";
  ASSERT_EQ(RunCommand(Tbfs("migrate " + logdir_ + " --store " + store +
                            " --apply --older-than 0s >/dev/null"))
                .exit_code,
            0);
  WriteBytes(store + "/CURRENT", "MANIFEST-99\n");
  auto fsck = RunCommand(Tbfs("fsck --json " + logdir_ + " --store " + store));
  EXPECT_EQ(fsck.exit_code, 1) << fsck.out;
  std::string advice = nlohmann::json::parse(fsck.out)["advice"];
  const std::string command = "tbfs salvage " + logdir_ + " --store " + store + " --to DIR";
  ASSERT_NE(advice.find(command), std::string::npos) << advice;
  const std::string out = dir_ / "out";
  auto salvage = RunCommand(Tbfs(command.substr(5, command.size() - 8) + out));
  EXPECT_EQ(salvage.exit_code, 0) << salvage.out;
  for (const auto& [path, bytes] : before_) {
    if (Tree(logdir_).count(path)) continue;  // still hot
    EXPECT_EQ(ReadBytes(out + "/" + path), bytes) << path;
  }
}

// A store folder that is a symbolic link: read commands followed it and
// writing ones failed with "open STORE: Not a directory". LOGDIR/.tbfs is
// never followed (whoever can write the logdir could point the store and
// the logdir's lock anywhere): every command refuses it and says why. A
// link named by --store is the admin's, and every command follows it.
TEST_F(MigrateCli, ALinkedStoreIsRefusedBesideTheLogdirAndFollowedWhenNamed) {
  const std::string real = dir_ / "real", link = dir_ / "link";
  ASSERT_EQ(RunCommand(Tbfs("migrate " + logdir_ + " --store " + real +
                            " --apply --older-than 0s >/dev/null"))
                .exit_code,
            0);
  ASSERT_EQ(::symlink(real.c_str(), link.c_str()), 0);
  std::filesystem::remove_all(logdir_ + "/.tbfs");
  ASSERT_EQ(::symlink(real.c_str(), (logdir_ + "/.tbfs").c_str()), 0);
  const auto cold = Tree(logdir_);  // the link is in it, as a file
  ASSERT_LE(cold.size(), before_.size());
  for (const std::string command :
       {"ls", "fsck", "restore --all", "restore --all --apply", "gc --older-than 0 --apply",
        "migrate --older-than 0 --apply", "recompress"}) {
    const auto space = command.find(' ');
    const std::string verb = command.substr(0, space);
    const std::string rest = space == std::string::npos ? "" : command.substr(space);
    auto r = RunCommand(Tbfs(verb + " " + logdir_ + rest + " 2>&1"));
    EXPECT_EQ(r.exit_code, 2) << command << ": " << r.out;
    EXPECT_NE(r.out.find(logdir_ + "/.tbfs is a symbolic link"), std::string::npos)
        << command << ": " << r.out;
    EXPECT_TRUE(Tree(logdir_) == cold) << command;
  }
  std::filesystem::remove(logdir_ + "/.tbfs");
  for (const std::string command :
       {"ls", "fsck", "recompress --level 5", "restore --all --apply"}) {
    const auto space = command.find(' ');
    const std::string verb = command.substr(0, space);
    const std::string rest = space == std::string::npos ? "" : command.substr(space);
    auto r = RunCommand(Tbfs(verb + " " + logdir_ + " --store " + link + rest + " 2>&1"));
    EXPECT_EQ(r.exit_code, 0) << command << ": " << r.out;
  }
  EXPECT_TRUE(Tree(logdir_) == before_);
  struct stat st;
  ASSERT_EQ(::lstat(link.c_str(), &st), 0);
  EXPECT_TRUE(S_ISLNK(st.st_mode));
}

// A writing command given a --store that holds other files was refused,
// but had already made LOGDIR/.tbfs and the logdir's lock in it; migrate
// with nothing to move printed "nothing to migrate" beside the refusal.
TEST_F(MigrateCli, AWriterRefusedItsStoreSaysSoAloneAndLeavesTheLogdirAsItWas) {
  const std::string other = dir_ / "other";
  WriteBytes(other + "/notes.txt", "mine");
  for (const std::string& command :
       {"migrate " + logdir_ + " --older-than 0 --min-size 1T --apply",
        "migrate " + logdir_ + " --older-than 0 --apply", "restore " + logdir_ + " --all --apply",
        "gc " + logdir_ + " --garbage --apply", "recompress " + logdir_}) {
    auto r = RunCommand(Tbfs(command + " --store " + other + " 2>&1"));
    EXPECT_EQ(r.exit_code, 2) << command << ": " << r.out;
    EXPECT_NE(r.out.find("is not a tbfs store"), std::string::npos) << command << ": " << r.out;
    EXPECT_EQ(r.out.find("nothing to migrate"), std::string::npos) << command << ": " << r.out;
    EXPECT_EQ(Tree(logdir_), before_) << command;
    EXPECT_FALSE(std::filesystem::exists(logdir_ + "/.tbfs")) << command;
  }
  EXPECT_EQ(ReadBytes(other + "/notes.txt"), "mine");
}

// A --store its user cannot make (a folder of root's on its path) was
// refused only after the logdir's lock was taken: LOGDIR/.tbfs and the
// lock stayed behind.
TEST_F(MigrateCli, AStoreItsUserCannotMakeLeavesTheLogdirAsItWas) {
  ASSERT_EQ(::chmod(dir_.path().c_str(), 0755), 0);
  const std::string roots = dir_ / "roots";
  ASSERT_EQ(::mkdir(roots.c_str(), 0755), 0);
  ASSERT_EQ(RunCommand("chown -R 65534:65534 " + logdir_).exit_code, 0);
  auto r = RunCommand(
      "setpriv --reuid 65534 --regid 65534 --clear-groups " +
      Tbfs("migrate " + logdir_ + " --older-than 0 --apply --store " + roots + "/store 2>&1"));
  EXPECT_EQ(r.exit_code, 2) << r.out;
  EXPECT_NE(r.out.find("Permission denied"), std::string::npos) << r.out;
  EXPECT_FALSE(std::filesystem::exists(logdir_ + "/.tbfs"));
  EXPECT_TRUE(std::filesystem::is_empty(roots));
}

// A user short of threads (RLIMIT_NPROC, a shared machine's cap on a user's
// processes) migrates on the threads it gets, or is told in one line that
// the store's engine cannot start its own: `tbfs migrate` aborted
// ("terminate called without an active exception", exit 134), or blamed
// stdout ("cannot write the report"). Limits from 1 up to the first that
// lets the engine open: there, none is left for the copies' threads.
TEST_F(MigrateCli, AUserShortOfThreadsMigratesOnTheThreadsItGets) {
  ASSERT_EQ(::chmod(dir_.path().c_str(), 0755), 0);
  ASSERT_EQ(RunCommand("chown -R 65534:65534 " + logdir_).exit_code, 0);
  // As uid 65534 under a cap of `n` processes. Under ASan, LeakSanitizer
  // cannot start its tracer there, and RocksDB leaks the engine it was
  // opening when a thread is refused: leak checks off.
  auto short_of = [](int n) {
    const char* asan = std::getenv("ASAN_OPTIONS");
    return fmt::format(
        "setpriv --reuid 65534 --regid 65534 --clear-groups env "
        "ASAN_OPTIONS='{}:detect_leaks=0' prlimit --nproc={} ",
        asan != nullptr ? asan : "", n);
  };
  bool moved = false;
  for (int limit = 1; limit <= 32 && !moved; ++limit) {
    auto r = RunCommand(short_of(limit) +
                        Tbfs("migrate " + logdir_ + " --older-than 0 --apply --threads 4 2>&1"));
    SCOPED_TRACE(fmt::format("--nproc={}: exit {}: {}", limit, r.exit_code, r.out));
    EXPECT_EQ(r.out.find("cannot write the report"), std::string::npos);
    if (r.exit_code == 2) {
      EXPECT_NE(r.out.find("the engine cannot start its threads"), std::string::npos);
      EXPECT_TRUE(Tree(logdir_) == before_);
      continue;
    }
    ASSERT_EQ(r.exit_code, 0);
    EXPECT_NE(r.out.find("threads started (Resource temporarily unavailable); going on with fewer"),
              std::string::npos);
    moved = true;
  }
  EXPECT_TRUE(moved);
  // A store that cannot open for want of threads is not damaged: fsck
  // said it was (exit 1) and sent the user to salvage.
  auto fsck = RunCommand(short_of(1) + Tbfs("fsck " + logdir_ + " 2>&1"));
  EXPECT_EQ(fsck.exit_code, 2) << fsck.out;
  EXPECT_NE(fsck.out.find("the engine cannot start its threads"), std::string::npos) << fsck.out;
  EXPECT_EQ(fsck.out.find("salvage"), std::string::npos) << fsck.out;
  // Nor does watch keep a sample without the cold files: the next run read
  // it as all of them gone and back.
  const std::string series = logdir_ + "/.tbfs/" + store::kGrowthFileName;
  const std::string kept = std::filesystem::exists(series) ? ReadBytes(series) : "";
  auto watch = RunCommand(short_of(1) + Tbfs("watch " + logdir_ + " --interval 0s 2>&1"));
  EXPECT_EQ(watch.exit_code, 0) << watch.out;
  EXPECT_NE(watch.out.find("cold files: not counted"), std::string::npos) << watch.out;
  EXPECT_EQ(std::filesystem::exists(series) ? ReadBytes(series) : "", kept);
  for (const auto& [path, bytes] : before_) {
    const bool hot = std::filesystem::exists(JoinPath(logdir_, path));
    EXPECT_EQ(hot, path.find("tfevents") != std::string::npos) << path;
  }
  EXPECT_EQ(RunCommand("setpriv --reuid 65534 --regid 65534 --clear-groups " +
                       Tbfs("restore " + logdir_ + " --all --apply >/dev/null 2>&1"))
                .exit_code,
            0);
  EXPECT_TRUE(Tree(logdir_) == before_);
}

// A folder the watching user cannot read (another user's private run) is
// left out with a warning, as scan and verify leave it; the rest is still
// counted and the exit status is the thresholds'.
TEST_F(MigrateCli, WatchLeavesOutAFolderItCannotReadAndSaysSo) {
  ASSERT_EQ(::chmod(dir_.path().c_str(), 0755), 0);
  ASSERT_EQ(::mkdir((logdir_ + "/private_run").c_str(), 0700), 0);
  WriteBytes(logdir_ + "/private_run/blob.bin", std::string(1 << 20, 'x'));
  const std::string as_nobody = "setpriv --reuid 65534 --regid 65534 --clear-groups ";
  auto r = RunCommand(as_nobody +
                      Tbfs("watch " + logdir_ + " --interval 0 --warn-at 100 --json 2>/dev/null"));
  ASSERT_EQ(r.exit_code, 0) << r.out;
  auto j = nlohmann::json::parse(r.out);
  ASSERT_EQ(j["not_counted"].size(), 1u) << r.out;
  EXPECT_NE(j["not_counted"][0].get<std::string>().find("private_run"), std::string::npos);
  EXPECT_GT(j["bytes"]["tfevents"].get<uint64_t>(), 0u);
  r = RunCommand(as_nobody + Tbfs("watch " + logdir_ + " --interval 0 --warn-at 100 2>&1"));
  EXPECT_EQ(r.exit_code, 0) << r.out;
  EXPECT_NE(r.out.find("watch: warning: not counted: "), std::string::npos) << r.out;
  // As root the folder is read, and counted.
  r = RunCommand(Tbfs("watch " + logdir_ + " --interval 0 --warn-at 100 --json"));
  ASSERT_EQ(r.exit_code, 0) << r.out;
  EXPECT_EQ(nlohmann::json::parse(r.out)["not_counted"].size(), 0u);
}

// A store folder another user owns (their own run folder watched as a
// logdir, say) is not root's to keep a series in (a store refuses another
// owner's folder): root's watch still reports, reading it, keeping nothing.
TEST_F(MigrateCli, WatchOfALogdirWhoseStoreFolderIsAnotherUsersStillReports) {
  ASSERT_EQ(
      RunCommand(Tbfs("migrate " + logdir_ + " --apply --older-than 0s >/dev/null")).exit_code, 0);
  ASSERT_EQ(RunCommand("chown -R 65534:65534 " + logdir_ + "/.tbfs").exit_code, 0);
  auto r = RunCommand(Tbfs("watch " + logdir_ + " --interval 1s --warn-within 0s --json 2>&1"));
  ASSERT_EQ(r.exit_code, 0) << r.out;
  auto j = nlohmann::json::parse(r.out);
  EXPECT_FALSE(j["series_kept"].get<bool>());
  EXPECT_GT(j["bytes"]["cold"].get<uint64_t>(), 0u);
  r = RunCommand(Tbfs("watch " + logdir_ + " --interval 1s --warn-within 0s 2>&1"));
  EXPECT_NE(r.out.find(".tbfs belongs to uid 65534); the rates are from this run's samples"),
            std::string::npos)
      << r.out;
  EXPECT_FALSE(std::filesystem::exists(logdir_ + "/.tbfs/growth.jsonl"));
}

// Retention policies: the newest N profiles of each run, a size budget for
// the store, the migration time; the union of what they select.
TEST_F(MigrateCli, GcPoliciesKeepTheNewestProfilesAndABudget) {
  ASSERT_EQ(RunCommand(Tbfs("migrate " + logdir_ + " --older-than 0 --apply >/dev/null")).exit_code,
            0);
  auto cold = [&] { return nlohmann::json::parse(RunCommand(Tbfs("ls --json " + logdir_)).out); };
  const size_t all = cold().size();
  ASSERT_GT(all, 3u);
  EXPECT_EQ(RunCommand(Tbfs("gc " + logdir_ + " 2>/dev/null")).exit_code, 2);  // no policy
  // Nothing was migrated a day ago.
  auto none =
      nlohmann::json::parse(RunCommand(Tbfs("gc --json " + logdir_ + " --migrated-before 1d")).out);
  EXPECT_EQ(none["files"].get<int>(), 0);
  // --keep-last 1: one profile per run stays (a TF session folder counts as one).
  auto keep = RunCommand(Tbfs("gc --json " + logdir_ + " --keep-last 1 --apply"));
  ASSERT_EQ(keep.exit_code, 0) << keep.out;
  std::map<std::string, std::set<std::string>> profiles;  // run -> profiles left
  for (const auto& f : cold()) {
    const std::string path = f["path"];
    const std::string profile = store::ProfileOf(path);
    profiles[store::RunOfProfile(profile)].insert(profile);
  }
  ASSERT_FALSE(profiles.empty());
  for (const auto& [run, left] : profiles) EXPECT_EQ(left.size(), 1u) << run;
  EXPECT_LT(cold().size(), all);
  // --max-store: the store's files within the budget afterwards.
  auto du = [&] { return nlohmann::json::parse(RunCommand(Tbfs("du --json " + logdir_)).out); };
  const uint64_t stored = du()["stored_bytes"].get<uint64_t>();
  ASSERT_GT(stored, 0u);
  const uint64_t budget = stored / 2;
  ASSERT_EQ(RunCommand(Tbfs("gc " + logdir_ + " --max-store " + std::to_string(budget) +
                            " --apply >/dev/null"))
                .exit_code,
            0);
  EXPECT_LE(du()["stored_bytes"].get<uint64_t>(), budget);
}

// Budgets and keep_last count per owner (issue 21): bob's two newer traces
// in a shared run, or his bytes, never delete alice's files; with
// --across-owners they count together.
TEST_F(MigrateCli, RetentionCountsEachOwnersFilesOnTheirOwn) {
  const std::string shared = logdir_ + "/shared";
  ASSERT_EQ(::mkdir(shared.c_str(), 01777), 0);
  auto trace = [&](const std::string& name, uid_t uid, int64_t age_s, size_t bytes) {
    const std::string path = shared + "/" + name;
    std::string content = "{\"traceEvents\": [";
    std::mt19937_64 rng(bytes + uid);
    while (content.size() < bytes) content += std::to_string(rng()) + ",";  // not compressible
    WriteBytes(path, content + "0]}");
    ASSERT_EQ(::chown(path.c_str(), uid, uid), 0);
    struct timespec t[2] = {{::time(nullptr) - age_s, 0}, {::time(nullptr) - age_s, 0}};
    ASSERT_EQ(::utimensat(AT_FDCWD, path.c_str(), t, 0), 0);
  };
  trace("alice1.pt.trace.json", 1001, 400, 4000);
  trace("alice2.pt.trace.json", 1001, 300, 4000);
  trace("bob1.pt.trace.json", 1002, 200, 200000);
  trace("bob2.pt.trace.json", 1002, 100, 200000);
  ASSERT_EQ(RunCommand(Tbfs("migrate " + logdir_ + " --older-than 0 --apply >/dev/null")).exit_code,
            0);
  auto chosen = [&](const std::string& flags) {
    auto r = RunCommand(Tbfs("gc --json " + logdir_ + " " + flags));
    std::set<std::string> out;
    auto j = nlohmann::json::parse(r.out, nullptr, false);
    if (j.is_discarded()) return out;
    for (const auto& f : j["deleted"]) {
      const std::string path = f["path"];
      if (path.starts_with("shared/")) out.insert(path.substr(7));
    }
    return out;
  };
  using Names = std::set<std::string>;
  // keep_last 2 in the shared run: each owner keeps two.
  EXPECT_EQ(chosen("--keep-last 2"), Names{});
  EXPECT_EQ(chosen("--keep-last 1"), (Names{"alice1.pt.trace.json", "bob1.pt.trace.json"}));
  EXPECT_EQ(chosen("--keep-last 2 --across-owners"),
            (Names{"alice1.pt.trace.json", "alice2.pt.trace.json"}));
  // A budget bob's bytes exceed alone: only bob's oldest goes.
  EXPECT_EQ(chosen("--max-store 150K"), Names{"bob1.pt.trace.json"});
  Names across = chosen("--max-store 150K --across-owners");
  EXPECT_TRUE(across.count("alice1.pt.trace.json")) << ::testing::PrintToString(across);
}

TEST(Retention, ProfilesAndRuns) {
  EXPECT_EQ(store::ProfileOf("r/train/plugins/profile/2026_01_01/h.trace.json.gz"),
            "r/train/plugins/profile/2026_01_01");
  EXPECT_EQ(store::RunOfProfile("r/train/plugins/profile/2026_01_01"), "r/train");
  EXPECT_EQ(store::ProfileOf("plugins/profile/s1/h.xplane.pb"), "plugins/profile/s1");
  EXPECT_EQ(store::RunOfProfile("plugins/profile/s1"), ".");
  EXPECT_EQ(store::ProfileOf("run0/host.1.pt.trace.json"), "run0/host.1.pt.trace.json");
  EXPECT_EQ(store::RunOfProfile("run0/host.1.pt.trace.json"), "run0");
  EXPECT_EQ(store::RunOfProfile("top.pt.trace.json"), ".");
}

// A loss as a crash and a damaged engine would leave it, recorded by hand:
// a journal record names a file that is neither in the logdir nor in the
// store. Recovery names it and fails; fsck and salvage fail naming it until
// an admin clears it (fsck --clear-lost); nothing says success over it.
TEST_F(MigrateCli, AFileLostToACrashIsNamedByEveryToolUntilCleared) {
  ASSERT_EQ(
      RunCommand(Tbfs("migrate " + logdir_ + " --older-than 0 --apply >/dev/null 2>&1")).exit_code,
      0);
  {
    store::OpenOptions o;
    auto s = store::ColdStore::Open(logdir_ + "/.tbfs", o);
    ASSERT_TRUE(s.ok()) << s.status().ToString();
    storepb::JournalRecord record;
    record.set_kind(storepb::JournalRecord::MIGRATE);
    record.set_batch_id((*s)->NewBatchId());
    auto* e = record.add_entries();
    e->set_path("ghost.pt.trace.json");
    e->set_file_id((*s)->NewFileId());
    e->set_size(4096);
    ASSERT_TRUE((*s)->PutJournal(record).ok());
  }
  auto gc = RunCommand(Tbfs("gc " + logdir_ + " --older-than 36500d --apply 2>&1"));
  EXPECT_EQ(gc.exit_code, 1) << gc.out;
  EXPECT_NE(gc.out.find("LOST " + logdir_ + "/ghost.pt.trace.json"), std::string::npos) << gc.out;

  auto fsck = RunCommand(Tbfs("fsck " + logdir_));
  EXPECT_EQ(fsck.exit_code, 1) << fsck.out;
  EXPECT_NE(fsck.out.find("LOST: ghost.pt.trace.json"), std::string::npos) << fsck.out;
  EXPECT_EQ(fsck.out.find(": clean"), std::string::npos) << fsck.out;
  auto j = nlohmann::json::parse(RunCommand(Tbfs("fsck --json " + logdir_)).out);
  EXPECT_FALSE(j["clean"].get<bool>());
  ASSERT_EQ(j["lost"].size(), 1u);
  EXPECT_EQ(j["lost"][0]["path"], "ghost.pt.trace.json");

  auto salvage = RunCommand(Tbfs("salvage " + logdir_ + " --to " + (dir_ / "out") + " 2>&1"));
  EXPECT_EQ(salvage.exit_code, 1) << salvage.out;
  EXPECT_NE(salvage.out.find("ghost.pt.trace.json"), std::string::npos) << salvage.out;

  auto cleared = RunCommand(Tbfs("fsck " + logdir_ + " --clear-lost"));
  EXPECT_EQ(cleared.exit_code, 0) << cleared.out;
  EXPECT_NE(cleared.out.find("cleared: ghost.pt.trace.json"), std::string::npos) << cleared.out;
  fsck = RunCommand(Tbfs("fsck " + logdir_));
  EXPECT_EQ(fsck.exit_code, 0) << fsck.out;
  EXPECT_NE(fsck.out.find(": clean"), std::string::npos) << fsck.out;
}

}  // namespace
}  // namespace tbfs
