// tbfs-bench gzip: what storing gzip'd traces by their content would gain
// and cost (issue 24), per file, in one run:
//   - whether zlib makes the file again (store/gzip_recipe.h), and the
//     seconds to find that out and to make the whole file again, against
//     `zcat` of the same file (what any reader of the .gz pays anyway);
//   - `zstd -19` of the .gz bytes (what storing it as it is can reach at
//     best) against `zstd -19` of its content (what storing by content
//     can reach).
// Files: the real traces of ../shared/data, the real Kineto trace written
// again by Python's gzip module (as PyTorch's use_gzip does) at levels 1, 6
// and 9, by GNU gzip -6 and by pigz, and the generator's *.pt.trace.json.gz.
#include <fcntl.h>
#include <sys/stat.h>

#include <algorithm>
#include <filesystem>

#include "base/fs_util.h"
#include "base/work_pool.h"
#include "fmt/format.h"
#include "store/cold_store.h"
#include "store/file_io.h"
#include "store/gzip_recipe.h"
#include "tools/bench/bench.h"
#include "tools/cli/progress.h"
#include "tools/gen/gen.h"

namespace tbfs::bench {

namespace {
namespace gzip_bench {

namespace fs = std::filesystem;

// Bytes a shell command writes to stdout (kept in *keep when given), and
// its seconds (-1 when it failed).
std::pair<uint64_t, double> CountOutput(const std::string& cmd, std::string* keep = nullptr) {
  const double t0 = cli::NowSeconds();
  FILE* p = ::popen(cmd.c_str(), "r");
  if (p == nullptr) return {0, -1};
  uint64_t n = 0;
  char buf[1 << 16];
  size_t got;
  while ((got = std::fread(buf, 1, sizeof(buf), p)) > 0) {
    n += got;
    if (keep) keep->append(buf, got);
  }
  const int rc = ::pclose(p);
  return {n, rc == 0 ? cli::NowSeconds() - t0 : -1};
}

std::string ReadAll(const std::string& path) {
  std::string out;
  (void)ReadFileToString(path, &out);
  return out;
}

// The file stored in a new store at `store_dir`, by its content or as it
// is: the manifest, or an error.
Result<storepb::Manifest> Store(const std::string& path, const std::string& store_dir,
                                bool by_content, WorkPool* pool) {
  store::OpenOptions o;
  o.create_if_missing = true;
  auto s = store::ColdStore::Open(store_dir, o);
  if (!s.ok()) return s.status();
  auto fd = OpenFile(path, O_RDONLY);
  if (!fd.ok()) return fd.status();
  struct stat st;
  if (::fstat(fd->get(), &st) != 0) return Status::FromErrno(errno, "stat", path);
  store::IngestOptions io;
  io.file_class = "pytorch_trace";
  io.gzip_by_content = by_content;
  io.pool = pool;
  const std::string dir = fs::path(path).parent_path();
  return store::IngestFile(**s, dir, fs::path(path).filename(), fd->get(), st, (*s)->NewFileId(),
                           io);
}

// Seconds to the first 4 KiB and to the whole file through a store opened
// afresh (no remaker kept), the page cache dropped after the open; -1 on an
// error.
std::pair<double, double> ReadStored(const std::string& store_dir, const storepb::Manifest& m) {
  store::OpenOptions o;
  o.read_only = true;
  auto s = store::ColdStore::Open(store_dir, o);
  if (!s.ok()) return {-1, -1};
  DropCaches();
  const double t0 = cli::NowSeconds();
  std::string buf(1 << 20, '\0');
  store::ChunkCodec codec;
  size_t got = 0;
  if (!(*s)->ReadRange(m, 0, 4096, buf.data(), &got, &codec).ok()) return {-1, -1};
  const double first = cli::NowSeconds() - t0;
  for (uint64_t at = 0; at < m.size(); at += buf.size()) {
    if (!(*s)->ReadRange(m, at, buf.size(), buf.data(), &got, &codec).ok()) return {first, -1};
  }
  return {first, cli::NowSeconds() - t0};
}

// What the store does with each file: stored by content or as it is, the
// bytes it takes either way, and the cost of reading it back against `cat`.
void StoredTable(const std::vector<std::pair<std::string, std::string>>& files,
                 const std::string& dir) {
  fmt::print(
      "\nstored through a ColdStore (level 9, 1 MiB chunks), read back with the page cache "
      "dropped:\n");
  fmt::print("{:<28} {:<10} {:>10} {:>10} {:>9} {:>9} {:>9} {:>9}\n", "file", "stored as", "KB",
             "as is KB", "4K ms", "cat 4K ms", "read s", "cat s");
  WorkPool pool(2);
  int n = 0;
  for (const auto& [name, path] : files) {
    const std::string by = fmt::format("{}/store-c{}", dir, ++n);
    const std::string as = fmt::format("{}/store-a{}", dir, n);
    auto m = Store(path, by, true, &pool);
    auto plain = Store(path, as, false, &pool);
    if (!m.ok() || !plain.ok()) {
      fmt::print("{:<28} {}\n", name, (m.ok() ? plain : m).status().message());
      continue;
    }
    const auto [first, all] = ReadStored(by, *m);
    // The original, read as cat does (open, 1 MiB reads), in this process.
    DropCaches();
    const double t0 = cli::NowSeconds();
    char head[4096];
    size_t got = 0;
    if (auto fd = OpenFile(path, O_RDONLY); fd.ok()) {
      (void)PreadFull(fd->get(), head, sizeof(head), 0, &got, path);
    }
    const double cat_first = cli::NowSeconds() - t0;
    DropCaches();
    uint64_t bytes = 0;
    const double cat_s = ReadFiles({path}, &bytes);
    fmt::print("{:<28} {:<10} {:>10.0f} {:>10.0f} {:>9.2f} {:>9.2f} {:>9.3f} {:>9.3f}\n", name,
               m->has_gzip() ? "content" : "as it is", m->stored_bytes() / 1e3,
               plain->stored_bytes() / 1e3, first * 1e3, cat_first * 1e3, all, cat_s);
  }
}

int RunGzip() {
  const std::string dir = "/tmp/tbfs-bench-gzip";
  fs::remove_all(dir);
  fs::create_directories(dir);
  const std::string data = "../shared/data";
  const std::string kineto = data + "/kineto-resnet50/worker0.1623143089861.pt.trace.json.gz";
  if (!fs::exists(kineto)) {
    fmt::print(stderr, "{} is missing (run from the repository's folder)\n", kineto);
    return 2;
  }
  std::vector<std::pair<std::string, std::string>> files = {
      {"real Kineto (GNU gzip -6)", kineto},
      {"real PyTorch use_gzip",
       data + "/pytorch-logdir/profile_gzip/vm_19341.1796027115058.pt.trace.json.gz"}};
  const std::string json = dir + "/k.pt.trace.json";
  if (std::system(("zcat " + kineto + " > " + json).c_str()) != 0) return 2;
  for (int level : {1, 6, 9}) {
    const std::string out = fmt::format("{}/python{}.pt.trace.json.gz", dir, level);
    const std::string py = fmt::format(
        "import gzip\nwith open('{}') as fin, gzip.open('{}', 'wt', compresslevel={}) as fout:\n"
        "    fout.writelines(fin)\n",
        json, out, level);
    if (std::system(("python3 -c \"" + py + "\"").c_str()) != 0) return 2;
    files.push_back({fmt::format("Kineto, Python gzip {}", level), out});
  }
  if (std::system(fmt::format("gzip -6 -c {} > {}/gnu6.gz", json, dir).c_str()) == 0) {
    files.push_back({"Kineto, GNU gzip -6", dir + "/gnu6.gz"});
  }
  if (std::system(fmt::format("pigz -c {} > {}/pigz.gz", json, dir).c_str()) == 0) {
    files.push_back({"Kineto, pigz", dir + "/pigz.gz"});
  }
  gen::GenOptions g;
  g.runs = 2;
  g.steps = 10;
  g.trace_mb = 64;
  g.gzip_pytorch = true;
  gen::GenReport rep;
  if (Status st = gen::GenerateLogdir(dir + "/gen", g, &rep); !st.ok()) {
    fmt::print(stderr, "{}\n", st.message());
    return 2;
  }
  std::vector<std::string> generated;
  for (auto& e : fs::recursive_directory_iterator(dir + "/gen")) {
    if (e.is_regular_file() && e.path().string().ends_with(".gz")) generated.push_back(e.path());
  }
  std::sort(generated.begin(), generated.end());
  for (size_t i = 0; i < generated.size(); i++) {
    files.push_back({fmt::format("generated #{} (zlib 6)", i + 1), generated[i]});
  }

  fmt::print("{:<28} {:>9} {:>9}  {:<24} {:>7} {:>7} {:>7}  {:>10} {:>10} {:>6}\n", "file", "gz KB",
             "JSON MB", "zlib recipe", "find s", "remake", "zcat s", "zstd19 gz", "zstd19 JSON",
             "gain");
  for (const auto& [name, path] : files) {
    const std::string gz = ReadAll(path);
    double t0 = cli::NowSeconds();
    store::GzipRecipeFinder finder(1 << 20);
    for (size_t at = 0; at < gz.size(); at += 1 << 20) {
      finder.Add(std::string_view(gz).substr(at, 1 << 20));
    }
    auto recipe = finder.Finish();
    const double find_s = cli::NowSeconds() - t0;
    const auto [content_bytes, zcat_s] = CountOutput("zcat " + path);
    std::string what = "none";
    double remake_s = -1;
    if (recipe.ok()) {
      std::string content;
      CountOutput("zcat " + path, &content);
      t0 = cli::NowSeconds();
      store::GzipRemaker remaker(*recipe);
      std::string made;
      bool ok = true;
      for (size_t at = 0; at < content.size() && ok; at += 1 << 20) {
        ok = remaker.Add(std::string_view(content).substr(at, 1 << 20), &made).ok();
      }
      ok = ok && remaker.Finish(&made).ok();
      remake_s = cli::NowSeconds() - t0;
      what = ok && made == gz
                 ? fmt::format("level {}, memLevel {}", recipe->level, recipe->mem_level)
                 : "FOUND BUT DIFFERS";
    }
    const auto [z_gz, z_gz_s] = CountOutput("zstd -19 -T2 -c " + path);
    const auto [z_json, z_json_s] = CountOutput("zcat " + path + " | zstd -19 -T2 -c");
    fmt::print(
        "{:<28} {:>9.0f} {:>9.1f}  {:<24} {:>7.3f} {:>7.3f} {:>7.3f}  {:>10.0f} {:>10.0f} "
        "{:>5.1f}x\n",
        name, gz.size() / 1e3, content_bytes / 1e6, what, find_s, remake_s, zcat_s, z_gz / 1e3,
        z_json / 1e3, static_cast<double>(z_gz) / z_json);
  }
  StoredTable(files, dir);
  fs::remove_all(dir);
  return 0;
}

}  // namespace gzip_bench
}  // namespace

void RegisterGzipBench(CLI::App& app, int* exit_code) {
  using namespace gzip_bench;  // its Args and Run
  CLI::App* cmd =
      app.add_subcommand("gzip", "gzip'd traces: made again by zlib? cost and gain by content");
  cmd->callback([exit_code] { *exit_code = RunGzip(); });
}

}  // namespace tbfs::bench
