// Test-only crash, pause, fault and hook points, compiled in only when the
// build defines TBFS_FAILPOINTS (CMake option of the same name: on for the
// development and test builds, off for Release and the shipped .deb, where
// every function below is an empty inline and no point's name, environment
// variable or hook is in the binary).
//
// MaybeCrash("migrate.unlinked") ends the process at once, exit status 86
// when the environment variable TBFS_FAILPOINT names that point (exactly).
// Crash tests set the variable, run a command, and check what recovery
// makes of the state left behind.
//
// MaybePause("migrate.batch") holds the calling thread when TBFS_PAUSE is
// "migrate.batch:/some/file" and that file exists: it creates
// "/some/file.reached", then waits until the file is removed. Tests use it
// to freeze an operation at a known instant and look at the rest of the
// system meanwhile.
//
// ShouldFail("migrate.verify") is true when the point is armed to fail: by
// TBFS_FAIL naming it (for a whole process, e.g. the tbfs command) or by a
// ScopedFailpoint in a test's own process. The caller then takes its
// failure path.
//
// FailpointHook("migrate.copied", path) runs the callback a ScopedFailpoint
// set for that point, if any: tests act at a known instant (a writer
// appears between a file's copy and its unlink).
//
// Every point is named once, in kFailpointNames below: a name that is not
// there does not compile where a point is placed or armed in code (Failpoint
// is consteval), and a process whose TBFS_FAILPOINT, TBFS_FAIL or TBFS_PAUSE
// names none aborts as it starts, saying so. When MaybeCrash ends a process
// and TBFS_FAILPOINT_REACHED names a file, it creates that file first: a
// test of a daemon (not its child) proves the crash was the point's.
//
// The environment is read once per process. Thread-safe.
#pragma once

#include <functional>
#include <string>
#include <string_view>

namespace tbfs {

inline constexpr int kFailpointExitCode = 86;

// The points, by the code they are in.
inline constexpr std::string_view kFailpointNames[] = {
    // store/migrate.cc: a batch's steps, in order (crashes, pauses, faults)
    "migrate.batch", "migrate.stored", "migrate.read_back", "migrate.copied", "migrate.named",
    "migrate.staged", "migrate.aside", "migrate.unlinked", "migrate.journaled", "migrate.flush",
    "migrate.flushed", "migrate.slow_file", "migrate.before_folder_sync", "migrate.fsync_folder",
    "migrate.all_unlinked", "migrate.before_verify", "migrate.verify", "migrate.verified",
    "migrate.commit", "migrate.committed", "migrate.rollback_one", "migrate.journal",
    // store/file_io.cc: a file's copy into the store
    "migrate.copying", "ingest.wave", "ingest.commit",
    // store/cold_store.cc, store/tree_conversion.cc: creation and format 4
    "store.create.engine", "store.create.record", "store.convert.before_switch",
    "store.convert.after_switch",
    // store/store_dictionaries.cc, store/recompress.cc, store/restore.cc
    "store.dict_records", "recompress.chunks_synced", "recompress.before_record", "store.compact",
    "restore.in_place",
    // store/recovery.cc: a file written back, its store copy not yet dropped
    "recovery.written_back",
    // store/rocks_compact.cc: a compaction's files checked, not yet read
    "compact.checked",
    // store/local_engine.cc: a write's room checked (armed to fail: passed
    // whatever the room), the engine's log not yet written
    "store.room_checked",
    // store/rados_backend.cc: either side of a batch's commit point
    "rados.before_commit_point", "rados.after_commit_point",
    // base/fs_util.cc: between a path's check and its open
    "open_regular.before",
    // fs/: the mount
    "rehydrate.placing", "migrator.took_over", "readdir.colliding_cookies", "cache.slow_chunk",
    "retention.slow_delete", "fixowner.made", "create.looked_up", "open.throws"};

constexpr bool IsFailpoint(std::string_view name) {
  for (std::string_view known : kFailpointNames) {
    if (known == name) return true;
  }
  return false;
}

// A point's name, checked against kFailpointNames as the code compiles.
class Failpoint {
 public:
  consteval Failpoint(const char* name) : name_(name) {  // NOLINT: implicit on purpose
    if (!IsFailpoint(name_)) throw "not a failpoint: name it in base/failpoint.h";
  }
  constexpr std::string_view name() const { return name_; }

 private:
  std::string_view name_;
};

#ifdef TBFS_FAILPOINTS

inline constexpr bool kFailpointsBuilt = true;

void MaybeCrash(Failpoint point);
void MaybePause(Failpoint point);
bool ShouldFail(Failpoint point);
void FailpointHook(Failpoint point, const std::string& arg);

// Arms `point` for as long as it lives: ShouldFail(point) is true, and
// FailpointHook(point, arg) calls `hook(arg)` (when given). One per point
// at a time.
class ScopedFailpoint {
 public:
  explicit ScopedFailpoint(Failpoint point, std::function<void(const std::string&)> hook = nullptr);
  ~ScopedFailpoint();
  ScopedFailpoint(const ScopedFailpoint&) = delete;
  ScopedFailpoint& operator=(const ScopedFailpoint&) = delete;

 private:
  std::string point_;
};

#else

inline constexpr bool kFailpointsBuilt = false;

inline void MaybeCrash(Failpoint) {}
inline void MaybePause(Failpoint) {}
inline bool ShouldFail(Failpoint) { return false; }
inline void FailpointHook(Failpoint, const std::string&) {}

#endif

}  // namespace tbfs
