// The throwaway Ceph cluster the RADOS tests run against
// (scripts/ceph-cluster.sh): under ctest, one for the whole run (the ceph
// fixture in tests/CMakeLists.txt, found through TBFS_CEPH_DIR); run by
// hand, a binary starts its own. Without Ceph installed, why_not() says why
// and the tests skip saying so (TBFS_NEED_CEPH), or fail under CI=true.
#pragma once

#include <cstdlib>
#include <string>

#include "tests/test_util.h"

namespace tbfs::testing {

// One cluster for every RADOS test of the run.
class CephCluster {
 public:
  static CephCluster& Get() {
    static CephCluster cluster;
    return cluster;
  }
  const std::string& conf() const { return shared_conf_.empty() ? conf_ : shared_conf_; }
  const std::string& why_not() const { return why_not_; }
  // The folder a child process (a death test) finds the same cluster in.
  std::string dir() const { return shared_conf_.empty() ? dir_ : std::getenv("TBFS_CEPH_DIR"); }
  ~CephCluster() {
    if (!conf_.empty())
      (void)testing::RunCommand("bash " TBFS_SOURCE_DIR "/scripts/ceph-cluster.sh stop " + dir_);
  }

 private:
  CephCluster() {
    // Under ctest one cluster serves every test (the Ceph.Cluster fixture
    // in tests/CMakeLists.txt); run by hand, the binary starts its own.
    if (const char* shared = std::getenv("TBFS_CEPH_DIR")) {
      std::string why = testing::ReadBytes(std::string(shared) + "/unavailable");
      if (!why.empty()) {
        why_not_ = "RADOS tests skipped: " + why;
      } else {
        shared_conf_ = std::string(shared) + "/ceph.conf";
      }
      return;
    }
    if (testing::RunCommand("command -v ceph-mon && command -v ceph-osd").exit_code != 0) {
      why_not_ =
          "Ceph is not installed (apt-get install ceph-mon ceph-osd ceph-common): RADOS tests "
          "skipped";
      return;
    }
    dir_ = tmp_.path() + "/ceph";
    auto r = testing::RunCommand("bash " TBFS_SOURCE_DIR "/scripts/ceph-cluster.sh start " + dir_ +
                                 " tbfs 2>&1");
    if (r.exit_code != 0) {
      why_not_ = "the test cluster did not start: " + r.out;
      return;
    }
    conf_ = r.out.substr(0, r.out.find('\n'));
  }
  testing::TempDir tmp_;
  std::string dir_, conf_, why_not_, shared_conf_;
};

// In a RADOS test, first: skips it, saying why, when there is no cluster;
// with CI=true in the environment (scripts/test.sh, the README's test
// command, which installs Ceph) fails it instead, so that a green run has
// tested that backend.
#define TBFS_NEED_CEPH()                                                                        \
  do {                                                                                          \
    const std::string& why_not = ::tbfs::testing::CephCluster::Get().why_not();                 \
    if (why_not.empty()) break;                                                                 \
    const char* ci = std::getenv("CI");                                                         \
    if (ci != nullptr && std::string(ci) == "true") GTEST_FAIL() << "CI=true, so: " << why_not; \
    GTEST_SKIP() << why_not;                                                                    \
  } while (0)

}  // namespace tbfs::testing
