#include "store/number_deltas.h"

#include <gtest/gtest.h>
#include <zlib.h>

#include <cstring>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "store/chunk.h"
#include "store/format.h"
#include "tests/store/trace_json.h"
#include "tests/test_util.h"

namespace tbfs::store {
namespace {

// Encode, then decode into exactly raw.size() bytes.
std::string RoundTrip(std::string_view raw, std::string* encoded) {
  if (!EncodeNumberDeltas(raw, encoded)) return "<nothing rewritten>";
  std::string back(raw.size(), '\0');
  Status s = DecodeNumberDeltas(*encoded, back.data(), back.size());
  return s.ok() ? back : "<" + s.message() + ">";
}

TEST(NumberDeltas, AKeysNumbersBecomeDifferencesWhereThatMakesThemShorter) {
  const std::string raw =
      "{\"ts\": 1623142623482433, \"dur\": 69, \"pid\": 25738},\n"
      "{\"ts\": 1623142623482350, \"dur\": 155, \"pid\": 25738}";
  std::string enc;
  EXPECT_EQ(RoundTrip(raw, &enc), raw);
  // "dur" as differences (~69, ~86) would take more than as it is; "pid"
  // is the same number throughout (zstd takes it as well as ~0).
  EXPECT_EQ(enc,
            "{\"ts\": ~1623142623482433, \"dur\": 69, \"pid\": 25738},\n"
            "{\"ts\": ~-83, \"dur\": 155, \"pid\": 25738}");
}

// A number that never changes in the chunk stays as it is, however long:
// the decoder would stop at each ~0 for nothing zstd does not already get.
TEST(NumberDeltas, ANumberTheSameThroughoutTheChunkStaysAsItIs) {
  std::string raw;
  for (int i = 0; i < 100; ++i) {
    raw += fmt::format("{{\"device\": 123456789, \"ts\": {}, \"once\": 98765}},\n",
                       1700000000000000 + 7 * i);
  }
  raw += "{\"device\": 123456788}";  // one change: now they differ
  std::string enc;
  EXPECT_EQ(RoundTrip(raw, &enc), raw);
  EXPECT_NE(enc.find("\"once\": 98765}"), std::string::npos) << enc;
  EXPECT_NE(enc.find("\"device\": ~0,"), std::string::npos) << enc;
  EXPECT_NE(enc.find("\"ts\": ~7,"), std::string::npos) << enc;
  std::string same;
  for (int i = 0; i < 100; ++i) same += "{\"device\": 123456789, \"once\": 98765}\n";
  EXPECT_FALSE(EncodeNumberDeltas(same, &enc)) << enc;
}

// The rewrite writes into a buffer the size of the text, trusting the
// lengths it counted first: differences of every length, both signs, with
// and without a point, between many short ones, must come back exactly
// and shorter.
TEST(NumberDeltas, DifferencesOfEveryLengthComeBackInTheSpaceCounted) {
  for (int digits = 1; digits <= 18; ++digits) {
    for (int fraction : {0, 3, 9}) {
      if (fraction >= digits) continue;
      const std::string big(static_cast<size_t>(digits), '9');
      auto number = [&](std::string whole) {  // its digits, the point put in
        if (fraction == 0) return whole;
        const size_t f = static_cast<size_t>(fraction);
        if (whole.size() <= f) whole.insert(0, f + 1 - whole.size(), '0');
        return whole.substr(0, whole.size() - f) + "." + whole.substr(whole.size() - f);
      };
      std::string raw;
      for (int i = 0; i < 200; ++i) {
        raw += "{\"ts\": " + number(std::to_string(100000 + i)) + "},";
        if (i % 50 == 0) raw += "{\"ts\": " + number(big) + "},{\"ts\": " + number("1") + "},";
      }
      std::string enc;
      SCOPED_TRACE(raw.substr(0, 120));
      EXPECT_EQ(RoundTrip(raw, &enc), raw);
      EXPECT_LT(enc.size(), raw.size());
    }
  }
}

TEST(NumberDeltas, DecimalsKeepTheirDigitsAfterThePointAsTheirOwnSequence) {
  const std::string raw =
      "\"ts\":1700000000000.125,\"ts\":1700000000000.250,\"ts\":1700000000001.000,"
      "\"dur\":0.005,\"dur\":0.007,\"dur\":10.50,\"x\":10.25,\"x\":10.26,\"x\":10.27,"
      "\"x\":10.28,\"n\":0,\"n\":0\n";
  std::string enc;
  EXPECT_EQ(RoundTrip(raw, &enc), raw);
  EXPECT_EQ(enc,
            "\"ts\":~1700000000000125'3,\"ts\":~125'3,\"ts\":~750'3,"
            "\"dur\":~5'3,\"dur\":~2'3,\"dur\":10.50,\"x\":~1025'2,\"x\":~1'2,\"x\":~1'2,"
            "\"x\":~1'2,\"n\":0,\"n\":0\n");
}

TEST(NumberDeltas, WhatIsNotAPlainNumberAfterAKeyStaysAsItIs) {
  for (const std::string& raw : std::vector<std::string>{
           "\"a\": -5, \"b\": 007, \"c\": 1e5, \"d\": 1., \"e\": .5, \"f\": \"12\",",
           "\"g\\h\": 12, \"\": 12, x: 12, \"i\":  12, \"j\": 1234567890123456789,",
           "\"k\": 0.1234567890, \"l\": 12x, \"m\": 12",  // the last has no delimiter
           "\"" + std::string(65, 'k') + "\": 12,",
       }) {
    std::string enc;
    EXPECT_FALSE(EncodeNumberDeltas(raw, &enc)) << raw << " -> " << enc;
  }
  std::string enc;
  const std::string key64 = "\"" + std::string(64, 'k') + "\": 12345";
  EXPECT_EQ(RoundTrip(key64 + "6," + key64 + "7,", &enc), key64 + "6," + key64 + "7,");
  const std::string bytes = "\"\xff\xfe\": 123456, \"\xff\xfe\": 123457}";  // not UTF-8
  EXPECT_EQ(RoundTrip(bytes, &enc), bytes);
}

TEST(NumberDeltas, KeysBeyondTheSixtyFourthOfAChunkStayAsTheyAre) {
  std::string raw;
  for (int step = 0; step < 2; ++step) {
    for (int i = 0; i < 100; ++i) raw += fmt::format("\"k{}\": {},", i, 100000 + i + step);
  }
  std::string enc;
  EXPECT_EQ(RoundTrip(raw, &enc), raw);
  EXPECT_NE(enc.find("\"k63\": ~100063,"), std::string::npos) << enc;
  EXPECT_NE(enc.find("\"k64\": 100064,"), std::string::npos) << enc;
}

TEST(NumberDeltas, TextWithoutATildeAlwaysComesBack) {
  // Pieces of what the rewrite looks at, drawn at random, so that keys,
  // numbers and their near misses are everywhere: timestamps that grow
  // (rewritten) beside every way of not quite being one.
  const std::vector<std::string> pieces = {
      "\"ts\": ", "\"ts\":", "\"id\": ", "\"a\\b\": ", "\"\": ", "\"", ":", ": ", " ", ",",
      "}",        "]",       "\n",       ".",          "-",      "'",  "0", "00", "x"};
  std::mt19937 rng(7);
  int64_t ts = 1700000000000000;
  int rewritten = 0;
  for (int round = 0; round < 3000; ++round) {
    std::string raw;
    const size_t want = rng() % 400;
    while (raw.size() < want) {
      const uint32_t r = rng() % (pieces.size() + 4);
      if (r < pieces.size()) {
        raw += pieces[r];
      } else if (r == pieces.size()) {
        raw += std::to_string(ts += rng() % 1000);
      } else if (r == pieces.size() + 1) {
        raw += std::to_string(rng() % 100) + "." + std::to_string(rng() % 1000);
      } else if (r == pieces.size() + 2) {
        raw += std::to_string(rng());
      } else {
        raw += "\"ts\": " + std::to_string(ts += rng() % 1000) + ", ";
      }
    }
    std::string enc;
    if (!EncodeNumberDeltas(raw, &enc)) continue;
    ++rewritten;
    ASSERT_EQ(RoundTrip(raw, &enc), raw) << "encoded as " << enc;
  }
  EXPECT_GT(rewritten, 300);
}

TEST(NumberDeltas, DamagedDifferencesAreCorruptionNeverAnOverrun) {
  const std::string raw = "{\"ts\": 1623142623482433, \"dur\": 69},{\"ts\": 1623142623482533}";
  std::string enc;
  ASSERT_TRUE(EncodeNumberDeltas(raw, &enc));
  std::mt19937 rng(3);
  int failed = 0;
  for (int round = 0; round < 20000; ++round) {
    std::string bad = enc;
    const int flips = 1 + static_cast<int>(rng() % 3);
    for (int i = 0; i < flips; ++i) {
      bad[rng() % bad.size()] = "~-'0123456789\":, x"[rng() % 18];
    }
    if (rng() % 4 == 0) bad.resize(rng() % bad.size());
    std::string out(raw.size(), '\0');
    if (!DecodeNumberDeltas(bad, out.data(), out.size()).ok()) ++failed;
  }
  EXPECT_GT(failed, 0);
  std::string out(raw.size(), '\0');
  EXPECT_FALSE(DecodeNumberDeltas("\"ts\": ~9999999999999999999", out.data(), out.size()).ok());
  EXPECT_FALSE(DecodeNumberDeltas("\"ts\": ~-1", out.data(), out.size()).ok());
  EXPECT_FALSE(DecodeNumberDeltas(enc + " ", out.data(), out.size()).ok());
}

// The decoder copies the text between differences 16 bytes at a time
// where the buffer has room, and byte by byte near its end: a '~' (a
// difference's or the text's own) at every place from the end of the
// buffer, in texts of every length, comes back exactly into a buffer of
// exactly its size (ASan sees a byte written past it), and a buffer a
// byte too short or too long is Corruption.
TEST(NumberDeltas, ATildeAtEveryPlaceDecodesWithinABufferOfExactlyItsSize) {
  int rewritten = 0;
  for (size_t head = 0; head < 40; ++head) {
    for (size_t tail = 0; tail < 40; ++tail) {
      const std::string raw = std::string(head, 'h') + "{\"ts\": 1700000000000000},x~y" +
                              std::string(tail % 7, 'm') + "{\"ts\": 1700000000000005}" +
                              std::string(tail, 't');
      std::string enc;
      ASSERT_TRUE(EncodeNumberDeltas(raw, &enc)) << raw;
      ++rewritten;
      for (size_t size : {raw.size() - 1, raw.size(), raw.size() + 1}) {
        auto out = std::make_unique<char[]>(size);
        std::memset(out.get(), '#', size);
        Status s = DecodeNumberDeltas(enc, out.get(), size);
        if (size != raw.size()) {
          EXPECT_FALSE(s.ok()) << raw << " into " << size;
        } else {
          ASSERT_TRUE(s.ok()) << s.message() << " " << raw;
          EXPECT_EQ(std::string_view(out.get(), size), raw);
        }
      }
    }
  }
  EXPECT_EQ(rewritten, 1600);
}

// A '~' the rewrite did not write but that reads as a difference: the
// chunk is stored as it is, and reads back exactly.
TEST(NumberDeltas, AChunkWhoseTildeWouldMisreadIsStoredWithoutTheRewrite) {
  std::string raw = TraceJson(256 << 10, 1);
  raw += "{\"note\": ~12, \"ts\": 5}\n";
  std::string enc;
  ASSERT_TRUE(EncodeNumberDeltas(raw, &enc));
  std::string back(raw.size(), '\0');
  Status decoded = DecodeNumberDeltas(enc, back.data(), back.size());
  EXPECT_TRUE(!decoded.ok() || back != raw) << "the literal ~12 must not survive the rewrite";

  ChunkCodec codec;
  std::string value, out;
  codec.Encode(raw, 9, {1, 0, 0}, &value);
  EXPECT_EQ(static_cast<uint8_t>(value[0]), kChunkZstd);
  ASSERT_TRUE(codec.Decode(value, raw.size(), {1, 0, 0}, &out).ok());
  EXPECT_EQ(out, raw);
}

TEST(NumberDeltas, ATraceChunkIsStoredRewrittenAndReadsBackExactly) {
  const std::string raw = TraceJson(1 << 20, 2);
  ChunkCodec codec;
  std::string value, out;
  codec.Encode(raw, 9, {5, 3, 0}, &value);
  EXPECT_EQ(static_cast<uint8_t>(value[0]), kChunkZstdNumbers);
  ASSERT_TRUE(codec.Decode(value, raw.size(), {5, 3, 0}, &out).ok());
  EXPECT_EQ(out, raw);
  // Bound to its place like every chunk, and damage is Corruption.
  EXPECT_FALSE(codec.Decode(value, raw.size(), {5, 4, 0}, &out).ok());
  std::string bad = value;
  bad[bad.size() / 2] ^= 0x20;
  EXPECT_FALSE(codec.Decode(bad, raw.size(), {5, 3, 0}, &out).ok());
}

// The real Kineto trace, chunk by chunk as a migration cuts it: every
// chunk comes back, and the rewrite is where the size goes.
TEST(NumberDeltas, TheRealKinetoTraceRoundTripsChunkByChunk) {
  const std::string gz = testing::ReadBytes(
      testing::SharedData("kineto-resnet50/worker0.1623143089861.pt.trace.json.gz"));
  ASSERT_FALSE(gz.empty());
  std::string json(40 << 20, '\0');
  z_stream z{};
  ASSERT_EQ(inflateInit2(&z, 16 + MAX_WBITS), Z_OK);
  z.next_in = reinterpret_cast<Bytef*>(const_cast<char*>(gz.data()));
  z.avail_in = static_cast<uInt>(gz.size());
  z.next_out = reinterpret_cast<Bytef*>(json.data());
  z.avail_out = static_cast<uInt>(json.size());
  ASSERT_EQ(inflate(&z, Z_FINISH), Z_STREAM_END);
  json.resize(z.total_out);
  inflateEnd(&z);
  size_t plain = 0, rewritten = 0;
  std::string enc;
  for (size_t at = 0; at < json.size(); at += 1 << 20) {
    const std::string_view chunk = std::string_view(json).substr(at, 1 << 20);
    ASSERT_EQ(RoundTrip(chunk, &enc), chunk) << "chunk at " << at;
    plain += chunk.size();
    rewritten += enc.size();
  }
  EXPECT_LT(rewritten, plain);  // 16-digit timestamps become 2-3 digit differences
}

}  // namespace
}  // namespace tbfs::store
