#include "store/footprint.h"

#include <algorithm>

#include "events/logdir_digest.h"

namespace tbfs::store {

namespace {

void AddEventBytes(const events::LogdirDigest& digest, uint64_t event_bytes, EventsSplit* split) {
  uint64_t attributed = 0;
  for (const auto& [name, run] : digest.runs) {
    for (const auto& [tag, t] : run.tags) {
      if (t.plugin == events::kPluginScalars) {
        split->scalars += t.record_bytes;
      } else if (t.plugin == events::kPluginHistograms) {
        split->histograms += t.record_bytes;
      } else if (t.plugin == events::kPluginImages) {
        split->images += t.record_bytes;
      } else {
        split->other += t.record_bytes;
      }
      attributed += t.record_bytes;
    }
  }
  // Records without values, partial tails, unreadable remainders.
  split->other += event_bytes - std::min(event_bytes, attributed);
}

}  // namespace

Result<Footprint> ScanLogdir(const std::string& logdir, const Policy& policy,
                             const ScanOptions& options) {
  Footprint fp;
  std::vector<FileEntry> files;
  std::vector<std::string> event_files;
  WalkOptions walk = options.walk;
  walk.warnings = &fp.warnings;  // an unreadable folder is named; the rest is counted
  Status st = WalkTree(logdir, walk, [&](const WalkEntry& e) {
    if (!S_ISREG(e.st.st_mode)) return;
    FileEntry entry{e.rel, static_cast<uint64_t>(e.st.st_size), policy.Classify(e.rel)};
    ClassTotal& total = fp.classes[static_cast<int>(entry.cls)];
    total.files++;
    total.bytes += entry.bytes;
    fp.total_files++;
    fp.total_bytes += entry.bytes;
    if (entry.cls == FileClass::kEvents) event_files.push_back(e.rel);
    if (IsTraceClass(entry.cls) && !policy.IsProtected(e.rel)) {
      fp.trace_files++;
      fp.trace_bytes += entry.bytes;
    }
    files.push_back(std::move(entry));
  });
  if (!st.ok()) return st;

  events::DigestOptions digest_options;
  digest_options.walk = options.walk;
  digest_options.bytes_done = options.bytes_done;
  events::LogdirDigest digest = events::DigestFiles(logdir, event_files, digest_options);
  for (const auto& err : digest.errors) fp.warnings.push_back(err.status.message());
  AddEventBytes(digest, fp.of(FileClass::kEvents).bytes, &fp.events);

  size_t n = std::min(options.largest, files.size());
  std::partial_sort(files.begin(), files.begin() + static_cast<ptrdiff_t>(n), files.end(),
                    [](const FileEntry& a, const FileEntry& b) {
                      return a.bytes != b.bytes ? a.bytes > b.bytes : a.path < b.path;
                    });
  files.resize(n);
  fp.largest = std::move(files);
  return fp;
}

}  // namespace tbfs::store
