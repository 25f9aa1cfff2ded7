// Store addresses: rados://POOL[/PREFIX][?conf=FILE&id=NAME&timeout=DUR&lease=DUR]
// (store/rados_backend.h).
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <climits>

#include "base/units.h"
#include "store/rados_backend.h"

namespace tbfs::store {

bool IsRadosUrl(const std::string& store) { return store.starts_with("rados://"); }

bool LooksLikeAddress(const std::string& store) {
  if (store.empty()) return false;
  // Blanks around it (a YAML or fstab value), or rados: without //.
  if (std::isspace(static_cast<unsigned char>(store.front())) ||
      std::isspace(static_cast<unsigned char>(store.back()))) {
    return true;
  }
  std::string head = store.substr(0, 6);
  std::transform(head.begin(), head.end(), head.begin(),
                 [](unsigned char c) { return std::tolower(c); });
  if (head == "rados:") return true;
  const size_t colon = store.find(":/");
  if (colon == std::string::npos || colon == 0 ||
      !std::isalpha(static_cast<unsigned char>(store[0])))
    return false;
  return std::all_of(store.begin(), store.begin() + static_cast<std::ptrdiff_t>(colon), [](char c) {
    return std::isalnum(static_cast<unsigned char>(c)) || c == '+' || c == '-' || c == '.';
  });
}

Result<RadosLocation> ParseRadosUrl(const std::string& url) {
  auto bad = [&](const std::string& why) {
    return Status::InvalidArgument(
        url + ": " + why +
        " (use rados://POOL[/PREFIX][?conf=FILE&id=NAME&timeout=DUR&lease=DUR])");
  };
  // %XX escapes (either case) decoded; false on a bad one.
  auto decode = [](std::string_view in, std::string* out) {
    auto nibble = [](char c) {
      c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
      return c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10 : -1;
    };
    out->clear();
    for (size_t i = 0; i < in.size(); ++i) {
      if (in[i] != '%') {
        out->push_back(in[i]);
        continue;
      }
      if (i + 2 >= in.size()) return false;
      const int hi = nibble(in[i + 1]), lo = nibble(in[i + 2]);
      if (hi < 0 || lo < 0) return false;
      out->push_back(static_cast<char>(hi << 4 | lo));
      i += 2;
    }
    return true;
  };
  if (!IsRadosUrl(url)) return bad("not a rados:// address");
  if (std::isspace(static_cast<unsigned char>(url.back()))) return bad("blanks at its end");
  std::string_view rest = std::string_view(url).substr(8);
  const size_t q = rest.find('?');
  std::string_view path = rest.substr(0, q),
                   query = q == std::string_view::npos ? "" : rest.substr(q + 1);
  RadosLocation where;
  const size_t slash = path.find('/');
  if (!decode(path.substr(0, slash), &where.pool) || where.pool.empty()) return bad("no pool");
  if (slash != std::string_view::npos) {
    if (!decode(path.substr(slash + 1), &where.prefix)) return bad("a bad %-escape in the prefix");
    if (!where.prefix.empty() && where.prefix.back() != '/') where.prefix += '/';
  }
  for (size_t start = 0; start < query.size();) {
    size_t end = query.find('&', start);
    if (end == std::string_view::npos) end = query.size();
    std::string_view item = query.substr(start, end - start);
    start = end + 1;
    const size_t eq = item.find('=');
    std::string key(item.substr(0, eq)), value;
    if (eq == std::string_view::npos || !decode(item.substr(eq + 1), &value) || value.empty()) {
      return bad("'" + key + "' needs a value");
    }
    if (key == "conf") {
      where.conf = value;
      if (where.conf[0] != '/') {
        char cwd[PATH_MAX];
        if (::getcwd(cwd, sizeof(cwd)) == nullptr)
          return bad("conf: the current folder is unknown");
        where.conf = std::string(cwd) + "/" + where.conf;
      }
    } else if (key == "id") {
      where.user = value;
    } else if (key == "timeout") {
      auto s = ParseDurationSeconds(value);
      if (!s.ok() || *s < 1 || *s > 3600) return bad("timeout: between 1s and 1h");
      where.timeout_s = static_cast<int>(*s);
    } else if (key == "lease") {
      auto s = ParseDurationSeconds(value);
      if (!s.ok() || *s < 3 || *s > 3600) return bad("lease: between 3s and 1h");
      where.lease_s = static_cast<int>(*s);
    } else {
      return bad("unknown parameter '" + key + "'");
    }
  }
  return where;
}

}  // namespace tbfs::store
