// The cold store on Ceph RADOS (store/rados_backend.cc; docs/format.md, "The
// RADOS store"): where it is, and how to open it as a store::Backend.
#pragma once

#include <memory>
#include <mutex>
#include <string>

#include "base/status.h"
#include "base/thread_annotations.h"
#include "store/backend.h"

namespace tbfs::store {

struct RadosLocation {
  std::string pool;
  std::string prefix;  // objects' name prefix: several stores share a pool
  std::string conf;    // ceph.conf; "" for Ceph's default search
  std::string user;    // the client id ("admin" when empty)
  int timeout_s = 30;  // an operation the cluster does not answer fails after this long
  int lease_s = 30;    // the writer's lease (RadosLease): how long a dead writer blocks the next
};

// "rados://POOL[/PREFIX][?conf=FILE&id=NAME&timeout=DUR&lease=DUR]" (%XX escapes
// allowed): the form --store and the config take. The prefix ends in '/'
// when given. InvalidArgument, one line, for anything else.
// A relative conf= is made absolute against the current folder (a daemon
// changes to /).
Result<RadosLocation> ParseRadosUrl(const std::string& url);
bool IsRadosUrl(const std::string& store);
// True for anything of the form SCHEME:/..., anything starting "rados:"
// (any case), and anything with blanks at either end, rados:// or not: a
// store that looks like an address but is no rados:// one is a mistake
// ("RADOS://", "rados:/pool", " rados://pool"), never a folder to create.
bool LooksLikeAddress(const std::string& store);

class RadosLease;

// Who may write a shared store from this process: the writer's lease it
// holds, or none. Every commit point asserts, in the same atomic operation
// on the head object, that the lease is still this process's (cls_lock's
// assert_locked), so a writer that lost it (a pause or a partition longer
// than the lease) writes no record, whatever it believes.
class RadosFence {
 public:
  void Set(std::shared_ptr<RadosLease> lease);
  std::shared_ptr<RadosLease> lease() const;

 private:
  mutable Mutex mu_;  // a leaf
  std::shared_ptr<RadosLease> lease_ TBFS_GUARDED_BY(mu_);
};

// Connects and opens (or, with create_if_missing, creates) the store.
// NotFound when the pool or the store is missing. With a fence, Commit
// writes only while the fence holds a live lease (EROFS otherwise: this
// process reads a store another one writes); without one, it writes
// unfenced (tests, tools).
Result<std::unique_ptr<Backend>> OpenRadosBackend(
    const RadosLocation& where, const BackendOptions& options,
    std::shared_ptr<const RadosFence> fence = nullptr);

// One writer (migrator, gc, restore) per RADOS store, whatever host it runs
// on: an exclusive RADOS lock on the store's head object held as a lease.
// A thread renews it every third of the lease; a holder that dies (or
// loses the cluster) loses it when the lease runs out, and the next writer
// may take it then. A holder whose renewal failed stops being one: held()
// turns false, and it must write no more.
class RadosLease {
 public:
  // Busy, naming the holder (its `holder` text), when another holds it.
  static Result<std::unique_ptr<RadosLease>> Acquire(const RadosLocation& where,
                                                     const std::string& holder, int lease_s);
  ~RadosLease();  // stops renewing and gives the lock back
  // False once a renewal failed: the lease may be someone else's now.
  bool held() const;
  // The lock's cookie (the holder's text made unique): what a fenced commit
  // asserts.
  const std::string& cookie() const;

  RadosLease(const RadosLease&) = delete;
  RadosLease& operator=(const RadosLease&) = delete;

 private:
  struct State;
  friend struct RadosLeaseAccess;  // a fenced commit goes through the lease's own client
  explicit RadosLease(std::unique_ptr<State> state);
  std::unique_ptr<State> state_;
};

}  // namespace tbfs::store
