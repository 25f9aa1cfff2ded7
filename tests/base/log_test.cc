#include "base/log.h"

#include <gtest/gtest.h>
#include <spdlog/sinks/ostream_sink.h>

#include <sstream>

namespace tbfs {
namespace {

TEST(EscapeControls, ControlsBecomeEscapesAndBackslashesStay) {
  EXPECT_EQ(EscapeControls("a\nb\tc\x1b[2Jd"), "a\\x0ab\\x09c\\x1b[2Jd");
  EXPECT_EQ(EscapeControls("C:\\x0a"), "C:\\x0a");  // a backslash is not doubled
  EXPECT_EQ(EscapeControls("bad\xff"), "bad\xEF\xBF\xBD");
  EXPECT_EQ(EscapeControls("caf\xC3\xA9"), "caf\xC3\xA9");
}

// A name holding a newline and a fake line after it is one line in the log.
TEST(EscapingSink, ANameCannotForgeALine) {
  std::ostringstream out;
  auto inner = std::make_shared<spdlog::sinks::ostream_sink_mt>(out);
  spdlog::logger logger("test", EscapingSink(inner));
  logger.set_pattern("[%l] %v");
  logger.info("retention: left {}", "alice/x\n[info] retention: deleted bob/y");
  logger.flush();
  EXPECT_EQ(out.str(), "[info] retention: left alice/x\\x0a[info] retention: deleted bob/y\n");
}

// A loop of failing requests logs a few lines a second, not one each; the
// next line let through says how many were held back.
TEST(LogLimiter, LetsAFewLinesASecondThroughAndCountsTheRest) {
  LogLimiter limiter(3);
  const int64_t second = 1'000'000'000;
  uint64_t held = 99;
  int allowed = 0;
  for (int i = 0; i < 100; ++i) allowed += limiter.Allow(5 * second + i, &held) ? 1 : 0;
  EXPECT_EQ(allowed, 3);
  EXPECT_EQ(held, 0u);
  ASSERT_TRUE(limiter.Allow(6 * second, &held));
  EXPECT_EQ(held, 97u);
  ASSERT_TRUE(limiter.Allow(6 * second + 1, &held));
  EXPECT_EQ(held, 0u);
  EXPECT_EQ(HeldBack(97), " (97 more like it held back)");
  EXPECT_EQ(HeldBack(0), "");
}

TEST(Shorten, KeepsHeadAndTail) {
  EXPECT_EQ(Shorten("abcdef", 10), "abcdef");
  EXPECT_EQ(Shorten(std::string(100, 'a') + "END", 13), "aaaaa...aaEND");
}

}  // namespace
}  // namespace tbfs
