// The `tbfs` subcommands. Each Register* adds one subcommand to the app; its
// callback stores the process exit status in *exit_code:
//   0 success, 1 a finding (integrity failure, damaged data), 2 usage or I/O error.
// Errors are one line on stderr, prefixed with "tbfs <command>: ".
#pragma once

#include <CLI/CLI.hpp>
#include <string>

namespace tbfs::cli {

inline constexpr int kExitOk = 0;
inline constexpr int kExitFinding = 1;
inline constexpr int kExitError = 2;

void RegisterGen(CLI::App& app, int* exit_code);
void RegisterScan(CLI::App& app, int* exit_code);
void RegisterVerify(CLI::App& app, int* exit_code);
void RegisterMigrate(CLI::App& app, int* exit_code);
void RegisterRestore(CLI::App& app, int* exit_code);  // restore and export
void RegisterLs(CLI::App& app, int* exit_code);       // ls and du
void RegisterFsck(CLI::App& app, int* exit_code);     // fsck and gc
void RegisterSalvage(CLI::App& app, int* exit_code);
void RegisterRecompress(CLI::App& app, int* exit_code);
void RegisterWatch(CLI::App& app, int* exit_code);
void RegisterMount(CLI::App& app, int* exit_code);  // mount and status
void RegisterExporter(CLI::App& app, int* exit_code);

// Sends a request ("status", "migrate-now") to the tbfs mount at
// `mountpoint` over its control socket; the JSON reply goes to *json.
// Returns "" or a one-line error (not a tbfs mount, permission denied, the
// daemon's own error).
std::string AskMount(const std::string& mountpoint, const std::string& request, std::string* json);
// True when `path` is the mount point of a running tbfs mount.
bool IsTbfsMount(const std::string& path);

// Prints "tbfs <command>: <message>" on stderr. The first message of a
// run is kept for FinishJsonRun.
void PrintError(const std::string& command, const std::string& message);
// The line that says a compaction after a change failed: what was deleted
// or replaced still takes its space on disk (`error` says why).
std::string CompactWarning(const std::string& error);
// {"ok": false, "error": message} on stdout: what a --json run prints
// where its report would be, beside PrintError's line on stderr.
void PrintJsonError(const std::string& message);
// A JSON document (already serialized) on stdout, and noted as printed.
void PrintJsonText(const std::string& text);
// Notes that this run's JSON report has begun on stdout (one printed in
// pieces; PrintJson, PrintJsonText and PrintJsonError note it themselves).
void NoteJsonPrinted();
// For a --json run that failed (exit 1 or 2) before its report began: prints
// PrintJsonError of its first error (or of `error`, when none was printed
// through PrintError), so a script always reads a document.
void FinishJsonRun(bool json_asked, int exit_code, const std::string& error = "");

}  // namespace tbfs::cli
