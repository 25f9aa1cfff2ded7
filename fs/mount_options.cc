// mount -o: tbfs's own options, read by libfuse's parser; the rest are
// handed to libfuse.
#include <fuse_lowlevel.h>

#include "base/units.h"
#include "fmt/format.h"
#include "fs/metrics.h"
#include "fs/mount.h"
#include "fs/mount_internal.h"

namespace tbfs::fs {

namespace {

// The -o keys tbfs takes for itself; the rest go to libfuse.
enum OptKey {
  kOptStore,
  kOptState,
  kOptColdAfter,
  kOptMigrateInterval,
  kOptCache,
  kOptMetrics,
  kOptNoMigrate,
  kOptConfig,
  kOptForeground,
  kOptNonempty,
  kOptRemount,
  kOptNoDirAtime,
  kOptDirAtime,
  kOptRelAtime,
  kOptStrictAtime,
};

const struct fuse_opt kMountOpts[] = {
    FUSE_OPT_KEY("store=", kOptStore),
    FUSE_OPT_KEY("state=", kOptState),
    FUSE_OPT_KEY("cold_after=", kOptColdAfter),
    FUSE_OPT_KEY("migrate_interval=", kOptMigrateInterval),
    FUSE_OPT_KEY("cache=", kOptCache),
    FUSE_OPT_KEY("metrics=", kOptMetrics),
    FUSE_OPT_KEY("no_migrate", kOptNoMigrate),
    FUSE_OPT_KEY("config=", kOptConfig),
    FUSE_OPT_KEY("foreground", kOptForeground),
    FUSE_OPT_KEY("nonempty", kOptNonempty),  // libfuse 3 mounts over anything; we ask first
    FUSE_OPT_KEY("remount", kOptRemount),
    // Access times: libfuse 3.14 passes noatime and atime to the kernel and
    // refuses these, which the daemon honours itself (MountOptions).
    FUSE_OPT_KEY("nodiratime", kOptNoDirAtime),
    FUSE_OPT_KEY("diratime", kOptDirAtime),
    FUSE_OPT_KEY("relatime", kOptRelAtime),
    FUSE_OPT_KEY("nostrictatime", kOptRelAtime),
    FUSE_OPT_KEY("strictatime", kOptStrictAtime),
    FUSE_OPT_KEY("norelatime", kOptStrictAtime),
    // fstab's own words, not for libfuse.
    FUSE_OPT_KEY("nofail", FUSE_OPT_KEY_DISCARD),
    FUSE_OPT_KEY("_netdev", FUSE_OPT_KEY_DISCARD),
    FUSE_OPT_KEY("auto", FUSE_OPT_KEY_DISCARD),
    FUSE_OPT_KEY("noauto", FUSE_OPT_KEY_DISCARD),
    FUSE_OPT_KEY("user", FUSE_OPT_KEY_DISCARD),
    FUSE_OPT_KEY("users", FUSE_OPT_KEY_DISCARD),
    FUSE_OPT_KEY("defaults", FUSE_OPT_KEY_DISCARD),
    FUSE_OPT_END,
};

struct OptParse {
  MountOptions* config;
  std::string error;  // the first one
};

// fuse_opt_parse's callback: `arg` is one option, unescaped ("key=value").
int ProcessMountOpt(void* data, const char* arg, int key, struct fuse_args*) {
  auto* p = static_cast<OptParse*>(data);
  MountOptions* config = p->config;
  const std::string opt = arg;
  const size_t eq = opt.find('=');
  const std::string value = eq == std::string::npos ? "" : opt.substr(eq + 1);
  auto fail = [&](std::string msg) {
    if (p->error.empty()) p->error = std::move(msg);
    return -1;
  };
  auto path = [&](const char* name, std::string* out) {
    // Empty is a mistake: store= alone would mean the default store.
    if (value.empty()) return fail(fmt::format("{}: give a path ({}=PATH)", name, name));
    *out = value;
    return 0;
  };
  switch (key) {
    case kOptStore:
      return path("store", &config->store_dir);
    case kOptState:
      return path("state", &config->state_dir);
    case kOptConfig:
      return path("config", &config->config_file);
    case kOptNoMigrate:
      config->migrate = false;
      return 0;
    case kOptForeground:
      config->foreground = true;
      return 0;
    case kOptNonempty:
      config->nonempty = true;
      return 0;
    case kOptRemount:
      config->remount = true;
      return 0;
    case kOptColdAfter: {
      auto s = ParseDurationSeconds(value);
      if (!s.ok()) return fail("cold_after: " + s.status().message());
      config->cold_after_s = *s;
      return 0;
    }
    case kOptMigrateInterval: {
      auto s = ParseDurationSeconds(value);
      if (!s.ok() || *s < 1) return fail("migrate_interval: use a duration of at least 1s");
      config->migrate_interval_s = *s;
      return 0;
    }
    case kOptCache: {
      auto b = ParseSizeBytes(value);
      if (!b.ok() || *b < kMinCacheBytes) return fail("cache: use a size of at least 1M");
      config->cache_bytes = *b;
      return 0;
    }
    case kOptMetrics: {
      std::string err;
      config->metrics_address = MetricsAddress(value, &err);
      if (!err.empty()) return fail(err);
      return 0;
    }
    case kOptNoDirAtime:
      config->nodiratime = true;
      return 0;
    case kOptDirAtime:
      config->nodiratime = false;
      return 0;
    case kOptRelAtime:     // the default: access times as the backing filesystem keeps them
    case kOptStrictAtime:  // checked against the backing filesystem (CheckMount)
      config->strictatime = key == kOptStrictAtime;
      config->noatime = false;  // and the kernel is not told noatime either
      std::erase(config->fuse_options, "noatime");
      return 0;
    default:  // FUSE_OPT_KEY_OPT: not ours (noatime and atime go on to the kernel too)
      if (opt == "noatime") config->noatime = true, config->strictatime = false;
      if (opt == "atime") config->noatime = false;
      if (!opt.empty()) config->fuse_options.push_back(opt);
      return 0;
  }
}

}  // namespace

std::string EscapeFuseOpt(const std::string& opt) {
  std::string out;
  for (char c : opt) {
    if (c == ',' || c == '\\') out += '\\';
    out += c;
  }
  return out;
}

std::string ParseMountOption(const std::string& key, const std::string& value,
                             MountOptions* config) {
  return ParseMountOptions(EscapeFuseOpt(key + "=" + value), config);
}

std::string ParseMountOptions(const std::string& opts, MountOptions* config) {
  // libfuse's own parser, so that an option is read as libfuse itself reads
  // it (a comma inside a value is written "\\,").
  std::string prog = "tbfs", dash_o = "-o", list = opts;
  char* argv[] = {prog.data(), dash_o.data(), list.data(), nullptr};
  struct fuse_args args = FUSE_ARGS_INIT(3, argv);
  OptParse parse{config, ""};
  int rc = fuse_opt_parse(&args, &parse, kMountOpts, ProcessMountOpt);
  fuse_opt_free_args(&args);
  if (rc != 0) return parse.error.empty() ? "cannot parse the -o options: " + opts : parse.error;
  return "";
}

}  // namespace tbfs::fs
