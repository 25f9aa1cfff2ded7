// The cold store on Ceph RADOS (store/rados_backend.cc; docs/format.md, "The
// RADOS store"): where it is, and how to open it as a store::Backend.
#pragma once

#include <memory>
#include <string>

#include "base/status.h"
#include "store/backend.h"

namespace tbfs::store {

struct RadosLocation {
  std::string pool;
  std::string prefix;  // objects' name prefix: several stores share a pool
  std::string conf;    // ceph.conf; "" for Ceph's default search
  std::string user;    // the client id ("admin" when empty)
  int timeout_s = 30;  // an operation the cluster does not answer fails after this long
};

// Connects and opens (or, with create_if_missing, creates) the store.
// NotFound when the pool or the store is missing.
Result<std::unique_ptr<Backend>> OpenRadosBackend(const RadosLocation& where, const BackendOptions& options);

}  // namespace tbfs::store
