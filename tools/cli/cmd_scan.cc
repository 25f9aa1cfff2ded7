// tbfs scan LOGDIR: the footprint by class, the largest files, and how many
// bytes the trace classes hold.
#include <nlohmann/json.hpp>

#include "base/text.h"
#include "fmt/format.h"
#include "store/footprint.h"
#include "tools/cli/commands.h"
#include "tools/cli/progress.h"

namespace tbfs::cli {

namespace {

struct ScanArgs {
  std::string logdir;
  size_t top = 20;
  bool json = false;
};

double Share(uint64_t part, uint64_t whole) {
  return whole == 0 ? 0.0 : 100.0 * static_cast<double>(part) / static_cast<double>(whole);
}

void PrintHuman(const std::string& logdir, const store::Footprint& fp) {
  fmt::print("{}: {} files, {}\n\n", logdir, fp.total_files, HumanBytes(fp.total_bytes));
  fmt::print("{:<16} {:>8} {:>12} {:>7}\n", "class", "files", "bytes", "share");
  for (int c = 0; c < store::kNumClasses; ++c) {
    auto cls = static_cast<store::FileClass>(c);
    const store::ClassTotal& t = fp.of(cls);
    fmt::print("{:<16} {:>8} {:>12} {:>6.1f}%\n", store::ClassName(cls), t.files,
               HumanBytes(t.bytes), Share(t.bytes, fp.total_bytes));
    if (cls == store::FileClass::kEvents) {
      const store::EventsSplit& e = fp.events;
      std::pair<const char*, uint64_t> parts[] = {{"scalars", e.scalars},
                                                  {"histograms", e.histograms},
                                                  {"images", e.images},
                                                  {"other", e.other}};
      for (const auto& [name, bytes] : parts) {
        fmt::print("  {:<14} {:>8} {:>12} {:>6.1f}%\n", name, "", HumanBytes(bytes),
                   Share(bytes, fp.total_bytes));
      }
    }
  }
  fmt::print("\ntraces: {} in {} files ({:.1f}% of the logdir) can move to the cold store\n",
             HumanBytes(fp.trace_bytes), fp.trace_files, Share(fp.trace_bytes, fp.total_bytes));
  if (!fp.largest.empty()) {
    fmt::print("\nlargest files:\n");
    for (const store::FileEntry& f : fp.largest) {
      fmt::print("  {:>10}  {:<14} {}\n", HumanBytes(f.bytes), store::ClassName(f.cls),
                 Printable(f.path));
    }
  }
}

nlohmann::json ToJson(const std::string& logdir, const store::Footprint& fp) {
  nlohmann::json classes = nlohmann::json::object();
  for (int c = 0; c < store::kNumClasses; ++c) {
    auto cls = static_cast<store::FileClass>(c);
    classes[std::string(store::ClassName(cls))] = {{"files", fp.of(cls).files},
                                                   {"bytes", fp.of(cls).bytes}};
  }
  nlohmann::json largest = nlohmann::json::array();
  for (const store::FileEntry& f : fp.largest) {
    largest.push_back(
        {{"path", f.path}, {"bytes", f.bytes}, {"class", std::string(store::ClassName(f.cls))}});
  }
  return {{"logdir", logdir},
          {"files", fp.total_files},
          {"bytes", fp.total_bytes},
          {"classes", classes},
          {"tfevents_split",
           {{"scalars", fp.events.scalars},
            {"histograms", fp.events.histograms},
            {"images", fp.events.images},
            {"other", fp.events.other}}},
          {"trace_files", fp.trace_files},
          {"trace_bytes", fp.trace_bytes},
          {"largest", largest},
          {"warnings", fp.warnings}};
}

int RunScan(const ScanArgs& args) {
  store::Policy policy;
  store::ScanOptions options;
  options.walk.skip_dirs = {store::kStoreDirName};
  options.largest = args.top;
  auto scan = [&] {
    Progress progress("scan", 0);
    options.bytes_done = progress.counter();
    return store::ScanLogdir(args.logdir, policy, options);
  };
  Result<store::Footprint> fp = scan();
  if (!fp.ok()) {
    PrintError("scan", fp.status().message());
    return kExitError;
  }
  for (const std::string& w : fp->warnings) PrintError("scan", "warning: " + w);
  if (args.json) {
    PrintJson(ToJson(args.logdir, *fp));
  } else {
    PrintHuman(args.logdir, *fp);
  }
  return kExitOk;
}

}  // namespace

void RegisterScan(CLI::App& app, int* exit_code) {
  auto args = std::make_shared<ScanArgs>();
  CLI::App* cmd = app.add_subcommand(
      "scan", "Show what takes the space in a logdir, by class, and how much could move");
  cmd->add_option("LOGDIR", args->logdir, "the logdir to scan")->required();
  cmd->add_option("--top", args->top, "how many of the largest files to list")
      ->capture_default_str()
      ->check(CLI::Range(0, 1000000));
  cmd->add_flag("--json", args->json, "print the report as JSON");
  cmd->callback([args, exit_code] { *exit_code = RunScan(*args); });
}

}  // namespace tbfs::cli
