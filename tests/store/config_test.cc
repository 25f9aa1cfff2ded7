#include "store/config.h"

#include <gtest/gtest.h>

#include <filesystem>

#include "base/fs_util.h"
#include "tests/test_util.h"

namespace tbfs::store {
namespace {

TEST(ConfigFile, ReadsEveryKey) {
  auto c = ParseConfigFile(R"(
logdir: /data/logs
dry_run: false
backup: {enabled: true, dir: /backup}
criteria:
  trace_marker: ["*.nsys-rep", "timeline/"]
  protected_marker: [keep/]
validate:
  must_have_tags: [loss/train, lr]
)",
                           "test.yaml");
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  EXPECT_EQ(*c->logdir, "/data/logs");
  EXPECT_FALSE(c->dry_run);
  EXPECT_TRUE(c->backup_enabled);
  EXPECT_EQ(c->backup_dir, "/backup");
  EXPECT_EQ(c->trace_markers, (std::vector<std::string>{"*.nsys-rep", "timeline/"}));
  EXPECT_EQ(c->protected_markers, (std::vector<std::string>{"keep/"}));
  EXPECT_EQ(c->must_have_tags, (std::vector<std::string>{"loss/train", "lr"}));
}

TEST(ConfigFile, EmptyFileMeansDefaults) {
  auto c = ParseConfigFile("", "empty.yaml");
  ASSERT_TRUE(c.ok());
  EXPECT_TRUE(c->dry_run);
  EXPECT_FALSE(c->logdir);
}

TEST(ConfigFile, GarbageGivesOneLineErrors) {
  for (const char* text : {"dry_run: maybe", "logdir: [1, 2", "unknown_key: 1",
                           "criteria: {trace_markers: [x]}", "criteria: {trace_marker: x}",
                           "backup: {enabled: true}", "- just\n- a list", "validate: 3"}) {
    auto c = ParseConfigFile(text, "bad.yaml");
    ASSERT_FALSE(c.ok()) << text;
    EXPECT_EQ(c.status().message().find('\n'), std::string::npos) << c.status().message();
    EXPECT_NE(c.status().message().find("bad.yaml"), std::string::npos) << c.status().message();
  }
}

TEST(ConfigFile, MissingFileNamesIt) {
  auto c = LoadConfigFile("/nonexistent/policy.yaml");
  ASSERT_FALSE(c.ok());
  EXPECT_NE(c.status().message().find("/nonexistent/policy.yaml"), std::string::npos);
}

TEST(ConfigFile, ReadsTheMountSection) {
  auto c = ParseConfigFile(R"(
logdir: /data/logs
mount:
  mountpoint: /mnt/logs
  store: /cold
  cold_after: 10m
  migrate: false
  migrate_interval: 1m
  cache: 1G
  options: [allow_other, ro]
)",
                           "mount.yaml");
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  EXPECT_EQ(*c->mount.mountpoint, "/mnt/logs");
  EXPECT_EQ(*c->mount.store, "/cold");
  EXPECT_EQ(*c->mount.cold_after, "10m");
  EXPECT_FALSE(*c->mount.migrate);
  EXPECT_EQ(*c->mount.migrate_interval, "1m");
  EXPECT_EQ(*c->mount.cache, "1G");
  EXPECT_EQ(c->mount.options, (std::vector<std::string>{"allow_other", "ro"}));
  for (const char* text : {"mount: {mountpont: /m}", "mount: {options: allow_other}",
                           "mount: {migrate: sometimes}", "mount: [1]"}) {
    auto bad = ParseConfigFile(text, "bad.yaml");
    EXPECT_FALSE(bad.ok()) << text;
  }
}

TEST(ConfigFile, ReadsTheRetentionPolicy) {
  auto c = ParseConfigFile(
      "retention: {migrated_before: 90d, older_than: 1h, keep_last: 5, max_store: 2G}", "r.yaml");
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  EXPECT_EQ(*c->retention.migrated_before_s, 90 * 86400);
  EXPECT_EQ(*c->retention.older_than_s, 3600);
  EXPECT_EQ(*c->retention.keep_last, 5u);
  EXPECT_EQ(*c->retention.max_store_bytes, 2ull << 30);
  auto none = ParseConfigFile("mount: {cold_after: 1m}", "n.yaml");
  ASSERT_TRUE(none.ok());
  EXPECT_FALSE(none->retention.any()) << "no retention: section, no deletions";
  for (const char* text :
       {"retention: {keep_last: -1}", "retention: {keep_last: five}", "retention: {keep_last: 1.5}",
        "retention: {max_store: lots}", "retention: {migrated_before: soon}",
        "retention: {keep_newest: 3}", "retention: {keep_last: 0}", "retention: {older_than: 0s}",
        "retention: {migrated_before: 0}", "retention: {max_store: 0}", "retention: [keep_last]"}) {
    auto bad = ParseConfigFile(text, "bad.yaml");
    ASSERT_FALSE(bad.ok()) << text;
    EXPECT_NE(bad.status().message().find("bad.yaml"), std::string::npos) << bad.status().message();
    EXPECT_EQ(bad.status().message().find('\n'), std::string::npos) << bad.status().message();
  }
}

TEST(ConfigFile, RelativePathsAreTheFilesNotTheCallers) {
  testing::TempDir dir;
  const std::string file = dir.path() + "/etc/tbfs.yaml";
  std::filesystem::create_directories(dir.path() + "/etc");
  ASSERT_TRUE(WriteFileAtomic(
                  file,
                  "logdir: logs\nbackup: {dir: ../bak}\nmount: {mountpoint: /mnt/x, store: cold}\n",
                  0600)
                  .ok());
  auto c = LoadConfigFile(file);
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  EXPECT_EQ(*c->logdir, dir.path() + "/etc/logs");
  EXPECT_EQ(c->backup_dir, dir.path() + "/etc/../bak");
  EXPECT_EQ(*c->mount.mountpoint, "/mnt/x");
  EXPECT_EQ(*c->mount.store, dir.path() + "/etc/cold");
}

}  // namespace
}  // namespace tbfs::store
