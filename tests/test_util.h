// Helpers shared by the tests: temporary folders, file bytes, running the
// tbfs binary.
#pragma once

#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>

namespace tbfs::testing {

// A fresh folder under $TMPDIR (or /tmp), removed with everything in it.
class TempDir {
 public:
  TempDir() {
    const char* base = std::getenv("TMPDIR");
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

// The real files of ../shared/data, read in place. Fails the test (does not
// skip it) when they are missing.
inline std::string SharedData(const std::string& rel) {
  const char* env = std::getenv("TBFS_SHARED_DATA");
  std::string path = std::string(env && *env ? env : TBFS_SHARED_DATA) + "/" + rel;
  EXPECT_TRUE(std::filesystem::exists(path))
      << "missing shared test data " << path << " (expected ../shared/data beside the repo)";
  return path;
}

}  // namespace tbfs::testing
