// tbfs-bench soak's bookkeeping (bench_soak.cc): the model of every
// file's expected bytes and who holds it, and the tally of what was done
// and what went wrong. Both are shared by the soak's worker threads.
#pragma once

#include <algorithm>
#include <cstring>
#include <map>
#include <mutex>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "fmt/format.h"

namespace tbfs::bench::soak {

// Every file's expected bytes, and who holds it.
class Model {
 public:
  struct File {
    std::string bytes;
    bool events = false;
    bool held = false;
  };

  void Add(const std::string& path, std::string bytes, bool events, bool held) {
    std::lock_guard<std::mutex> lock(mu_);
    files_[path] = {std::move(bytes), events, held};
  }
  // A random file nobody holds, of the kind asked, now held; "" if none.
  std::string Take(std::mt19937_64& rng, bool events) {
    std::lock_guard<std::mutex> lock(mu_);
    std::vector<const std::string*> free;
    for (const auto& [path, f] : files_) {
      if (!f.held && f.events == events) free.push_back(&path);
    }
    if (free.empty()) return "";
    const std::string& path = *free[rng() % free.size()];
    files_[path].held = true;
    return path;
  }
  bool TakeExact(const std::string& path) {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = files_.find(path);
    if (it == files_.end() || it->second.held) return false;
    it->second.held = true;
    return true;
  }
  void Give(const std::string& path) {
    std::lock_guard<std::mutex> lock(mu_);
    files_[path].held = false;
  }
  std::string Bytes(const std::string& path) {
    std::lock_guard<std::mutex> lock(mu_);
    return files_[path].bytes;
  }
  void SetBytes(const std::string& path, std::string bytes) {
    std::lock_guard<std::mutex> lock(mu_);
    files_[path].bytes = std::move(bytes);
  }
  void Rename(const std::string& from, const std::string& to) {
    std::lock_guard<std::mutex> lock(mu_);
    auto node = files_.extract(from);
    node.key() = to;
    files_.insert(std::move(node));
  }
  void Erase(const std::string& path) {
    std::lock_guard<std::mutex> lock(mu_);
    files_.erase(path);
  }
  size_t traces() {
    std::lock_guard<std::mutex> lock(mu_);
    size_t n = 0;
    for (const auto& [path, f] : files_) n += !f.events;
    return n;
  }
  std::map<std::string, File> Snapshot() {
    std::lock_guard<std::mutex> lock(mu_);
    return files_;
  }

 private:
  std::mutex mu_;
  std::map<std::string, File> files_;
};

// What went wrong, and how much was done.
class Tally {
 public:
  void Op(const std::string& what) {
    std::lock_guard<std::mutex> lock(mu_);
    ops_[what]++;
  }
  void Error(const std::string& op, const std::string& path, int err) {
    std::lock_guard<std::mutex> lock(mu_);
    std::string key = fmt::format("{}: {}", op, std::strerror(err));
    if (errors_[key]++ < 3) fmt::print(stderr, "soak: unexpected error: {} on {}\n", key, path);
  }
  // `backing`: the file as the logdir has it (empty when it is cold).
  void Wrong(const std::string& path, const std::string& op, const std::string& want,
             const std::string& got, const std::string& state, const std::string& backing) {
    size_t at = 0;
    while (at < want.size() && at < got.size() && want[at] == got[at]) ++at;
    std::lock_guard<std::mutex> lock(mu_);
    if (wrong_files_++ < 10) {
      fmt::print(stderr,
                 "soak: WRONG BYTES in {} ({}, {}): {} bytes expected, {} read, first difference "
                 "at {}; the logdir's copy is {}\n",
                 path, op, state, want.size(), got.size(), at,
                 state != "hot"    ? "not there (cold)"
                 : backing == want ? "right"
                                   : "wrong too");
    }
    wrong_bytes_ += std::max(want.size(), got.size()) - at;
  }
  void Compared() {
    std::lock_guard<std::mutex> lock(mu_);
    compared_++;
  }
  uint64_t compared() {
    std::lock_guard<std::mutex> lock(mu_);
    return compared_;
  }
  uint64_t wrong_bytes() {
    std::lock_guard<std::mutex> lock(mu_);
    return wrong_bytes_;
  }
  uint64_t wrong_files() {
    std::lock_guard<std::mutex> lock(mu_);
    return wrong_files_;
  }
  std::map<std::string, uint64_t> ops() {
    std::lock_guard<std::mutex> lock(mu_);
    return ops_;
  }
  std::map<std::string, uint64_t> errors() {
    std::lock_guard<std::mutex> lock(mu_);
    return errors_;
  }

 private:
  std::mutex mu_;
  std::map<std::string, uint64_t> ops_, errors_;
  uint64_t wrong_bytes_ = 0, wrong_files_ = 0, compared_ = 0;
};

}  // namespace tbfs::bench::soak
