// tbfs-bench backends: the two storage engines behind store/backend.h, side
// by side in one run: chunks committed per second (batches of 64 1-MiB
// chunks, synced, as a migration writes them), the first chunk read by a
// freshly opened store, and every chunk read back in order.
#include <fmt/format.h>
#include <spdlog/spdlog.h>
#include <unistd.h>

#include <chrono>
#include <cstring>
#include <filesystem>
#include <random>

#include "store/backend.h"
#include "store/format.h"
#include "store/rados_backend.h"
#include "tools/bench/bench.h"

namespace tbfs::bench {

namespace {
namespace backends_bench {

struct Args {
  std::string conf;
  std::string pool = "tbfs";
  int mb = 256;
};

struct Figures {
  double write_mbps = 0, first_ms = 0, read_mbps = 0;
};

double Seconds(std::chrono::steady_clock::time_point since) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - since).count();
}

Result<Figures> Measure(const std::function<Result<std::unique_ptr<store::Backend>>(bool)>& open,
                        int chunks) {
  Figures f;
  std::mt19937_64 rng(7);
  std::string chunk(1 << 20, '\0');  // stored chunks are zstd output: incompressible
  for (size_t i = 0; i < chunk.size(); i += 8) {
    const uint64_t v = rng();
    std::memcpy(chunk.data() + i, &v, 8);
  }
  {
    auto b = open(true);
    if (!b.ok()) return b.status();
    const auto start = std::chrono::steady_clock::now();
    for (int i = 0; i < chunks; i += 64) {
      store::WriteBatch batch;
      for (int j = i; j < std::min(chunks, i + 64); ++j) {
        chunk[0] = static_cast<char>(j);
        batch.Put(store::Space::kChunks, store::ChunkKey(1, static_cast<uint64_t>(j)), chunk);
      }
      batch.Put(store::Space::kManifests, store::EncodeId(1), "manifest");
      TBFS_RETURN_IF_ERROR((*b)->Commit(batch, true));
    }
    TBFS_RETURN_IF_ERROR((*b)->Flush());
    f.write_mbps = chunks / Seconds(start);
  }
  auto b = open(false);
  if (!b.ok()) return b.status();
  std::string value;
  auto start = std::chrono::steady_clock::now();
  TBFS_RETURN_IF_ERROR((*b)->Get(store::Space::kChunks, store::ChunkKey(1, 0), &value));
  f.first_ms = 1000 * Seconds(start);
  start = std::chrono::steady_clock::now();
  for (int j = 0; j < chunks; ++j) {
    TBFS_RETURN_IF_ERROR(
        (*b)->Get(store::Space::kChunks, store::ChunkKey(1, static_cast<uint64_t>(j)), &value));
    if (value.size() != chunk.size() || value[0] != static_cast<char>(j)) {
      return Status::Corruption(fmt::format("chunk {} read back wrong", j));
    }
  }
  f.read_mbps = chunks / Seconds(start);
  return f;
}

int Run(const Args& args) {
  spdlog::set_level(spdlog::level::err);  // RocksDB's write stalls are part of what is measured
  // On the same filesystem as the other benchmarks' data.
  const std::string dir = fmt::format("/tmp/tbfs-bench-backends-{}", ::getpid());
  auto rocks = Measure(
      [&](bool create) { return store::OpenRocksBackend(dir, {.create_if_missing = create}); },
      args.mb);
  std::error_code ec;
  std::filesystem::remove_all(dir, ec);
  if (!rocks.ok()) {
    fmt::print(stderr, "tbfs-bench backends: rocksdb: {}\n", rocks.status().message());
    return 2;
  }
  store::RadosLocation where{
      .pool = args.pool, .prefix = fmt::format("bench-{}/", ::getpid()), .conf = args.conf};
  auto rados = Measure(
      [&](bool create) { return store::OpenRadosBackend(where, {.create_if_missing = create}); },
      args.mb);
  if (!rados.ok()) {
    fmt::print(stderr, "tbfs-bench backends: rados: {}\n", rados.status().message());
    return 2;
  }
  // Leave the pool as it was.
  if (auto b = store::OpenRadosBackend(where, {}); b.ok()) {
    store::WriteBatch drop;
    for (int i = 0; i < args.mb; ++i) drop.Delete(store::Space::kChunks, store::ChunkKey(1, i));
    drop.Delete(store::Space::kManifests, store::EncodeId(1));
    (void)(*b)->Commit(drop, true);
  }
  fmt::print("{} chunks of 1 MiB, batches of 64 synced\n", args.mb);
  fmt::print("{:<8} {:>12} {:>16} {:>12}\n", "engine", "write MB/s", "first chunk ms", "read MB/s");
  for (const auto& [name, f] : {std::pair{"rocksdb", *rocks}, {"rados", *rados}}) {
    fmt::print("{:<8} {:>12.0f} {:>16.2f} {:>12.0f}\n", name, f.write_mbps, f.first_ms,
               f.read_mbps);
  }
  fmt::print("rados/rocksdb: write {:.2f}x, first chunk {:.1f}x the time, read {:.2f}x\n",
             rados->write_mbps / rocks->write_mbps, rados->first_ms / rocks->first_ms,
             rados->read_mbps / rocks->read_mbps);
  return 0;
}

}  // namespace backends_bench
}  // namespace

void RegisterBackendsBench(CLI::App& app, int* exit_code) {
  using namespace backends_bench;  // its Args and Run
  auto args = std::make_shared<Args>();
  CLI::App* cmd = app.add_subcommand(
      "backends",
      "The RocksDB and the RADOS engine side by side: chunk writes, first read, sequential reads");
  cmd->add_option("--conf", args->conf,
                  "ceph.conf of the cluster to use (scripts/ceph-cluster.sh start DIR prints one)")
      ->required();
  cmd->add_option("--pool", args->pool, "its pool")->capture_default_str();
  cmd->add_option("--mb", args->mb, "MiB of chunks")
      ->capture_default_str()
      ->check(CLI::Range(64, 65536));
  cmd->callback([args, exit_code] { *exit_code = Run(*args); });
}

}  // namespace tbfs::bench
