// Which files the unfinished migrations of this process journaled, so that
// a file deleted before its batch commits is known to be deleted, not lost.
//
// A migration's journal record (invariant I4) lists its files; recovery
// undoes what a batch left unfinished, and a file it finds neither in the
// logdir nor in the store is recorded lost (it cannot tell a deletion from
// a store that lost the file). But a file can be deleted on purpose in the
// batch's window: through the mount (its store copy unlinked, while it
// waits aside or after its move), by a restore, or in the logdir while it
// is copied (the batch sees it go). Whoever deletes it then writes a mark,
// Meta "batch_mark/" + file id -> batch id + kind, in the same commit
// as the deletion; recovery removes what the batch set aside of a marked
// file and records no loss (store/recovery.cc). A file the batch gives up
// (left in place, or put back) is marked too, with another kind: deleted
// after that, it is the user's doing, not a loss either. The marks go with
// their batch's record (its commit, or the recovery that ends it).
//
// The index is this process's own: the records it wrote (PutJournal) or
// found at the store's open; only the store's writer deletes files.
#pragma once

#include <cstdint>
#include <map>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "base/status.h"
#include "base/thread_annotations.h"
#include "store/backend.h"
#include "store/proto/store.pb.h"

namespace tbfs::store {

inline constexpr char kBatchMarkPrefix[] = "batch_mark/";

enum class Mark : char {
  kNone = 0,
  kDeleted = 'd',      // deleted on purpose: what the batch set aside of it goes
  kLeftInPlace = 'k',  // given up by the batch: in the logdir, or deleted since
};

class JournalIndex {
 public:
  // A migration's record written (again: it replaces what was known of it).
  void Add(const storepb::JournalRecord& record);
  // Its record deleted: its files are no longer journaled.
  void Forget(uint64_t batch_id);
  // When file_id is journaled by an unfinished migration: its mark, into
  // `batch` (the commit that deletes the file, or gives it up). A file
  // marked deleted stays so.
  void MarkDeleted(WriteBatch* batch, uint64_t file_id) { Put(batch, file_id, Mark::kDeleted); }
  void Put(WriteBatch* batch, uint64_t file_id, Mark mark);
  // The deletion of the marks written for batch_id's files, into `batch`
  // (the commit that deletes its record).
  void DropMarks(WriteBatch* batch, uint64_t batch_id);

 private:
  struct Batch {
    std::unordered_set<uint64_t> files;
    std::unordered_map<uint64_t, Mark> marked;
  };
  Mutex mu_;
  std::map<uint64_t, Batch> batches_ TBFS_GUARDED_BY(mu_);  // by batch id
};

// The deletion of file_id's mark, into `batch`.
void DropBatchMark(WriteBatch* batch, uint64_t file_id);

}  // namespace tbfs::store
