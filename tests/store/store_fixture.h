// A test with a new, empty store at DIR/.tbfs, DIR a fresh temporary folder.
#pragma once

#include <gtest/gtest.h>

#include <memory>

#include "store/cold_store.h"
#include "tests/test_util.h"

namespace tbfs::store {

class NewStoreTest : public ::testing::Test {
 protected:
  void SetUp() override {
    OpenOptions o;
    o.create_if_missing = true;
    auto s = ColdStore::Open(dir_ / ".tbfs", o);
    ASSERT_TRUE(s.ok()) << s.status().ToString();
    store_ = std::move(s).value();
  }

  testing::TempDir dir_;
  std::unique_ptr<ColdStore> store_;
};

}  // namespace tbfs::store
