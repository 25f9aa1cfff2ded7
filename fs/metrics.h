// Prometheus metrics of a mount (`-o metrics=[ADDR:]PORT`): what `tbfs
// status` shows, as counters and gauges in base units, each labelled with
// the mount point, read from the daemon's own counters at every scrape
// (nothing is counted twice). The only cost on the I/O paths is the FUSE
// latency histograms' (fs/op_latency.h).
#pragma once

#include <prometheus/metric_family.h>

#include <mutex>
#include <string>
#include <utility>
#include <vector>

#include "fs/filesystem.h"
#include "fs/migrator.h"
#include "fs/op_latency.h"

namespace tbfs::fs {

class MountMetrics {
 public:
  MountMetrics(Filesystem& fs, store::ColdStore& store, OpLatency& latency, Migrator& migrator,
               std::string mountpoint)
      : fs_(fs),
        store_(store),
        latency_(latency),
        migrator_(migrator),
        mountpoint_(std::move(mountpoint)) {}
  std::vector<prometheus::MetricFamily> Collect() const;
  // Collect(), in the Prometheus text format.
  std::string Text() const;

 private:
  Filesystem& fs_;
  store::ColdStore& store_;
  OpLatency& latency_;
  Migrator& migrator_;
  std::string mountpoint_;
};

// Merges expositions in the text format (one per mount) into one: each
// family's HELP and TYPE once, then its samples from every input, in the
// order families first appear. Inputs whose samples repeat one another's
// (the same name and labels) are not checked: each mount labels its own.
std::string MergeExpositions(const std::vector<std::string>& texts);

// "10465" -> "127.0.0.1:10465"; "0.0.0.0:10465" as given. "" with *error set
// when it is not [ADDR:]PORT with an IPv4 ADDR (the metrics server, Debian's
// civetweb, listens on IPv4 only).
std::string MetricsAddress(const std::string& value, std::string* error);
// "" when a server may listen on ADDR:PORT, else why not ("Address already
// in use"): the metrics server itself only says that it failed.
std::string CheckCanListen(const std::string& address);

}  // namespace tbfs::fs
