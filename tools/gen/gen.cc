#include "tools/gen/gen.h"

#include <dirent.h>
#include <sys/stat.h>

#include "fmt/format.h"
#include "tools/gen/gen_internal.h"

namespace tbfs::gen {

namespace {

Status CheckOutdir(const std::string& outdir) {
  struct stat st;
  if (::stat(outdir.c_str(), &st) != 0) {
    if (errno == ENOENT) return MakeDirs(outdir);
    return Status::FromErrno(errno, "stat", outdir);
  }
  if (!S_ISDIR(st.st_mode)) return Status::InvalidArgument(outdir + " is not a directory");
  DIR* dir = ::opendir(outdir.c_str());
  if (dir == nullptr) return Status::FromErrno(errno, "opendir", outdir);
  bool empty = true;
  while (struct dirent* de = ::readdir(dir)) {
    std::string_view name = de->d_name;
    if (name != "." && name != "..") empty = false;
  }
  ::closedir(dir);
  if (!empty)
    return Status::InvalidArgument(outdir + " is not empty; gen writes only into an empty folder");
  return Status::OK();
}

const char* kModels[] = {"resnet50", "vit_b16", "bert_base", "gpt2_small", "unet", "efficientnet"};

}  // namespace

Status GenerateLogdir(const std::string& outdir, const GenOptions& options, GenReport* report,
                      std::atomic<uint64_t>* bytes_done) {
  if (options.runs < 1) return Status::InvalidArgument("--runs must be at least 1");
  if (options.steps < 1) return Status::InvalidArgument("--steps must be at least 1");
  if (options.trace_mb < 0) return Status::InvalidArgument("--trace-mb must not be negative");
  TBFS_RETURN_IF_ERROR(CheckOutdir(outdir));

  *report = GenReport();
  Ctx ctx;
  ctx.logdir = outdir;
  ctx.options = options;
  ctx.report = report;
  ctx.progress = bytes_done;
  Rng root(options.seed);
  // 2026-01-01 plus up to a year, so the profile folders' names vary by seed.
  ctx.base_time = 1767225600.0 + static_cast<double>(root.Below(365 * 86400));
  ctx.host = fmt::format("gpu-node-{:02}", root.Below(64));
  ctx.pid = 10000 + static_cast<int>(root.Below(50000));

  const uint64_t trace_total = static_cast<uint64_t>(options.trace_mb * 1024 * 1024);
  bool tail_done = !options.live_tail;
  for (int r = 0; r < options.runs; ++r) {
    // Each run has its own stream, so adding runs does not change the others.
    Rng rng(options.seed * 1000003 + static_cast<uint64_t>(r));
    uint64_t trace_bytes = trace_total / static_cast<uint64_t>(options.runs);
    const char* model = kModels[r % 6];
    if (r % 2 == 0) {
      std::string run = fmt::format("{}_lr{:.0e}_run{}", model, 0.1 / (1 + r), r);
      TBFS_RETURN_IF_ERROR(WritePytorchRun(ctx, run, rng, trace_bytes, !tail_done));
      tail_done = true;
    } else {
      std::string run = fmt::format("keras_{}_run{}", model, r);
      TBFS_RETURN_IF_ERROR(WriteKerasRun(ctx, run, rng, trace_bytes));
    }
  }
  return Status::OK();
}

}  // namespace tbfs::gen
