// tbfs: a filesystem and toolkit for TensorBoard logdirs. See README.md.
#include <spdlog/cfg/env.h>
#include <spdlog/sinks/stdout_color_sinks.h>
#include <spdlog/spdlog.h>
#include <sys/resource.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <system_error>

#include "base/log.h"
#include "tools/cli/commands.h"
#include "tools/cli/store_cli.h"

// jemalloc's settings (base/heap.h): two arenas, as glibc had (jemalloc's
// default, four per core, left the soak's peak where glibc's was), and the
// pages of freed blocks go back to the system after a second unused,
// purged at once rather than aged a second time.
extern "C" {
const char* malloc_conf = "narenas:2,dirty_decay_ms:1000,muzzy_decay_ms:0";
}

int main(int argc, char** argv) {
  // A walk holds an fd per folder level: allow what the hard limit allows.
  struct rlimit files;
  if (::getrlimit(RLIMIT_NOFILE, &files) == 0 && files.rlim_cur < files.rlim_max) {
    files.rlim_cur = files.rlim_max;
    ::setrlimit(RLIMIT_NOFILE, &files);
  }
  auto logger = tbfs::StderrLogger("tbfs");
  spdlog::set_default_logger(logger);
  spdlog::set_level(spdlog::level::warn);
  spdlog::cfg::load_env_levels();  // SPDLOG_LEVEL=debug overrides

  CLI::App app{
      "tbfs: keep TensorBoard logdirs small without losing a byte.\n"
      "Traces move to a compressed cold store; scalar curves are verified intact."};
  app.name("tbfs");
  app.require_subcommand(1);
  app.set_version_flag("--version", "tbfs 0.1.0");
  bool verbose = false;
  app.add_flag("-v,--verbose", verbose, "log progress details (info level)");
  app.parse_complete_callback([&] {
    if (verbose) spdlog::set_level(spdlog::level::info);
  });

  int exit_code = tbfs::cli::kExitOk;
  tbfs::cli::RegisterGen(app, &exit_code);
  tbfs::cli::RegisterScan(app, &exit_code);
  tbfs::cli::RegisterVerify(app, &exit_code);
  tbfs::cli::RegisterMigrate(app, &exit_code);
  tbfs::cli::RegisterRestore(app, &exit_code);
  tbfs::cli::RegisterLs(app, &exit_code);
  tbfs::cli::RegisterFsck(app, &exit_code);
  tbfs::cli::RegisterSalvage(app, &exit_code);
  tbfs::cli::RegisterRecompress(app, &exit_code);
  tbfs::cli::RegisterWatch(app, &exit_code);
  tbfs::cli::RegisterMount(app, &exit_code);
  tbfs::cli::RegisterExporter(app, &exit_code);
  // mount.fuse3 (fstab type fuse.tbfs) runs "tbfs LOGDIR MOUNTPOINT -o OPTS".
  std::vector<std::string> args(argv + 1, argv + argc);
  if (args.size() >= 2 && !args[0].empty() && args[0][0] != '-') {
    bool known = false;
    for (const CLI::App* sub : app.get_subcommands([](CLI::App*) { return true; })) {
      known |= sub->get_name() == args[0];
    }
    if (!known) args.insert(args.begin(), "mount");
  }
  std::reverse(args.begin(), args.end());  // CLI11 takes them reversed
  // Reports go to stdout after the work is done. One that cannot be written
  // (a full disk, a closed terminal) is said in one line, and the exit code
  // says it: fmt::print throws, and what is still buffered fails at the
  // flush below.
  auto output_error = [](int err) {
    std::fprintf(stderr,
                 "tbfs: cannot write the report to stdout: %s (what the command did stands)\n",
                 std::strerror(err));
    return tbfs::cli::kExitError;
  };
  // A --json run that fails before its report (bad arguments, a refusal)
  // still prints a JSON document: {"ok": false, "error": ...}.
  const bool json_asked = std::find(args.begin(), args.end(), "--json") != args.end();
  try {
    app.parse(args);
    tbfs::cli::FinishJsonRun(json_asked, exit_code);
  } catch (const CLI::ParseError& e) {
    int code = app.exit(e);
    if (code == 0) return 0;
    tbfs::cli::FinishJsonRun(json_asked, tbfs::cli::kExitError, e.what());
    return tbfs::cli::kExitError;
  } catch (const std::system_error& e) {
    return output_error(e.code().value());
  }
  if (std::fflush(stdout) != 0) return output_error(errno);
  if (std::ferror(stdout)) return output_error(EIO);
  if (exit_code == tbfs::cli::kExitOk && tbfs::cli::RecoveryFoundLosses())
    return tbfs::cli::kExitFinding;
  return exit_code;
}
