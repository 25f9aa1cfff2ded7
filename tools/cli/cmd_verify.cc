// tbfs verify LOGDIR: per run, the tags with count, last step and last value;
// with a baseline, the proof that every record it saw is still there.
// Exit 0 intact, 1 integrity failure, 2 usage or I/O error.
#include <algorithm>
#include <nlohmann/json.hpp>

#include "base/fs_util.h"
#include "base/text.h"
#include "events/verifier.h"
#include "fmt/format.h"
#include "store/classify.h"
#include "tools/cli/commands.h"
#include "tools/cli/progress.h"

namespace tbfs::cli {

namespace {

struct VerifyArgs {
  std::string logdir;
  std::vector<std::string> must_have;
  std::string save_baseline;
  std::string baseline;
  int threads = 0;
  bool json = false;
};

std::string ScalarText(const std::optional<events::ScalarValue>& v) {
  if (!v) return "-";
  if (v->is_integer) return std::to_string(v->i);
  return fmt::format("{:.6g}", v->f);
}

nlohmann::json ScalarJson(const std::optional<events::ScalarValue>& v) {
  if (!v) return nullptr;
  if (v->is_integer) return v->i;
  if (!std::isfinite(v->f)) return fmt::format("{}", v->f);  // JSON has no NaN/inf
  return v->f;
}

nlohmann::json FailureJson(const events::Failure& f) {
  return {{"run", f.run},       {"tag", f.tag},       {"file", f.file},
          {"offset", f.offset}, {"reason", f.reason}, {"unread", f.unread}};
}

// What a run found: damage (an integrity failure), and what it could not
// read (files: permissions, the disk; folders the walk could not enter),
// which is neither damage nor proof of intact curves.
struct Findings {
  size_t damaged = 0;
  size_t unread = 0;
  const std::vector<std::string>* not_walked = nullptr;
  bool intact() const { return damaged == 0 && unread == 0 && not_walked->empty(); }
};

Findings Count(const events::VerifyReport& report, const std::vector<std::string>& not_walked) {
  Findings f;
  f.unread = std::count_if(report.failures.begin(), report.failures.end(),
                           [](const events::Failure& x) { return x.unread; });
  f.damaged = report.failures.size() - f.unread;
  f.not_walked = &not_walked;
  return f;
}

void PrintHuman(const VerifyArgs& args, const events::VerifyReport& report, const Findings& found,
                double secs) {
  for (const auto& [name, run] : report.digest.runs) {
    fmt::print("run {} ({} file{})\n", Printable(name), run.files.size(),
               run.files.size() == 1 ? "" : "s");
    fmt::print("  {:<36} {:<11} {:>9} {:>10} {:>14}\n", "tag", "plugin", "count", "last step",
               "last value");
    for (const auto& [tag, t] : run.tags) {
      fmt::print("  {:<36} {:<11} {:>9} {:>10} {:>14}\n", tag, t.plugin.empty() ? "-" : t.plugin,
                 t.count, t.last_step, ScalarText(t.last_scalar));
    }
  }
  for (const events::Failure& f : report.failures) {
    fmt::print("{}: {}\n", f.unread ? "NOT READ" : "FAILED", Printable(f.ToString()));
  }
  std::string verdict = args.baseline.empty() ? "intact" : "intact (every baseline record present)";
  if (!found.intact()) {
    verdict = found.damaged > 0 ? fmt::format("{} integrity failure(s)", found.damaged) : "";
    if (found.unread + found.not_walked->size() > 0) {
      verdict += fmt::format("{}NOT VERIFIED: {} file(s) and {} folder(s) could not be read",
                             verdict.empty() ? "" : "; ", found.unread, found.not_walked->size());
    }
  }
  fmt::print("{}: {} tfevents files, {} records, {} in {:.2f}s: {}\n", args.logdir,
             report.digest.files.size(), report.records, HumanBytes(report.bytes), secs, verdict);
}

nlohmann::json ToJson(const VerifyArgs& args, const events::VerifyReport& report,
                      const Findings& found, double secs) {
  nlohmann::json runs = nlohmann::json::array();
  for (const auto& [name, run] : report.digest.runs) {
    nlohmann::json tags = nlohmann::json::array();
    for (const auto& [tag, t] : run.tags) {
      tags.push_back({{"tag", tag},
                      {"plugin", t.plugin},
                      {"count", t.count},
                      {"first_step", t.first_step},
                      {"last_step", t.last_step},
                      {"last_value", ScalarJson(t.last_scalar)}});
    }
    runs.push_back({{"run", name}, {"files", run.files}, {"tags", tags}});
  }
  nlohmann::json failures = nlohmann::json::array();
  for (const events::Failure& f : report.failures) failures.push_back(FailureJson(f));
  return {{"logdir", args.logdir},
          {"files", report.digest.files.size()},
          {"records", report.records},
          {"bytes", report.bytes},
          {"seconds", secs},
          {"intact", found.intact()},
          {"integrity_failures", found.damaged},
          {"unread_files", found.unread},
          {"not_walked", *found.not_walked},
          {"runs", runs},
          {"failures", failures}};
}

int RunVerify(const VerifyArgs& args) {
  std::vector<events::FileDigest> baseline;
  if (!args.baseline.empty()) {
    std::string text;
    Status st = ReadFileToString(args.baseline, &text);
    if (!st.ok()) {
      PrintError("verify", st.message());
      return kExitError;
    }
    auto parsed = events::BaselineFromJson(text);
    if (!parsed.ok()) {
      PrintError("verify", args.baseline + ": " + parsed.status().message());
      return kExitError;
    }
    baseline = std::move(parsed).value();
  }

  events::VerifyOptions options;
  options.walk.skip_dirs = {store::kStoreDirName};
  // A folder that cannot be walked is named; the rest is verified.
  std::vector<std::string> walk_warnings;
  options.walk.warnings = &walk_warnings;
  options.must_have = args.must_have;
  options.baseline = args.baseline.empty() ? nullptr : &baseline;
  options.threads = args.threads;
  double start = NowSeconds();
  auto verify = [&] {
    Progress progress("verify", 0);
    options.bytes_done = progress.counter();
    return events::VerifyLogdir(args.logdir, options);
  };
  Result<events::VerifyReport> report = verify();
  double secs = NowSeconds() - start;
  for (const std::string& w : walk_warnings) PrintError("verify", "warning: not verified: " + w);
  if (!report.ok()) {
    PrintError("verify", report.status().message());
    return kExitError;
  }
  if (report->digest.files.empty() && args.baseline.empty()) {
    PrintError("verify", "no tfevents files under " + args.logdir + " (is this a logdir?)");
    return kExitError;
  }
  if (!args.save_baseline.empty()) {
    Status st = WriteFileAtomic(args.save_baseline, events::BaselineToJson(report->digest.files));
    if (!st.ok()) {
      PrintError("verify", st.message());
      return kExitError;
    }
  }
  const Findings found = Count(*report, walk_warnings);
  if (args.json) {
    PrintJson(ToJson(args, *report, found, secs));
  } else {
    PrintHuman(args, *report, found, secs);
  }
  // Damage is a finding; what could not be read was not checked: an I/O
  // error, not a damaged curve, and not "intact" either.
  if (found.damaged > 0) return kExitFinding;
  return found.intact() ? kExitOk : kExitError;
}

}  // namespace

void RegisterVerify(CLI::App& app, int* exit_code) {
  auto args = std::make_shared<VerifyArgs>();
  CLI::App* cmd = app.add_subcommand(
      "verify",
      "Check every scalar curve of a logdir: per run, each tag's count, last step and value; "
      "with --baseline, prove every record seen before is still there.\n"
      "Exit status: 0 intact, 1 integrity failure, 2 usage or I/O error.");
  cmd->add_option("LOGDIR", args->logdir, "the logdir (or a tbfs mount point)")->required();
  cmd->add_option("--must-have", args->must_have, "tags that some run must hold (TAG,TAG,...)")
      ->delimiter(',');
  cmd->add_option("--save-baseline", args->save_baseline,
                  "write the digests to FILE, to check later with --baseline");
  cmd->add_option("--baseline", args->baseline,
                  "a file written by --save-baseline: every record it covers must be intact");
  cmd->add_option("--threads", args->threads, "reader threads (default: one per core)")
      ->check(CLI::Range(0, 1024));
  cmd->add_flag("--json", args->json, "print the report as JSON");
  cmd->callback([args, exit_code] { *exit_code = RunVerify(*args); });
}

}  // namespace tbfs::cli
