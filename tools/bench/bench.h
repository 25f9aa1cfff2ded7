// Benchmark subcommands of tbfs-bench.
#pragma once

#include <CLI/CLI.hpp>

namespace tbfs::bench {

void RegisterVerifyBench(CLI::App& app, int* exit_code);
void RegisterMigrateBench(CLI::App& app, int* exit_code);  // migrate and chunking
void RegisterMountBench(CLI::App& app, int* exit_code);
void RegisterSoakBench(CLI::App& app, int* exit_code);
void RegisterFaultsBench(CLI::App& app, int* exit_code);
void RegisterBackendsBench(CLI::App& app, int* exit_code);  // RocksDB vs RADOS

}  // namespace tbfs::bench
