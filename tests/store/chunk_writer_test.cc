#include "store/chunk_writer.h"

#include <gtest/gtest.h>

#include <atomic>
#include <vector>

#include "base/work_pool.h"
#include "store/format.h"
#include "tests/store/store_fixture.h"
#include "tests/test_util.h"

namespace tbfs::store {
namespace {

using testing::kChunk;

std::string ChunkContent(uint64_t index) {
  std::string s(kChunk, '\0');
  for (size_t i = 0; i < s.size(); ++i) s[i] = "{\"ts\": 1, \"dur\": 2}\n"[(i + index) % 21];
  return s;
}

class ChunkWriterTest : public NewStoreTest {
 protected:
  void SetUp() override {
    NewStoreTest::SetUp();
    options_.chunk_bytes = kChunk;
    options_.level = 3;
    options_.pool = &pool_;
  }

  // The manifest a file of `chunks` chunks written by file id `id` reads by.
  storepb::Manifest ManifestOf(uint64_t id, uint64_t chunks) {
    storepb::Manifest m;
    m.set_file_id(id);
    m.set_size(chunks * kChunk);
    m.set_chunk_bytes(kChunk);
    m.set_chunks(chunks);
    m.set_codec(kCodecZstd);
    m.set_level(options_.level);
    return m;
  }

  WorkPool pool_{2};  // waves of 4 chunks
  IngestOptions options_;
};

TEST_F(ChunkWriterTest, TheNextWaveIsReadWhileTheOneBeforeIsCompressedAndPutAfter) {
  constexpr uint64_t kChunks = 13;  // waves of 4, 4, 4 and 1
  const uint64_t id = store_->NewFileId();
  const std::string path = (dir_ / "trace.json");
  ChunkWriter writer(*store_, path, id, kChunks, 0, nullptr, options_);
  uint64_t index = 0;
  std::vector<uint64_t> stored_when_read;
  auto next = [&](std::string* raw, uint64_t* at) -> Result<bool> {
    if (index == kChunks) return false;
    stored_when_read.push_back(writer.stored());
    *raw = ChunkContent(index);
    *at = index++;
    return true;
  };
  ASSERT_TRUE(writer.WriteAll(next).ok());
  ASSERT_EQ(stored_when_read.size(), kChunks);
  // The second wave is read while the first is compressed: nothing put yet.
  // The third is read once the first is put, while the second is compressed.
  for (uint64_t i = 0; i < 8; ++i) EXPECT_EQ(stored_when_read[i], 0u) << "chunk " << i;
  EXPECT_GT(stored_when_read[8], 0u);
  EXPECT_LT(stored_when_read[12], writer.stored());

  // Every chunk in the store under its own index, whatever thread read it.
  ASSERT_TRUE(store_->Commit(*writer.batch(), true).ok());
  const storepb::Manifest m = ManifestOf(id, kChunks);
  ChunkCodec codec;
  for (uint64_t i = 0; i < kChunks; ++i) {
    std::string raw;
    ASSERT_TRUE(store_->ReadChunk(m, i, &codec, &raw).ok()) << "chunk " << i;
    EXPECT_EQ(raw, ChunkContent(i)) << "chunk " << i;
  }
}

TEST_F(ChunkWriterTest, AnErrorOfTheReaderEndsTheCopyWithIt) {
  const uint64_t id = store_->NewFileId();
  const std::string path = (dir_ / "trace.json");
  ChunkWriter writer(*store_, path, id, 20, 0, nullptr, options_);
  uint64_t index = 0;
  auto next = [&](std::string* raw, uint64_t* at) -> Result<bool> {
    if (index == 6) return Status::Aborted("trace.json shrank while it was copied");
    *raw = ChunkContent(index);
    *at = index++;
    return true;
  };
  Status st = writer.WriteAll(next);
  EXPECT_EQ(st.code(), Code::kAborted);
  EXPECT_NE(st.message().find("shrank"), std::string::npos) << st.message();
  EXPECT_EQ(index, 6u);  // no chunk asked for after the error
}

TEST_F(ChunkWriterTest, ACopyAskedToStopStopsAtTheNextWave) {
  const uint64_t id = store_->NewFileId();
  const std::string path = (dir_ / "trace.json");
  std::atomic<bool> stop{false};
  options_.should_stop = [&] { return stop.load(); };
  ChunkWriter writer(*store_, path, id, 40, 0, nullptr, options_);
  uint64_t index = 0;
  auto next = [&](std::string* raw, uint64_t* at) -> Result<bool> {
    if (index == 40) return false;
    if (index == 5) stop = true;  // a writer opened the file
    *raw = ChunkContent(index);
    *at = index++;
    return true;
  };
  Status st = writer.WriteAll(next);
  EXPECT_EQ(st.code(), Code::kAborted) << st.ToString();
  EXPECT_NE(st.message().find("opened for writing"), std::string::npos) << st.message();
  EXPECT_EQ(index, 8u);  // the wave under way is read to its end, no more
}

}  // namespace
}  // namespace tbfs::store
