#include "store/gzip_recipe.h"

#include <fmt/format.h>
#include <gtest/gtest.h>
#include <sys/mman.h>
#include <zlib.h>

#include <cstring>
#include <random>
#include <string>

#include "tests/store/trace_json.h"
#include "tests/test_util.h"

namespace tbfs::store {
namespace {

using testing::ReadBytes;
using testing::RunCommand;
using testing::SameBytes;
using testing::SharedData;
using testing::TempDir;
using testing::WriteBytes;

// Feeds `gz` to a finder in pieces of `piece` bytes.
Result<GzipRecipe> Find(const std::string& gz, size_t piece = 1 << 20) {
  GzipRecipeFinder finder(1 << 20);
  for (size_t at = 0; at < gz.size(); at += piece)
    finder.Add(std::string_view(gz).substr(at, piece));
  return finder.Finish();
}

std::string Inflate(const std::string& gz) {
  z_stream z{};
  EXPECT_EQ(inflateInit2(&z, 15 + 16), Z_OK);
  std::string out;
  char buf[1 << 16];
  z.next_in = reinterpret_cast<Bytef*>(const_cast<char*>(gz.data()));
  z.avail_in = static_cast<uInt>(gz.size());
  int rc;
  do {
    z.next_out = reinterpret_cast<Bytef*>(buf);
    z.avail_out = sizeof(buf);
    rc = inflate(&z, Z_NO_FLUSH);
    out.append(buf, sizeof(buf) - z.avail_out);
  } while (rc == Z_OK);
  EXPECT_EQ(rc, Z_STREAM_END);
  inflateEnd(&z);
  return out;
}

// The file made again from `content`, fed in pieces of `piece` bytes.
std::string Remake(const GzipRecipe& r, const std::string& content, size_t piece = 1 << 20) {
  GzipRemaker remaker(r);
  std::string out;
  for (size_t at = 0; at < content.size(); at += piece) {
    EXPECT_TRUE(remaker.Add(std::string_view(content).substr(at, piece), &out).ok());
  }
  EXPECT_TRUE(remaker.Finish(&out).ok());
  return out;
}

// Found, and made again bit for bit however the content is cut.
void ExpectRoundTrip(const std::string& gz, const std::string& what) {
  auto r = Find(gz);
  ASSERT_TRUE(r.ok()) << what << ": " << r.status().message();
  const std::string content = Inflate(gz);
  EXPECT_EQ(r->content_bytes, content.size()) << what;
  EXPECT_EQ(r->gzip_bytes, gz.size()) << what;
  EXPECT_TRUE(SameBytes(Remake(*r, content), gz)) << what;
  EXPECT_TRUE(SameBytes(Remake(*r, content, 4099), gz)) << what;
}

// Trace JSON of `bytes` bytes.
std::string Json(size_t bytes, uint32_t seed) { return TraceJson(bytes, seed); }

// Written by zlib itself (deflateInit2 with a gzip wrapper), flushing with
// Z_SYNC_FLUSH at each of `flushes`.
std::string ZlibGzip(const std::string& content, int level, int mem_level,
                     const std::vector<size_t>& flushes, int strategy = Z_DEFAULT_STRATEGY) {
  z_stream z{};
  EXPECT_EQ(deflateInit2(&z, level, Z_DEFLATED, 15 + 16, mem_level, strategy), Z_OK);
  std::string out;
  char buf[1 << 16];
  size_t at = 0;
  auto run = [&](size_t end, int flush) {
    z.next_in = reinterpret_cast<Bytef*>(const_cast<char*>(content.data() + at));
    z.avail_in = static_cast<uInt>(end - at);
    do {
      z.next_out = reinterpret_cast<Bytef*>(buf);
      z.avail_out = sizeof(buf);
      deflate(&z, flush);
      out.append(buf, sizeof(buf) - z.avail_out);
    } while (z.avail_in > 0 || z.avail_out == 0);
    at = end;
  };
  for (size_t f : flushes) run(f, Z_SYNC_FLUSH);
  run(content.size(), Z_FINISH);
  deflateEnd(&z);
  return out;
}

TEST(GzipRecipeTest, ZlibAtEveryLevelAndMemLevelWithFlushesIsMadeAgain) {
  const std::string content = Json(3 << 19, 7);
  // Level 0 (stored blocks whose sizes follow the writer's buffers) is
  // not tried: stored as it is, such a file compresses as well as its content.
  for (int level = 1; level <= 9; level++) {
    for (int mem_level : {8, 9}) {
      const std::string gz = ZlibGzip(content, level, mem_level, {});
      ExpectRoundTrip(gz, fmt::format("level {} memLevel {}", level, mem_level));
    }
  }
  // Flushes anywhere, at the start and at the end too.
  ExpectRoundTrip(ZlibGzip(content, 6, 8, {0, 1, 65536, 1000003, content.size()}), "flushes");
  auto r = Find(ZlibGzip(content, 9, 8, {17, 1000000}));
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->sync_flushes, (std::vector<uint64_t>{17, 1000000}));
  EXPECT_EQ(r->level, 9);
}

// The finder deflates the content in the pieces a remaker is given (cut
// at each multiple of its feed and at each flush): its recipe proves what
// that remaker makes. It also hashes the content it deflated, which ties
// the recipe to the content the store keeps.
TEST(GzipRecipeTest, TheFinderDeflatesInTheRemakersPiecesAndHashesTheContent) {
  const std::string content = Json(100000, 4);
  Xxh128 hash;
  hash.Update(content);
  // Flushes inside a piece, on a piece's border (3 * 4099) and at the end.
  const std::string gz = ZlibGzip(content, 6, 8, {5000, 3 * 4099, content.size()});
  for (size_t feed : {size_t{7}, size_t{4099}, size_t{1} << 20}) {
    GzipRecipeFinder finder(feed);
    for (size_t at = 0; at < gz.size(); at += 1000) {
      finder.Add(std::string_view(gz).substr(at, 1000));
    }
    auto r = finder.Finish();
    ASSERT_TRUE(r.ok()) << feed << ": " << r.status().message();
    EXPECT_EQ(r->sync_flushes, (std::vector<uint64_t>{5000, 3 * 4099, content.size()}));
    EXPECT_EQ(finder.content_hash(), hash.Digest()) << feed;
    EXPECT_TRUE(SameBytes(Remake(*r, content, feed), gz)) << feed;
  }
}

TEST(GzipRecipeTest, PythonsGzipModuleIsMadeAgain) {
  TempDir dir;
  const std::string json = dir / "t.json";
  WriteBytes(json, Json(2 << 20, 3));
  for (int level : {1, 5, 6, 9}) {
    // As torch.profiler does with use_gzip: a text stream written in lines.
    const std::string gz = dir / fmt::format("t{}.json.gz", level);
    const std::string py = fmt::format(
        "import gzip\n"
        "with open('{}') as fin, gzip.open('{}', 'wt', compresslevel={}) as fout:\n"
        "    fout.writelines(fin)\n",
        json, gz, level);
    ASSERT_EQ(RunCommand("python3 -c \"" + py + "\"").exit_code, 0) << "python3 is needed";
    ExpectRoundTrip(ReadBytes(gz), "python gzip level " + std::to_string(level));
  }
}

TEST(GzipRecipeTest, RealTracesInSharedData) {
  // PyTorch's use_gzip: zlib through Python, made again.
  const std::string small =
      SharedData("pytorch-logdir/profile_gzip/vm_19341.1796027115058.pt.trace.json.gz");
  ExpectRoundTrip(ReadBytes(small), small);
  // The Kineto sample was written by GNU gzip -6, whose deflate is not
  // zlib's: no recipe, and it says why.
  auto r = Find(ReadBytes(SharedData("kineto-resnet50/worker0.1623143089861.pt.trace.json.gz")));
  ASSERT_FALSE(r.ok());
  EXPECT_TRUE(r.status().IsNotFound());
  EXPECT_NE(r.status().message().find("no zlib settings"), std::string::npos)
      << r.status().message();
}

TEST(GzipRecipeTest, OtherDeflatersAndOddFilesHaveNone) {
  TempDir dir;
  const std::string content = Json(1 << 20, 11);
  WriteBytes(dir / "t.json", content);
  for (int level = 1; level <= 9; level++) {
    const std::string gz = RunCommand(fmt::format("gzip -{} -c {}", level, dir / "t.json")).out;
    ASSERT_EQ(Inflate(gz), content);
    EXPECT_FALSE(Find(gz).ok()) << "gzip -" << level;
  }
  const std::string pigz = RunCommand("pigz -c " + dir / "t.json").out;
  ASSERT_FALSE(pigz.empty()) << "pigz is needed";
  ASSERT_EQ(Inflate(pigz), content);
  auto p = Find(pigz);
  if (p.ok()) {
    EXPECT_TRUE(SameBytes(Remake(*p, content), pigz));  // a recipe is always exact
  }

  const std::string good = ZlibGzip(content, 6, 8, {});
  ASSERT_TRUE(Find(good).ok());
  auto why = [&](const std::string& gz) {
    auto r = Find(gz);
    EXPECT_FALSE(r.ok());
    return r.ok() ? std::string() : r.status().message();
  };
  EXPECT_EQ(why(good + good), "bytes after the gzip member");  // two members
  EXPECT_EQ(why(good + "x"), "bytes after the gzip member");
  EXPECT_EQ(why(good.substr(0, good.size() - 1)), "the gzip trailer is cut short");
  EXPECT_EQ(why(good.substr(0, good.size() / 2)), "the deflate stream is cut short");
  EXPECT_EQ(why(good.substr(0, 5)), "shorter than a gzip header");
  EXPECT_EQ(why(""), "shorter than a gzip header");
  EXPECT_EQ(why("plain text, not gzip"), "not a gzip header this version keeps");
  std::string crc = good;
  crc[crc.size() - 6] ^= 1;
  EXPECT_EQ(why(crc), "the gzip trailer does not match the content");
  std::string reserved = good;
  reserved[3] |= 0x20;
  EXPECT_EQ(why(reserved), "not a gzip header this version keeps");
  // A flipped byte anywhere in the stream: never a recipe that makes other bytes.
  std::mt19937_64 rng(5);
  for (int i = 0; i < 40; i++) {
    std::string bad = good;
    bad[10 + rng() % (good.size() - 18)] ^= static_cast<char>(1 + rng() % 255);
    auto r = Find(bad);
    if (r.ok()) {
      EXPECT_TRUE(SameBytes(Remake(*r, Inflate(bad)), bad));
    }
  }
  // Z_FULL_FLUSH and other strategies are not tried.
  EXPECT_FALSE(Find(ZlibGzip(content, 6, 8, {}, Z_FILTERED)).ok());
}

// A piece of 4 GiB or more (an mmap'd file given whole) is read whole:
// zlib counts its input in 32 bits. Before, a valid member followed by
// 4 GiB of anything was taken for the whole file (red team).
TEST(GzipRecipeTest, APieceOf4GiBOrMoreIsReadWhole) {
  const std::string member = ZlibGzip("hello, trace", 6, 8, {});
  const size_t size = (size_t{1} << 32) + member.size();
  void* p = ::mmap(nullptr, size, PROT_READ | PROT_WRITE,
                   MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
  ASSERT_NE(p, MAP_FAILED);
  std::memcpy(p, member.data(), member.size());
  GzipRecipeFinder finder(1 << 20);
  finder.Add({static_cast<const char*>(p), size});
  auto r = finder.Finish();
  ::munmap(p, size);
  ASSERT_FALSE(r.ok()) << "a recipe for " << r->gzip_bytes << " bytes";
  EXPECT_EQ(r.status().message(), "bytes after the gzip member");
}

// Empty stored blocks one after another: zlib never makes two flushes with
// nothing between them, so the answer is no at once, not after holding
// the whole stream (red team: 200 MB of them took 675 MB).
TEST(GzipRecipeTest, TwoFlushesAtOneOffsetHaveNone) {
  const std::string content = Json(100000, 9);
  std::string gz = ZlibGzip(content, 6, 8, {5000});
  // After the flush's marker (00 00 ff ff), another empty stored block.
  const size_t marker = gz.find(std::string("\x00\x00\xff\xff", 4));
  ASSERT_NE(marker, std::string::npos);
  gz.insert(marker + 4, std::string("\x00\x00\x00\xff\xff", 5));
  ASSERT_EQ(Inflate(gz), content);
  auto r = Find(gz);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().message(), "two flushes at one content offset");
}

TEST(GzipRecipeTest, HeaderFieldsAreKeptVerbatimAndPiecesOfAnySizeWork) {
  const std::string content = Json(300000, 2);
  const std::string plain = ZlibGzip(content, 9, 8, {4096});
  // The same stream behind a header with extra field, name, comment and CRC.
  std::string header("\x1f\x8b\x08\x1e\x01\x02\x03\x04\x02\x03", 10);
  header += std::string("\x03\x00xyz", 5);
  header += std::string("name.json\0", 10);
  header += std::string("a comment\0", 10);
  const uLong hcrc = crc32(0, reinterpret_cast<const Bytef*>(header.data()), header.size());
  header += std::string{static_cast<char>(hcrc & 0xff), static_cast<char>(hcrc >> 8 & 0xff)};
  EXPECT_EQ(GzipHeaderLength(header), static_cast<int64_t>(header.size()));
  EXPECT_EQ(GzipHeaderLength(header.substr(0, 20)), 0);
  const std::string gz = header + plain.substr(10);
  ExpectRoundTrip(gz, "header fields");
  for (size_t piece : {1, 7, 10, 11, 4096}) {
    auto r = Find(gz, piece);
    ASSERT_TRUE(r.ok()) << piece;
    EXPECT_EQ(r->header, header);
    EXPECT_TRUE(SameBytes(Remake(*r, content, piece), gz)) << piece;
  }
  // A remaker given the wrong amount of content says so.
  auto r = Find(gz);
  ASSERT_TRUE(r.ok());
  GzipRemaker short_content(*r);
  std::string out;
  ASSERT_TRUE(short_content.Add(content.substr(0, 100), &out).ok());
  EXPECT_TRUE(short_content.Finish(&out).IsCorruption());
  GzipRemaker long_content(*r);
  EXPECT_TRUE(long_content.Add(content + "x", &out).IsCorruption());
}

}  // namespace
}  // namespace tbfs::store
