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

}  // namespace
}  // namespace tbfs::store
