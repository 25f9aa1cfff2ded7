#include "events/logdir_digest.h"

#include <algorithm>
#include <thread>

#include "base/work_pool.h"

namespace tbfs::events {

bool IsEventsFileName(std::string_view name) {
  return BaseName(name).find("tfevents") != std::string_view::npos;
}

std::string RunOf(std::string_view rel_path) {
  std::string parent = ParentPath(rel_path);
  return parent.empty() ? "." : parent;
}

Status ListEventFiles(const std::string& logdir, const WalkOptions& walk,
                      std::vector<std::string>* rel_paths, uint64_t* total_bytes) {
  rel_paths->clear();
  *total_bytes = 0;
  return WalkTree(logdir, walk, [&](const WalkEntry& e) {
    if (IsEventsFile(e)) {
      rel_paths->push_back(e.rel);
      *total_bytes += static_cast<uint64_t>(e.st.st_size);
    }
  });
}

std::vector<Status> DigestEach(const std::string& logdir, const std::vector<std::string>& rel_paths,
                               int threads, std::vector<FileDigest>* out,
                               std::atomic<uint64_t>* bytes_done) {
  out->assign(rel_paths.size(), FileDigest());
  std::vector<Status> statuses(rel_paths.size());
  std::atomic<size_t> next{0};
  auto work = [&] {
    for (size_t i = next.fetch_add(1); i < rel_paths.size(); i = next.fetch_add(1)) {
      statuses[i] = DigestFile(logdir, rel_paths[i], &(*out)[i], kNoLimit, bytes_done);
    }
  };
  unsigned n = threads > 0 ? static_cast<unsigned>(threads)
                           : std::max(1u, std::thread::hardware_concurrency());
  n = std::min<unsigned>(n, std::max<size_t>(1, rel_paths.size()));
  std::vector<std::thread> pool;
  StartThreads(
      n - 1, "scalar digests", [&](size_t) { work(); }, &pool);
  work();
  for (auto& t : pool) t.join();
  return statuses;
}

LogdirDigest DigestFiles(const std::string& logdir, const std::vector<std::string>& rel_paths,
                         const DigestOptions& options) {
  LogdirDigest digest;
  std::vector<std::string> paths = rel_paths;
  std::sort(paths.begin(), paths.end());
  std::vector<Status> statuses =
      DigestEach(logdir, paths, options.threads, &digest.files, options.bytes_done);
  for (size_t i = 0; i < paths.size(); ++i) {
    if (!statuses[i].ok()) {
      digest.errors.push_back({paths[i], digest.files[i].offset_bytes, std::move(statuses[i])});
    }
  }
  MergeRuns(&digest);
  return digest;
}

void MergeRuns(LogdirDigest* digest) {
  digest->runs.clear();
  // Files are sorted by path, so the files of a run arrive in name order.
  for (const FileDigest& file : digest->files) {
    std::string run_name = RunOf(file.path);
    RunDigest& run = digest->runs[run_name];
    run.run = run_name;
    run.files.push_back(file.path);
    for (const auto& [name, tag] : file.tags) {
      RunTag& merged = run.tags[name];
      if (merged.plugin.empty()) merged.plugin = tag.plugin;
      if (merged.count == 0) merged.first_step = tag.first_step;
      merged.count += tag.count;
      merged.last_step = tag.last_step;
      merged.last_scalar = tag.last_scalar;
      merged.record_bytes += tag.record_bytes;
    }
  }
}

}  // namespace tbfs::events
