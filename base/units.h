// Parsing of the human units users type: durations ("90s", "5m", "2h",
// "7d", "1w"; a bare number is seconds) and sizes ("512", "64K", "1.5M",
// "2G", "1T"; binary multiples, an optional trailing "B" or "iB").
// InvalidArgument with the offending text on anything else.
#pragma once

#include <cstdint>
#include <string_view>

#include "base/status.h"

namespace tbfs {

Result<int64_t> ParseDurationSeconds(std::string_view text);
Result<uint64_t> ParseSizeBytes(std::string_view text);

}  // namespace tbfs
