// What the parts of the RADOS store (rados_backend.cc, rados_lease.cc)
// share; not for use outside store/. It includes librados.
#pragma once

#include <memory>
#include <rados/librados.hpp>
#include <string>
#include <string_view>

#include "base/status.h"
#include "store/rados_backend.h"

namespace tbfs::store {

// The name of the writer's lease: a cls_lock exclusive lock on the head.
inline constexpr char kLeaseName[] = "tbfs.writer";

inline Status FromRados(int r, const std::string& op, const std::string& object) {
  if (r >= 0) return Status::OK();
  return Status::FromErrno(-r, "rados " + op, object);
}

// A client of the cluster with the store's pool open.
struct Connection {
  std::unique_ptr<librados::Rados> cluster;
  librados::IoCtx io;
  ~Connection() {
    io.close();
    if (cluster) cluster->shutdown();
  }
};

// "rados://POOL/PREFIX", for messages.
std::string Describe(const RadosLocation& where);

// Connects to the cluster of `where` and opens its pool; operations fail
// after where.timeout_s rather than hang.
Status Connect(const RadosLocation& where, Connection* c);

// The input of cls_lock's assert_locked (Ceph's encoding of
// cls_lock_assert_op, version 1): the lock's name, its type (1: exclusive),
// the holder's cookie and tag (librados's lock_exclusive takes tag "").
librados::bufferlist AssertLockedInput(std::string_view cookie);

// A fenced commit goes through the lease's own client (RadosLease's
// friend).
struct RadosLeaseAccess {
  static int Operate(RadosLease& lease, const std::string& oid, librados::ObjectWriteOperation* op);
};

}  // namespace tbfs::store
