#include "fs/metrics.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include <algorithm>
#include <charconv>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <limits>
#include <map>
#include <sstream>

#include "base/fs_util.h"
#include "base/text.h"
#include "prometheus/text_serializer.h"
#include "store/growth.h"

namespace tbfs::fs {

namespace {

// Blocked runs named by label (bounded: a label per run would let users
// grow every scrape).
constexpr size_t kMetricsBlockedRuns = 10;

using prometheus::ClientMetric;
using prometheus::MetricFamily;
using prometheus::MetricType;

class Families {
 public:
  // Label values must be UTF-8 (a mount point need not be): a scrape with
  // one bad byte is rejected whole.
  explicit Families(const std::string& mountpoint) : mountpoint_(ValidUtf8(mountpoint)) {}

  void Counter(const std::string& name, const std::string& help, double value,
               std::vector<ClientMetric::Label> labels = {}) {
    ClientMetric m = Metric(std::move(labels));
    m.counter.value = value;
    Add(name, help, MetricType::Counter, std::move(m));
  }
  void Gauge(const std::string& name, const std::string& help, double value,
             std::vector<ClientMetric::Label> labels = {}) {
    ClientMetric m = Metric(std::move(labels));
    m.gauge.value = value;
    Add(name, help, MetricType::Gauge, std::move(m));
  }
  // Buckets: per bucket (not cumulative), the last one +Inf.
  void Histogram(const std::string& name, const std::string& help, const OpLatency::Snapshot& s,
                 std::vector<ClientMetric::Label> labels) {
    ClientMetric m = Metric(std::move(labels));
    m.histogram.sample_count = s.count;
    m.histogram.sample_sum = s.sum_seconds;
    uint64_t cumulative = 0;
    for (size_t b = 0; b < s.buckets.size(); ++b) {
      cumulative += s.buckets[b];
      m.histogram.bucket.push_back({cumulative, b < OpLatency::kBounds.size()
                                                    ? OpLatency::kBounds[b]
                                                    : std::numeric_limits<double>::infinity()});
    }
    Add(name, help, MetricType::Histogram, std::move(m));
  }
  std::vector<MetricFamily> Take() { return std::move(out_); }

 private:
  ClientMetric Metric(std::vector<ClientMetric::Label> labels) {
    ClientMetric m;
    m.label.push_back({"mountpoint", mountpoint_});
    for (auto& l : labels) m.label.push_back(std::move(l));
    return m;
  }
  // Samples of one name share a family (added one after the other).
  void Add(const std::string& name, const std::string& help, MetricType type, ClientMetric m) {
    if (out_.empty() || out_.back().name != name) out_.push_back({name, help, type, {}});
    out_.back().metric.push_back(std::move(m));
  }
  std::string mountpoint_;
  std::vector<MetricFamily> out_;
};

// The standard process collector's series (process_*), from /proc/self.
void ProcessMetrics(Families& f) {
  std::ifstream statm("/proc/self/statm");
  uint64_t size = 0, resident = 0;
  statm >> size >> resident;
  const double page = static_cast<double>(::sysconf(_SC_PAGESIZE));
  const double ticks = static_cast<double>(::sysconf(_SC_CLK_TCK));
  f.Gauge("process_resident_memory_bytes", "Resident memory size in bytes.",
          static_cast<double>(resident) * page);
  f.Gauge("process_virtual_memory_bytes", "Virtual memory size in bytes.",
          static_cast<double>(size) * page);
  // /proc/self/stat: fields after the command's closing parenthesis; utime
  // and stime are the 14th and 15th fields, starttime the 22nd.
  std::ifstream stat_in("/proc/self/stat");
  std::string stat((std::istreambuf_iterator<char>(stat_in)), std::istreambuf_iterator<char>());
  const size_t paren = stat.rfind(')');
  if (paren != std::string::npos) {
    std::istringstream fields(stat.substr(paren + 2));
    std::vector<std::string> v;
    for (std::string w; fields >> w;) v.push_back(w);
    if (v.size() > 19) {  // v[0] is field 3
      f.Counter("process_cpu_seconds_total", "Total user and system CPU time spent in seconds.",
                (std::stod(v[11]) + std::stod(v[12])) / ticks);
      std::ifstream proc_stat("/proc/stat");
      for (std::string key; proc_stat >> key;) {
        if (key == "btime") {
          double boot = 0;
          proc_stat >> boot;
          f.Gauge("process_start_time_seconds",
                  "Start time of the process since unix epoch in seconds.",
                  boot + std::stod(v[19]) / ticks);
          break;
        }
      }
    }
  }
  double fds = 0;
  std::error_code ec;
  for (auto it = std::filesystem::directory_iterator("/proc/self/fd", ec);
       !ec && it != std::filesystem::directory_iterator(); it.increment(ec)) {
    ++fds;
  }
  f.Gauge("process_open_fds", "Number of open file descriptors.", fds);
  struct rlimit files;
  if (::getrlimit(RLIMIT_NOFILE, &files) == 0) {
    f.Gauge("process_max_fds", "Maximum number of open file descriptors.",
            static_cast<double>(files.rlim_cur));
  }
}

// The store: the mount's role, its cold files and what they take, and the
// files a recovery found nowhere.
void StoreMetrics(Families& f, store::ColdStore& store, const MigratorStats& m) {
  const bool shared = store.shared(), writer = store.writer();
  for (const char* role : {"writer", "reader"}) {
    f.Gauge("tbfs_store_role",
            std::string(role) == "writer"
                ? "1 for the mount's role: writer (migrates; of a shared store, holds its "
                  "lease) or reader (serves the store read-only)"
                : "",
            (std::string(role) == "writer") == writer ? 1 : 0,
            {{"role", role}, {"shared", shared ? "true" : "false"}});
  }
  auto totals = store.GetTotals();
  const double cold_files = totals.ok() ? static_cast<double>(totals->files) : 0;
  const double cold_bytes = totals.ok() ? static_cast<double>(totals->logical_bytes) : 0;
  const double stored = totals.ok() ? static_cast<double>(totals->stored_bytes) : 0;

  f.Gauge("tbfs_files", "Files of the logdir by where they are (hot: at the last migrator pass)",
          static_cast<double>(m.hot_files), {{"state", "hot"}});
  f.Gauge("tbfs_files", "", cold_files, {{"state", "cold"}});
  f.Gauge("tbfs_logical_bytes", "Bytes of the files as readers see them, by where they are",
          static_cast<double>(m.hot_bytes), {{"state", "hot"}});
  f.Gauge("tbfs_logical_bytes", "", cold_bytes, {{"state", "cold"}});
  f.Gauge("tbfs_cold_stored_bytes", "Bytes the cold files take in the store (compressed)", stored);
  f.Gauge("tbfs_saved_bytes", "Logical bytes of the cold files minus what they take in the store",
          std::max(0.0, cold_bytes - stored));
  std::vector<store::ColdStore::LostFile> lost;
  const bool listed = store.ListLost(&lost).ok();
  f.Gauge("tbfs_lost_files",
          "Files a recovery found neither in the logdir nor in the store (until tbfs fsck "
          "--clear-lost); -1 when the records cannot be read",
          listed ? static_cast<double>(lost.size()) : -1);
}

// The migrator's passes, batches, verifier and what it left hot, and the
// retention policy's deletions.
void MigratorMetrics(Families& f, const MigratorStats& m) {
  f.Counter("tbfs_migration_passes_total", "Migrator passes", static_cast<double>(m.passes));
  f.Counter("tbfs_migration_logdir_walks_total",
            "Walks of the whole logdir by the migrator (one per pass that moves nothing)",
            static_cast<double>(m.logdir_walks));
  f.Counter("tbfs_migration_batches_total", "Migration batches", static_cast<double>(m.batches));
  f.Counter("tbfs_migration_rollbacks_total",
            "Migration batches rolled back (the verifier "
            "found a difference)",
            static_cast<double>(m.rolled_back));
  f.Counter("tbfs_migration_store_full_total", "Migrator passes cut short: the store had no room",
            static_cast<double>(m.stopped_store_full));
  f.Counter("tbfs_migration_over_budget_total",
            "Migrator passes that used their time budget (the rest moved at the next)",
            static_cast<double>(m.over_budget));
  f.Counter("tbfs_migrated_files_total", "Files moved into the cold store",
            static_cast<double>(m.files_moved));
  f.Counter("tbfs_migrated_bytes_total", "Logical bytes moved into the cold store",
            static_cast<double>(m.bytes_moved));
  f.Gauge("tbfs_verifier_ok",
          "1 when the last verification of a migrated batch found every "
          "scalar curve intact (or none ran yet), 0 when it failed",
          m.last_verifier.empty() || m.last_verifier == "intact" ? 1 : 0);
  f.Gauge("tbfs_blocked_runs",
          "Runs whose traces stayed hot at the last pass: a tfevents file of theirs cannot be "
          "read (tbfs_blocked_run_traces names the first ones)",
          static_cast<double>(m.blocked_runs.size()));
  for (size_t i = 0; i < m.blocked_runs.size() && i < kMetricsBlockedRuns; ++i) {
    const store::BlockedRun& b = m.blocked_runs[i];
    f.Gauge("tbfs_blocked_run_traces",
            i == 0 ? "Traces a run keeps hot because its tfevents file cannot be read" : "",
            static_cast<double>(b.traces),
            {{"run", ValidUtf8(b.run.empty() ? "." : b.run)}, {"file", ValidUtf8(b.file)}});
  }
  f.Gauge("tbfs_unwalked_entries",
          "Folders and entries the last pass could not walk (unreadable, another filesystem)",
          static_cast<double>(m.unwalked));
  f.Gauge("tbfs_big_xattr_traces",
          "Traces the last pass left hot: more extended attributes than a cold file keeps "
          "(64 KiB)",
          static_cast<double>(m.big_xattrs));
  f.Gauge("tbfs_owner_conflicts",
          "Hot files the last pass left in place: another owner's cold file is at their name "
          "in a sticky folder (both kept)",
          static_cast<double>(m.conflicts));
  f.Gauge("tbfs_last_pass_timestamp_seconds", "When the migrator last finished a pass",
          static_cast<double>(m.last_pass_unix));
  f.Counter("tbfs_retention_deleted_files_total", "Cold files deleted by the retention policy",
            static_cast<double>(m.retention_files));
  f.Counter("tbfs_retention_deleted_bytes_total",
            "Logical bytes of the cold files deleted by the "
            "retention policy",
            static_cast<double>(m.retention_bytes));
}

// The read path: rehydrations, cold reads, the chunk cache, EIO answers and
// the inodes the kernel holds.
void ReadPathMetrics(Families& f, const Filesystem::Stats& k, uint64_t cache_capacity) {
  f.Counter("tbfs_rehydrations_total", "Cold files brought back to the logdir (opened for writing)",
            static_cast<double>(k.rehydrations));
  f.Counter("tbfs_cold_reads_total", "Reads served from the cold store",
            static_cast<double>(k.cold_reads));
  f.Counter("tbfs_chunk_cache_hits_total",
            "Cold chunk lookups (reads' and readahead's) that found the chunk in the cache",
            static_cast<double>(k.cache.hits));
  f.Counter("tbfs_chunk_cache_misses_total",
            "Cold chunk lookups (reads' and readahead's) that went to the store",
            static_cast<double>(k.cache.misses));
  f.Counter("tbfs_chunk_cache_let_go_total",
            "Cached chunks dropped as a sequential reader passed them (the page cache holds them)",
            static_cast<double>(k.cache.let_go));
  f.Counter("tbfs_cold_chunk_reads_total",
            "Reads' lookups of a cold chunk: found decoded (ready), being loaded by readahead or "
            "another read (waited), or loaded by the read itself (loaded)",
            static_cast<double>(k.cache.reads_ready), {{"found", "ready"}});
  f.Counter("tbfs_cold_chunk_reads_total", "", static_cast<double>(k.cache.reads_waited),
            {{"found", "waited"}});
  f.Counter("tbfs_cold_chunk_reads_total", "", static_cast<double>(k.cache.reads_loaded),
            {{"found", "loaded"}});
  f.Counter("tbfs_cold_chunk_read_wait_seconds_total",
            "Time reads spent on cold chunks that were not ready (waited or loaded)",
            static_cast<double>(k.cache.reads_waiting_ns) / 1e9);
  f.Gauge("tbfs_chunk_cache_readahead_bytes",
          "Bytes of the cold chunk cache readahead holds for readers to come (at most half of it)",
          static_cast<double>(k.cache.ahead_bytes));
  f.Counter("tbfs_chunk_cache_readahead_lost_total",
            "Chunks readahead decoded that left the cache before any read asked for them",
            static_cast<double>(k.cache.ahead_unread));
  f.Gauge("tbfs_chunk_cache_bytes", "Bytes held by the cold chunk cache",
          static_cast<double>(k.cache.bytes));
  f.Gauge("tbfs_chunk_cache_capacity_bytes", "Capacity of the cold chunk cache",
          static_cast<double>(cache_capacity));
  f.Gauge("tbfs_chunk_buffers_mapped_bytes",
          "Memory mapped for decompressed chunks: the cache's, readers' in flight and up to 16 MiB "
          "kept free",
          static_cast<double>(k.cache.buffers.mapped_bytes));
  f.Counter("tbfs_eio_total", "Operations answered EIO, by cause",
            static_cast<double>(k.eio_cold_chunk), {{"cause", "cold_chunk"}});
  f.Counter("tbfs_eio_total", "", static_cast<double>(k.eio_rehydrate), {{"cause", "rehydrate"}});
  f.Counter("tbfs_eio_total", "", static_cast<double>(k.eio_store), {{"cause", "store"}});
  for (int i = 0; i < kNumEioSites; ++i) {
    f.Counter("tbfs_eio_sites_total",
              i == 0 ? "Operations answered EIO, by the place that answered" : "",
              static_cast<double>(k.eio_by_site[i]), {{"site", kEioSiteNames[i]}});
  }
  for (int i = 0; i < kNumStoreFaults; ++i) {
    f.Counter("tbfs_store_errors_total",
              i == 0 ? "Operations failed by the cold store, by what failed and why" : "",
              static_cast<double>(k.eio_cold_chunk_by[i]),
              {{"op", "cold_chunk"}, {"cause", kStoreFaultNames[i]}});
    f.Counter("tbfs_store_errors_total", "", static_cast<double>(k.eio_store_by[i]),
              {{"op", "metadata"}, {"cause", kStoreFaultNames[i]}});
  }
  f.Gauge("tbfs_inodes", "Inodes the kernel holds through the mount",
          static_cast<double>(k.inodes));
}

// The logdir's filesystem (as node_exporter reports it).
void SpaceMetrics(Families& f, const std::string& logdir) {
  struct statvfs vfs;
  if (::statvfs(logdir.c_str(), &vfs) == 0) {
    f.Gauge("tbfs_fs_avail_bytes",
            "Bytes of the logdir's filesystem available to users (statvfs f_bavail, as "
            "node_exporter's node_filesystem_avail_bytes)",
            static_cast<double>(vfs.f_bavail) * static_cast<double>(vfs.f_frsize));
    f.Gauge("tbfs_fs_free_bytes",
            "Bytes of the logdir's filesystem free, root's reserve included (statvfs f_bfree, as "
            "node_exporter's node_filesystem_free_bytes)",
            static_cast<double>(vfs.f_bfree) * static_cast<double>(vfs.f_frsize));
    f.Gauge("tbfs_fs_size_bytes", "Size of the logdir's filesystem",
            static_cast<double>(vfs.f_blocks) * static_cast<double>(vfs.f_frsize));
  }
}

// The logdir's size by class and its growth, from the migrator's samples.
void GrowthMetrics(Families& f, const std::vector<store::GrowthSample>& samples) {
  if (auto g = store::SummarizeGrowth(samples, 24 * 3600, 0)) {
    const char* help =
        "Bytes of the logdir at the last migrator pass, by class (cold: the cold "
        "files' logical bytes)";
    f.Gauge("tbfs_logdir_bytes", help, static_cast<double>(g->last.tfevents_bytes),
            {{"class", "tfevents"}});
    f.Gauge("tbfs_logdir_bytes", "", static_cast<double>(g->last.trace_bytes),
            {{"class", "traces"}});
    f.Gauge("tbfs_logdir_bytes", "", static_cast<double>(g->last.other_bytes),
            {{"class", "other"}});
    f.Gauge("tbfs_logdir_bytes", "", static_cast<double>(g->last.cold_bytes), {{"class", "cold"}});
    f.Gauge("tbfs_logdir_growth_bytes_per_second",
            "How fast the logdir (hot and cold, logical bytes) grew over the last day, fitted to "
            "the migrator's samples (0 until two are a second apart)",
            g->logdir_rate.value_or(0));
    f.Gauge("tbfs_logdir_recent_growth_bytes_per_second",
            "How fast the logdir grew between the migrator's last two samples (what happens "
            "now: 0 one interval after writers stop)",
            g->recent_logdir_rate.value_or(0));
  }
}

void LatencyMetrics(Families& f, const OpLatency& latency) {
  for (FuseOp op :
       {FuseOp::kLookup, FuseOp::kGetAttr, FuseOp::kRead, FuseOp::kWrite, FuseOp::kReadDir}) {
    f.Histogram("tbfs_fuse_operation_duration_seconds",
                op == FuseOp::kLookup
                    ? "Time from a FUSE request reaching the daemon to its reply, by operation"
                    : "",
                latency.Read(op), {{"op", FuseOpName(op)}});
  }
}

}  // namespace

std::vector<MetricFamily> MountMetrics::Collect() const {
  Families f(mountpoint_);
  f.Gauge("tbfs_build_info", "Always 1: the version of the tbfs serving the mount", 1,
          {{"version", TBFS_VERSION}});
  const MigratorStats m = migrator_.stats();
  StoreMetrics(f, store_, m);
  MigratorMetrics(f, m);
  ReadPathMetrics(f, fs_.stats(), fs_.options().cache_bytes);
  SpaceMetrics(f, fs_.options().logdir);
  GrowthMetrics(f, migrator_.growth());
  LatencyMetrics(f, latency_);
  ProcessMetrics(f);
  return f.Take();
}

std::string MountMetrics::Text() const { return prometheus::TextSerializer().Serialize(Collect()); }

std::string MergeExpositions(const std::vector<std::string>& texts) {
  struct Family {
    std::string help, type, samples;
  };
  std::vector<std::string> order;
  std::map<std::string, Family> families;
  for (const std::string& text : texts) {
    std::string current;
    auto family = [&](const std::string& name) -> Family& {
      auto [it, fresh] = families.try_emplace(name);
      if (fresh) order.push_back(name);
      current = name;
      return it->second;
    };
    std::istringstream in(text);
    for (std::string line; std::getline(in, line);) {
      if (line.empty()) continue;
      if (line.starts_with("# HELP ") || line.starts_with("# TYPE ")) {
        const size_t end = line.find(' ', 7);
        Family& fam = family(line.substr(7, end == std::string::npos ? end : end - 7));
        std::string& slot = line[2] == 'H' ? fam.help : fam.type;
        if (slot.empty()) slot = line;
        continue;
      }
      if (line[0] == '#') continue;
      // A sample without a family before it is its own (untyped) family.
      std::string name = line.substr(0, line.find_first_of("{ "));
      if (current.empty() || !name.starts_with(current)) family(name);
      families[current].samples += line + "\n";
    }
  }
  std::string out;
  for (const std::string& name : order) {
    const Family& fam = families[name];
    if (!fam.help.empty()) out += fam.help + "\n";
    if (!fam.type.empty()) out += fam.type + "\n";
    out += fam.samples;
  }
  return out;
}

std::string MetricsAddress(const std::string& value, std::string* error) {
  const size_t colon = value.rfind(':');
  const std::string port = colon == std::string::npos ? value : value.substr(colon + 1);
  const std::string host = colon == std::string::npos ? "127.0.0.1" : value.substr(0, colon);
  int n = 0;
  auto [end, ec] = std::from_chars(port.data(), port.data() + port.size(), n);
  struct in_addr addr;
  if (ec != std::errc() || end != port.data() + port.size() || n < 1 || n > 65535 ||
      ::inet_pton(AF_INET, host.c_str(), &addr) != 1) {
    *error = "metrics: use [ADDR:]PORT with an IPv4 ADDR (e.g. 10465, or 0.0.0.0:10465)";
    return "";
  }
  return host + ":" + port;
}

std::string CheckCanListen(const std::string& address) {
  const size_t colon = address.rfind(':');
  sockaddr_in sa{};
  sa.sin_family = AF_INET;
  sa.sin_port = htons(static_cast<uint16_t>(std::atoi(address.c_str() + colon + 1)));
  if (::inet_pton(AF_INET, address.substr(0, colon).c_str(), &sa.sin_addr) != 1)
    return "not an IPv4 address";
  UniqueFd s(::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0));
  const int one = 1;
  ::setsockopt(s.get(), SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));  // as the server will
  if (!s.valid() || ::bind(s.get(), reinterpret_cast<sockaddr*>(&sa), sizeof(sa)) != 0) {
    return std::strerror(errno);
  }
  return "";
}

}  // namespace tbfs::fs
