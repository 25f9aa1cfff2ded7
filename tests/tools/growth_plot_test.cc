#include "tools/cli/growth_plot.h"

#include <gtest/gtest.h>

#include <regex>

namespace tbfs::cli {
namespace {

size_t Count(const std::string& text, const std::string& what) {
  size_t n = 0;
  for (size_t at = text.find(what); at != std::string::npos; at = text.find(what, at + 1)) n++;
  return n;
}

store::GrowthSample At(double t, uint64_t tfevents, uint64_t traces, uint64_t cold,
                       uint64_t free_bytes) {
  store::GrowthSample s;
  s.unix_s = t;
  s.tfevents_bytes = tfevents;
  s.trace_bytes = traces;
  s.cold_bytes = cold;
  s.fs_size = 1 << 30;
  s.fs_free = free_bytes;
  return s;
}

TEST(GrowthSvg, DrawsEachClassStackedAndHowFullTheFilesystemIs) {
  std::vector<store::GrowthSample> series;
  for (int i = 0; i < 10; ++i)
    series.push_back(At(1.8e9 + 60 * i, 1000 * i, 5000 * i, 20000 * i, (1 << 30) - (1 << 24) * i));
  const std::string svg = GrowthSvg(series, "/data/logs", 90);
  EXPECT_EQ(svg.rfind("<svg xmlns=\"http://www.w3.org/2000/svg\"", 0), 0u);
  EXPECT_EQ(svg.substr(svg.size() - 7), "</svg>\n");
  EXPECT_EQ(Count(svg, "<polygon "), 4u);   // cold, traces, tfevents, other
  EXPECT_EQ(Count(svg, "<polyline "), 1u);  // filesystem used
  EXPECT_NE(svg.find("warn at 90%"), std::string::npos);
  EXPECT_NE(svg.find("2027-01-15 08:00 UTC"), std::string::npos) << "the first sample's time";
  EXPECT_EQ(svg.find("nan"), std::string::npos);
  EXPECT_EQ(svg.find("inf"), std::string::npos);
  // Every polygon has a point per sample on its top and on its bottom edge.
  std::smatch m;
  ASSERT_TRUE(std::regex_search(svg, m, std::regex("<polygon points=\"([^\"]*)\"")));
  EXPECT_EQ(Count(m[1].str(), ","), 2 * series.size());
}

TEST(GrowthSvg, ATitleOfAnyBytesIsEscapedAndFewSamplesStillDraw) {
  const std::string svg = GrowthSvg({At(1.8e9, 1, 2, 3, 4)}, "<a&b>\"\n\xff", 101);
  EXPECT_NE(svg.find("Growth of &lt;a&amp;b&gt;&quot;\\x0a\xEF\xBF\xBD"), std::string::npos) << svg;
  EXPECT_NE(svg.find("warn at 100%"), std::string::npos);
  EXPECT_EQ(svg.find("nan"), std::string::npos);
  const std::string empty = GrowthSvg({}, "x", 90);
  EXPECT_NE(empty.find("no samples yet"), std::string::npos);
  EXPECT_EQ(empty.substr(empty.size() - 7), "</svg>\n");
}

}  // namespace
}  // namespace tbfs::cli
