// Digests of a whole logdir, grouped by run as TensorBoard groups them.
//
// A run is the folder that holds tfevents files, relative to the logdir
// ("." for the logdir itself). Within a run, files are taken in name order
// (their names start with the creation time) and a tag's plugin is the one
// its first value with metadata named, in whichever file that was: writers
// send the metadata only with the first value of a tag.
//
// DigestLogdir reads files on several threads; the result does not depend
// on the thread count. Per-file errors do not stop the walk: they are
// collected in `errors`.
#pragma once

#include <atomic>
#include <map>
#include <string>
#include <string_view>
#include <vector>

#include "base/fs_util.h"
#include "events/digest.h"

namespace tbfs::events {

// True for the files TensorBoard reads as event files: the name contains
// "tfevents" (TensorBoard's own test). This is also what invariant I1
// protects, so it errs on the side of matching.
bool IsEventsFileName(std::string_view name);
// A walked entry that is one to digest: a regular file with such a name.
inline bool IsEventsFile(const WalkEntry& e) {
  return S_ISREG(e.st.st_mode) && IsEventsFileName(e.rel);
}

// The run a tfevents file belongs to: its folder, "." at the top.
std::string RunOf(std::string_view rel_path);

struct RunTag {
  std::string plugin;
  uint64_t count = 0;
  int64_t first_step = 0;
  int64_t last_step = 0;
  std::optional<ScalarValue> last_scalar;
  uint64_t record_bytes = 0;
};

struct RunDigest {
  std::string run;
  std::vector<std::string> files;  // relative paths, in name order
  std::map<std::string, RunTag> tags;
};

// A tfevents file that could not be read to its end.
struct FileError {
  std::string path;     // relative
  uint64_t offset = 0;  // where reading stopped (the bad record's offset)
  Status status;
};

struct LogdirDigest {
  std::vector<FileDigest> files;  // sorted by path; partial for files in errors
  std::vector<FileError> errors;  // in path order
  std::map<std::string, RunDigest> runs;
};

struct DigestOptions {
  WalkOptions walk;                             // folders to skip (the store)
  int threads = 0;                              // 0: one per core
  std::atomic<uint64_t>* bytes_done = nullptr;  // progress, optional
};

// Lists the tfevents files under logdir (relative paths, sorted) and their
// total size in bytes.
Status ListEventFiles(const std::string& logdir, const WalkOptions& walk,
                      std::vector<std::string>* rel_paths, uint64_t* total_bytes);

// Digests each of `rel_paths` (relative to logdir) on up to `threads`
// threads (0: one per core): (*out)[i] and the status i returned are
// rel_paths[i]'s.
std::vector<Status> DigestEach(const std::string& logdir, const std::vector<std::string>& rel_paths,
                               int threads, std::vector<FileDigest>* out,
                               std::atomic<uint64_t>* bytes_done = nullptr);

// Digests the given files (relative to logdir) and merges them into runs.
LogdirDigest DigestFiles(const std::string& logdir, const std::vector<std::string>& rel_paths,
                         const DigestOptions& options);

// Recomputes runs from files (for digests built or loaded elsewhere).
void MergeRuns(LogdirDigest* digest);

}  // namespace tbfs::events
