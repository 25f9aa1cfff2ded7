// One Prometheus endpoint for every tbfs mount of a host (`tbfs exporter`).
//
// A mount run by root registers itself in kExporterRunDir: a file named
// after its mount point (EscapePath) that holds the mount point, its
// control socket and its pid, written once the mount serves and removed
// when it ends. Only that pid, as root, is believed at the socket (a user
// who owns a folder above it could put a server of their own there).
// The exporter asks each registered mount's control socket for its metrics
// at every scrape ("metrics": the same series as `-o metrics=`, labelled
// with the mount point) and merges them into one exposition; it never
// touches the mounted trees. A registration left by a daemon that died is
// skipped when nothing is mounted at its mount point; a mount that is
// there but does not answer within kExporterMountTimeoutS (all mounts are
// asked at once, so a scrape takes that long at most) shows as
// tbfs_exporter_mount_up 0.
#pragma once

#include <string>

#include "base/status.h"

namespace tbfs::fs {

inline constexpr char kExporterRunDir[] = "/run/tbfs/mounts";
inline constexpr int kExporterMountTimeoutS = 4;  // under Prometheus's 10 s scrape timeout
// Where `tbfs exporter` listens unless told (see README: "Metrics").
inline constexpr char kExporterDefaultAddress[] = "127.0.0.1:10464";

// Registers (and Unregister removes, if it is still this process's) the
// mount on `mountpoint` whose control socket is `socket`, in `dir` (made
// 0700, root's, when missing).
Status RegisterWithExporter(const std::string& dir, const std::string& mountpoint,
                            const std::string& socket);
void UnregisterFromExporter(const std::string& dir, const std::string& mountpoint);

// One scrape of every mount registered in `dir`: their series merged, the
// exporter's own (tbfs_exporter_mount_up, _mounts, _scrape_duration_seconds)
// after them.
std::string ScrapeRegisteredMounts(const std::string& dir);

// `tbfs exporter`: serves ScrapeRegisteredMounts(dir) at
// http://address/metrics until SIGTERM, SIGINT or SIGHUP (then returns 0;
// sd_notify READY=1 once it listens). 2 with *error set when it cannot
// listen.
int RunExporter(const std::string& dir, const std::string& address, std::string* error);

}  // namespace tbfs::fs
