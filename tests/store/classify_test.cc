#include "store/classify.h"

#include <gtest/gtest.h>

namespace tbfs::store {
namespace {

TEST(Classify, DefaultClasses) {
  Policy p;
  EXPECT_EQ(p.Classify("run/events.out.tfevents.1.host.1.0"), FileClass::kEvents);
  EXPECT_EQ(p.Classify("r/train/plugins/profile/2026_01_01_00_00_00/h.xplane.pb"),
            FileClass::kTfProfile);
  EXPECT_EQ(p.Classify("r/train/plugins/profile/2026_01_01_00_00_00/h.trace.json.gz"),
            FileClass::kTfProfile);
  EXPECT_EQ(p.Classify("r/h_1.1700000000000.pt.trace.json"), FileClass::kPytorchTrace);
  EXPECT_EQ(p.Classify("r/h_1.1700000000000.pt.trace.json.gz"), FileClass::kPytorchTrace);
  EXPECT_EQ(p.Classify("r/chrome.trace.json"), FileClass::kOtherTrace);
  EXPECT_EQ(p.Classify("r/timeline.trace"), FileClass::kOtherTrace);
  EXPECT_EQ(p.Classify("r/profiles/step3/mem.json.gz"), FileClass::kOtherTrace);
  EXPECT_EQ(p.Classify("r/config.json"), FileClass::kOther);
  EXPECT_EQ(p.Classify("r/checkpoint.pt"), FileClass::kOther);
}

TEST(Classify, ProfilerMarkerTfeventsFileStaysEvents) {
  Policy p;
  // The profile-empty marker lives beside profiler output but is a tfevents file.
  EXPECT_EQ(p.Classify("r/train/events.out.tfevents.1700000000.h.profile-empty"),
            FileClass::kEvents);
  EXPECT_EQ(p.Classify("r/train/plugins/profile/x/events.out.tfevents.1.h"), FileClass::kEvents);
}

TEST(Classify, HostileGlobsNeverMakeATfeventsFileATrace) {
  // I1: whatever the configuration says, a tfevents file is never a candidate.
  Policy p;
  p.tf_profile_globs = {"**"};
  p.pytorch_globs = {"**/*tfevents*"};
  p.other_trace_globs = {"**/events.out.*"};
  p.trace_markers = {".tfevents.", "*tfevents*", "**"};
  for (const char* path : {"events.out.tfevents.1.h", "run/events.out.tfevents.1.h.0.v2",
                           "r/train/events.out.tfevents.1.h.profile-empty",
                           "r/plugins/profile/events.out.tfevents.9"}) {
    EXPECT_EQ(p.Classify(path), FileClass::kEvents) << path;
    EXPECT_FALSE(p.IsMigratable(path)) << path;
    EXPECT_TRUE(p.IsProtected(path)) << path;
  }
  EXPECT_TRUE(p.IsMigratable("r/anything.bin"));  // the hostile globs do apply elsewhere
}

TEST(Classify, ProtectedMarkersOnlyAddProtection) {
  Policy p;
  p.protected_markers = {"keep/", "*.xplane.pb"};
  EXPECT_FALSE(p.IsMigratable("r/keep/h.pt.trace.json"));
  EXPECT_FALSE(p.IsMigratable("r/plugins/profile/x/h.xplane.pb"));
  EXPECT_TRUE(p.IsMigratable("r/plugins/profile/x/h.trace.json.gz"));
  EXPECT_EQ(p.Classify("r/keep/h.pt.trace.json"), FileClass::kPytorchTrace);
}

TEST(ClassName, RoundTrips) {
  for (FileClass c : {FileClass::kEvents, FileClass::kTfProfile, FileClass::kPytorchTrace,
                      FileClass::kOtherTrace, FileClass::kOther}) {
    FileClass back;
    ASSERT_TRUE(ParseClassName(ClassName(c), &back));
    EXPECT_EQ(back, c);
  }
  FileClass x;
  EXPECT_FALSE(ParseClassName("traces", &x));
}

}  // namespace
}  // namespace tbfs::store
