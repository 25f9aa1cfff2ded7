#include "base/text.h"

#include <gtest/gtest.h>

#include <vector>

namespace tbfs {
namespace {

TEST(ValidUtf8, ValidTextComesBackUnchanged) {
  for (const std::string& s :
       std::vector<std::string>{"", "loss", "r\xC3\xA9sum\xC3\xA9", "\xE2\x82\xAC",
                                "\xF0\x9F\x98\x80", "\xF4\x8F\xBF\xBF", std::string("a\0b", 3)}) {
    EXPECT_EQ(ValidUtf8(s), s);
  }
}

TEST(ValidUtf8, EachBadByteBecomesOneReplacementCharacter) {
  const std::string r = "\xEF\xBF\xBD";
  EXPECT_EQ(ValidUtf8("run\xFF"), "run" + r);
  EXPECT_EQ(ValidUtf8("\x80\x80"), r + r);                  // lone continuations
  EXPECT_EQ(ValidUtf8("\xC3"), r);                          // cut short at the end
  EXPECT_EQ(ValidUtf8("\xC3x"), r + "x");                   // cut short before ASCII
  EXPECT_EQ(ValidUtf8("\xC0\xAF"), r + r);                  // overlong '/'
  EXPECT_EQ(ValidUtf8("\xE0\x80\xAF"), r + r + r);          // overlong, three bytes
  EXPECT_EQ(ValidUtf8("\xED\xA0\x80"), r + r + r);          // a surrogate
  EXPECT_EQ(ValidUtf8("\xF4\x90\x80\x80"), r + r + r + r);  // above U+10FFFF
  EXPECT_EQ(ValidUtf8("\xF8\x88\x80\x80\x80"), r + r + r + r + r);
}

TEST(Printable, ControlCharactersAreEscapedAndTextIsNot) {
  EXPECT_EQ(Printable("run-1/\xC3\xA9t\xC3\xA9"), "run-1/\xC3\xA9t\xC3\xA9");
  EXPECT_EQ(Printable("a\nb\tc\x1B[2Jd\x7F"), "a\\x0ab\\x09c\\x1b[2Jd\\x7f");
  EXPECT_EQ(Printable("back\\slash"), "back\\\\slash");
  EXPECT_EQ(Printable("c1\xC2\x9B"), "c1\\x9b");  // CSI as a C1 character
  EXPECT_EQ(Printable("bad\xFF"), "bad\xEF\xBF\xBD");
  // A line separator, and a right-to-left override that shows a name reversed.
  EXPECT_EQ(Printable("a\xE2\x80\xA8"
                      "b\xE2\x80\xAE"
                      "c"),
            "a\\u2028b\\u202ec");
}

}  // namespace
}  // namespace tbfs
