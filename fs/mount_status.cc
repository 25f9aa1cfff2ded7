// A mount's status (tbfs status --json) and its control socket's requests.
#include <sys/statvfs.h>

#include <chrono>
#include <cstdio>
#include <fstream>
#include <nlohmann/json.hpp>

#include "base/fs_util.h"
#include "base/heap.h"
#include "fmt/format.h"
#include "fs/mount_internal.h"
#include "spdlog/spdlog.h"
#include "store/growth.h"

namespace tbfs::fs {

namespace {

// One-line JSON; names are bytes, so what is not UTF-8 prints as U+FFFD.
std::string Compact(const nlohmann::json& j) {
  return j.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
}

constexpr double kStatusGrowthWindowS = 24 * 3600;
constexpr size_t kStatusBlockedRuns = 100;  // listed; the count is whole

nlohmann::json ByFault(const uint64_t (&counts)[kNumStoreFaults]) {
  nlohmann::json by;
  for (int i = 0; i < kNumStoreFaults; ++i) by[kStoreFaultNames[i]] = counts[i];
  return by;
}

nlohmann::json BySite(const uint64_t (&counts)[kNumEioSites]) {
  nlohmann::json by;
  for (int i = 0; i < kNumEioSites; ++i) by[kEioSiteNames[i]] = counts[i];
  return by;
}

// The chunk cache: its lookups, size, how reads found their chunks, and
// what readahead holds for readers to come and lost before they came.
nlohmann::json CacheJson(const ChunkCache::Stats& c, uint64_t capacity) {
  const uint64_t lookups = c.hits + c.misses;
  return {{"hits", c.hits},
          {"misses", c.misses},
          {"hit_ratio", lookups ? static_cast<double>(c.hits) / static_cast<double>(lookups) : 0.0},
          {"bytes", c.bytes},
          {"capacity_bytes", capacity},
          {"let_go", c.let_go},
          {"reads",
           {{"ready", c.reads_ready},
            {"waited", c.reads_waited},
            {"loaded", c.reads_loaded},
            {"waiting_seconds", static_cast<double>(c.reads_waiting_ns) / 1e9}}},
          {"readahead", {{"held_bytes", c.ahead_bytes}, {"lost", c.ahead_unread}}},
          {"buffers_mapped_bytes", c.buffers.mapped_bytes}};
}

// A field of /proc/self/status ("VmRSS", "VmHWM") in bytes; 0 if absent.
uint64_t SelfStatusBytes(std::string_view field) {
  std::ifstream in("/proc/self/status");
  std::string line;
  while (std::getline(in, line)) {
    if (line.starts_with(field) && line.size() > field.size() && line[field.size()] == ':') {
      return std::strtoull(line.c_str() + field.size() + 1, nullptr, 10) * 1024;
    }
  }
  return 0;
}

// Where the daemon's memory is: its resident set, the heap (in use, and
// free but still resident or mapped: base/heap.h), and what holds memory
// on purpose, each beside its bound.
nlohmann::json MemoryJson(store::ColdStore& store, const Filesystem::Stats& k,
                          uint64_t cache_capacity) {
  const HeapStats heap = GetHeapStats();
  const store::Backend::Memory e = store.EngineMemory();
  return {
      {"rss_bytes", SelfStatusBytes("VmRSS")},
      {"peak_rss_bytes", SelfStatusBytes("VmHWM")},
      {"heap",
       {{"allocator", HeapAllocator()}, {"in_use_bytes", heap.in_use}, {"free_bytes", heap.free}}},
      {"chunk_cache",
       {{"bytes", k.cache.bytes},
        {"capacity_bytes", cache_capacity},
        {"lent_bytes", k.cache.lent},
        {"buffers_mapped_bytes", k.cache.buffers.mapped_bytes}}},
      {"engine",
       {{"memtables_bytes", e.memtables},
        {"table_readers_bytes", e.table_readers},
        {"block_cache_bytes", e.block_cache},
        {"block_cache_capacity_bytes", e.block_cache_capacity}}}};
}

}  // namespace

std::string StatusJson(const MountOptions& mc, const std::string& store_dir,
                       store::ColdStore& store, Filesystem& fs, Migrator& migrator) {
  auto totals = store.GetTotals();
  MigratorStats m = migrator.stats();
  Filesystem::Stats k = fs.stats();
  const ChunkCache::Stats& c = k.cache;
  std::vector<store::ColdStore::LostFile> lost;
  Status listed = store.ListLost(&lost);
  nlohmann::json lost_paths = nlohmann::json::array();
  for (const auto& l : lost) {
    if (lost_paths.size() < 100) lost_paths.push_back(l.path);
  }
  // Runs whose traces stay hot (a tfevents file of theirs cannot be read).
  nlohmann::json blocked = nlohmann::json::array();
  for (const store::BlockedRun& b : m.blocked_runs) {
    if (blocked.size() == kStatusBlockedRuns) break;
    blocked.push_back({{"run", b.run.empty() ? "." : b.run},
                       {"file", b.file},
                       {"reason", b.reason},
                       {"traces", b.traces}});
  }
  nlohmann::json j = {
      {"logdir", mc.logdir},
      {"mountpoint", mc.mountpoint},
      {"store", store_dir},
      {"state", mc.state_dir},
      {"store_role", !store.shared()  ? (store.writer() ? "writer" : store.refusal())
                     : store.writer() ? "writer (holds the shared store's lease)"
                                      : "reader: " + store.refusal()},
      {"pid", ::getpid()},
      // ro now (as mounted, or since a remount): reads change no access time.
      {"read_only", fs.options().read_only != nullptr && fs.options().read_only->load()},
      {"hot", {{"files", m.hot_files}, {"bytes", m.hot_bytes}}},
      {"cold",
       {{"files", totals.ok() ? totals->files : 0},
        {"bytes", totals.ok() ? totals->logical_bytes : 0},
        {"stored_bytes", totals.ok() ? totals->stored_bytes : 0}}},
      {"bytes_saved",
       totals.ok() ? totals->logical_bytes - std::min(totals->logical_bytes, totals->stored_bytes)
                   : 0},
      {"migrations",
       {{"passes", m.passes},
        {"logdir_walks", m.logdir_walks},
        {"batches", m.batches},
        {"rolled_back", m.rolled_back},
        {"stopped_store_full", m.stopped_store_full},
        {"over_budget", m.over_budget},
        {"files_moved", m.files_moved},
        {"bytes_moved", m.bytes_moved},
        {"last_pass_unix", m.last_pass_unix},
        {"last_error", m.last_error}}},
      {"last_verifier", m.last_verifier},
      {"blocked", {{"runs", m.blocked_runs.size()}, {"list", blocked}, {"owners", m.held_owners}}},
      {"unwalked", {{"entries", m.unwalked}, {"examples", m.unwalked_examples}}},
      {"big_xattrs", {{"files", m.big_xattrs}, {"examples", m.big_xattrs_examples}}},
      {"conflicts", {{"files", m.conflicts}, {"examples", m.conflict_examples}}},
      // Recorded by a recovery until an admin clears them (fsck --clear-lost).
      {"lost",
       {{"files", lost.size()},
        {"paths", lost_paths},
        {"error", listed.ok() ? "" : listed.message()}}},
      {"rehydrations", k.rehydrations},
      {"cold_reads", k.cold_reads},
      {"cache", CacheJson(c, fs.options().cache_bytes)},
      {"eio",
       {{"cold_chunk", k.eio_cold_chunk},
        {"cold_chunk_by_cause", ByFault(k.eio_cold_chunk_by)},
        {"store_by_cause", ByFault(k.eio_store_by)},
        {"rehydrate", k.eio_rehydrate},
        {"store", k.eio_store},
        {"by_site", BySite(k.eio_by_site)}}},
      {"inodes", k.inodes},
      {"memory", MemoryJson(store, k, fs.options().cache_bytes)},
      {"retention",
       {{"enabled", migrator.retention_enabled()},
        {"deleted_files", m.retention_files},
        {"deleted_bytes", m.retention_bytes}}},
  };
  // How fast the logdir grows and when its filesystem is full: what `tbfs
  // watch` reports, from the samples the migrator's passes take.
  if (auto g = store::SummarizeGrowth(migrator.growth(), kStatusGrowthWindowS, 5)) {
    auto opt = [](const std::optional<double>& v, double scale) {
      return v ? nlohmann::json(*v * scale) : nlohmann::json(nullptr);
    };
    nlohmann::json runs = nlohmann::json::array();
    for (const auto& [run, rate] : g->top_runs)
      runs.push_back({{"run", run}, {"bytes_per_hour", rate * 3600}});
    j["growth"] = {{"window_seconds", kStatusGrowthWindowS},
                   {"samples", g->samples},
                   {"span_seconds", g->span_s},
                   {"bytes",
                    {{"tfevents", g->last.tfevents_bytes},
                     {"traces_hot", g->last.trace_bytes},
                     {"other", g->last.other_bytes},
                     {"cold", g->last.cold_bytes}}},
                   {"filesystem",
                    {{"size", g->last.fs_size},
                     {"free", g->last.fs_free},
                     {"used_percent", 100 * g->last.fs_used_fraction()}}},
                   {"logdir_bytes_per_hour", opt(g->logdir_rate, 3600)},
                   {"filesystem_bytes_per_hour", opt(g->filesystem_rate, 3600)},
                   {"recent",
                    {{"span_seconds", g->recent_span_s},
                     {"logdir_bytes_per_hour", opt(g->recent_logdir_rate, 3600)},
                     {"filesystem_bytes_per_hour", opt(g->recent_filesystem_rate, 3600)}}},
                   {"full_in_seconds", opt(g->full_in_s, 1)},
                   {"top_runs", runs}};
  }
  return Compact(j);
}

namespace {

// "recompress LEVEL DICTIONARIES" (1..22, 0 or 1): Migrator::Recompress.
std::string AnswerRecompress(const std::string& request, const std::string& store_dir,
                             Migrator& migrator) {
  int level = 0, dictionaries = -1;
  char extra = 0;
  if (std::sscanf(request.c_str(), "recompress %d %d %c", &level, &dictionaries, &extra) != 2 ||
      level < 1 || level > 22 || (dictionaries != 0 && dictionaries != 1)) {
    return Compact({{"error", "bad request: " + request}});
  }
  const auto start = std::chrono::steady_clock::now();
  auto r = migrator.Recompress(level, dictionaries == 1);
  if (!r.ok()) return Compact({{"error", r.status().message()}});
  return Compact(RecompressJson(
      *r, store_dir, level,
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count()));
}

}  // namespace

// Answers the control socket's requests (fs/control.h).
std::string Control(const std::string& request, const MountOptions& mc,
                    const std::string& store_dir, store::ColdStore& store, Filesystem& fs,
                    Migrator& migrator) {
  if (request == "status") return StatusJson(mc, store_dir, store, fs, migrator);
  if (request == "migrate-now") {
    const int r = migrator.RunNow();
    if (r == -ECANCELED) {
      return Compact({{"error",
                       "the mount is stopping: the pass stopped at its next file (what "
                       "moved before is cold, the rest stays hot)"}});
    }
    if (r == -EROFS) return Compact({{"error", migrator.stats().last_error}});
    if (r != 0) {
      return Compact(
          {{"error", "the migration pass failed: " + migrator.stats().last_error + " (the log is " +
                         JoinPath(mc.state_dir, "tbfs-mount.log") + ")"}});
    }
    if (!store.writer()) {
      return Compact(
          {{"error", store.shared() ? "this mount reads the shared store " + store_dir +
                                          " and another one writes it: " + store.refusal()
                                    : "the store " + store_dir + " is " + store.refusal()}});
    }
    return StatusJson(mc, store_dir, store, fs, migrator);
  }
  if (request == "gc-garbage" || request == "gc-garbage-apply") {
    if (request == "gc-garbage-apply" && migrator.ReadOnly()) {
      return Compact({{"error",
                       "the mount is read-only: nothing is removed from its store (mount -o "
                       "remount,rw MOUNTPOINT first)"}});
    }
    store::Garbage garbage;
    Status st = migrator.CollectGarbage(request == "gc-garbage-apply", &garbage);
    if (!st.ok()) return Compact({{"error", st.message()}});
    return Compact({{"chunks", garbage.chunks.size()}, {"file_ids", garbage.files}});
  }
  if (request.starts_with("recompress ")) return AnswerRecompress(request, store_dir, migrator);
  return Compact({{"error", "unknown request: " + request}});
}

}  // namespace tbfs::fs
