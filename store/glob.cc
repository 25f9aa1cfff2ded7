#include "store/glob.h"

#include <fnmatch.h>

#include <cstdint>
#include <string>
#include <vector>

namespace tbfs::store {

namespace {

std::vector<std::string_view> Split(std::string_view s) {
  std::vector<std::string_view> parts;
  size_t start = 0;
  while (start <= s.size()) {
    size_t end = s.find('/', start);
    if (end == std::string_view::npos) end = s.size();
    if (end > start) parts.push_back(s.substr(start, end - start));
    start = end + 1;
  }
  return parts;
}

// Whether pat[pi..] matches path[si..], each (pi, si) decided once: time
// O(pattern segments x path segments), whatever the number of "**".
class Matcher {
 public:
  Matcher(const std::vector<std::string_view>& pat, const std::vector<std::string_view>& path)
      : pat_(pat), path_(path), memo_((pat.size() + 1) * (path.size() + 1), -1) {}

  bool Match(size_t pi, size_t si) {
    int8_t& m = memo_[pi * (path_.size() + 1) + si];
    if (m < 0) m = Decide(pi, si) ? 1 : 0;
    return m == 1;
  }

 private:
  bool Decide(size_t pi, size_t si) {
    if (pi == pat_.size()) return si == path_.size();
    if (pat_[pi] == "**") {
      // Nothing more of the path, or one more segment, for the "**".
      return Match(pi + 1, si) || (si < path_.size() && Match(pi, si + 1));
    }
    if (si >= path_.size()) return false;
    std::string p(pat_[pi]), s(path_[si]);
    return ::fnmatch(p.c_str(), s.c_str(), 0) == 0 && Match(pi + 1, si + 1);
  }

  const std::vector<std::string_view>& pat_;
  const std::vector<std::string_view>& path_;
  std::vector<int8_t> memo_;
};

}  // namespace

bool GlobMatch(std::string_view pattern, std::string_view path) {
  std::vector<std::string_view> pat = Split(pattern), parts = Split(path);
  return Matcher(pat, parts).Match(0, 0);
}

bool HasGlobChars(std::string_view s) { return s.find_first_of("*?[") != std::string_view::npos; }

}  // namespace tbfs::store
