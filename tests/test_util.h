// Helpers shared by the tests: temporary folders, file bytes, running the
// tbfs binary.
#pragma once

#include <gtest/gtest.h>
#include <unistd.h>

#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <set>
#include <sstream>
#include <string>
#include <thread>
#include <utility>
#include <vector>

namespace tbfs::testing {

// The chunk size the store tests open their stores with: small, so a few
// hundred KiB of content spans several chunks.
inline constexpr uint32_t kChunk = 64 << 10;

// The shell command that runs the tbfs binary under test with `args`.
inline std::string Tbfs(const std::string& args) { return std::string(TBFS_BINARY) + " " + args; }

// A fresh folder under `base`, or else $TMPDIR (or /tmp), removed with
// everything in it.
class TempDir {
 public:
  explicit TempDir(const char* base = nullptr) {
    if (base == nullptr) base = std::getenv("TMPDIR");
    std::string pattern = std::string(base ? base : "/tmp") + "/tbfs-test-XXXXXX";
    char* p = ::mkdtemp(pattern.data());
    if (p == nullptr) std::abort();
    path_ = pattern;
  }
  ~TempDir() {
    std::error_code ec;
    std::filesystem::remove_all(path_, ec);
  }
  const std::string& path() const { return path_; }
  std::string operator/(const std::string& rel) const { return path_ + "/" + rel; }

 private:
  std::string path_;
};

inline std::string ReadBytes(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::ostringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

// `n` bytes that do not compress, the same for the same seed.
inline std::string RandomBytes(size_t n, uint64_t seed) {
  std::string out(n, '\0');
  uint64_t x = seed * 0x9E3779B97F4A7C15ull + 1;
  for (char& c : out) {
    x ^= x << 13;
    x ^= x >> 7;
    x ^= x << 17;
    c = static_cast<char>(x);
  }
  return out;
}

// A POSIX access ACL in the kernel's xattr form (system.posix_acl_access):
// the owner's, group's and others' bits from `mode`, plus named users'
// entries {uid, perm}; a mask of `mask` when there are named entries.
inline std::string AccessAcl(unsigned mode, const std::vector<std::pair<unsigned, unsigned>>& users,
                             unsigned mask = 7) {
  std::string acl;
  auto put16 = [&](unsigned v) {
    acl.push_back(static_cast<char>(v & 0xff));
    acl.push_back(static_cast<char>(v >> 8 & 0xff));
  };
  auto entry = [&](unsigned tag, unsigned perm, unsigned id) {
    put16(tag);
    put16(perm);
    put16(id & 0xffff);
    put16(id >> 16);
  };
  put16(2);
  put16(0);
  entry(0x01, mode >> 6 & 7, ~0u);
  for (const auto& [uid, perm] : users) entry(0x02, perm, uid);
  entry(0x04, mode >> 3 & 7, ~0u);
  if (!users.empty()) entry(0x10, mask, ~0u);
  entry(0x20, mode & 7, ~0u);
  return acl;
}

inline void WriteBytes(const std::string& path, const std::string& bytes) {
  std::filesystem::create_directories(std::filesystem::path(path).parent_path());
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out << bytes;
}

struct CommandResult {
  int exit_code = -1;
  std::string out;  // stdout
};

// Runs a shell command line; captures stdout, lets stderr through.
inline CommandResult RunCommand(const std::string& cmd) {
  CommandResult r;
  FILE* p = ::popen(cmd.c_str(), "r");
  if (p == nullptr) return r;
  char buf[4096];
  size_t n;
  while ((n = std::fread(buf, 1, sizeof(buf), p)) > 0) r.out.append(buf, n);
  int status = ::pclose(p);
  r.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  return r;
}

// Polls `done` every `every` until it is true (true) or `timeout` has
// passed (false). The one poll loop of the tests: no fixed sleep where a
// condition can be waited for.
template <typename Condition>
bool WaitUntil(Condition done, std::chrono::milliseconds timeout,
               std::chrono::milliseconds every = std::chrono::milliseconds(10)) {
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  while (!done()) {
    if (std::chrono::steady_clock::now() >= deadline) return done();
    std::this_thread::sleep_for(every);
  }
  return true;
}

// The real files of ../shared/data, read in place. Fails the test (does not
// skip it) when they are missing.
inline std::string SharedData(const std::string& rel) {
  const char* env = std::getenv("TBFS_SHARED_DATA");
  std::string path = std::string(env && *env ? env : TBFS_SHARED_DATA) + "/" + rel;
  EXPECT_TRUE(std::filesystem::exists(path))
      << "missing shared test data " << path << " (expected ../shared/data beside the repo)";
  return path;
}

// Whether `got` holds exactly `want`; if not, the sizes and where they
// first differ (not megabytes of bytes printed).
inline ::testing::AssertionResult SameBytes(const std::string& got, const std::string& want) {
  if (got == want) return ::testing::AssertionSuccess();
  size_t i = 0;
  while (i < got.size() && i < want.size() && got[i] == want[i]) i++;
  return ::testing::AssertionFailure() << got.size() << " bytes where " << want.size()
                                       << " were expected; first difference at " << i;
}

// The names of the files in `dir` whose names end in `ext` (".blob").
inline std::set<std::string> FilesEndingIn(const std::string& dir, const std::string& ext) {
  std::set<std::string> names;
  for (const auto& e : std::filesystem::directory_iterator(dir)) {
    if (e.path().extension() == ext) names.insert(e.path().filename());
  }
  return names;
}

// Those of them the process `pid` ("self": this one) holds open.
inline std::set<std::string> FilesOpenBy(const std::string& pid, const std::string& dir,
                                         const std::string& ext) {
  std::set<std::string> open;
  const std::filesystem::path folder = std::filesystem::canonical(dir);
  for (const auto& e : std::filesystem::directory_iterator("/proc/" + pid + "/fd")) {
    std::error_code ec;
    const std::filesystem::path target = std::filesystem::read_symlink(e.path(), ec);
    if (!ec && target.parent_path() == folder && target.extension() == ext) {
      open.insert(target.filename());
    }
  }
  return open;
}

}  // namespace tbfs::testing
