// Classification policy: which files of a logdir are traces that may move to
// the cold store, and which must stay where they are.
//
// Invariant I1 lives here: a file whose name marks it as a tfevents file is
// class kEvents and never a migration candidate, whatever the globs or the
// markers of a configuration say. Protected markers can only add protection.
//
// A Policy is a plain value; its methods are const and thread-safe.
#pragma once

#include <string>
#include <string_view>
#include <vector>

namespace tbfs::store {

// The store's default folder inside a logdir. Walks of a logdir skip it:
// it is tbfs's own data, never part of the logdir's content.
inline constexpr char kStoreDirName[] = ".tbfs";

enum class FileClass {
  kEvents,        // *.tfevents.* : never moved (I1)
  kTfProfile,     // TensorFlow profiler output under plugins/profile/
  kPytorchTrace,  // *.pt.trace.json(.gz)
  kOtherTrace,    // Chrome / generic traces, and trace markers
  kOther,         // everything else: stays hot
};

std::string_view ClassName(FileClass c);
// Parses "tf_profile", "pytorch_trace", ... Returns false for an unknown name.
bool ParseClassName(std::string_view name, FileClass* out);
inline bool IsTraceClass(FileClass c) {
  return c == FileClass::kTfProfile || c == FileClass::kPytorchTrace || c == FileClass::kOtherTrace;
}

struct Policy {
  // Globs of each trace class (store/glob.h), matched against the path
  // relative to the logdir. Defaults are those of docs/DESIGN.
  std::vector<std::string> tf_profile_globs = {"**/plugins/profile/**"};
  std::vector<std::string> pytorch_globs = {"**/*.pt.trace.json", "**/*.pt.trace.json.gz"};
  std::vector<std::string> other_trace_globs = {"**/*.trace.json", "**/*.trace",
                                                "**/*profile*/**/*.json.gz"};
  // Extra markers, each a path substring or (with * ? [) a glob. A glob
  // without '/' is matched against the file name. Trace markers make a file
  // class kOtherTrace; protected markers keep a file out of migration.
  std::vector<std::string> trace_markers;
  std::vector<std::string> protected_markers;

  FileClass Classify(std::string_view rel_path) const;
  bool IsProtected(std::string_view rel_path) const;
  // A trace class, not protected: a file migration may move (if it is
  // also quiet, regular, with one link: see the migration engine).
  bool IsMigratable(std::string_view rel_path) const {
    return IsTraceClass(Classify(rel_path)) && !IsProtected(rel_path);
  }
};

// True when `marker` (substring or glob, as above) matches rel_path.
bool MarkerMatches(std::string_view marker, std::string_view rel_path);

}  // namespace tbfs::store
