// The writer's lease of a RADOS store: a cls_lock exclusive lock on its
// head, renewed in the background; and the fence that makes each commit
// assert it (store/rados_backend.h).
#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <cstring>
#include <list>
#include <thread>

#include "base/thread_annotations.h"
#include "fmt/format.h"
#include "spdlog/spdlog.h"
#include "store/rados_internal.h"

namespace tbfs::store {

librados::bufferlist AssertLockedInput(std::string_view cookie) {
  auto u32 = [](std::string* out, uint32_t v) {
    for (int i = 0; i < 4; ++i) out->push_back(static_cast<char>(v >> (8 * i)));
  };
  auto str = [&](std::string* out, std::string_view v) {
    u32(out, static_cast<uint32_t>(v.size()));
    out->append(v);
  };
  std::string body;
  str(&body, kLeaseName);
  body.push_back(1);
  str(&body, cookie);
  str(&body, "");
  std::string framed = {1, 1};  // struct version, oldest compatible version
  u32(&framed, static_cast<uint32_t>(body.size()));
  framed += body;
  librados::bufferlist bl;
  bl.append(framed.data(), framed.size());
  return bl;
}

void RadosFence::Set(std::shared_ptr<RadosLease> lease) {
  MutexLock lock(mu_);
  lease_ = std::move(lease);
}

std::shared_ptr<RadosLease> RadosFence::lease() const {
  MutexLock lock(mu_);
  return lease_;
}

struct RadosLease::State {
  Connection c;
  std::string head, cookie, what;
  int lease_s = 30;
  Mutex mu;
  std::condition_variable_any cv;
  bool stopping TBFS_GUARDED_BY(mu) = false;
  std::atomic<bool> held{true};
  std::thread renewer;

  int Lock(uint8_t flags) {
    struct timeval duration = {lease_s, 0};
    return c.io.lock_exclusive(head, kLeaseName, cookie, "tbfs store writer", &duration, flags);
  }
  void Renew() {
    MutexLock lock(mu);
    // The wait releases and retakes mu; the analysis cannot see into it.
    while (!cv.wait_for(lock, std::chrono::milliseconds(lease_s * 1000 / 3),
                        [&]() TBFS_NO_THREAD_SAFETY_ANALYSIS { return stopping; })) {
      const int r = Lock(LIBRADOS_LOCK_FLAG_MUST_RENEW);
      if (r < 0) {
        held = false;
        spdlog::error("{}: the writer's lease could not be renewed ({}); writing stops", what,
                      std::strerror(-r));
        return;
      }
    }
  }
};

RadosLease::RadosLease(std::unique_ptr<State> state) : state_(std::move(state)) {}

RadosLease::~RadosLease() {
  {
    MutexLock lock(state_->mu);
    state_->stopping = true;
  }
  state_->cv.notify_all();
  if (state_->renewer.joinable()) state_->renewer.join();
  if (state_->held) (void)state_->c.io.unlock(state_->head, kLeaseName, state_->cookie);
}

int RadosLeaseAccess::Operate(RadosLease& lease, const std::string& oid,
                              librados::ObjectWriteOperation* op) {
  return lease.state_->c.io.operate(oid, op);
}

bool RadosLease::held() const { return state_->held; }
const std::string& RadosLease::cookie() const { return state_->cookie; }

Result<std::unique_ptr<RadosLease>> RadosLease::Acquire(const RadosLocation& where,
                                                        const std::string& holder, int lease_s) {
  auto state = std::make_unique<State>();
  TBFS_RETURN_IF_ERROR(Connect(where, &state->c));
  state->head = where.prefix + "head";
  state->what = Describe(where);
  state->lease_s = std::max(lease_s, 3);
  // The cookie names the holder to whoever is refused: unique per taker.
  state->cookie = fmt::format("{} [{}]", holder, reinterpret_cast<uintptr_t>(state.get()));
  const int r = state->Lock(0);
  if (r == -EBUSY || r == -EEXIST) {
    int exclusive = 0;
    std::string tag;
    std::list<librados::locker_t> lockers;
    std::string who = "another tbfs process";
    if (state->c.io.list_lockers(state->head, kLeaseName, &exclusive, &tag, &lockers) >= 0 &&
        !lockers.empty()) {
      who = lockers.front().cookie + " on " + lockers.front().address;
    }
    return Status::Busy(
        fmt::format("{} is in use by {} (its lease lasts {} s after its last renewal)", state->what,
                    who, state->lease_s));
  }
  TBFS_RETURN_IF_ERROR(FromRados(r, "lock", state->what));
  State* s = state.get();
  state->renewer = std::thread([s] { s->Renew(); });
  return std::unique_ptr<RadosLease>(new RadosLease(std::move(state)));
}

}  // namespace tbfs::store
