#include "store/footprint.h"

#include <gtest/gtest.h>

#include "tests/events/event_files.h"

namespace tbfs::store {
namespace {

using namespace tbfs::testing;

TEST(ScanLogdir, SplitsClassesAndTfeventsBytes) {
  TempDir dir;
  WriteEvents(dir / "run/events.out.tfevents.1.h.1.0",
              {FileVersion(), SimpleScalar("loss", 0, 1.0f), SimpleScalar("loss", 1, 0.5f)});
  WriteBytes(dir / "run/h_1.1.pt.trace.json", std::string(5000, 'x'));
  WriteBytes(dir / "run/plugins/profile/d/h.xplane.pb", std::string(3000, 'x'));
  WriteBytes(dir / "run/notes.txt", "hello");
  WriteBytes(dir / ".tbfs/000001.sst", std::string(99999, 'x'));  // the store: not counted

  ScanOptions options;
  options.walk.skip_dirs = {kStoreDirName};
  options.largest = 2;
  auto fp = ScanLogdir(dir.path(), Policy(), options);
  ASSERT_TRUE(fp.ok()) << fp.status().ToString();
  uint64_t events_bytes = ReadBytes(dir / "run/events.out.tfevents.1.h.1.0").size();
  EXPECT_EQ(fp->total_files, 4u);
  EXPECT_EQ(fp->total_bytes, events_bytes + 5000 + 3000 + 5);
  EXPECT_EQ(fp->of(FileClass::kEvents).bytes, events_bytes);
  EXPECT_EQ(fp->of(FileClass::kPytorchTrace).bytes, 5000u);
  EXPECT_EQ(fp->of(FileClass::kTfProfile).bytes, 3000u);
  EXPECT_EQ(fp->of(FileClass::kOther).bytes, 5u);
  EXPECT_EQ(fp->trace_bytes, 8000u);
  EXPECT_EQ(fp->trace_files, 2u);
  const EventsSplit& e = fp->events;
  EXPECT_EQ(e.scalars + e.histograms + e.images + e.other, events_bytes);
  EXPECT_GT(e.scalars, 0u);
  EXPECT_GT(e.other, 0u);  // file_version
  ASSERT_EQ(fp->largest.size(), 2u);
  EXPECT_EQ(fp->largest[0].path, "run/h_1.1.pt.trace.json");
  EXPECT_EQ(fp->largest[1].path, "run/plugins/profile/d/h.xplane.pb");
}

TEST(ScanLogdir, CorruptTfeventsIsAWarningNotAFailure) {
  TempDir dir;
  std::string bytes = Frame({FileVersion(), SimpleScalar("loss", 0, 1.0f)});
  bytes[bytes.size() - 6] ^= 0x40;
  WriteBytes(dir / "r/events.out.tfevents.1.h", bytes);
  auto fp = ScanLogdir(dir.path(), Policy(), {});
  ASSERT_TRUE(fp.ok());
  ASSERT_EQ(fp->warnings.size(), 1u);
  EXPECT_NE(fp->warnings[0].find("events.out.tfevents.1.h"), std::string::npos);
}

TEST(ScanLogdir, MissingLogdirIsAnError) {
  auto fp = ScanLogdir("/nonexistent/logdir", Policy(), {});
  ASSERT_FALSE(fp.ok());
  EXPECT_NE(fp.status().message().find("/nonexistent/logdir"), std::string::npos);
}

}  // namespace
}  // namespace tbfs::store
