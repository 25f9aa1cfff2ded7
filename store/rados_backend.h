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

// "rados://POOL[/PREFIX][?conf=FILE&id=NAME&timeout=DUR]" (%XX escapes
// allowed): the form --store and the config take. The prefix ends in '/'
// when given. InvalidArgument, one line, for anything else.
Result<RadosLocation> ParseRadosUrl(const std::string& url);
bool IsRadosUrl(const std::string& store);

// Connects and opens (or, with create_if_missing, creates) the store.
// NotFound when the pool or the store is missing.
Result<std::unique_ptr<Backend>> OpenRadosBackend(const RadosLocation& where, const BackendOptions& options);

// One writer (migrator, gc, restore) per RADOS store, whatever host it runs
// on: an exclusive RADOS lock on the store's head object held as a lease.
// A thread renews it every third of the lease; a holder that dies (or
// loses the cluster) loses it when the lease runs out, and the next writer
// may take it then. A holder whose renewal failed stops being one: held()
// turns false, and it must write no more.
class RadosLease {
 public:
  // Busy, naming the holder (its `holder` text), when another holds it.
  static Result<std::unique_ptr<RadosLease>> Acquire(const RadosLocation& where, const std::string& holder,
                                                     int lease_s);
  ~RadosLease();  // stops renewing and gives the lock back
  bool held() const;

  RadosLease(const RadosLease&) = delete;
  RadosLease& operator=(const RadosLease&) = delete;

 private:
  struct State;
  explicit RadosLease(std::unique_ptr<State> state);
  std::unique_ptr<State> state_;
};

}  // namespace tbfs::store
