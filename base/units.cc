#include "base/units.h"

#include <charconv>
#include <cmath>
#include <string>

namespace tbfs {

namespace {

// Splits "1.5M" into 1.5 and "M".
bool SplitNumber(std::string_view text, double* number, std::string_view* suffix) {
  size_t i = 0;
  while (i < text.size() && (std::isdigit(static_cast<unsigned char>(text[i])) || text[i] == '.')) {
    ++i;
  }
  if (i == 0) return false;
  std::string digits(text.substr(0, i));
  char* end = nullptr;
  *number = std::strtod(digits.c_str(), &end);
  if (end != digits.c_str() + digits.size() || !std::isfinite(*number)) return false;
  *suffix = text.substr(i);
  return true;
}

}  // namespace

Result<int64_t> ParseDurationSeconds(std::string_view text) {
  double n;
  std::string_view unit;
  if (!SplitNumber(text, &n, &unit)) {
    return Status::InvalidArgument("not a duration: '" + std::string(text) +
                                   "' (use e.g. 30s, 5m, 2h, 7d)");
  }
  double mult;
  if (unit.empty() || unit == "s") {
    mult = 1;
  } else if (unit == "m" || unit == "min") {
    mult = 60;
  } else if (unit == "h") {
    mult = 3600;
  } else if (unit == "d") {
    mult = 86400;
  } else if (unit == "w") {
    mult = 7 * 86400;
  } else {
    return Status::InvalidArgument("unknown duration unit in '" + std::string(text) +
                                   "' (use s, m, h, d or w)");
  }
  double secs = n * mult;
  if (secs > 1e12)
    return Status::InvalidArgument("duration too large: '" + std::string(text) + "'");
  return static_cast<int64_t>(std::llround(secs));
}

Result<uint64_t> ParseSizeBytes(std::string_view text) {
  double n;
  std::string_view unit;
  if (!SplitNumber(text, &n, &unit)) {
    return Status::InvalidArgument("not a size: '" + std::string(text) +
                                   "' (use e.g. 4096, 64K, 256M, 2G)");
  }
  if (unit.ends_with("iB")) {
    unit.remove_suffix(2);
  } else if (unit.ends_with("B") && unit.size() > 1) {
    unit.remove_suffix(1);
  } else if (unit == "B") {
    unit = "";
  }
  double mult;
  if (unit.empty()) {
    mult = 1;
  } else if (unit == "K" || unit == "k") {
    mult = 1024.0;
  } else if (unit == "M" || unit == "m") {
    mult = 1024.0 * 1024;
  } else if (unit == "G" || unit == "g") {
    mult = 1024.0 * 1024 * 1024;
  } else if (unit == "T" || unit == "t") {
    mult = 1024.0 * 1024 * 1024 * 1024;
  } else {
    return Status::InvalidArgument("unknown size unit in '" + std::string(text) +
                                   "' (use K, M, G or T)");
  }
  double bytes = n * mult;
  if (bytes > 1.8e19) return Status::InvalidArgument("size too large: '" + std::string(text) + "'");
  return static_cast<uint64_t>(std::llround(bytes));
}

}  // namespace tbfs
