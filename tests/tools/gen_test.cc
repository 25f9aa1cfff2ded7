#include "tools/gen/gen.h"

#include <gtest/gtest.h>
#include <xxhash.h>

#include <map>

#include "base/fs_util.h"
#include "events/verifier.h"
#include "store/classify.h"
#include "tests/test_util.h"

namespace tbfs::gen {
namespace {

using testing::ReadBytes;
using testing::TempDir;

// Path -> hash of content, for the whole tree.
std::map<std::string, uint64_t> TreeHashes(const std::string& root) {
  std::map<std::string, uint64_t> out;
  EXPECT_TRUE(WalkTree(root, {}, [&](const WalkEntry& e) {
                std::string bytes = ReadBytes(JoinPath(root, e.rel));
                out[e.rel] = XXH3_64bits(bytes.data(), bytes.size());
              }).ok());
  return out;
}

GenOptions Small(uint64_t seed) {
  GenOptions o;
  o.runs = 2;
  o.steps = 300;
  o.trace_mb = 3;
  o.seed = seed;
  return o;
}

TEST(Generator, SameSeedSameBytes) {
  TempDir a, b, c;
  GenReport ra, rb, rc;
  ASSERT_TRUE(GenerateLogdir(a.path(), Small(7), &ra).ok());
  ASSERT_TRUE(GenerateLogdir(b.path(), Small(7), &rb).ok());
  ASSERT_TRUE(GenerateLogdir(c.path(), Small(8), &rc).ok());
  auto ha = TreeHashes(a.path());
  EXPECT_EQ(ha, TreeHashes(b.path()));
  EXPECT_NE(ha, TreeHashes(c.path()));
  EXPECT_EQ(ra.files, ha.size());
}

TEST(Generator, WritesTheLayoutsOfPytorchKerasAndBothProfilers) {
  TempDir dir;
  GenReport report;
  ASSERT_TRUE(GenerateLogdir(dir.path(), Small(1), &report).ok());
  store::Policy policy;
  std::map<store::FileClass, int> classes;
  bool xplane = false, pt_json = false, pt_gz = false, profile_empty = false, v2 = false;
  ASSERT_TRUE(WalkTree(dir.path(), {}, [&](const WalkEntry& e) {
                classes[policy.Classify(e.rel)]++;
                std::string_view name = BaseName(e.rel);
                if (e.rel.find("/train/plugins/profile/") != std::string::npos &&
                    name.ends_with(".xplane.pb")) {
                  xplane = true;
                }
                pt_json |= name.ends_with(".pt.trace.json");
                pt_gz |= name.ends_with(".pt.trace.json.gz");
                profile_empty |= name.ends_with(".profile-empty");
                v2 |= name.ends_with(".v2");
              }).ok());
  EXPECT_TRUE(xplane && pt_json && pt_gz && profile_empty && v2);
  EXPECT_GT(classes[store::FileClass::kTfProfile], 0);
  EXPECT_GT(classes[store::FileClass::kPytorchTrace], 0);
  EXPECT_EQ(classes[store::FileClass::kOther], 0);
  EXPECT_GT(report.trace_bytes, 2u << 20);
}

TEST(Generator, OutputVerifiesWithTheExpectedCurves) {
  TempDir dir;
  GenReport report;
  ASSERT_TRUE(GenerateLogdir(dir.path(), Small(3), &report).ok());
  auto verified = events::VerifyLogdir(dir.path(), {});
  ASSERT_TRUE(verified.ok());
  EXPECT_TRUE(verified->intact());
  int pytorch_runs = 0, keras_runs = 0;
  for (const auto& [name, run] : verified->digest.runs) {
    if (run.tags.count("loss/train")) {
      ++pytorch_runs;
      EXPECT_EQ(run.tags.at("loss/train").count, 300u);
      EXPECT_EQ(run.tags.at("weights/fc1").plugin, "histograms");
      EXPECT_EQ(run.tags.at("samples/input").plugin, "images");
      EXPECT_EQ(run.tags.at("notes/text_summary").plugin, "text");
    }
    if (run.tags.count("batch_loss")) {
      ++keras_runs;
      // Metadata only on the first value, yet every value is a scalar.
      EXPECT_EQ(run.tags.at("batch_loss").plugin, "scalars");
      EXPECT_EQ(run.tags.at("batch_loss").count, 300u);
      EXPECT_TRUE(run.tags.at("batch_loss").last_scalar.has_value());
      EXPECT_EQ(run.tags.at("epoch_steps").last_scalar->i, 300);
      EXPECT_EQ(run.tags.at("dense/kernel_0").plugin, "histograms");
    }
  }
  EXPECT_EQ(pytorch_runs, 1);
  EXPECT_EQ(keras_runs, 1);
}

TEST(Generator, LiveTailLeavesAPartialRecord) {
  TempDir dir;
  GenOptions o = Small(4);
  o.live_tail = true;
  GenReport report;
  ASSERT_TRUE(GenerateLogdir(dir.path(), o, &report).ok());
  auto verified = events::VerifyLogdir(dir.path(), {});
  ASSERT_TRUE(verified.ok());
  EXPECT_TRUE(verified->intact());
  int partial = 0;
  for (const auto& f : verified->digest.files) partial += f.partial_tail ? 1 : 0;
  EXPECT_EQ(partial, 1);
}

TEST(Generator, RefusesANonEmptyFolder) {
  TempDir dir;
  testing::WriteBytes(dir / "keep.txt", "mine");
  GenReport report;
  Status st = GenerateLogdir(dir.path(), Small(1), &report);
  EXPECT_FALSE(st.ok());
  EXPECT_NE(st.message().find("not empty"), std::string::npos);
  EXPECT_EQ(TreeHashes(dir.path()).size(), 1u);
}

}  // namespace
}  // namespace tbfs::gen
