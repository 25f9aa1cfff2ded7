// The tbfs command as a user runs it: exit codes, one-line errors, JSON.
#include <gtest/gtest.h>
#include <sys/stat.h>

#include <nlohmann/json.hpp>

#include "tests/events/event_files.h"
#include "tests/test_util.h"

namespace tbfs {
namespace {

using namespace tbfs::testing;

class CliTest : public ::testing::Test {
 protected:
  void SetUp() override {
    logdir_ = dir_ / "logdir";
    CommandResult gen = RunCommand(Tbfs("gen " + logdir_ + " --runs 2 --steps 200 --trace-mb 2"));
    ASSERT_EQ(gen.exit_code, 0) << gen.out;
  }
  TempDir dir_;
  std::string logdir_;
};

TEST_F(CliTest, VerifyIntactLogdirExitsZero) {
  CommandResult r = RunCommand(Tbfs("verify " + logdir_ + " --must-have loss/train,batch_loss"));
  EXPECT_EQ(r.exit_code, 0) << r.out;
  EXPECT_NE(r.out.find("intact"), std::string::npos);
}

TEST_F(CliTest, VerifyJsonIsParseable) {
  CommandResult r = RunCommand(Tbfs("verify --json " + logdir_));
  ASSERT_EQ(r.exit_code, 0);
  auto j = nlohmann::json::parse(r.out);
  EXPECT_TRUE(j["intact"].get<bool>());
  EXPECT_GT(j["runs"].size(), 2u);
}

TEST_F(CliTest, BaselineCatchesAChangedFileWithExitOne) {
  std::string baseline = dir_ / "baseline.json";
  ASSERT_EQ(RunCommand(Tbfs("verify " + logdir_ + " --save-baseline " + baseline)).exit_code, 0);
  ASSERT_EQ(RunCommand(Tbfs("verify " + logdir_ + " --baseline " + baseline)).exit_code, 0);
  // Flip one byte in the middle of a tfevents file: a CRC failure.
  CommandResult find = RunCommand("find " + logdir_ + " -name '*.tfevents.*.0' | head -1");
  std::string file = find.out.substr(0, find.out.find('\n'));
  std::string bytes = ReadBytes(file);
  bytes[bytes.size() / 2] ^= 0x10;
  WriteBytes(file, bytes);
  CommandResult r = RunCommand(Tbfs("verify --json " + logdir_ + " --baseline " + baseline));
  EXPECT_EQ(r.exit_code, 1) << r.out;
  auto j = nlohmann::json::parse(r.out);
  ASSERT_FALSE(j["failures"].empty());
  EXPECT_NE(j["failures"][0]["file"].get<std::string>(), "");
}

// A tfevents file the user cannot read is not a damaged curve: exit 2 (an
// I/O error, naming it), not 1 (an integrity failure; so it was). A damaged
// file beside it is a finding again: exit 1.
TEST_F(CliTest, AFileTheUserCannotReadIsAnIOErrorNotAFinding) {
  ASSERT_EQ(RunCommand("chmod 0755 " + dir_.path()).exit_code, 0);
  CommandResult find = RunCommand("find " + logdir_ + " -name '*.tfevents.*' | sort");
  std::vector<std::string> files;
  for (size_t at = 0, end; (end = find.out.find('\n', at)) != std::string::npos; at = end + 1) {
    files.push_back(find.out.substr(at, end - at));
  }
  ASSERT_GE(files.size(), 2u);
  ASSERT_EQ(::chmod(files[0].c_str(), 0600), 0);
  const std::string as_nobody = "setpriv --reuid 65534 --regid 65534 --clear-groups ";
  CommandResult r = RunCommand(as_nobody + Tbfs("verify " + logdir_ + " 2>&1"));
  EXPECT_EQ(r.exit_code, 2) << r.out;
  EXPECT_NE(r.out.find(files[0].substr(logdir_.size() + 1)), std::string::npos) << r.out;
  r = RunCommand(as_nobody + Tbfs("verify --json " + logdir_));
  EXPECT_EQ(r.exit_code, 2) << r.out;
  EXPECT_FALSE(nlohmann::json::parse(r.out)["intact"].get<bool>()) << r.out;
  // With a baseline (taken by root): the same, said once (red team: twice,
  // as two integrity failures, exit 1).
  ASSERT_EQ(RunCommand("chmod 0644 " + files[0]).exit_code, 0);
  const std::string baseline = dir_ / "baseline.json";
  ASSERT_EQ(RunCommand(Tbfs("verify " + logdir_ + " --save-baseline " + baseline)).exit_code, 0);
  ASSERT_EQ(RunCommand("chmod 0644 " + baseline).exit_code, 0);
  ASSERT_EQ(::chmod(files[0].c_str(), 0600), 0);
  r = RunCommand(as_nobody + Tbfs("verify " + logdir_ + " --baseline " + baseline + " 2>&1"));
  EXPECT_EQ(r.exit_code, 2) << r.out;
  EXPECT_EQ(r.out.find("NOT READ"), r.out.rfind("NOT READ")) << "said twice: " << r.out;
  EXPECT_NE(r.out.find("NOT READ"), std::string::npos) << r.out;
  EXPECT_EQ(r.out.find("FAILED"), std::string::npos) << r.out;
  // A run folder the user cannot enter is not "intact" (red team: exit 0).
  ASSERT_EQ(::chmod(files[0].c_str(), 0644), 0);
  const std::string run = files[0].substr(0, files[0].rfind('/'));
  ASSERT_EQ(::chmod(run.c_str(), 0700), 0);
  r = RunCommand(as_nobody + Tbfs("verify --json " + logdir_));
  EXPECT_EQ(r.exit_code, 2) << r.out;
  auto j = nlohmann::json::parse(r.out);
  EXPECT_FALSE(j["intact"].get<bool>()) << r.out;
  EXPECT_EQ(j["not_walked"].size(), 1u) << r.out;
  ASSERT_EQ(::chmod(run.c_str(), 0755), 0);
  std::string bytes = ReadBytes(files[1]);
  bytes[bytes.size() / 2] ^= 0x10;
  WriteBytes(files[1], bytes);
  ASSERT_EQ(::chmod(files[0].c_str(), 0600), 0);
  r = RunCommand(as_nobody + Tbfs("verify " + logdir_ + " 2>&1"));
  EXPECT_EQ(r.exit_code, 1) << r.out;
}

TEST_F(CliTest, UsageAndInputErrorsExitTwoWithOneLine) {
  EXPECT_EQ(RunCommand(Tbfs("verify /nonexistent/logdir 2>/dev/null")).exit_code, 2);
  EXPECT_EQ(RunCommand(Tbfs("verify 2>/dev/null")).exit_code, 2);
  EXPECT_EQ(RunCommand(Tbfs("nosuchcommand 2>/dev/null")).exit_code, 2);
  // Counts that cannot be negative.
  for (const std::string& bad :
       {"verify " + logdir_ + " --threads -3", "migrate " + logdir_ + " --threads -1",
        "scan " + logdir_ + " --top -1", "watch " + logdir_ + " --top -1 --interval 0"}) {
    EXPECT_EQ(RunCommand(Tbfs(bad + " 2>/dev/null")).exit_code, 2) << bad;
  }
  WriteBytes(dir_ / "garbage.json", "{{{{ not a baseline");
  CommandResult r = RunCommand(
      Tbfs("verify " + logdir_ + " --baseline " + (dir_ / "garbage.json") + " 2>&1 >/dev/null"));
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_EQ(std::count(r.out.begin(), r.out.end(), '\n'), 1) << r.out;
  EXPECT_NE(r.out.find("garbage.json"), std::string::npos);
  // A folder without tfevents files is most likely a wrong path.
  std::filesystem::create_directories(dir_ / "empty");
  EXPECT_EQ(RunCommand(Tbfs("verify " + (dir_ / "empty") + " 2>/dev/null")).exit_code, 2);
}

// A script that asked for --json reads one JSON document on stdout even
// when the command fails before its report (a wrong path, bad arguments,
// a refusal): {"ok": false, "error": the line stderr says}, exit 2.
TEST_F(CliTest, AFailedJsonRunStillPrintsOneJsonDocument) {
  const std::string missing = dir_ / "missing";
  for (const std::string& args :
       {"scan --json " + missing, "verify --json " + missing, "migrate --json " + missing,
        "restore --json " + missing + " --all", "ls --json " + missing, "du --json " + missing,
        "fsck --json " + missing, "salvage --json --store " + missing,
        "recompress --json " + missing, "watch --json " + missing, "status --json " + missing,
        "gc --json " + missing + " --keep-last 1", "export --json " + missing,
        "gen --json " + logdir_, "watch --json --quiet " + logdir_,
        "migrate --json " + logdir_ + " --older-than never"}) {
    SCOPED_TRACE(args);
    CommandResult r = RunCommand(Tbfs(args + " 2>/dev/null"));
    EXPECT_EQ(r.exit_code, 2) << r.out;
    auto j = nlohmann::json::parse(r.out, nullptr, false);
    ASSERT_FALSE(j.is_discarded()) << r.out;
    EXPECT_EQ(j["ok"], false) << r.out;
    const std::string error = j.value("error", "");
    EXPECT_FALSE(error.empty()) << r.out;
    // The same error on stderr.
    r = RunCommand(Tbfs(args + " 2>&1 >/dev/null"));
    EXPECT_NE(r.out.find(error), std::string::npos) << r.out;
  }
  // A refusal that is a finding (exit 1) too.
  CommandResult r = RunCommand(
      Tbfs("migrate --json " + logdir_ + " --older-than 0s --must-have nosuchtag 2>/dev/null"));
  EXPECT_EQ(r.exit_code, 1) << r.out;
  auto j = nlohmann::json::parse(r.out, nullptr, false);
  ASSERT_FALSE(j.is_discarded()) << r.out;
  EXPECT_EQ(j["ok"], false) << r.out;
}

TEST_F(CliTest, ScanJsonAccountsForEveryByte) {
  CommandResult r = RunCommand(Tbfs("scan --json " + logdir_));
  ASSERT_EQ(r.exit_code, 0);
  auto j = nlohmann::json::parse(r.out);
  uint64_t sum = 0;
  for (auto& [name, c] : j["classes"].items()) sum += c["bytes"].get<uint64_t>();
  EXPECT_EQ(sum, j["bytes"].get<uint64_t>());
  EXPECT_GT(j["trace_bytes"].get<uint64_t>(), 0u);
  EXPECT_LE(j["largest"].size(), 20u);
}

TEST_F(CliTest, HelpExitsZero) {
  for (const char* cmd : {"--help", "scan --help", "verify --help", "gen --help"}) {
    EXPECT_EQ(RunCommand(Tbfs(std::string(cmd) + " >/dev/null")).exit_code, 0) << cmd;
  }
}

TEST_F(CliTest, GenIntoNonEmptyFolderChangesNothing) {
  // Every entry's path, type, size, mode and bytes, before and after.
  const std::string listing = "cd " + logdir_ +
                              " && find . -printf '%p %y %s %m %T@\\n' | sort && "
                              "find . -type f -print0 | sort -z | xargs -0 sha256sum";
  CommandResult before = RunCommand(listing);
  ASSERT_EQ(before.exit_code, 0) << before.out;
  ASSERT_NE(before.out.find(".tfevents."), std::string::npos) << before.out;
  CommandResult r = RunCommand(Tbfs("gen " + logdir_ + " 2>&1"));
  EXPECT_EQ(r.exit_code, 2) << r.out;
  EXPECT_EQ(std::count(r.out.begin(), r.out.end(), '\n'), 1) << r.out;
  EXPECT_NE(r.out.find(logdir_ + " is not empty"), std::string::npos) << r.out;
  EXPECT_EQ(RunCommand(listing).out, before.out);
}

// stdout on a full disk (/dev/full): every report that cannot be written is
// a one-line error and exit 2, never an abort; what the command did stands.
TEST_F(CliTest, AReportThatCannotBeWrittenIsAOneLineErrorNeverAnAbort) {
  for (const char* cmd : {"scan --json", "scan", "verify --json", "migrate --json", "ls --json",
                          "migrate --apply --older-than 0s --json", "fsck --json"}) {
    CommandResult r = RunCommand(Tbfs(std::string(cmd) + " " + logdir_ + " 2>&1 >/dev/full"));
    EXPECT_EQ(r.exit_code, 2) << cmd << ": " << r.out;
    EXPECT_EQ(std::count(r.out.begin(), r.out.end(), '\n'), 1) << cmd << ": " << r.out;
    EXPECT_NE(r.out.find("No space left on device"), std::string::npos) << cmd << ": " << r.out;
  }
  // The migration ran: the store has the traces, and fsck says so.
  CommandResult fsck = RunCommand(Tbfs("fsck --json " + logdir_));
  EXPECT_EQ(fsck.exit_code, 0) << fsck.out;
  EXPECT_GT(nlohmann::json::parse(fsck.out, nullptr, false)["files"].get<int>(), 0) << fsck.out;
}

}  // namespace
}  // namespace tbfs
