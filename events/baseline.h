// Baselines: a saved set of file digests, and the proof that a logdir still
// holds every record a baseline saw.
//
// A check passes for a file when the digest of its first offset_bytes bytes
// today equals the baseline's: records appended since are fine, any changed,
// removed or reordered record, a truncation or a deletion is a Failure that
// names the run, the tag, the file and the byte offset of the first changed
// region. The verifier of every migration batch (invariant I3) runs exactly
// this check. The JSON form is described in docs/format.md.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "base/status.h"
#include "events/logdir_digest.h"

namespace tbfs::events {

struct Failure {
  std::string run;
  std::string tag;   // "" when the failure is not about one tag
  std::string file;  // relative path
  uint64_t offset = 0;
  std::string reason;
  // The file could not be read (permissions, the disk): not checked, which
  // is not proof of damage.
  bool unread = false;

  std::string ToString() const;  // one line
};

// Serialises the file digests of `digest` as a baseline document.
std::string BaselineToJson(const std::vector<FileDigest>& files);
// Parses a baseline document. InvalidArgument with a one-line reason when it
// is not one (wrong format, unknown version, bad field).
Result<std::vector<FileDigest>> BaselineFromJson(std::string_view json);

// Checks every file of `baseline` against the files under logdir now.
std::vector<Failure> CheckBaseline(const std::string& logdir,
                                   const std::vector<FileDigest>& baseline, int threads = 0);

// Compares one file's baseline digest with a digest of the same prefix
// taken now (DigestFile with limit = baseline.offset_bytes).
std::vector<Failure> CompareFileDigests(const FileDigest& before, const FileDigest& now);

// One Failure per tag of `must_have` that no run of `digest` holds.
std::vector<Failure> CheckMustHave(const LogdirDigest& digest,
                                   const std::vector<std::string>& must_have);

}  // namespace tbfs::events
