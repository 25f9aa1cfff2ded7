#include "events/baseline.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include "events/verifier.h"
#include "tests/events/event_files.h"

namespace tbfs::events {
namespace {

using namespace tbfs::testing;

class BaselineTest : public ::testing::Test {
 protected:
  void SetUp() override {
    events_ = {FileVersion()};
    for (int step = 0; step < 200; ++step) {
      events_.push_back(SimpleScalar("loss", step, 2.0f / static_cast<float>(step + 1)));
      if (step % 10 == 0) events_.push_back(SimpleScalar("acc", step, 0.01f * step));
    }
    WriteEvents(dir_ / kRun, events_);
    WriteEvents(dir_ / kOther, {FileVersion(), TensorScalar("epoch_loss", 0, 1.0f, true)});
    baseline_ = Take();
  }

  std::vector<FileDigest> Take() {
    auto report = VerifyLogdir(dir_.path(), {});
    EXPECT_TRUE(report.ok());
    EXPECT_TRUE(report->intact());
    // Through JSON, as `tbfs verify --save-baseline` and `--baseline` do.
    auto parsed = BaselineFromJson(BaselineToJson(report->digest.files));
    EXPECT_TRUE(parsed.ok()) << parsed.status().ToString();
    return parsed.value();
  }

  std::vector<Failure> Check() { return CheckBaseline(dir_.path(), baseline_); }

  static constexpr const char* kRun = "run1/events.out.tfevents.100.host.1.0";
  static constexpr const char* kOther = "run2/events.out.tfevents.100.host.2.0.v2";
  TempDir dir_;
  std::vector<pb::Event> events_;
  std::vector<FileDigest> baseline_;
};

TEST_F(BaselineTest, UnchangedLogdirPasses) { EXPECT_TRUE(Check().empty()); }

TEST_F(BaselineTest, AppendsByALiveWriterPass) {
  AppendEvents(dir_ / kRun, {SimpleScalar("loss", 200, 0.01f), SimpleScalar("new_tag", 200, 1)});
  std::string tail = Frame({SimpleScalar("loss", 201, 0.01f)});
  WriteBytes(dir_ / kRun, ReadBytes(dir_ / kRun) + tail.substr(0, 7));
  EXPECT_TRUE(Check().empty());
}

TEST_F(BaselineTest, ChangedValueFailsNamingRunTagFileAndOffset) {
  std::vector<pb::Event> changed = events_;
  changed[150] = SimpleScalar(changed[150].summary().value(0).tag(), changed[150].step(), 123.0f);
  WriteEvents(dir_ / kRun, changed);  // same length: one float differs
  ASSERT_EQ(ReadBytes(dir_ / kRun).size(), Frame(events_).size());
  std::vector<Failure> failures = Check();
  ASSERT_EQ(failures.size(), 1u);
  EXPECT_EQ(failures[0].run, "run1");
  EXPECT_EQ(failures[0].tag, changed[150].summary().value(0).tag());
  EXPECT_EQ(failures[0].file, kRun);
  EXPECT_NE(failures[0].reason.find("differ"), std::string::npos);
  EXPECT_LT(failures[0].offset, ReadBytes(dir_ / kRun).size());
}

TEST_F(BaselineTest, RemovedRecordFails) {
  std::vector<pb::Event> fewer = events_;
  fewer.erase(fewer.begin() + 40);
  fewer.push_back(SimpleScalar("loss", 999, 0.0f));  // keep the file as long
  fewer.push_back(SimpleScalar("loss", 999, 0.0f));
  WriteEvents(dir_ / kRun, fewer);
  std::vector<Failure> failures = Check();
  ASSERT_FALSE(failures.empty());
  EXPECT_EQ(failures[0].file, kRun);
}

TEST_F(BaselineTest, TruncatedFileFails) {
  std::string bytes = ReadBytes(dir_ / kRun);
  WriteBytes(dir_ / kRun, bytes.substr(0, bytes.size() / 2));
  std::vector<Failure> failures = Check();
  ASSERT_EQ(failures.size(), 1u);
  EXPECT_NE(failures[0].reason.find("truncated"), std::string::npos);
  EXPECT_EQ(failures[0].offset, bytes.size() / 2);
}

TEST_F(BaselineTest, DeletedFileFails) {
  ASSERT_EQ(::unlink((dir_ / kOther).c_str()), 0);
  std::vector<Failure> failures = Check();
  ASSERT_EQ(failures.size(), 1u);
  EXPECT_EQ(failures[0].file, kOther);
  EXPECT_EQ(failures[0].run, "run2");
  EXPECT_NE(failures[0].reason.find("gone"), std::string::npos);
}

TEST_F(BaselineTest, VerifyLogdirWithBaselineUsesTheSameProof) {
  VerifyOptions options;
  options.baseline = &baseline_;
  options.must_have = {"loss", "epoch_loss"};
  auto ok = VerifyLogdir(dir_.path(), options);
  ASSERT_TRUE(ok.ok());
  EXPECT_TRUE(ok->intact());

  std::vector<pb::Event> changed = events_;
  changed[3] = SimpleScalar("loss", changed[3].step(), 9.0f);
  WriteEvents(dir_ / kRun, changed);
  auto bad = VerifyLogdir(dir_.path(), options);
  ASSERT_TRUE(bad.ok());
  EXPECT_FALSE(bad->intact());
}

TEST_F(BaselineTest, MissingMustHaveTagFails) {
  VerifyOptions options;
  options.must_have = {"loss", "val_loss"};
  auto report = VerifyLogdir(dir_.path(), options);
  ASSERT_TRUE(report.ok());
  ASSERT_EQ(report->failures.size(), 1u);
  EXPECT_EQ(report->failures[0].tag, "val_loss");
}

TEST(BaselineJson, GarbageIsRefusedWithAOneLineReason) {
  for (const char* text : {"", "not json", "[]", "{\"format\":\"other\"}",
                           "{\"format\":\"tbfs-baseline\",\"version\":1}",
                           "{\"format\":\"tbfs-baseline\",\"version\":1,\"files\":[{\"path\":1}]}",
                           "{\"format\":\"tbfs-baseline\",\"version\":1,\"files\":[{\"path\":"
                           "\"../x\",\"offset_bytes\":1,\"records\":1,\"other_bytes\":0,"
                           "\"content_hash\":\"0000000000000000\",\"checkpoints\":[],"
                           "\"tags\":{}}]}"}) {
    auto parsed = BaselineFromJson(text);
    ASSERT_FALSE(parsed.ok()) << text;
    EXPECT_EQ(parsed.status().message().find('\n'), std::string::npos);
  }
  auto future = BaselineFromJson("{\"format\":\"tbfs-baseline\",\"version\":99,\"files\":[]}");
  ASSERT_FALSE(future.ok());
  EXPECT_EQ(future.status().code(), Code::kNotSupported);
}

}  // namespace
}  // namespace tbfs::events
