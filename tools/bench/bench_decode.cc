// tbfs-bench decode: what a cold chunk costs the CPU to decode, as the
// store keeps it and as the same chunks were kept before format 8 wrote
// trace numbers as differences (store/number_deltas.h). Per input: the
// stored size either way and the time per MiB, best of --rounds passes
// alternating the two: the whole decode a read does (frame, numbers,
// checksum: ChunkCodec::DecodeInto) and the zstd frames alone. One core,
// no I/O; the inputs are the real Kineto trace and a generated Kineto and
// XSpace trace, cut in 1 MiB chunks at the default level.
#include <zstd.h>

#include <algorithm>
#include <chrono>
#include <filesystem>

#include "base/fs_util.h"
#include "fmt/format.h"
#include "store/chunk.h"
#include "store/format.h"
#include "tools/bench/bench.h"
#include "tools/gen/gen.h"

namespace tbfs::bench {

namespace {
namespace decode_bench {

namespace fs = std::filesystem;

constexpr size_t kChunk = 1 << 20;

struct Args {
  int level = 9;
  int rounds = 20;
  std::string dir = "/tmp/tbfs-bench-decode";
};

struct Stored {
  std::vector<std::string> values;
  std::vector<size_t> lengths;
  uint64_t bytes = 0;
  int rewritten = 0;
};

Stored EncodeAll(const std::string& raw, int level, bool numbers) {
  store::ChunkCodec codec;
  codec.set_number_deltas(numbers);
  Stored s;
  for (size_t at = 0; at < raw.size(); at += kChunk) {
    const std::string_view chunk = std::string_view(raw).substr(at, kChunk);
    std::string value;
    codec.Encode(chunk, level, {1, s.values.size(), 0}, &value);
    s.bytes += value.size();
    s.rewritten += store::RewroteNumbers(value);
    s.values.push_back(std::move(value));
    s.lengths.push_back(chunk.size());
  }
  return s;
}

// Seconds for one pass over every chunk: the whole decode, or (frames)
// the zstd frame alone into a scratch buffer. False on any error.
bool DecodePass(const Stored& s, bool frames, store::ChunkCodec& codec, ZSTD_DCtx* dctx,
                std::string& out, double* seconds) {
  const auto start = std::chrono::steady_clock::now();
  for (size_t i = 0; i < s.values.size(); ++i) {
    const std::string_view value = s.values[i];
    if (!frames) {
      if (!codec.DecodeInto(value, out.data(), s.lengths[i], {1, i, 0}).ok()) return false;
      continue;
    }
    if (static_cast<uint8_t>(value[0]) == store::kChunkRaw) continue;
    const std::string_view payload = value.substr(store::kChunkHeaderBytes);
    if (ZSTD_isError(
            ZSTD_decompressDCtx(dctx, out.data(), out.size(), payload.data(), payload.size()))) {
      return false;
    }
  }
  *seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  return true;
}

int RunOne(const Args& a, const std::string& name, const std::string& raw) {
  const Stored plain = EncodeAll(raw, a.level, false);
  const Stored now = EncodeAll(raw, a.level, true);
  store::ChunkCodec codec;
  ZSTD_DCtx* dctx = ZSTD_createDCtx();
  std::string out(3 * kChunk, '\0');
  // Best of the rounds: plain whole, now whole, plain frames, now frames.
  double best[4] = {1e9, 1e9, 1e9, 1e9};
  for (int r = 0; r < a.rounds; ++r) {
    for (int k = 0; k < 4; ++k) {
      double s = 0;
      if (!DecodePass(k % 2 == 0 ? plain : now, k >= 2, codec, dctx, out, &s)) {
        fmt::print(stderr, "{}: a chunk does not decode\n", name);
        ZSTD_freeDCtx(dctx);
        return 1;
      }
      best[k] = std::min(best[k], s);
    }
  }
  ZSTD_freeDCtx(dctx);
  const double mib = static_cast<double>(raw.size()) / kChunk;
  auto ms = [&](double s) { return s * 1e3 / mib; };
  fmt::print(
      "{:<22} {:>6.1f} {:>9.1f} {:>9.1f} {:>5}/{:<4} {:>8.3f} {:>8.3f} ({:.3f} + {:.3f}) "
      "{:>7.2f}x\n",
      name, mib, now.bytes / 1e3, plain.bytes / 1e3, now.rewritten, now.values.size(), ms(best[0]),
      ms(best[1]), ms(best[3]), ms(best[1] - best[3]), best[1] / best[0]);
  return 0;
}

std::string ReadAll(const std::string& path) {
  std::string bytes;
  (void)ReadFileToString(path, &bytes);  // empty on error: no chunk, a line of zeros
  return bytes;
}

int Run(const Args& a) {
  const std::string real = RealKinetoTrace();
  if (real.empty()) return 2;
  fs::remove_all(a.dir);
  gen::GenOptions g;
  g.runs = 2;  // one PyTorch run, one Keras run
  g.steps = 10;
  g.trace_mb = 96;
  gen::GenReport rep;
  if (Status st = gen::GenerateLogdir(a.dir, g, &rep); !st.ok()) {
    fmt::print(stderr, "generating the traces: {}\n", st.message());
    return 1;
  }
  std::string kineto, xplane;
  for (const auto& e : fs::recursive_directory_iterator(a.dir)) {
    const std::string p = e.path().string();
    if (p.ends_with(".pt.trace.json") && kineto.empty()) kineto = p;
    if (p.ends_with(".xplane.pb") && xplane.empty()) xplane = p;
  }
  fmt::print("decode of 1 MiB chunks at level {}, best of {} rounds, one core; ms per MiB\n",
             a.level, a.rounds);
  fmt::print("{:<22} {:>6} {:>9} {:>9} {:>10} {:>8} {:>8} {:>17} {:>8}\n", "input", "MiB",
             "stored KB", "plain KB", "rewritten", "plain", "stored", "(zstd + numbers)", "cost");
  int rc = RunOne(a, "real Kineto trace", CommandOutput("zcat '" + real + "'"));
  if (!kineto.empty()) rc = std::max(rc, RunOne(a, "generated Kineto", ReadAll(kineto)));
  if (!xplane.empty()) rc = std::max(rc, RunOne(a, "generated XSpace", ReadAll(xplane)));
  fs::remove_all(a.dir);
  return rc;
}

}  // namespace decode_bench
}  // namespace

void RegisterDecodeBench(CLI::App& app, int* exit_code) {
  auto args = std::make_shared<decode_bench::Args>();
  CLI::App* cmd = app.add_subcommand(
      "decode", "CPU per MiB of a cold chunk's decode, with and without format 8's numbers");
  cmd->add_option("--level", args->level, "zstd level (default 9, the store's)");
  cmd->add_option("--rounds", args->rounds, "passes over each input; the best counts");
  cmd->callback([args, exit_code] { *exit_code = decode_bench::Run(*args); });
}

}  // namespace tbfs::bench
