// The engine under a ColdStore, for tests that damage records in it
// (ColdStore names this struct its friend).
#pragma once

#include "store/cold_store.h"

namespace tbfs::store {
struct StoreInternals {
  static Backend& Of(ColdStore& store) { return store.backend(); }
};
}  // namespace tbfs::store
