// tbfs ls: the cold files with their logical and stored sizes.
// tbfs du: totals and ratio per class, and what the store takes on disk.
#include <map>
#include <nlohmann/json.hpp>

#include "base/text.h"
#include "fmt/format.h"
#include "store/restore.h"
#include "tools/cli/commands.h"
#include "tools/cli/progress.h"
#include "tools/cli/store_cli.h"

namespace tbfs::cli {

namespace {

using nlohmann::json;

struct LsArgs {
  std::string logdir;
  std::string path;
  std::string store;
  bool json = false;
};

std::string TimeText(int64_t ns) {
  time_t secs = static_cast<time_t>(ns / 1'000'000'000);
  struct tm tm;
  localtime_r(&secs, &tm);
  char buf[32];
  std::strftime(buf, sizeof(buf), "%Y-%m-%d %H:%M", &tm);
  return buf;
}

int RunLs(const LsArgs& args) {
  auto loc = LocateStore(args.logdir, args.store);
  if (!loc.ok()) {
    PrintError("ls", loc.status().message());
    return kExitError;
  }
  auto store = OpenStoreForRead(*loc);
  if (!store.ok()) {
    PrintError("ls", store.status().message());
    return kExitError;
  }
  std::vector<storepb::Manifest> files;
  if (*store) {
    std::vector<std::string> sel, not_found;
    if (!args.path.empty()) {
      auto n = store::NormalizeUserPath(args.logdir, args.path);
      if (!n.ok()) {
        PrintError("ls", n.status().message());
        return kExitError;
      }
      sel.push_back(*n);
    }
    Status st = store::SelectCold(**store, sel, &files, &not_found);
    // Beside an unfinished migration, a file still at its path is hot.
    if (st.ok()) st = store::DropInFlight(**store, loc->logdir, &files);
    if (!st.ok()) {
      PrintError("ls", st.message());
      return kExitError;
    }
    if (!not_found.empty()) {
      PrintError("ls", "not in the cold store: " + not_found[0]);
      return kExitError;
    }
  }
  std::sort(files.begin(), files.end(),
            [](const auto& a, const auto& b) { return a.path() < b.path(); });
  if (args.json) {
    json j = json::array();
    for (const auto& m : files) {
      j.push_back({{"path", m.path()},
                   {"bytes", m.size()},
                   {"data_bytes", store::DataBytes(m)},  // without its holes
                   {"stored_bytes", m.stored_bytes()},
                   {"class", m.file_class()},
                   {"level", m.level()},
                   {"dictionary", m.dictionary()},  // 0: none (docs/format.md)
                   // a gzip file stored by its content, made again on reads
                   {"gzip_content", m.has_gzip()},
                   {"mtime_ns", m.mtime_ns()},
                   {"mode", m.mode() & 07777},
                   {"file_id", m.file_id()}});
    }
    PrintJson(j);
    return kExitOk;
  }
  for (const auto& m : files) {
    fmt::print("{:>10} {:>10} {:>6.1f}x  {}  {:<14} {}\n", HumanBytes(m.size()),
               HumanBytes(m.stored_bytes()), Ratio(store::DataBytes(m), m.stored_bytes()),
               TimeText(m.mtime_ns()), m.file_class(), Printable(m.path()));
  }
  if (files.empty()) fmt::print("no cold files\n");
  return kExitOk;
}

int RunDu(const LsArgs& args) {
  auto loc = LocateStore(args.logdir, args.store);
  if (!loc.ok()) {
    PrintError("du", loc.status().message());
    return kExitError;
  }
  auto store = OpenStoreForRead(*loc);
  if (!store.ok()) {
    PrintError("du", store.status().message());
    return kExitError;
  }
  struct Sum {
    uint64_t files = 0, bytes = 0, stored = 0;
  };
  std::map<std::string, Sum> by_class;
  Sum total;
  uint64_t disk = 0;
  if (*store) {
    std::vector<storepb::Manifest> files;
    std::vector<std::string> not_found;
    Status st = store::SelectCold(**store, {}, &files, &not_found);
    if (st.ok()) st = store::DropInFlight(**store, loc->logdir, &files);
    if (!st.ok()) {
      PrintError("du", st.message());
      return kExitError;
    }
    for (const storepb::Manifest& m : files) {
      for (Sum* s : {&by_class[m.file_class()], &total}) {
        s->files++;
        s->bytes += store::DataBytes(m);  // a sparse file's holes take no room
        s->stored += m.stored_bytes();
      }
    }
    disk = (*store)->DiskBytes();
  }
  if (args.json) {
    json j = {{"files", total.files},         {"bytes", total.bytes},
              {"stored_bytes", total.stored}, {"ratio", Ratio(total.bytes, total.stored)},
              {"store_disk_bytes", disk},     {"store", loc->dir}};
    for (const auto& [cls, s] : by_class) {
      j["classes"][cls] = {{"files", s.files},
                           {"bytes", s.bytes},
                           {"stored_bytes", s.stored},
                           {"ratio", Ratio(s.bytes, s.stored)}};
    }
    PrintJson(j);
    return kExitOk;
  }
  fmt::print("{:<16} {:>8} {:>12} {:>12} {:>8}\n", "class", "files", "logical", "stored", "ratio");
  for (const auto& [cls, s] : by_class) {
    fmt::print("{:<16} {:>8} {:>12} {:>12} {:>7.1f}x\n", cls, s.files, HumanBytes(s.bytes),
               HumanBytes(s.stored), Ratio(s.bytes, s.stored));
  }
  fmt::print("{:<16} {:>8} {:>12} {:>12} {:>7.1f}x\n", "total", total.files,
             HumanBytes(total.bytes), HumanBytes(total.stored), Ratio(total.bytes, total.stored));
  fmt::print("store {} takes {} on disk\n", loc->dir, HumanBytes(disk));
  return kExitOk;
}

}  // namespace

void RegisterLs(CLI::App& app, int* exit_code) {
  auto args = std::make_shared<LsArgs>();
  CLI::App* cmd = app.add_subcommand("ls", "List cold files: logical size, stored size, ratio");
  cmd->add_option("LOGDIR", args->logdir, "the logdir")->required();
  cmd->add_option("PATH", args->path, "a file or folder, relative to LOGDIR");
  cmd->add_option("--store", args->store, kStoreOptionHelp);
  cmd->add_flag("--json", args->json, "print the list as JSON");
  cmd->callback([args, exit_code] { *exit_code = RunLs(*args); });

  auto dargs = std::make_shared<LsArgs>();
  CLI::App* du = app.add_subcommand("du", "Cold totals and ratio per class; store size on disk");
  du->add_option("LOGDIR", dargs->logdir, "the logdir")->required();
  du->add_option("--store", dargs->store, kStoreOptionHelp);
  du->add_flag("--json", dargs->json, "print the totals as JSON");
  du->callback([dargs, exit_code] { *exit_code = RunDu(*dargs); });
}

}  // namespace tbfs::cli
