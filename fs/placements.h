// Files put in place in the backing folder while the store still has them.
#pragma once

#include <atomic>
#include <cstdint>

namespace tbfs::fs {

// Files put in place in the backing folder while the store still has them
// (a rehydration): for a moment a file is in both, and a reader that looks
// at the backing folder before it lands and at the store after it left
// finds it in neither. Readers take a Mark before they look and ask
// Moved(mark) after: true when a placement began, ended or was in flight
// in between, and they look again. Lock-free.
class Placements {
 public:
  struct Mark {
    uint64_t events;
  };
  void Begin() {
    in_flight_.fetch_add(1);
    events_.fetch_add(1);
  }
  void End() {
    events_.fetch_add(1);
    in_flight_.fetch_sub(1);
  }
  Mark Now() const { return {events_.load()}; }
  bool Moved(Mark m) const { return in_flight_.load() != 0 || events_.load() != m.events; }

 private:
  std::atomic<uint64_t> events_{0};
  std::atomic<int64_t> in_flight_{0};
};

}  // namespace tbfs::fs
