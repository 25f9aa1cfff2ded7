// tbfs gen OUTDIR: writes a deterministic, realistic logdir (tools/gen/gen.h).
#include <nlohmann/json.hpp>

#include "base/text.h"
#include "fmt/format.h"
#include "tools/cli/commands.h"
#include "tools/cli/progress.h"
#include "tools/gen/gen.h"

namespace tbfs::cli {

namespace {

struct GenArgs {
  std::string outdir;
  gen::GenOptions options;
  bool json = false;
};

int RunGen(const GenArgs& args) {
  gen::GenReport report;
  double start = NowSeconds();
  Status st;
  {
    Progress progress("gen", 0);
    st = gen::GenerateLogdir(args.outdir, args.options, &report, progress.counter());
  }
  if (!st.ok()) {
    PrintError("gen", st.message());
    return kExitError;
  }
  double secs = NowSeconds() - start;
  if (args.json) {
    nlohmann::json j{{"logdir", args.outdir},
                     {"files", report.files},
                     {"event_files", report.event_files},
                     {"event_bytes", report.event_bytes},
                     {"trace_files", report.trace_files},
                     {"trace_bytes", report.trace_bytes},
                     {"seconds", secs}};
    PrintJson(j);
  } else {
    fmt::print("wrote {}: {} files; {} tfevents files ({}), {} traces ({}) in {:.1f}s\n",
               args.outdir, report.files, report.event_files, HumanBytes(report.event_bytes),
               report.trace_files, HumanBytes(report.trace_bytes), secs);
  }
  return kExitOk;
}

}  // namespace

void RegisterGen(CLI::App& app, int* exit_code) {
  auto args = std::make_shared<GenArgs>();
  CLI::App* cmd = app.add_subcommand(
      "gen",
      "Write a deterministic, realistic TensorBoard logdir (PyTorch and Keras runs, "
      "profiler traces) into an empty folder");
  cmd->add_option("OUTDIR", args->outdir, "folder to create (must be missing or empty)")
      ->required();
  cmd->add_option("--runs", args->options.runs, "training runs; PyTorch and Keras alternate")
      ->capture_default_str()
      ->check(CLI::Range(1, 10000));
  cmd->add_option("--steps", args->options.steps, "training steps per run")
      ->capture_default_str()
      ->check(CLI::Range(1, 100000000));
  cmd->add_option("--trace-mb", args->options.trace_mb, "total MiB of profiler traces")
      ->capture_default_str()
      ->check(CLI::Range(0.0, 1e7));
  cmd->add_option("--seed", args->options.seed, "random seed; same seed, same bytes")
      ->capture_default_str();
  cmd->add_flag("--live-tail", args->options.live_tail,
                "leave a partial record at the end of one tfevents file (a live writer)");
  cmd->add_flag("!--no-gzip", args->options.gzip_pytorch, "do not write *.pt.trace.json.gz files");
  cmd->add_flag("--json", args->json, "print the summary as JSON");
  cmd->callback([args, exit_code] { *exit_code = RunGen(*args); });
}

namespace {
// One command runs per process: what FinishJsonRun needs to know of it.
std::string first_error;
bool json_printed = false;
}  // namespace

std::string CompactWarning(const std::string& error) {
  return fmt::format(
      "warning: the space of what was deleted or replaced is still on disk: the store was not "
      "compacted ({}); a later gc --apply, restore or recompress compacts it again",
      Printable(error));
}

void PrintError(const std::string& command, const std::string& message) {
  if (first_error.empty()) first_error = message;
  fmt::print(stderr, "tbfs {}: {}\n", command, message);
}

void PrintJsonError(const std::string& message) {
  nlohmann::json j{{"ok", false}, {"error", message}};
  PrintJsonText(j.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace));
}

void PrintJsonText(const std::string& text) {
  json_printed = true;
  fmt::print("{}\n", text);
}

void NoteJsonPrinted() { json_printed = true; }

void FinishJsonRun(bool json_asked, int exit_code, const std::string& error) {
  if (!json_asked || exit_code == kExitOk || json_printed) return;
  const std::string& e = !first_error.empty() ? first_error : error;
  PrintJsonError(e.empty() ? std::string("failed (no message)") : e);
}

}  // namespace tbfs::cli
