#include "events/crc32c.h"

#include <gtest/gtest.h>

#include <string>

namespace tbfs::events {
namespace {

TEST(Crc32c, KnownVectors) {
  EXPECT_EQ(Crc32c("123456789", 9), 0xe3069283u);
  EXPECT_EQ(Crc32c("", 0), 0u);
  std::string zeros(32, '\0');
  EXPECT_EQ(Crc32c(zeros.data(), zeros.size()), 0x8a9136aau);  // RFC 3720 B.4
  std::string ones(32, '\xff');
  EXPECT_EQ(Crc32c(ones.data(), ones.size()), 0x62a8ab43u);
}

TEST(Crc32c, MaskedVectorFromTfRecord) {
  std::string bytes = std::string("\x1a\x11", 2) + "CRC test, one two";
  EXPECT_EQ(MaskedCrc32c(bytes.data(), bytes.size()), 0x5794d08au);
}

TEST(Crc32c, ExtendEqualsWhole) {
  std::string data;
  for (int i = 0; i < 100000; ++i) data.push_back(static_cast<char>(i * 7));
  uint32_t whole = Crc32c(data.data(), data.size());
  uint32_t part = Crc32c(data.data(), 12345);
  EXPECT_EQ(Crc32c(data.data() + 12345, data.size() - 12345, part), whole);
}

TEST(Crc32c, MaskRoundTrip) {
  for (uint32_t c : {0u, 1u, 0xe3069283u, 0xffffffffu}) EXPECT_EQ(UnmaskCrc(MaskCrc(c)), c);
}

}  // namespace
}  // namespace tbfs::events

namespace tbfs::events {
namespace {

TEST(Crc32c, SmallAndLargePathsAgree) {
  // Sizes around the switch between the inline and the isa-l kernels.
  std::string data;
  for (int i = 0; i < 1000; ++i) data.push_back(static_cast<char>(i * 31 + 7));
  for (size_t n : {1, 7, 8, 9, 255, 256, 257, 1000}) {
    uint32_t whole = Crc32c(data.data(), n);
    uint32_t bytewise = 0;
    for (size_t i = 0; i < n; ++i) bytewise = Crc32c(data.data() + i, 1, bytewise);
    EXPECT_EQ(whole, bytewise) << n;
  }
}

}  // namespace
}  // namespace tbfs::events
