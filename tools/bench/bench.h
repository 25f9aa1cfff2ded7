// Benchmark subcommands of tbfs-bench.
#pragma once

#include <sys/types.h>

#include <CLI/CLI.hpp>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace tbfs::bench {

void RegisterVerifyBench(CLI::App& app, int* exit_code);
void RegisterMigrateBench(CLI::App& app, int* exit_code);  // migrate and chunking
void RegisterMountBench(CLI::App& app, int* exit_code);
void RegisterSoakBench(CLI::App& app, int* exit_code);
void RegisterFaultsBench(CLI::App& app, int* exit_code);
void RegisterBackendsBench(CLI::App& app, int* exit_code);    // RocksDB vs RADOS
void RegisterStoresBench(CLI::App& app, int* exit_code);      // the same, through a mount
void RegisterScaleBench(CLI::App& app, int* exit_code);       // a big logdir
void RegisterHostileBench(CLI::App& app, int* exit_code);     // one user against the rest
void RegisterColdBench(CLI::App& app, int* exit_code);        // issue 23's table
void RegisterGzipBench(CLI::App& app, int* exit_code);        // gzip'd traces by content
void RegisterCrashesBench(CLI::App& app, int* exit_code);     // crashes beside a writer
void RegisterRecompressBench(CLI::App& app, int* exit_code);  // recompress in a mount
void RegisterDecodeBench(CLI::App& app, int* exit_code);      // a chunk's decode, CPU

// What the mount benchmarks share (bench_util.cc).
// Drops the page cache (root only; a no-op otherwise).
void DropCaches();
// Reads the files sequentially with 1 MiB reads; returns seconds.
double ReadFiles(const std::vector<std::string>& paths, uint64_t* bytes);
// Open + read of one byte of `path`; a 4 KiB pread at `off` of it (open
// not timed); a stat of it. Seconds, or -1.
double FirstByte(const std::string& path);
double Pread4k(const std::string& path, off_t off);
double StatSeconds(const std::string& path);
// The real Kineto trace of ../shared/data (the benches run from the
// repository's folder), or "" after a one-line error naming the path.
std::string RealKinetoTrace();
// What `command` (run by the shell) prints on its standard output.
std::string CommandOutput(const std::string& command);
// `tbfs status --json MOUNTPOINT`'s output ("{}" when it cannot run).
std::string MountStatus(const std::string& tbfs, const std::string& mnt);
// A process's peak resident set (VmHWM), in KiB; 0 when unknown.
uint64_t PeakRssKb(int pid);
// A field of /proc/PID/status in KiB ("VmRSS", "VmHWM"); 0 when unknown.
uint64_t ProcStatusKb(int pid, std::string_view field);

}  // namespace tbfs::bench
