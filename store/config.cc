#include "store/config.h"

#include <yaml-cpp/depthguard.h>
#include <yaml-cpp/yaml.h>

#include <set>

#include "base/fs_util.h"

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

Result<MigrateConfig> ParseMigrateConfig(const std::string& text, const std::string& origin) {
  MigrateConfig config;
  try {
    YAML::Node root = YAML::Load(text);
    if (root.IsNull()) return config;  // an empty file: all defaults
    TBFS_RETURN_IF_ERROR(CheckKeys(
        root, {"logdir", "dry_run", "backup", "criteria", "validate", "mount"}, origin));
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
      TBFS_RETURN_IF_ERROR(CheckKeys(m, {"mountpoint", "store", "cold_after", "migrate_interval",
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

Result<MigrateConfig> LoadMigrateConfig(const std::string& path) {
  std::string text;
  Status st = ReadFileToString(path, &text);
  if (!st.ok()) return st;
  return ParseMigrateConfig(text, path);
}

}  // namespace tbfs::store
