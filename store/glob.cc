#include "store/glob.h"

#include <fnmatch.h>

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

bool MatchFrom(const std::vector<std::string_view>& pat, size_t pi,
               const std::vector<std::string_view>& path, size_t si) {
  while (pi < pat.size()) {
    if (pat[pi] == "**") {
      // Collapse runs of "**", then try every split point.
      while (pi + 1 < pat.size() && pat[pi + 1] == "**") ++pi;
      for (size_t k = si; k <= path.size(); ++k) {
        if (MatchFrom(pat, pi + 1, path, k)) return true;
      }
      return false;
    }
    if (si >= path.size()) return false;
    std::string p(pat[pi]);
    std::string s(path[si]);
    if (::fnmatch(p.c_str(), s.c_str(), 0) != 0) return false;
    ++pi;
    ++si;
  }
  return si == path.size();
}

}  // namespace

bool GlobMatch(std::string_view pattern, std::string_view path) {
  return MatchFrom(Split(pattern), 0, Split(path), 0);
}

bool HasGlobChars(std::string_view s) {
  return s.find_first_of("*?[") != std::string_view::npos;
}

}  // namespace tbfs::store
