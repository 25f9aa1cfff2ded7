// The digest of one tfevents file: what the verifier proves intact.
//
// For every tag, the digest holds the plugin, the number of values, the
// first and last step, the last scalar, and a hash chained over every
// (step, wall_time, value) in file order. Scalars are hashed by their exact
// number (events/scalar.h), so the same curve written as simple_value or as
// a tensor digests the same way every time; other values are hashed over
// their bytes exactly as stored. Every integer is hashed in a fixed byte
// order, so digests agree across runs and machines.
//
// A digest covers the bytes [0, offset_bytes) of its file: the complete
// records read. Because a tfevents file only grows, a later digest of the
// same prefix (DigestFile with limit = offset_bytes) must be identical;
// that is how a baseline is checked after the file has been appended to.
// Content checkpoints (the hash of the raw bytes at record boundaries about
// every kCheckpointBytes) locate the first changed region for reports.
//
// DigestFile is thread-safe; a FileDigest is a plain value.
#pragma once

#include <atomic>
#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "base/status.h"
#include "events/record.h"
#include "events/scalar.h"

namespace tbfs::events {

inline constexpr uint64_t kCheckpointBytes = 1 << 20;

struct TagDigest {
  std::string plugin;  // "" when no value of the tag in this file said
  uint64_t count = 0;
  int64_t first_step = 0;
  int64_t last_step = 0;
  double last_wall_time = 0;
  std::optional<ScalarValue> last_scalar;  // when the last value was a scalar
  uint64_t hash = 0;                       // chained over every value
  uint64_t record_bytes = 0;               // framed bytes of records led by this tag

  bool SameValues(const TagDigest& o) const {
    return count == o.count && first_step == o.first_step && last_step == o.last_step &&
           hash == o.hash;
  }
};

struct Checkpoint {
  uint64_t offset = 0;  // a record boundary
  uint64_t hash = 0;    // XXH3-64 of the file's bytes [0, offset)
};

struct FileDigest {
  std::string path;           // relative to the logdir
  uint64_t offset_bytes = 0;  // bytes covered: end of the last complete record
  uint64_t records = 0;
  bool partial_tail = false;  // an incomplete record follows offset_bytes
  uint64_t content_hash = 0;  // XXH3-64 of the bytes [0, offset_bytes)
  uint64_t other_bytes = 0;   // framed bytes of records without summary values
  std::vector<Checkpoint> checkpoints;
  std::map<std::string, TagDigest, std::less<>> tags;
};

// Plugin names for values that carry no metadata of their own.
inline constexpr char kPluginScalars[] = "scalars";
inline constexpr char kPluginHistograms[] = "histograms";
inline constexpr char kPluginImages[] = "images";
inline constexpr char kPluginAudio[] = "audio";

// Reads the records of the file rel_path beneath the folder `root` (opened
// without following symlinks, base/fs_util.h OpenUnder) up to
// `limit_offset` into *out. Returns OK at a clean end or a partial tail;
// NotFound for a missing file; Corruption or IOError otherwise, with *out
// covering the records before the error. `bytes_done`, when given, is
// advanced as bytes are digested.
Status DigestFile(const std::string& root, const std::string& rel_path, FileDigest* out,
                  uint64_t limit_offset = kNoLimit, std::atomic<uint64_t>* bytes_done = nullptr);

}  // namespace tbfs::events
