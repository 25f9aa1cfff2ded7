#include "store/config.h"

#include <gtest/gtest.h>

namespace tbfs::store {
namespace {

TEST(MigrateConfig, ReadsEveryKey) {
  auto c = ParseMigrateConfig(R"(
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

TEST(MigrateConfig, EmptyFileMeansDefaults) {
  auto c = ParseMigrateConfig("", "empty.yaml");
  ASSERT_TRUE(c.ok());
  EXPECT_TRUE(c->dry_run);
  EXPECT_FALSE(c->logdir);
}

TEST(MigrateConfig, GarbageGivesOneLineErrors) {
  for (const char* text : {"dry_run: maybe", "logdir: [1, 2", "unknown_key: 1",
                           "criteria: {trace_markers: [x]}", "criteria: {trace_marker: x}",
                           "backup: {enabled: true}", "- just\n- a list", "validate: 3"}) {
    auto c = ParseMigrateConfig(text, "bad.yaml");
    ASSERT_FALSE(c.ok()) << text;
    EXPECT_EQ(c.status().message().find('\n'), std::string::npos) << c.status().message();
    EXPECT_NE(c.status().message().find("bad.yaml"), std::string::npos) << c.status().message();
  }
}

TEST(MigrateConfig, MissingFileNamesIt) {
  auto c = LoadMigrateConfig("/nonexistent/policy.yaml");
  ASSERT_FALSE(c.ok());
  EXPECT_NE(c.status().message().find("/nonexistent/policy.yaml"), std::string::npos);
}


TEST(MigrateConfig, ReadsTheMountSection) {
  auto c = ParseMigrateConfig(R"(
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
    auto bad = ParseMigrateConfig(text, "bad.yaml");
    EXPECT_FALSE(bad.ok()) << text;
  }
}

}  // namespace
}  // namespace tbfs::store
