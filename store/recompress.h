// `tbfs recompress`: the chunks of cold files compressed again, in place,
// at another zstd level and with their family's dictionary
// (store/dictionary.h). A migration compresses at a level fast enough to
// keep up with training jobs; an idle machine can afford more later.
//
// Each chunk is read and checked (I5), compressed anew, decoded again and
// compared with what it replaces before it is written under the same key,
// so a reader (a shared store's mounts on other hosts) sees the old value
// or the new one, both whole and checked. A file's new chunks are synced,
// the file read back against its content hash, and only then its manifest
// records the new level, dictionary and stored size. A crash in between
// leaves chunks of both kinds, each readable; the manifest still names
// the old level, so the next run does the file again. Nothing is ever
// decompressed to disk. Needs the store's writer: the command's, or a
// mount's daemon serving the store meanwhile (`tbfs recompress
// MOUNTPOINT`; the options' locks below).
#pragma once

#include <atomic>
#include <functional>
#include <string>
#include <utility>
#include <vector>

#include "base/status.h"
#include "base/thread_annotations.h"
#include "base/work_pool.h"
#include "store/cold_store.h"

namespace tbfs::store {

struct RecompressOptions {
  int level = kDefaultZstdLevel;
  bool dictionaries = true;                   // IngestOptions::dictionaries
  WorkPool* pool = nullptr;                   // required
  std::atomic<uint64_t>* progress = nullptr;  // bytes of content read, optional
  // A mount's daemon, which serves the store while it recompresses. Held
  // around each file's work: the mount's pass lock (its migration passes
  // run between files, and no dictionary is trained by both at once).
  Mutex* file_lock = nullptr;
  // Held exclusively around each file's last step, a short one: its
  // manifest read again and, where it still names the same content,
  // written with the new level and dictionary as it is now (a chmod,
  // rename, unlink or rehydration through the mount meanwhile keeps its
  // effect). The mount's namespace lock.
  SharedMutex* namespace_lock = nullptr;
  // No further file (nor wave of a file's chunks) starts once either is
  // set: an unmount, a mount turned read-only.
  const std::atomic<bool>* stop = nullptr;
  const std::atomic<bool>* read_only = nullptr;
  // Called after each file, under file_lock (a mount's daemon hands the
  // pages the file's work freed back to the system).
  std::function<void()> after_file;
};

struct RecompressReport {
  uint64_t files = 0;      // compressed again
  uint64_t unchanged = 0;  // already at the level, with the dictionary chosen
  // Removed or made hot before their turn, or while their chunks were
  // compressed: their new chunks went with them (left for a retired
  // file's open handles).
  uint64_t gone = 0;
  bool stopped = false;  // options.stop or read_only was set: files were left as they were
  uint64_t bytes = 0;    // content of the files compressed again
  uint64_t stored_before = 0;
  uint64_t stored_after = 0;
  // What the store's files take on disk before the run and after it
  // (after the replaced chunks were collected: ColdStore::Compact).
  uint64_t disk_before = 0;
  uint64_t disk_after = 0;
  // Why the replaced chunks are still on disk (the compaction failed: a
  // full disk, the engine's files unreadable); empty when they are not, or when
  // they are too few to be worth the compaction (ColdStore::Compact
  // rewrites every chunk): a quarter of the store's size.
  std::string compact_error;
  std::vector<std::pair<std::string, std::string>> failed;  // path, why
  // Damage to the store's dictionaries found before the run
  // (ColdStore::CheckDictionaries): not this run's doing, but worth a look.
  std::vector<std::string> problems;
};

// Every cold file not yet at options.level with the better, on its middle
// chunk, of its own dictionary and its family's newest (training one on
// the first file that can teach it when the family has none). Per-file failures
// (a damaged chunk) are in the report and leave that file as it was; an
// error of the store itself stops the run.
Result<RecompressReport> Recompress(ColdStore& store, const RecompressOptions& options);

}  // namespace tbfs::store
