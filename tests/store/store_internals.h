// The engine under a ColdStore, for tests that damage records in it
// (ColdStore names this struct its friend).
#pragma once

#include <gtest/gtest.h>

#include <string>

#include "store/cold_store.h"
#include "store/format.h"

namespace tbfs::store {
struct StoreInternals {
  static Backend& Of(ColdStore& store) { return store.backend(); }
  // The format version the store's info record holds now.
  static uint32_t FormatVersion(ColdStore& store) {
    std::string bytes;
    EXPECT_TRUE(Of(store).Get(Space::kMeta, kMetaInfoKey, &bytes).ok());
    storepb::StoreInfo info;
    EXPECT_TRUE(info.ParseFromString(bytes));
    return info.format_version();
  }
};
}  // namespace tbfs::store
