// The readers against files written by PyTorch itself (../shared/data),
// checked against what TensorBoard's own reader finds in them (its README).
#include <gtest/gtest.h>

#include "events/event_view.h"
#include "events/verifier.h"
#include "tests/test_util.h"

namespace tbfs::events {
namespace {

class PytorchLogdir : public ::testing::Test {
 protected:
  void SetUp() override {
    auto report = VerifyLogdir(testing::SharedData("pytorch-logdir"), {});
    ASSERT_TRUE(report.ok()) << report.status().ToString();
    report_ = std::move(report).value();
  }
  const RunTag& Tag(const std::string& run, const std::string& tag) {
    return report_.digest.runs.at(run).tags.at(tag);
  }
  VerifyReport report_;
};

TEST_F(PytorchLogdir, IsIntact) {
  EXPECT_TRUE(report_.intact());
  EXPECT_EQ(report_.digest.files.size(), 6u);
}

TEST_F(PytorchLogdir, LossCurveMatchesTensorBoard) {
  const RunTag& loss = Tag("run_a", "loss");
  EXPECT_EQ(loss.plugin, "scalars");
  EXPECT_EQ(loss.count, 3000u);
  EXPECT_EQ(loss.first_step, 0);
  EXPECT_EQ(loss.last_step, 2999);
  ASSERT_TRUE(loss.last_scalar);
  EXPECT_NEAR(loss.last_scalar->f, 0.0616, 5e-5);
  EXPECT_EQ(Tag("run_a", "lr").count, 3000u);
  EXPECT_EQ(Tag("run_a", "eval_loss").count, 300u);
  EXPECT_EQ(Tag("run_a", "eval_loss").last_step, 2990);
}

TEST_F(PytorchLogdir, FirstLossValueMatchesTensorBoard) {
  // The digest keeps the last value; read the first one record by record.
  std::string rel = report_.digest.runs.at("run_a").files.at(0);
  auto reader = RecordReader::Open(testing::SharedData("pytorch-logdir/" + rel));
  ASSERT_TRUE(reader.ok());
  RecordView record;
  EventView event;
  while ((*reader)->Next(&record)) {
    ASSERT_TRUE(ParseEvent(record.data, &event).ok());
    if (!event.values.empty() && event.values[0].tag == "loss") break;
  }
  ASSERT_FALSE(event.values.empty());
  EXPECT_EQ(event.step, 0);
  EXPECT_NEAR(event.values[0].simple_value, 2.6021, 5e-5);
}

TEST_F(PytorchLogdir, HistogramsImagesTextAndSubRuns) {
  EXPECT_EQ(Tag("run_a", "weights/fc1").plugin, "histograms");
  EXPECT_EQ(Tag("run_a", "weights/fc1").count, 30u);
  EXPECT_EQ(Tag("run_a", "grads/fc1").count, 30u);
  EXPECT_EQ(Tag("run_a", "sample/gradient").plugin, "images");
  EXPECT_EQ(Tag("run_a", "sample/gradient").count, 3u);
  EXPECT_EQ(Tag("run_a", "notes/text_summary").plugin, "text");
  EXPECT_EQ(Tag("run_a", "notes/text_summary").count, 3u);
  for (const char* run : {"run_a/losses_train", "run_a/losses_eval"}) {
    EXPECT_EQ(Tag(run, "losses").count, 60u) << run;
    EXPECT_EQ(Tag(run, "losses").last_step, 2950) << run;
  }
  bool found = false;
  for (const auto& [name, run] : report_.digest.runs) {
    if (run.tags.count("hparam/final_loss")) {
      EXPECT_EQ(run.tags.at("hparam/final_loss").count, 1u);
      found = true;
    }
  }
  EXPECT_TRUE(found);
}

TEST_F(PytorchLogdir, ProfileRunsHoldSixLossValues) {
  for (const char* run : {"profile_plain", "profile_gzip"}) {
    EXPECT_EQ(Tag(run, "loss").count, 6u) << run;
    EXPECT_EQ(Tag(run, "loss").first_step, 0) << run;
    EXPECT_EQ(Tag(run, "loss").last_step, 5) << run;
  }
}

}  // namespace
}  // namespace tbfs::events
