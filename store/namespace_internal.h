// Pieces the namespace (store/namespace.cc) shares with the conversion to
// its format-4 tree (store/tree_conversion.cc).
#pragma once

#include <string>
#include <string_view>

#include "store/cold_store.h"

namespace tbfs::store {

// The last component of a relative path.
inline std::string_view BaseName(std::string_view path) {
  const size_t slash = path.find_last_of('/');
  return slash == std::string_view::npos ? path : path.substr(slash + 1);
}

// The namespace entry of a folder, with the attributes the caller sees it
// with (`attrs`, may be null), or 0755 root when it has none (the folder is
// gone).
storepb::Entry FolderEntry(const FolderAttrs& attrs, const std::string& folder, int64_t mtime_ns);

}  // namespace tbfs::store
