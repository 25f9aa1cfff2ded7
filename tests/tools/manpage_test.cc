// The manual page (packaging/tbfs.1.in), `tbfs CMD --help` and the README's
// command headings name the same options for every command; the page
// renders without a warning.
#include <gtest/gtest.h>

#include <map>
#include <regex>
#include <set>
#include <sstream>

#include "tests/test_util.h"

namespace tbfs {
namespace {

using namespace tbfs::testing;

using OptionSets = std::map<std::string, std::set<std::string>>;

const std::vector<std::string> kCommands = {
    "scan", "verify", "gen",     "migrate",    "restore", "export", "ls",     "du",
    "fsck", "gc",     "salvage", "recompress", "watch",   "mount",  "status", "exporter"};

std::set<std::string> OptionsIn(const std::string& text) {
  static const std::regex option(R"((^|[\s,\[|(])(--?[a-z][a-z-]*))");
  std::set<std::string> out;
  for (std::sregex_iterator it(text.begin(), text.end(), option), end; it != end; ++it) {
    std::string o = (*it)[2];
    if (o != "-h" && o != "--help") out.insert(o);
  }
  return out;
}

// `tbfs CMD --help`: the Options section.
std::set<std::string> HelpOptions(const std::string& cmd) {
  CommandResult r = RunCommand(std::string(TBFS_BINARY) + " " + cmd + " --help");
  EXPECT_EQ(r.exit_code, 0) << cmd;
  std::set<std::string> out;
  std::istringstream lines(r.out.substr(r.out.find("Options:")));
  for (std::string line; std::getline(lines, line);) {
    static const std::regex item(R"(^\s+(-[a-z]|--[a-z][a-z-]*)(,(--[a-z][a-z-]*))?)");
    std::smatch m;
    if (!std::regex_search(line, m, item)) continue;
    if (m[1] != "-h") out.insert(m[1]);
    if (m[3].matched && m[3] != "--help") out.insert(m[3]);
  }
  return out;
}

// The manual page: the .TP items after each `.SS "tbfs CMD ..."` heading.
OptionSets ManOptions() {
  std::string page = ReadBytes(std::string(TBFS_SOURCE_DIR) + "/packaging/tbfs.1.in");
  OptionSets out;
  std::istringstream lines(page);
  std::string cmd, line;
  bool item = false;
  while (std::getline(lines, line)) {
    if (line.starts_with(".SS \"tbfs ")) {
      cmd = line.substr(10, line.find_first_of(" \"", 10) - 10);
      out[cmd];
    } else if (line.starts_with(".SH")) {
      cmd.clear();
    } else if (line == ".TP") {
      item = true;
      continue;
    } else if (item && !cmd.empty()) {
      std::string plain = std::regex_replace(line, std::regex(R"(\\-)"), "-");
      for (const auto& o : OptionsIn(plain)) out[cmd].insert(o);
    }
    item = false;
  }
  return out;
}

// The README's headings: "### `tbfs CMD ...`, `tbfs CMD2 ...`".
OptionSets ReadmeOptions() {
  std::string readme = ReadBytes(std::string(TBFS_SOURCE_DIR) + "/README.md");
  OptionSets out;
  std::istringstream lines(readme);
  for (std::string line; std::getline(lines, line);) {
    if (!line.starts_with("### `tbfs ")) continue;
    static const std::regex usage(R"(`tbfs ([a-z]+)([^`]*)`)");
    for (std::sregex_iterator it(line.begin(), line.end(), usage), end; it != end; ++it) {
      out[(*it)[1]] = OptionsIn((*it)[2]);
    }
  }
  return out;
}

TEST(Manual, NamesEveryOptionOfEveryCommandAsHelpDoes) {
  OptionSets man = ManOptions();
  for (const std::string& cmd : kCommands) {
    ASSERT_TRUE(man.count(cmd)) << "no section for " << cmd << " in the manual page";
    EXPECT_EQ(man[cmd], HelpOptions(cmd)) << cmd;
  }
  EXPECT_EQ(man.size(), kCommands.size());
}

TEST(Manual, TheReadmeHeadingsNameTheSameOptions) {
  OptionSets readme = ReadmeOptions();
  for (const std::string& cmd : kCommands) {
    ASSERT_TRUE(readme.count(cmd)) << "no heading for " << cmd << " in README.md";
    EXPECT_EQ(readme[cmd], HelpOptions(cmd)) << cmd;
  }
}

TEST(Manual, RendersWithoutWarnings) {
  CommandResult r = RunCommand("man --warnings -l " + std::string(TBFS_BINARY_DIR) +
                               "/packaging/tbfs.1 2>&1 >/dev/null");
  EXPECT_EQ(r.exit_code, 0);
  EXPECT_EQ(r.out, "");
  CommandResult text = RunCommand("MANWIDTH=80 man -l " + std::string(TBFS_BINARY_DIR) +
                                  "/packaging/tbfs.1 2>/dev/null");
  EXPECT_NE(text.out.find("EXIT STATUS"), std::string::npos);
  CommandResult version = RunCommand(std::string(TBFS_BINARY) + " --version");
  EXPECT_NE(text.out.find(version.out.substr(0, version.out.find('\n'))), std::string::npos)
      << "the page's version is the binary's: " << version.out;
}

}  // namespace
}  // namespace tbfs
