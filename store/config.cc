#include "store/config.h"

#include <limits.h>
#include <unistd.h>
#include <yaml-cpp/depthguard.h>
#include <yaml-cpp/yaml.h>

#include <cerrno>
#include <set>

#include "base/fs_util.h"
#include "base/units.h"
#include "store/rados_backend.h"

namespace tbfs::store {

namespace {

Status CheckKeys(const YAML::Node& node, const std::set<std::string>& allowed,
                 const std::string& where) {
  if (!node.IsMap()) return Status::InvalidArgument(where + " must be a mapping");
  std::set<std::string> seen;
  for (const auto& kv : node) {
    std::string key = kv.first.as<std::string>();
    std::string line = "line " + std::to_string(kv.first.Mark().line + 1);
    if (!allowed.count(key)) {
      return Status::InvalidArgument("unknown key '" + key + "' in " + where + " (" + line + ")");
    }
    if (!seen.insert(key).second) {
      return Status::InvalidArgument(where + ": " + line + ": '" + key + "' is given twice");
    }
  }
  return Status::OK();
}

std::vector<std::string> StringList(const YAML::Node& node) {
  if (!node) return {};
  if (!node.IsSequence()) {
    throw YAML::TypedBadConversion<std::vector<std::string>>(node.Mark());
  }
  std::vector<std::string> out;
  for (const auto& item : node) {
    if (!item.IsScalar()) throw YAML::TypedBadConversion<std::string>(item.Mark());
    out.push_back(item.as<std::string>());
  }
  return out;
}

}  // namespace

Result<ConfigFile> ParseConfigFile(const std::string& text, const std::string& origin) {
  ConfigFile config;
  try {
    YAML::Node root = YAML::Load(text);
    if (root.IsNull()) return config;  // an empty file: all defaults
    TBFS_RETURN_IF_ERROR(CheckKeys(
        root, {"logdir", "dry_run", "backup", "criteria", "validate", "mount", "retention"},
        origin));
    if (root["logdir"]) config.logdir = root["logdir"].as<std::string>();
    if (root["dry_run"]) config.dry_run = root["dry_run"].as<bool>();
    if (const YAML::Node b = root["backup"]) {
      TBFS_RETURN_IF_ERROR(CheckKeys(b, {"enabled", "dir"}, origin + ": backup"));
      if (b["enabled"]) config.backup_enabled = b["enabled"].as<bool>();
      if (b["dir"]) config.backup_dir = b["dir"].as<std::string>();
      if (config.backup_enabled && config.backup_dir.empty()) {
        return Status::InvalidArgument(origin + ": backup.enabled needs backup.dir");
      }
    }
    if (const YAML::Node c = root["criteria"]) {
      TBFS_RETURN_IF_ERROR(
          CheckKeys(c, {"trace_marker", "protected_marker"}, origin + ": criteria"));
      config.trace_markers = StringList(c["trace_marker"]);
      config.protected_markers = StringList(c["protected_marker"]);
    }
    if (const YAML::Node v = root["validate"]) {
      TBFS_RETURN_IF_ERROR(CheckKeys(v, {"must_have_tags"}, origin + ": validate"));
      config.must_have_tags = StringList(v["must_have_tags"]);
    }
    if (const YAML::Node m = root["mount"]) {
      TBFS_RETURN_IF_ERROR(CheckKeys(m,
                                     {"mountpoint", "store", "cold_after", "migrate_interval",
                                      "cache", "migrate", "options", "metrics"},
                                     origin + ": mount"));
      auto text = [&](const char* key, std::optional<std::string>* out) {
        if (m[key]) *out = m[key].as<std::string>();
      };
      text("mountpoint", &config.mount.mountpoint);
      text("store", &config.mount.store);
      text("cold_after", &config.mount.cold_after);
      text("migrate_interval", &config.mount.migrate_interval);
      text("cache", &config.mount.cache);
      text("metrics", &config.mount.metrics);
      if (m["migrate"]) config.mount.migrate = m["migrate"].as<bool>();
      config.mount.options = StringList(m["options"]);
    }
    if (const YAML::Node r = root["retention"]) {
      TBFS_RETURN_IF_ERROR(
          CheckKeys(r, {"older_than", "migrated_before", "keep_last", "max_store", "across_owners"},
                    origin + ": retention"));
      auto bad = [&](const char* key, const std::string& why) {
        return Status::InvalidArgument(origin + ": line " + std::to_string(r[key].Mark().line + 1) +
                                       ": retention: " + key + ": " + why);
      };
      // A zero would delete every cold file after each pass: said, not done
      // (gc's options take it, for a one-off run that is listed first).
      const std::string all =
          "0 would delete every cold file after each pass; leave the key out for no limit";
      for (const char* key : {"older_than", "migrated_before"}) {
        if (!r[key]) continue;
        auto s = ParseDurationSeconds(r[key].as<std::string>());
        if (!s.ok()) return bad(key, s.status().message());
        if (*s == 0) return bad(key, all);
        (std::string(key) == "older_than" ? config.retention.older_than_s
                                          : config.retention.migrated_before_s) = *s;
      }
      if (r["keep_last"]) {
        const std::string n = r["keep_last"].as<std::string>();
        if (n.empty() || n.find_first_not_of("0123456789") != std::string::npos || n.size() > 9) {
          return bad("keep_last", "use a whole number of profiles (e.g. 5)");
        }
        config.retention.keep_last = std::stoull(n);
        if (*config.retention.keep_last == 0) return bad("keep_last", all);
      }
      if (r["max_store"]) {
        auto b = ParseSizeBytes(r["max_store"].as<std::string>());
        if (!b.ok()) return bad("max_store", b.status().message());
        if (*b == 0) return bad("max_store", all);
        config.retention.max_store_bytes = *b;
      }
      // keep_last and max_store count each owner's files on their own
      // unless the config says otherwise.
      if (r["across_owners"]) config.retention.across_owners = r["across_owners"].as<bool>();
    }
  } catch (const YAML::DeepRecursion& e) {
    return Status::InvalidArgument(origin + ": line " + std::to_string(e.mark.line + 1) +
                                   ": nested too deep (" + std::to_string(e.depth()) + " levels)");
  } catch (const YAML::Exception& e) {
    std::string msg = e.msg;
    return Status::InvalidArgument(origin + ": line " + std::to_string(e.mark.line + 1) + ": " +
                                   (msg.empty() ? "bad value" : msg));
  }
  return config;
}

Result<ConfigFile> LoadConfigFile(const std::string& path) {
  std::string text;
  Status st = ReadFileToString(path, &text);
  if (!st.ok()) return st;
  auto config = ParseConfigFile(text, path);
  if (!config.ok()) return config;
  // Relative paths are the file's: the same wherever the command runs.
  const size_t slash = path.rfind('/');
  std::string folder = slash == std::string::npos ? "" : slash == 0 ? "/" : path.substr(0, slash);
  if (folder.empty() || folder[0] != '/') {
    std::string cwd(PATH_MAX, '\0');
    if (::getcwd(cwd.data(), cwd.size()) == nullptr)
      return Status::FromErrno(errno, "getcwd", path);
    folder = JoinPath(cwd.c_str(), folder);
  }
  auto anchor = [&](std::string* p) {
    if (!p->empty() && (*p)[0] != '/') *p = JoinPath(folder, *p);
  };
  if (config->logdir) anchor(&*config->logdir);
  if (config->mount.mountpoint) anchor(&*config->mount.mountpoint);
  if (config->mount.store && !IsRadosUrl(*config->mount.store)) anchor(&*config->mount.store);
  anchor(&config->backup_dir);
  return config;
}

}  // namespace tbfs::store
