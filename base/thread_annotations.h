// Clang's thread-safety annotations, and a mutex that carries them.
//
// Shared state says which mutex guards it (TBFS_GUARDED_BY), functions say
// what they need held (TBFS_REQUIRES) and mutexes say what they are taken
// after (TBFS_ACQUIRED_AFTER): clang's -Wthread-safety then proves, at
// build time, that every access holds its lock and that locks are taken in
// the documented order. GCC ignores the annotations; the ctest test
// ThreadSafety.ClangAnalysis runs the analysis on every build.
#pragma once

#include <mutex>
#include <shared_mutex>

#if defined(__clang__)
#define TBFS_THREAD_ANNOTATION(x) __attribute__((x))
#else
#define TBFS_THREAD_ANNOTATION(x)
#endif

#define TBFS_CAPABILITY(x) TBFS_THREAD_ANNOTATION(capability(x))
#define TBFS_SCOPED_CAPABILITY TBFS_THREAD_ANNOTATION(scoped_lockable)
#define TBFS_GUARDED_BY(x) TBFS_THREAD_ANNOTATION(guarded_by(x))
#define TBFS_ACQUIRED_AFTER(...) TBFS_THREAD_ANNOTATION(acquired_after(__VA_ARGS__))
#define TBFS_ACQUIRED_BEFORE(...) TBFS_THREAD_ANNOTATION(acquired_before(__VA_ARGS__))
#define TBFS_REQUIRES_SHARED(...) TBFS_THREAD_ANNOTATION(requires_shared_capability(__VA_ARGS__))
#define TBFS_ACQUIRE_SHARED(...) TBFS_THREAD_ANNOTATION(acquire_shared_capability(__VA_ARGS__))
#define TBFS_RELEASE_SHARED(...) TBFS_THREAD_ANNOTATION(release_shared_capability(__VA_ARGS__))
#define TBFS_RELEASE_GENERIC(...) TBFS_THREAD_ANNOTATION(release_generic_capability(__VA_ARGS__))
#define TBFS_REQUIRES(...) TBFS_THREAD_ANNOTATION(requires_capability(__VA_ARGS__))
#define TBFS_EXCLUDES(...) TBFS_THREAD_ANNOTATION(locks_excluded(__VA_ARGS__))
#define TBFS_ACQUIRE(...) TBFS_THREAD_ANNOTATION(acquire_capability(__VA_ARGS__))
#define TBFS_TRY_ACQUIRE(...) TBFS_THREAD_ANNOTATION(try_acquire_capability(__VA_ARGS__))
#define TBFS_RELEASE(...) TBFS_THREAD_ANNOTATION(release_capability(__VA_ARGS__))
#define TBFS_NO_THREAD_SAFETY_ANALYSIS TBFS_THREAD_ANNOTATION(no_thread_safety_analysis)

namespace tbfs {

// std::mutex, annotated.
class TBFS_CAPABILITY("mutex") Mutex {
 public:
  void lock() TBFS_ACQUIRE() { mu_.lock(); }
  void unlock() TBFS_RELEASE() { mu_.unlock(); }

 private:
  std::mutex mu_;
};

// Holds a Mutex for its scope. lock()/unlock() let a
// std::condition_variable_any wait on it.
class TBFS_SCOPED_CAPABILITY MutexLock {
 public:
  explicit MutexLock(Mutex& mu) TBFS_ACQUIRE(mu) : mu_(mu) { mu_.lock(); }
  ~MutexLock() TBFS_RELEASE() { mu_.unlock(); }
  MutexLock(const MutexLock&) = delete;
  MutexLock& operator=(const MutexLock&) = delete;
  void lock() TBFS_ACQUIRE() { mu_.lock(); }
  void unlock() TBFS_RELEASE() { mu_.unlock(); }

 private:
  Mutex& mu_;
};

// std::shared_mutex, annotated.
class TBFS_CAPABILITY("shared_mutex") SharedMutex {
 public:
  void lock() TBFS_ACQUIRE() { mu_.lock(); }
  void unlock() TBFS_RELEASE() { mu_.unlock(); }
  bool try_lock() TBFS_TRY_ACQUIRE(true) { return mu_.try_lock(); }
  void lock_shared() TBFS_ACQUIRE_SHARED() { mu_.lock_shared(); }
  void unlock_shared() TBFS_RELEASE_SHARED() { mu_.unlock_shared(); }

 private:
  std::shared_mutex mu_;
};

// Holds a SharedMutex shared for its scope (or until unlock()).
class TBFS_SCOPED_CAPABILITY ReaderMutexLock {
 public:
  explicit ReaderMutexLock(SharedMutex& mu) TBFS_ACQUIRE_SHARED(mu) : mu_(mu) { mu_.lock_shared(); }
  ~ReaderMutexLock() TBFS_RELEASE_GENERIC() {
    if (held_) mu_.unlock_shared();
  }
  ReaderMutexLock(const ReaderMutexLock&) = delete;
  ReaderMutexLock& operator=(const ReaderMutexLock&) = delete;
  void unlock() TBFS_RELEASE_GENERIC() {
    mu_.unlock_shared();
    held_ = false;
  }

 private:
  SharedMutex& mu_;
  bool held_ = true;
};

// Holds a SharedMutex exclusively for its scope.
class TBFS_SCOPED_CAPABILITY WriterMutexLock {
 public:
  explicit WriterMutexLock(SharedMutex& mu) TBFS_ACQUIRE(mu) : mu_(mu) { mu_.lock(); }
  ~WriterMutexLock() TBFS_RELEASE() { mu_.unlock(); }
  WriterMutexLock(const WriterMutexLock&) = delete;
  WriterMutexLock& operator=(const WriterMutexLock&) = delete;

 private:
  SharedMutex& mu_;
};

}  // namespace tbfs
