// tbfs-bench: the benchmarks whose figures the README quotes. Each
// subcommand builds its own data with the generator (or uses the data it is
// given), runs the measured work and the reference work in the same run,
// and prints ratios.
#include <spdlog/spdlog.h>

#include <CLI/CLI.hpp>

#include "tools/bench/bench.h"

int main(int argc, char** argv) {
  spdlog::set_level(spdlog::level::warn);
  CLI::App app{"tbfs-bench: measurements quoted in README.md"};
  app.require_subcommand(1);
  int exit_code = 0;
  tbfs::bench::RegisterVerifyBench(app, &exit_code);
  tbfs::bench::RegisterMigrateBench(app, &exit_code);
  tbfs::bench::RegisterMountBench(app, &exit_code);
  tbfs::bench::RegisterSoakBench(app, &exit_code);
  tbfs::bench::RegisterFaultsBench(app, &exit_code);
  tbfs::bench::RegisterBackendsBench(app, &exit_code);
  tbfs::bench::RegisterStoresBench(app, &exit_code);
  tbfs::bench::RegisterScaleBench(app, &exit_code);
  tbfs::bench::RegisterHostileBench(app, &exit_code);
  tbfs::bench::RegisterColdBench(app, &exit_code);
  tbfs::bench::RegisterGzipBench(app, &exit_code);
  tbfs::bench::RegisterCrashesBench(app, &exit_code);
  tbfs::bench::RegisterRecompressBench(app, &exit_code);
  tbfs::bench::RegisterDecodeBench(app, &exit_code);
  CLI11_PARSE(app, argc, argv);
  return exit_code;
}
