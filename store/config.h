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
//   mount:                        # `tbfs mount --config FILE` (and tbfs@NAME)
//     mountpoint: /mnt/logs
//     store: /cold/logs
//     cold_after: 5m
//     migrate: true
//     migrate_interval: 30s
//     cache: 256M
//     metrics: 9464               # Prometheus /metrics on 127.0.0.1:9464
//     options: [allow_other]      # FUSE options, as after -o
//   retention:                    # the mount deletes cold files itself (off
//     migrated_before: 90d        #   without this section), after each
//     older_than: 180d            #   migrator pass: what `tbfs gc` would
//     keep_last: 5                #   delete with the same policies, each
//     max_store: 500G             #   deletion logged and counted
//
// Relative paths (logdir, mountpoint, store, backup dir) are relative to
// the folder of the file, not to where the command runs (systemd runs it
// in /).
// Unknown keys and wrong types are errors (a typo must not silently widen
// what moves). Nothing here can make a tfevents file a trace (I1).
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "base/status.h"
#include "store/maintenance.h"

namespace tbfs::store {

// The mount's own settings, as written (mount -o syntax checks them).
struct MountSection {
  std::optional<std::string> mountpoint;
  std::optional<std::string> store;
  std::optional<std::string> cold_after;
  std::optional<std::string> migrate_interval;
  std::optional<std::string> cache;
  std::optional<std::string> metrics;  // [ADDR:]PORT
  std::optional<bool> migrate;
  std::vector<std::string> options;
};

// What a tbfs.yaml holds (the example in packaging/tbfs.yaml). In memory,
// knobs are *Options structs; this is the file they are read from.
struct ConfigFile {
  std::optional<std::string> logdir;
  bool dry_run = true;
  bool backup_enabled = false;
  std::string backup_dir;
  std::vector<std::string> trace_markers;
  std::vector<std::string> protected_markers;
  std::vector<std::string> must_have_tags;
  MountSection mount;
  Retention retention;  // any() false: none
};

// InvalidArgument with the file, and the line where yaml-cpp knows it.
Result<ConfigFile> LoadConfigFile(const std::string& path);
Result<ConfigFile> ParseConfigFile(const std::string& yaml_text, const std::string& origin);

}  // namespace tbfs::store
