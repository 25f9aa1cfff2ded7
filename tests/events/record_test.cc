#include "events/record.h"

#include <fcntl.h>
#include <gtest/gtest.h>

#include <cstring>

#include "events/crc32c.h"
#include "tests/test_util.h"

namespace tbfs::events {
namespace {

using testing::ReadBytes;
using testing::TempDir;
using testing::WriteBytes;

std::string Framed(const std::vector<std::string>& records) {
  std::string out;
  for (const auto& r : records) AppendFramedRecord(r, &out);
  return out;
}

struct ReadAll {
  std::vector<std::string> records;
  Status status;
  uint64_t end = 0;
  bool partial = false;
};

ReadAll Read(const std::string& path, uint64_t start = 0, uint64_t limit = kNoLimit) {
  ReadAll out;
  auto reader = RecordReader::Open(path, start, limit);
  if (!reader.ok()) {
    out.status = reader.status();
    return out;
  }
  RecordView rec;
  while ((*reader)->Next(&rec)) out.records.emplace_back(rec.data);
  out.status = (*reader)->status();
  out.end = (*reader)->end_offset();
  out.partial = (*reader)->partial_tail();
  return out;
}

TEST(RecordWriter, RoundTripThroughReader) {
  TempDir dir;
  std::string path = dir / "f";
  std::vector<std::string> records = {"", "a", std::string(5000, 'x'), std::string(3 << 20, 'y')};
  {
    auto fd = OpenFile(path, O_WRONLY | O_CREAT, 0644);
    ASSERT_TRUE(fd.ok());
    RecordWriter w(fd->get(), path);
    for (const auto& r : records) ASSERT_TRUE(w.Append(r).ok());
    ASSERT_TRUE(w.Flush().ok());
  }
  ReadAll got = Read(path);
  ASSERT_TRUE(got.status.ok()) << got.status.ToString();
  EXPECT_EQ(got.records, records);
  EXPECT_FALSE(got.partial);
  EXPECT_EQ(got.end, ReadBytes(path).size());
}

TEST(RecordReader, PartialTailAtEveryCutStopsQuietly) {
  TempDir dir;
  std::string full = Framed({"first", "second record"});
  size_t first_len = kRecordHeaderBytes + 5 + kRecordFooterBytes;
  for (size_t cut = first_len + 1; cut < full.size(); ++cut) {
    WriteBytes(dir / "f", full.substr(0, cut));
    ReadAll got = Read(dir / "f");
    ASSERT_TRUE(got.status.ok()) << "cut " << cut << ": " << got.status.ToString();
    EXPECT_EQ(got.records, std::vector<std::string>{"first"}) << "cut " << cut;
    EXPECT_EQ(got.end, first_len);
    EXPECT_TRUE(got.partial);
  }
}

TEST(RecordReader, ResumesFromEndOffsetAfterAppend) {
  TempDir dir;
  std::string full = Framed({"one", "two", "three"});
  WriteBytes(dir / "f", full.substr(0, full.size() - 3));
  ReadAll first = Read(dir / "f");
  ASSERT_EQ(first.records.size(), 2u);
  WriteBytes(dir / "f", full);
  ReadAll rest = Read(dir / "f", first.end);
  ASSERT_TRUE(rest.status.ok());
  EXPECT_EQ(rest.records, std::vector<std::string>{"three"});
}

TEST(RecordReader, DataCrcMismatchInTheMiddleIsReportedWithOffset) {
  TempDir dir;
  std::string full = Framed({"alpha", "bravo", "charlie"});
  size_t second = kRecordHeaderBytes + 5 + kRecordFooterBytes;
  full[second + kRecordHeaderBytes + 1] ^= 0x20;  // a byte of "bravo"
  WriteBytes(dir / "f", full);
  ReadAll got = Read(dir / "f");
  EXPECT_TRUE(got.status.IsCorruption());
  EXPECT_NE(got.status.message().find("offset " + std::to_string(second)), std::string::npos)
      << got.status.message();
  EXPECT_NE(got.status.message().find(dir / "f"), std::string::npos);
  EXPECT_EQ(got.records, std::vector<std::string>{"alpha"});
}

TEST(RecordReader, LengthCrcMismatchIsCorruption) {
  TempDir dir;
  std::string full = Framed({"alpha", "bravo"});
  full[kRecordHeaderBytes + 5 + kRecordFooterBytes] ^= 0x01;  // length of the second
  WriteBytes(dir / "f", full);
  ReadAll got = Read(dir / "f");
  EXPECT_TRUE(got.status.IsCorruption()) << got.status.ToString();
  EXPECT_EQ(got.records.size(), 1u);
}

std::string HeaderClaiming(uint64_t length) {
  char header[kRecordHeaderBytes];
  std::memcpy(header, &length, 8);
  uint32_t crc = MaskedCrc32c(header, 8);
  std::memcpy(header + 8, &crc, 4);
  return std::string(header, sizeof(header));
}

TEST(RecordReader, OversizedLengthIsAnErrorNotAnAllocation) {
  TempDir dir;
  // A length with a valid CRC, far beyond any sane record: 16 TiB.
  WriteBytes(dir / "f", Framed({"ok"}) + HeaderClaiming(uint64_t{1} << 44) + "junk");
  ReadAll got = Read(dir / "f");
  EXPECT_TRUE(got.status.IsCorruption()) << got.status.ToString();
  EXPECT_NE(got.status.message().find("over the limit"), std::string::npos);
}

TEST(RecordReader, LengthBeyondEndOfFileIsAPartialTailWithoutBuffering) {
  TempDir dir;
  // 512 MiB claimed, a few bytes present: a writer mid-record.
  WriteBytes(dir / "f", Framed({"ok"}) + HeaderClaiming(512u << 20) + "abc");
  ReadAll got = Read(dir / "f");
  EXPECT_TRUE(got.status.ok()) << got.status.ToString();
  EXPECT_TRUE(got.partial);
  EXPECT_EQ(got.records.size(), 1u);
}

TEST(RecordReader, LimitStopsAtTheGivenOffset) {
  TempDir dir;
  std::string full = Framed({"a", "b", "c"});
  WriteBytes(dir / "f", full);
  uint64_t two = 2 * (kRecordHeaderBytes + 1 + kRecordFooterBytes);
  ReadAll got = Read(dir / "f", 0, two);
  EXPECT_EQ(got.records, (std::vector<std::string>{"a", "b"}));
  EXPECT_EQ(got.end, two);
  EXPECT_FALSE(got.partial);
}

TEST(RecordReader, MissingFileNamesThePath) {
  auto reader = RecordReader::Open("/nonexistent/events.out.tfevents.1");
  ASSERT_FALSE(reader.ok());
  EXPECT_TRUE(reader.status().IsNotFound());
  EXPECT_NE(reader.status().message().find("/nonexistent/events.out.tfevents.1"),
            std::string::npos);
}

}  // namespace
}  // namespace tbfs::events
