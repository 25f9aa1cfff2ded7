// Path globs for classification policies.
//
// A pattern is matched against a '/'-separated relative path, one component
// at a time: "**" matches zero or more whole components, and any other
// component is an fnmatch(3) pattern ('*', '?', '[...]') that never crosses
// a '/'. Leading dots are not special. Thread-safe.
#pragma once

#include <string_view>

namespace tbfs::store {

bool GlobMatch(std::string_view pattern, std::string_view path);

// True when `s` contains a glob metacharacter.
bool HasGlobChars(std::string_view s);

}  // namespace tbfs::store
