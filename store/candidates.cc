// Which files a migration takes: traces older than the cutoff, closed,
// not linked twice, not protected (store/migrate.h: FindCandidates).
#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <set>

#include "base/fs_util.h"
#include "base/time_util.h"
#include "fmt/format.h"
#include "spdlog/spdlog.h"
#include "store/file_io.h"
#include "store/format.h"
#include "store/migrate.h"
#include "store/migrate_internal.h"
#include "store/xattrs.h"

namespace tbfs::store {

Status ForEachCandidate(const std::string& logdir, const CandidateOptions& options,
                        const std::function<void(Candidate&&)>& on_candidate,
                        const std::function<void(Skipped&&)>& on_skipped) {
  const int64_t now_s = NowNs() / 1'000'000'000;
  // A folder that cannot be read is named among the skipped; the rest goes on.
  std::vector<std::string> warnings;
  WalkOptions walk = options.walk;
  walk.warnings = &warnings;
  Status st = WalkTree(logdir, walk, [&](const WalkEntry& e) {
    if (options.on_entry) options.on_entry(e);
    FileClass cls = options.policy.Classify(e.rel);
    if (!IsTraceClass(cls)) return;
    if (!options.classes.empty() &&
        std::find(options.classes.begin(), options.classes.end(), cls) == options.classes.end()) {
      return;
    }
    auto skip = [&](std::string reason) { on_skipped({e.rel, std::move(reason)}); };
    if (options.policy.IsProtected(e.rel)) return skip("protected by a marker");
    if (BaseName(e.rel).find(".tbfs-tmp-") != std::string_view::npos) {
      return skip("a tbfs temporary file");
    }
    if (!S_ISREG(e.st.st_mode)) return skip("not a regular file");
    if (e.st.st_nlink > 1) return skip(fmt::format("has {} hard links", e.st.st_nlink));
    if (static_cast<uint64_t>(e.st.st_size) < options.min_size_bytes) {
      return skip("smaller than --min-size");
    }
    int64_t age = now_s - static_cast<int64_t>(e.st.st_mtim.tv_sec);
    if (age < options.older_than_s) return skip(fmt::format("modified {}s ago", age));
    // More attributes than a manifest keeps: it would only be given up in a
    // batch, pass after pass.
    if (const size_t bytes = XattrBytesAt(e.dir_fd, e.name); bytes > kMaxXattrBytes) {
      return skip(
          fmt::format("{} ({} bytes; a cold file keeps 64 KiB at most)", kXattrsReason, bytes));
    }
    on_candidate({e.rel, cls, static_cast<uint64_t>(e.st.st_size), e.st.st_uid});
  });
  for (std::string& w : warnings) on_skipped({"", std::move(w)});
  return st;
}

Status FindCandidates(const std::string& logdir, const CandidateOptions& options,
                      std::vector<Candidate>* candidates, std::vector<Skipped>* skipped) {
  candidates->clear();
  skipped->clear();
  return ForEachCandidate(
      logdir, options, [&](Candidate&& c) { candidates->push_back(std::move(c)); },
      [&](Skipped&& s) { skipped->push_back(std::move(s)); });
}

}  // namespace tbfs::store
