#include "events/digest.h"

#include <gtest/gtest.h>

#include "events/logdir_digest.h"
#include "fmt/format.h"
#include "tests/events/event_files.h"

namespace tbfs::events {
namespace {

using namespace tbfs::testing;

FileDigest Digest(const std::string& path, uint64_t limit = kNoLimit) {
  FileDigest d;
  Status st = DigestFile(ParentPath(path), std::string(BaseName(path)), &d, limit);
  EXPECT_TRUE(st.ok()) << st.ToString();
  return d;
}

TEST(DigestFile, CountsStepsAndLastValuePerTag) {
  TempDir dir;
  WriteEvents(dir / "f", {FileVersion(), SimpleScalar("loss", 0, 2.5f), SimpleScalar("lr", 0, 0.1f),
                          SimpleScalar("loss", 10, 1.5f), SimpleScalar("loss", 20, 0.5f)});
  FileDigest d = Digest(dir / "f");
  EXPECT_EQ(d.records, 5u);
  ASSERT_EQ(d.tags.size(), 2u);
  const TagDigest& loss = d.tags.at("loss");
  EXPECT_EQ(loss.plugin, "scalars");
  EXPECT_EQ(loss.count, 3u);
  EXPECT_EQ(loss.first_step, 0);
  EXPECT_EQ(loss.last_step, 20);
  ASSERT_TRUE(loss.last_scalar);
  EXPECT_EQ(loss.last_scalar->f, 0.5);
  EXPECT_GT(d.other_bytes, 0u);  // the file_version record
}

TEST(DigestFile, MetadataOnlyWithFirstValueStillMakesEveryValueAScalar) {
  TempDir dir;
  WriteEvents(dir / "f", {FileVersion(), TensorScalar("epoch_loss", 0, 0.9f, true),
                          TensorScalar("epoch_loss", 1, 0.7f, false),
                          TensorScalar("epoch_loss", 2, 0.4f, false)});
  FileDigest d = Digest(dir / "f");
  const TagDigest& t = d.tags.at("epoch_loss");
  EXPECT_EQ(t.plugin, "scalars");
  EXPECT_EQ(t.count, 3u);
  ASSERT_TRUE(t.last_scalar);
  EXPECT_FLOAT_EQ(static_cast<float>(t.last_scalar->f), 0.4f);
}

TEST(MergeRuns, PluginFromAnEarlierFileOfTheRun) {
  TempDir dir;
  WriteEvents(dir / "run/events.out.tfevents.1.a",
              {FileVersion(), TensorScalar("acc", 0, 0.1f, true)});
  WriteEvents(dir / "run/events.out.tfevents.2.a",
              {FileVersion(), TensorScalar("acc", 1, 0.2f, false)});
  LogdirDigest d =
      DigestFiles(dir.path(), {"run/events.out.tfevents.2.a", "run/events.out.tfevents.1.a"}, {});
  ASSERT_TRUE(d.errors.empty());
  ASSERT_EQ(d.runs.size(), 1u);
  const RunTag& acc = d.runs.at("run").tags.at("acc");
  EXPECT_EQ(acc.plugin, "scalars");
  EXPECT_EQ(acc.count, 2u);
  EXPECT_EQ(acc.first_step, 0);
  EXPECT_EQ(acc.last_step, 1);
  ASSERT_TRUE(acc.last_scalar);
  EXPECT_FLOAT_EQ(static_cast<float>(acc.last_scalar->f), 0.2f);
}

TEST(DigestEach, EachFileItsOwnDigestAndStatusInTheOrderAsked) {
  TempDir dir;
  std::vector<std::string> paths;
  for (int i = 0; i < 9; ++i) {
    paths.push_back(fmt::format("run{}/events.out.tfevents.{}.a", i % 3, i));
    std::vector<pb::Event> records = {FileVersion()};
    for (int step = 0; step <= i; ++step) records.push_back(SimpleScalar("loss", step, 1.0f));
    WriteEvents(dir / paths.back(), records);
  }
  paths.insert(paths.begin() + 4, "run1/events.out.tfevents.gone");
  std::vector<FileDigest> out;
  const std::vector<Status> st = DigestEach(dir.path(), paths, 3, &out);
  ASSERT_EQ(st.size(), paths.size());
  ASSERT_EQ(out.size(), paths.size());
  for (size_t i = 0; i < paths.size(); ++i) {
    if (i == 4) {
      EXPECT_TRUE(st[i].IsNotFound()) << st[i].ToString();
      continue;
    }
    ASSERT_TRUE(st[i].ok()) << paths[i] << ": " << st[i].ToString();
    const int n = static_cast<int>(i < 4 ? i : i - 1);
    EXPECT_EQ(out[i].path, paths[i]);
    EXPECT_EQ(out[i].tags.at("loss").count, static_cast<uint64_t>(n + 1)) << paths[i];
  }
}

TEST(DigestFile, HashIsAFixedFunctionOfTheRecords) {
  // The same records must digest to the same value on every machine and
  // every run: integers are hashed little-endian, floats by their bits.
  TempDir dir;
  WriteEvents(dir / "f", {FileVersion(1.0), SimpleScalar("loss", 0, 1.0f, 2.0),
                          SimpleScalar("loss", 1, 0.5f, 3.0), TensorScalar("acc", 5, 0.25f, true)});
  FileDigest d = Digest(dir / "f");
  EXPECT_EQ(d.tags.at("loss").hash, 0x0cb6b54ec258715eull);
  EXPECT_EQ(d.tags.at("acc").hash, 0xcdb1535ce50ba4f0ull);
  FileDigest again = Digest(dir / "f");
  EXPECT_EQ(again.content_hash, d.content_hash);
}

TEST(DigestFile, AnyChangedValueChangesTheTagHash) {
  TempDir dir;
  WriteEvents(dir / "a", {SimpleScalar("loss", 0, 1.0f), SimpleScalar("loss", 1, 0.5f)});
  WriteEvents(dir / "b", {SimpleScalar("loss", 0, 1.0f), SimpleScalar("loss", 1, 0.50001f)});
  WriteEvents(dir / "c", {SimpleScalar("loss", 0, 1.0f), SimpleScalar("loss", 2, 0.5f)});
  uint64_t a = Digest(dir / "a").tags.at("loss").hash;
  EXPECT_NE(a, Digest(dir / "b").tags.at("loss").hash);
  EXPECT_NE(a, Digest(dir / "c").tags.at("loss").hash);
}

TEST(DigestFile, PrefixDigestIsUnchangedByAppends) {
  TempDir dir;
  WriteEvents(dir / "f", {FileVersion(), SimpleScalar("loss", 0, 1.0f)});
  FileDigest before = Digest(dir / "f");
  AppendEvents(dir / "f", {SimpleScalar("loss", 1, 0.5f)});
  FileDigest prefix = Digest(dir / "f", before.offset_bytes);
  EXPECT_EQ(prefix.content_hash, before.content_hash);
  EXPECT_EQ(prefix.tags.at("loss").hash, before.tags.at("loss").hash);
  EXPECT_NE(Digest(dir / "f").tags.at("loss").hash, before.tags.at("loss").hash);
}

TEST(DigestFile, PartialTailIsNotAnError) {
  TempDir dir;
  std::string bytes = Frame({FileVersion(), SimpleScalar("loss", 0, 1.0f)});
  std::string tail = Frame({SimpleScalar("loss", 1, 0.5f)});
  WriteBytes(dir / "f", bytes + tail.substr(0, tail.size() - 2));
  FileDigest d = Digest(dir / "f");
  EXPECT_TRUE(d.partial_tail);
  EXPECT_EQ(d.offset_bytes, bytes.size());
  EXPECT_EQ(d.tags.at("loss").count, 1u);
}

TEST(DigestFile, UnparsableRecordIsCorruptionWithOffset) {
  TempDir dir;
  std::string good = Frame({FileVersion()});
  std::string bad;
  AppendFramedRecord(std::string("\xff\xff\xff", 3), &bad);
  WriteBytes(dir / "f", good + bad);
  FileDigest d;
  Status st = DigestFile(dir.path(), "f", &d);
  EXPECT_TRUE(st.IsCorruption());
  EXPECT_NE(st.message().find("offset " + std::to_string(good.size())), std::string::npos)
      << st.message();
  EXPECT_EQ(d.offset_bytes, good.size());
}

}  // namespace
}  // namespace tbfs::events
