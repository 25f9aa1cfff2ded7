// tbfs exporter: one Prometheus endpoint for every tbfs mount of the host.
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>

#include "fs/exporter.h"
#include "fs/metrics.h"
#include "tools/cli/commands.h"

namespace tbfs::cli {

void RegisterExporter(CLI::App& app, int* exit_code) {
  struct Args {
    std::string listen = fs::kExporterDefaultAddress;
    bool once = false;
  };
  auto args = std::make_shared<Args>();
  CLI::App* cmd = app.add_subcommand(
      "exporter",
      "Serve the Prometheus metrics of every tbfs mount of this host (those root runs) on one "
      "port, each labelled by its mount point");
  cmd->add_option("--listen", args->listen,
                  std::string("[ADDR:]PORT to listen on, ADDR an IPv4 address (default ") +
                      fs::kExporterDefaultAddress + ")");
  cmd->add_flag("--once", args->once,
                "print one scrape on stdout and exit (e.g. for node_exporter's textfile "
                "collector)");
  cmd->callback([args, exit_code] {
    // Root's registrations: another user would see no mount at all.
    if (::access(fs::kExporterRunDir, R_OK | X_OK) != 0 && errno != ENOENT) {
      PrintError("exporter", std::string(fs::kExporterRunDir) + ": " + std::strerror(errno) +
                                 " (the mounts register there as root: run it as root)");
      *exit_code = kExitError;
      return;
    }
    if (args->once) {
      const std::string text = fs::ScrapeRegisteredMounts(fs::kExporterRunDir);
      std::fwrite(text.data(), 1, text.size(), stdout);
      // An ask left behind on a mount that does not answer must not hold
      // the exit (nor have anything torn down under it).
      std::fflush(stdout);
      ::_exit(std::ferror(stdout) ? kExitError : kExitOk);
    }
    std::string error;
    const std::string address = fs::MetricsAddress(args->listen, &error);
    if (address.empty()) {
      PrintError("exporter", "--listen " + args->listen + ": " + error);
      *exit_code = kExitError;
      return;
    }
    *exit_code = fs::RunExporter(fs::kExporterRunDir, address, &error);
    if (*exit_code != kExitOk) PrintError("exporter", error);
  });
}

}  // namespace tbfs::cli
