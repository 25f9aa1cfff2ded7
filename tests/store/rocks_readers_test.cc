// The engine's blob files opened ahead of the first read of a chunk in
// them (Backend::OpenReaders, store/rocks_readers.cc).
#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/resource.h>
#include <sys/stat.h>

#include <filesystem>
#include <set>

#include "store/backend.h"
#include "store/format.h"
#include "tests/test_util.h"

namespace tbfs::store {
namespace {
namespace open_readers {  // (one unity batch with other tests' helpers)

namespace fs = std::filesystem;
using testing::TempDir;

std::set<std::string> BlobFiles(const std::string& dir) {
  return testing::FilesEndingIn(dir, ".blob");
}
std::set<std::string> OpenBlobFiles(const std::string& dir) {
  return testing::FilesOpenBy("self", dir, ".blob");
}

// A store of `files` blob files, one flush each of 4 files of 3 chunks.
void WriteStore(const std::string& dir, int files) {
  BackendOptions o;
  o.create_if_missing = true;
  auto b = OpenRocksBackend(dir, o);
  ASSERT_TRUE(b.ok()) << b.status().ToString();
  for (uint64_t f = 0; f < static_cast<uint64_t>(files); ++f) {
    WriteBatch w;
    for (uint64_t id = 10 * f + 1; id <= 10 * f + 4; ++id) {
      for (uint64_t i = 0; i < 3; ++i) {
        w.Put(Space::kChunks, ChunkKey(id, i), testing::RandomBytes(16 << 10, id * 10 + i));
      }
    }
    ASSERT_TRUE((*b)->Commit(w, true).ok());
    ASSERT_TRUE((*b)->Flush().ok());
  }
}

std::unique_ptr<Backend> Reopen(const std::string& dir) {
  auto b = OpenRocksBackend(dir, BackendOptions());
  EXPECT_TRUE(b.ok()) << b.status().ToString();
  return b.ok() ? std::move(b).value() : nullptr;
}

// WriteStore(dir, files), then the store opened again: none of its blob
// files open yet.
std::unique_ptr<Backend> Written(const std::string& dir, int files) {
  WriteStore(dir, files);
  EXPECT_EQ(BlobFiles(dir).size(), static_cast<size_t>(files));
  return Reopen(dir);
}

// Byte `at` of the blob file `name` in `dir`, flipped.
void Flip(const std::string& dir, const std::string& name, off_t at) {
  const int fd = ::open((dir + "/" + name).c_str(), O_RDWR);
  ASSERT_GE(fd, 0);
  char c;
  ASSERT_EQ(::pread(fd, &c, 1, at), 1);
  c ^= 0x20;
  ASSERT_EQ(::pwrite(fd, &c, 1, at), 1);
  ::close(fd);
}

const auto kGoOn = [] { return false; };

TEST(OpenReaders, EveryBlobFileIsOpenBeforeAnyChunkIsRead) {
  TempDir dir;
  const std::string store = dir / "store";
  auto b = Written(store, 3);
  ASSERT_NE(b, nullptr);
  EXPECT_TRUE(OpenBlobFiles(store).empty()) << "the engine opened its blob files itself";
  b->OpenReaders(kGoOn);
  EXPECT_EQ(OpenBlobFiles(store), BlobFiles(store));
  // Nothing changed: every chunk reads as written.
  for (uint64_t id : {1, 13, 24}) {
    std::string value;
    ASSERT_TRUE(b->Get(Space::kChunks, ChunkKey(id, 2), &value).ok()) << id;
    EXPECT_EQ(value, testing::RandomBytes(16 << 10, id * 10 + 2)) << id;
  }
  EXPECT_EQ(BlobFiles(store).size(), 3u);
}

// A blob file whose header or first record is damaged is not opened (its
// chunks' reads find the damage, as they did); the others are.
TEST(OpenReaders, ADamagedHeaderOrFirstRecordLeavesOnlyThatFileClosed) {
  for (const off_t at : {0, 5, 30, 40, 56, 62}) {  // magic, version, key length, value
    TempDir dir;                                   // length, record CRC, the key
    const std::string store = dir / "store";
    WriteStore(store, 3);
    const std::set<std::string> all = BlobFiles(store);
    const std::string damaged = *all.begin();
    Flip(store, damaged, at);
    auto b = Reopen(store);
    ASSERT_NE(b, nullptr);
    b->OpenReaders(kGoOn);
    std::set<std::string> expected = all;
    expected.erase(damaged);
    EXPECT_EQ(OpenBlobFiles(store), expected) << "byte " << at;
  }
}

// A FIFO in a blob file's place neither blocks the pass nor is opened.
TEST(OpenReaders, AFifoWhereABlobFileWasDoesNotHoldThePass) {
  TempDir dir;
  const std::string store = dir / "store";
  WriteStore(store, 2);
  const std::string fifo = store + "/" + *BlobFiles(store).begin();
  ASSERT_EQ(::rename(fifo.c_str(), (store + "/saved").c_str()), 0);
  ASSERT_EQ(::mkfifo(fifo.c_str(), 0600), 0);
  auto b = Reopen(store);
  ASSERT_NE(b, nullptr);
  b->OpenReaders(kGoOn);
  EXPECT_EQ(OpenBlobFiles(store).size(), 1u);
}

TEST(OpenReaders, APassAskedToStopOpensNoMore) {
  TempDir dir;
  const std::string store = dir / "store";
  auto b = Written(store, 3);
  ASSERT_NE(b, nullptr);
  int asked = 0;
  b->OpenReaders([&] { return ++asked > 1; });
  EXPECT_EQ(OpenBlobFiles(store).size(), 1u);
}

// A quarter of the descriptor limit at most: the rest is for the logdir's
// files (red team: 321 blob files under a limit of 340 left a mount that
// could open nothing).
TEST(OpenReaders, AQuarterOfTheDescriptorLimitAtMost) {
  TempDir dir;
  const std::string store = dir / "store";
  auto b = Written(store, 40);
  ASSERT_NE(b, nullptr);
  struct rlimit saved;
  ASSERT_EQ(::getrlimit(RLIMIT_NOFILE, &saved), 0);
  struct rlimit low = saved;
  low.rlim_cur = 128;
  ASSERT_EQ(::setrlimit(RLIMIT_NOFILE, &low), 0);
  b->OpenReaders(kGoOn);
  ASSERT_EQ(::setrlimit(RLIMIT_NOFILE, &saved), 0);
  EXPECT_EQ(OpenBlobFiles(store).size(), 32u);
}

}  // namespace open_readers
}  // namespace
}  // namespace tbfs::store
