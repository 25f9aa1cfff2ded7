// tbfs-bench migrate: the cold store against the zstd command line, in one
// run, on a generated logdir with about --trace-mb of traces:
//   - migration throughput and stored size vs `zstd -3 -T2` / `zstd -19 -T2`
//     of the same files (one zstd process per file, as the store keeps files
//     apart too);
//   - export throughput vs `zstd -d` of the same data;
//   - the logdir's footprint before and after;
//   - the stored size of the real Kineto trace of ../shared/data.
// tbfs-bench chunking: ratio and speed of chunk sizes x zstd levels on the
// real Kineto trace and a generated XSpace, to choose the defaults.
// tbfs-bench dictionaries: per file family, stored size and time with and
// without zstd dictionaries, against zstd -9 -T2 and -19 -T2 of each whole
// file, on the real Kineto trace and variants of it and generated traces.
#include <fcntl.h>
#include <sys/stat.h>

#include <filesystem>

#include "base/fs_util.h"
#include "base/work_pool.h"
#include "fmt/format.h"
#include "store/file_io.h"
#include "store/migrate.h"
#include "store/recompress.h"
#include "store/restore.h"
#include "tools/bench/bench.h"
#include "tools/cli/progress.h"
#include "tools/gen/gen.h"

namespace tbfs::bench {

namespace {
namespace migrate_bench {

namespace fs = std::filesystem;

std::string Quote(const std::string& s) { return "'" + s + "'"; }

// Runs a shell command; returns seconds, or -1 on failure.
double Timed(const std::string& cmd) {
  double t0 = cli::NowSeconds();
  int rc = std::system(cmd.c_str());
  return rc == 0 ? cli::NowSeconds() - t0 : -1;
}

uint64_t TreeBytes(const std::string& root) {
  uint64_t total = 0;
  for (auto it = fs::recursive_directory_iterator(root); it != fs::recursive_directory_iterator();
       ++it) {
    struct stat st;
    if (::lstat(it->path().c_str(), &st) == 0 && S_ISREG(st.st_mode)) {
      total += static_cast<uint64_t>(st.st_blocks) * 512;
    }
  }
  return total;
}

struct ZstdRun {
  double seconds = 0;
  uint64_t bytes = 0;
};

// Compresses every file with the zstd CLI into out_dir; total size and time.
ZstdRun ZstdEach(const std::vector<std::string>& files, const std::string& out_dir, int level) {
  fs::create_directories(out_dir);
  std::string script;
  for (size_t i = 0; i < files.size(); ++i) {
    script +=
        fmt::format("zstd -q -{} -T2 -c {} > {}/{}.zst && ", level, Quote(files[i]), out_dir, i);
  }
  script += "true";
  ZstdRun r;
  r.seconds = Timed("bash -c " + Quote(script));
  for (size_t i = 0; i < files.size(); ++i)
    r.bytes += fs::file_size(fmt::format("{}/{}.zst", out_dir, i));
  return r;
}

struct Args {
  std::string dir = "/tmp/tbfs-bench-migrate";
  double trace_mb = 1024;
  bool zstd19 = true;
};

int RunMigrate(const Args& args) {
  fs::remove_all(args.dir);
  std::string logdir = args.dir + "/logdir";
  gen::GenOptions g;
  g.runs = 4;
  g.steps = 2000;
  g.trace_mb = args.trace_mb;
  gen::GenReport rep;
  fmt::print("generating {} MiB of traces into {} ...\n", args.trace_mb, logdir);
  Status st = gen::GenerateLogdir(logdir, g, &rep);
  if (!st.ok()) {
    fmt::print(stderr, "{}\n", st.message());
    return 2;
  }
  store::CandidateOptions copt;
  copt.older_than_s = 0;
  copt.walk.skip_dirs = {store::kStoreDirName};
  std::vector<store::Candidate> candidates;
  std::vector<store::Skipped> skipped;
  st = store::FindCandidates(logdir, copt, &candidates, &skipped);
  std::vector<std::string> files;
  uint64_t trace_bytes = 0;
  for (const auto& c : candidates) {
    files.push_back(JoinPath(logdir, c.path));
    trace_bytes += c.size;
  }
  uint64_t before = TreeBytes(logdir);
  std::system("sync");

  ZstdRun z3 = ZstdEach(files, args.dir + "/z3", 3);
  ZstdRun z19;
  if (args.zstd19) z19 = ZstdEach(files, args.dir + "/z19", 19);

  auto store = store::ColdStore::Open(JoinPath(logdir, store::kStoreDirName),
                                      store::OpenOptions{.create_if_missing = true});
  if (!store.ok()) {
    fmt::print(stderr, "{}\n", store.status().message());
    return 2;
  }
  store::MigrateOptions mopt;
  mopt.walk = copt.walk;
  double t0 = cli::NowSeconds();
  auto result = store::Migrate(**store, logdir, candidates, mopt);
  double migrate_s = cli::NowSeconds() - t0;
  if (!result.ok() || !result->ok()) {
    fmt::print(stderr, "migration failed\n");
    return 1;
  }
  (void)(*store)->Compact();
  uint64_t after = TreeBytes(logdir);

  std::vector<storepb::Manifest> cold;
  std::vector<std::string> missing;
  (void)store::SelectCold(**store, {}, &cold, &missing);
  WorkPool pool(0);
  std::string out = args.dir + "/export";
  std::system("sync; echo 1 > /proc/sys/vm/drop_caches 2>/dev/null");
  t0 = cli::NowSeconds();
  auto exported = store::Export(**store, out, cold, false, &pool, nullptr);
  double export_s = cli::NowSeconds() - t0;
  fs::remove_all(out);
  double zstd_d_s =
      Timed("bash -c " + Quote("cat " + args.dir + "/z3/*.zst | zstd -q -d -c > /dev/null"));
  // The same data decompressed into files, as export writes files.
  fs::create_directories(args.dir + "/unz");
  double zstd_files_s =
      Timed("bash -c " + Quote("for f in " + args.dir + "/z3/*.zst; do zstd -q -d -c $f > " +
                               args.dir + "/unz/$(basename $f .zst); done"));
  fs::remove_all(args.dir + "/unz");

  double mb = static_cast<double>(trace_bytes) / 1e6;
  fmt::print("\ntraces: {} files, {:.0f} MB (tfevents and the rest: {:.1f} MB)\n", files.size(), mb,
             static_cast<double>(rep.event_bytes) / 1e6);
  fmt::print("{:<28} {:>10} {:>8} {:>10}\n", "", "stored MB", "ratio", "MB/s");
  auto row = [&](const char* name, uint64_t bytes, double secs) {
    fmt::print("{:<28} {:>10.1f} {:>7.1f}x {:>10.0f}\n", name, static_cast<double>(bytes) / 1e6,
               mb / (static_cast<double>(bytes) / 1e6), mb / secs);
  };
  row("tbfs migrate (default)", result->stored_bytes, migrate_s);
  row("zstd -3 -T2, per file", z3.bytes, z3.seconds);
  if (args.zstd19) row("zstd -19 -T2, per file", z19.bytes, z19.seconds);
  fmt::print("tbfs stored size vs zstd -3: {:.2f}x smaller",
             static_cast<double>(z3.bytes) / result->stored_bytes);
  if (args.zstd19)
    fmt::print(", vs zstd -19: {:.2f}x", static_cast<double>(z19.bytes) / result->stored_bytes);
  fmt::print(
      "\nexport (read back, write files): {:.0f} MB/s; zstd -d of the -3 files into files: "
      "{:.0f} MB/s ({:.2f}x), to /dev/null: {:.0f} MB/s ({:.2f}x)\n",
      mb / export_s, mb / zstd_files_s, zstd_files_s / export_s, mb / zstd_d_s,
      zstd_d_s / export_s);
  fmt::print(
      "logdir footprint: {:.1f} MB before, {:.1f} MB after (store included): {:.1f}% smaller\n",
      static_cast<double>(before) / 1e6, static_cast<double>(after) / 1e6,
      100.0 * (1.0 - static_cast<double>(after) / static_cast<double>(before)));

  // The real Kineto trace, unpacked, through the same path.
  std::string real = RealKinetoTrace();
  if (!real.empty()) {
    std::string kdir = args.dir + "/kineto";
    fs::create_directories(kdir + "/run");
    std::system(("zcat " + real + " > " + kdir + "/run/w.pt.trace.json").c_str());
    auto ks =
        store::ColdStore::Open(kdir + "/.tbfs", store::OpenOptions{.create_if_missing = true});
    std::vector<store::Candidate> one = {{"run/w.pt.trace.json", store::FileClass::kPytorchTrace,
                                          fs::file_size(kdir + "/run/w.pt.trace.json")}};
    auto kr = store::Migrate(**ks, kdir, one, mopt);
    if (kr.ok()) {
      fmt::print("real Kineto trace: {:.1f} MB -> {:.2f} MB stored ({:.1f}x)\n",
                 static_cast<double>(kr->bytes_moved) / 1e6,
                 static_cast<double>(kr->stored_bytes) / 1e6,
                 static_cast<double>(kr->bytes_moved) / kr->stored_bytes);
    }
  }
  return 0;
}

int RunChunking() {
  std::string dir = "/tmp/tbfs-bench-chunking";
  fs::remove_all(dir);
  fs::create_directories(dir + "/in/run");
  const std::string real = RealKinetoTrace();
  if (real.empty()) return 2;
  std::system(("zcat " + real + " > " + dir + "/in/run/k.pt.trace.json").c_str());
  gen::GenOptions g;
  g.runs = 2;
  g.steps = 10;
  g.trace_mb = 96;
  gen::GenReport rep;
  (void)gen::GenerateLogdir(dir + "/gen", g, &rep);
  std::string xplane;
  for (auto& e : fs::recursive_directory_iterator(dir + "/gen")) {
    if (e.path().string().ends_with(".xplane.pb")) xplane = e.path();
  }
  fs::copy_file(xplane, dir + "/in/run/x.xplane.pb");
  WorkPool pool(0);
  fmt::print("{:>6} {:>5}  {:>12} {:>12}  {:>10} {:>10}\n", "chunk", "level", "kineto ratio",
             "xplane ratio", "write MB/s", "read MB/s");
  for (uint32_t chunk : {256u << 10, 1u << 20, 4u << 20}) {
    for (int level : {3, 6, 9, 12, 15}) {
      fs::remove_all(dir + "/store");
      auto s =
          store::ColdStore::Open(dir + "/store", store::OpenOptions{.create_if_missing = true});
      double ratio[2];
      double write_s = 0, read_s = 0, mb = 0;
      int k = 0;
      for (const char* name : {"run/k.pt.trace.json", "run/x.xplane.pb"}) {
        std::string path = dir + "/in/" + name;
        auto fd = OpenFile(path, O_RDONLY);
        struct stat st;
        ::fstat(fd->get(), &st);
        store::IngestOptions io;
        io.chunk_bytes = chunk;
        io.level = level;
        io.pool = &pool;
        double t0 = cli::NowSeconds();
        auto m = store::IngestFile(**s, dir + "/in", name, fd->get(), st, (*s)->NewFileId(), io);
        write_s += cli::NowSeconds() - t0;
        t0 = cli::NowSeconds();
        (void)store::VerifyStoredFile(**s, *m, &pool);
        read_s += cli::NowSeconds() - t0;
        mb += static_cast<double>(m->size()) / 1e6;
        ratio[k++] = static_cast<double>(m->size()) / m->stored_bytes();
      }
      fmt::print("{:>5}K {:>5}  {:>11.1f}x {:>11.1f}x  {:>10.0f} {:>10.0f}\n", chunk >> 10, level,
                 ratio[0], ratio[1], mb / write_s, mb / read_s);
    }
  }
  return 0;
}

constexpr int kRecompressLevel = 15;  // tbfs recompress's default

// One family's files into a fresh store, at the defaults, with or without
// dictionaries: stored bytes (dictionaries included) and seconds.
ZstdRun IngestAll(const std::string& root, const std::vector<std::string>& rels,
                  const std::string& file_class, bool dictionaries, const std::string& store_dir,
                  ZstdRun* recompressed = nullptr, int recompress_level = kRecompressLevel) {
  fs::remove_all(store_dir);
  auto s = store::ColdStore::Open(store_dir, store::OpenOptions{.create_if_missing = true});
  WorkPool pool(0);
  ZstdRun r;
  if (!s.ok()) return r;
  double t0 = cli::NowSeconds();
  for (const std::string& rel : rels) {
    auto fd = OpenFile(JoinPath(root, rel), O_RDONLY);
    struct stat st;
    ::fstat(fd->get(), &st);
    store::IngestOptions io;
    io.file_class = file_class;
    io.dictionaries = dictionaries;
    io.pool = &pool;
    auto m = store::IngestFile(**s, root, rel, fd->get(), st, (*s)->NewFileId(), io);
    if (m.ok()) r.bytes += m->stored_bytes();
  }
  r.seconds = cli::NowSeconds() - t0;
  uint64_t dict_bytes = 0;
  for (const auto& d : (*s)->Dictionaries()) dict_bytes += d->content().size();
  r.bytes += dict_bytes;
  if (recompressed != nullptr) {
    store::RecompressOptions ro;
    ro.level = recompress_level;
    ro.pool = &pool;
    t0 = cli::NowSeconds();
    auto rr = store::Recompress(**s, ro);
    recompressed->seconds = cli::NowSeconds() - t0;
    recompressed->bytes = rr.ok() ? rr->stored_after + dict_bytes : 0;
  }
  return r;
}

int RunDictionaries(double trace_mb, int variants, int recompress_level) {
  const std::string dir = "/tmp/tbfs-bench-dictionaries";
  fs::remove_all(dir);
  const std::string root = dir + "/in";
  fs::create_directories(root + "/kineto");
  const std::string real = RealKinetoTrace();
  if (real.empty()) return 2;
  // Variants of the real trace: every timestamp changed (a digit appended),
  // as another run of the same model would have them.
  std::system(("zcat " + real + " > " + root + "/kineto/w0.pt.trace.json").c_str());
  for (int k = 1; k <= variants; ++k) {
    std::system(
        fmt::format("sed -E 's/\"ts\": ([0-9]+)/\"ts\": \\1{}/' {}/kineto/w0.pt.trace.json > "
                    "{}/kineto/w{}.pt.trace.json",
                    k, root, root, k)
            .c_str());
  }
  gen::GenOptions g;
  g.runs = 4;
  g.steps = 10;
  g.trace_mb = trace_mb;
  gen::GenReport rep;
  if (Status st = gen::GenerateLogdir(root + "/gen", g, &rep); !st.ok()) {
    fmt::print(stderr, "{}\n", st.message());
    return 2;
  }
  struct Family {
    const char* name;
    const char* file_class;
    std::vector<std::string> rels;
  };
  std::vector<Family> families = {{"real Kineto + variants", "pytorch_trace", {}},
                                  {"generated *.pt.trace.json", "pytorch_trace", {}},
                                  {"generated *.xplane.pb", "tf_profile", {}}};
  for (auto& e : fs::recursive_directory_iterator(root)) {
    if (!e.is_regular_file()) continue;
    const std::string rel = fs::relative(e.path(), root).string();
    if (rel.starts_with("kineto/")) {
      families[0].rels.push_back(rel);
    } else if (rel.ends_with(".pt.trace.json")) {
      families[1].rels.push_back(rel);
    } else if (rel.ends_with(".xplane.pb")) {
      families[2].rels.push_back(rel);
    }
  }
  fmt::print("{:<26} {:>5} {:>8}  {:>22} {:>22} {:>22} {:>22} {:>22}\n", "family", "files", "MB",
             "tbfs, dictionaries", "tbfs, none",
             fmt::format("then recompress -{}", recompress_level), "zstd -9 -T2, whole",
             "zstd -19 -T2, whole");
  for (auto& f : families) {
    std::sort(f.rels.begin(), f.rels.end());
    std::vector<std::string> paths;
    uint64_t bytes = 0;
    for (const auto& rel : f.rels) {
      paths.push_back(JoinPath(root, rel));
      bytes += fs::file_size(paths.back());
    }
    std::system("sync");
    ZstdRun recompressed;
    ZstdRun with = IngestAll(root, f.rels, f.file_class, true, dir + "/store-dict", &recompressed,
                             recompress_level);
    ZstdRun without = IngestAll(root, f.rels, f.file_class, false, dir + "/store-plain");
    ZstdRun z9 = ZstdEach(paths, dir + "/z9", 9);
    ZstdRun z19 = ZstdEach(paths, dir + "/z19", 19);
    fs::remove_all(dir + "/z9");
    fs::remove_all(dir + "/z19");
    auto cell = [&](const ZstdRun& r) {
      return fmt::format("{:>8.0f} KB {:>5.1f} s", static_cast<double>(r.bytes) / 1e3, r.seconds);
    };
    fmt::print("{:<26} {:>5} {:>8.1f}  {:>22} {:>22} {:>22} {:>22} {:>22}\n", f.name, f.rels.size(),
               static_cast<double>(bytes) / 1e6, cell(with), cell(without), cell(recompressed),
               cell(z9), cell(z19));
    fmt::print(
        "{:<26} size vs zstd -19: {:.3f}x (none: {:.3f}x); time vs zstd -9 -T2: {:.2f}x "
        "(none: {:.2f}x)\n",
        "", static_cast<double>(with.bytes) / z19.bytes,
        static_cast<double>(without.bytes) / z19.bytes, with.seconds / z9.seconds,
        without.seconds / z9.seconds);
    fmt::print("{:<26} recompressed at {}: {:.3f}x zstd -19's size in {:.2f}x its time\n", "",
               recompress_level, static_cast<double>(recompressed.bytes) / z19.bytes,
               recompressed.seconds / z19.seconds);
  }
  fs::remove_all(dir);
  return 0;
}

}  // namespace migrate_bench
}  // namespace

void RegisterMigrateBench(CLI::App& app, int* exit_code) {
  using namespace migrate_bench;  // its Args and Run
  auto args = std::make_shared<Args>();
  CLI::App* cmd = app.add_subcommand("migrate", "cold store vs the zstd command line");
  cmd->add_option("--dir", args->dir, "scratch folder (wiped)")->capture_default_str();
  cmd->add_option("--trace-mb", args->trace_mb, "MiB of traces to generate")->capture_default_str();
  cmd->add_flag("!--no-zstd19", args->zstd19, "skip the (slow) zstd -19 comparison");
  cmd->callback([args, exit_code] { *exit_code = RunMigrate(*args); });
  CLI::App* chunking = app.add_subcommand("chunking", "chunk size x zstd level sweep");
  chunking->callback([exit_code] { *exit_code = RunChunking(); });
  auto dict_mb = std::make_shared<double>(256);
  auto variants = std::make_shared<int>(4);
  auto recompress_level = std::make_shared<int>(kRecompressLevel);
  CLI::App* dicts =
      app.add_subcommand("dictionaries", "stored size with and without zstd dictionaries");
  dicts->add_option("--trace-mb", *dict_mb, "MiB of generated traces")->capture_default_str();
  dicts->add_option("--variants", *variants, "variants of the real Kineto trace")
      ->capture_default_str();
  dicts->add_option("--recompress-level", *recompress_level, "the recompress column's level")
      ->check(CLI::Range(1, 22))
      ->capture_default_str();
  dicts->callback([=] { *exit_code = RunDictionaries(*dict_mb, *variants, *recompress_level); });
}

}  // namespace tbfs::bench
