// Trace JSON's numbers as differences (format 8): what whole-file zstd
// cannot find in a chunk. A profiler trace is a long list of events whose
// keys repeat ("ts": 1623142623482433, "dur": 69, "External id": 157,
// ...); the keys compress to almost nothing, but each timestamp is 16
// fresh digits. Written as the difference from the same key's value
// before it ("ts": ~83), they become short and repetitive: the real
// Kineto trace's 1 MiB chunks at level 15 take 0.6x what zstd -19 makes of
// the whole file, where plain chunks take 1.2x (docs/format.md, "Number
// deltas").
//
// The rewrite, within one chunk (so chunks stay independent):
//   "KEY": N    becomes  "KEY": ~D     (D = N - the previous N of KEY)
//   "KEY": N.F  becomes  "KEY": ~D'k   (k digits after the point, N.F read
//                                       as one integer; its own sequence)
// where KEY is up to 64 bytes without a quote or backslash, the space
// after the colon is optional, N has no leading zero (or is 0), N and F
// hold 18 digits at most together, and the number is followed by a comma,
// a closing bracket or white space. The first value of a key in a chunk
// is its difference from 0. A key's numbers are rewritten only where,
// all of the chunk's together, their differences take fewer bytes than
// they do (a timestamp or a counter, not an id drawn at random), and they
// are not all the same number (a pid); at most 64 keys per chunk. Any
// other byte stays as it is.
//
// Nothing in the rewrite escapes a '~' already in the text: a chunk is
// stored rewritten only if DecodeNumberDeltas gives its bytes back exactly
// (store/chunk.cc checks; the chunk's checksum is of the original bytes).
#pragma once

#include <cstddef>
#include <string>
#include <string_view>

#include "base/status.h"

namespace tbfs::store {

// Rewrites `raw` into *out. False when no number was rewritten (*out is
// then unspecified).
bool EncodeNumberDeltas(std::string_view raw, std::string* out);

// The inverse: writes exactly `out_len` bytes to `out`. Corruption when
// `in` does not decode to exactly that many bytes or a difference is not
// well formed.
Status DecodeNumberDeltas(std::string_view in, char* out, size_t out_len);

}  // namespace tbfs::store
