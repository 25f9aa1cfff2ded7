#include "events/verifier.h"

#include <set>
#include <unordered_map>

namespace tbfs::events {

std::vector<Failure> VerifyFiles(const std::string& logdir, const std::vector<FileDigest>& before,
                                 int threads, std::vector<FileDigest>* now) {
  std::vector<std::string> paths;
  for (const FileDigest& f : before) paths.push_back(f.path);
  const std::vector<Status> statuses = DigestEach(logdir, paths, threads, now);
  std::vector<FileDigest> grown;  // files to check again on their baseline prefix
  std::vector<Failure> failures;
  for (size_t i = 0; i < before.size(); ++i) {
    const Status& st = statuses[i];
    if (st.IsNotFound() || (*now)[i].offset_bytes != before[i].offset_bytes || !st.ok()) {
      grown.push_back(before[i]);  // CheckBaseline names what went wrong
      continue;
    }
    for (Failure& f : CompareFileDigests(before[i], (*now)[i])) failures.push_back(std::move(f));
  }
  for (Failure& f : CheckBaseline(logdir, grown, threads)) failures.push_back(std::move(f));
  return failures;
}

Result<VerifyReport> VerifyLogdir(const std::string& logdir, const VerifyOptions& options) {
  std::vector<std::string> paths;
  if (options.files != nullptr) {
    paths = *options.files;
  } else {
    uint64_t total = 0;
    TBFS_RETURN_IF_ERROR(ListEventFiles(logdir, options.walk, &paths, &total));
  }

  DigestOptions digest_options;
  digest_options.walk = options.walk;
  digest_options.threads = options.threads;
  digest_options.bytes_done = options.bytes_done;
  VerifyReport report;
  report.digest = DigestFiles(logdir, paths, digest_options);

  for (const FileDigest& f : report.digest.files) {
    report.bytes += f.offset_bytes;
    report.records += f.records;
  }
  std::set<std::string> in_error;
  for (const FileError& e : report.digest.errors) {
    report.failures.push_back({RunOf(e.path), "", e.path, e.offset, e.status.message(),
                               e.status.code() == Code::kIOError});
    in_error.insert(e.path);
  }

  if (options.baseline != nullptr) {
    // A file whose records end where the baseline's did is compared with
    // the digest just taken; a file that grew has its prefix read again.
    std::unordered_map<std::string, const FileDigest*> now;
    for (const FileDigest& f : report.digest.files) now[f.path] = &f;
    std::vector<FileDigest> reread;
    for (const FileDigest& before : *options.baseline) {
      auto it = now.find(before.path);
      if (in_error.count(before.path) > 0) continue;  // said above, once
      if (it != now.end() && it->second->offset_bytes == before.offset_bytes) {
        for (Failure& f : CompareFileDigests(before, *it->second)) {
          report.failures.push_back(std::move(f));
        }
      } else {
        reread.push_back(before);
      }
    }
    for (Failure& f : CheckBaseline(logdir, reread, options.threads)) {
      report.failures.push_back(std::move(f));
    }
  }
  for (Failure& f : CheckMustHave(report.digest, options.must_have)) {
    report.failures.push_back(std::move(f));
  }
  return report;
}

}  // namespace tbfs::events
