// The YAML policy file of `tbfs migrate --config FILE`, so a team can keep
// its policy in version control:
//
//   logdir: /data/logs            # optional; the command line wins
//   dry_run: true                 # default true: --apply is needed to move
//   backup: {enabled: false, dir: /backup/tbfs}
//   criteria:
//     trace_marker: ["*.nsys-rep", "timeline/"]   # extra traces (substring or glob)
//     protected_marker: ["keep/"]                 # never migrate these
//   validate:
//     must_have_tags: [loss/train]
//
// Unknown keys and wrong types are errors (a typo must not silently widen
// what moves). Nothing here can make a tfevents file a trace (I1).
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "base/status.h"

namespace tbfs::store {

struct MigrateConfig {
  std::optional<std::string> logdir;
  bool dry_run = true;
  bool backup_enabled = false;
  std::string backup_dir;
  std::vector<std::string> trace_markers;
  std::vector<std::string> protected_markers;
  std::vector<std::string> must_have_tags;
};

// InvalidArgument with the file, and the line where yaml-cpp knows it.
Result<MigrateConfig> LoadMigrateConfig(const std::string& path);
Result<MigrateConfig> ParseMigrateConfig(const std::string& yaml_text, const std::string& origin);

}  // namespace tbfs::store
