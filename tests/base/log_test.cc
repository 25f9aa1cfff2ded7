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

TEST(Shorten, KeepsHeadAndTail) {
  EXPECT_EQ(Shorten("abcdef", 10), "abcdef");
  EXPECT_EQ(Shorten(std::string(100, 'a') + "END", 13), "aaaaa...aaEND");
}

}  // namespace
}  // namespace tbfs
