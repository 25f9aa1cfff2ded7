// What the batch engine (migrate.cc) and recovery (recovery.cc) share; not
// for use outside store/.
#pragma once

#include <sys/stat.h>

#include <map>
#include <string>
#include <string_view>
#include <vector>

#include "base/status.h"
#include "base/work_pool.h"
#include "store/cold_store.h"
#include "store/migrate.h"

namespace tbfs::store {

// The file `st` describes is the one the journal entry recorded.
bool SameIdentity(const struct stat& st, const storepb::JournalEntry& e);
// A manifest with just enough to remove whatever a file id left in the store.
storepb::Manifest Stub(const storepb::JournalEntry& e);
// Removes the file's records and chunks in one commit (retire: keep the
// chunks for open handles, see ColdStore::Retire; mark: the file's mark,
// if its batch is not committed, store/journal_index.h).
Status DropFromStore(ColdStore& store, const storepb::Manifest& m, bool retire = false,
                     Mark mark = Mark::kNone);
// The name a file has while it waits aside, beside its own.
std::string AsideName(std::string_view name, uint64_t file_id);
// The name a moved file gets when it goes back and a new file took its own.
std::string RecoveredName(std::string_view name, uint64_t file_id);
// Writes a moved file back. When something new took its path meanwhile, the
// old content goes beside it, so neither is lost. *dest receives the path.
// The observer hears of the new file before it has a name (no lookup can
// find it unannounced).
Status PutBack(ColdStore& store, const std::string& logdir, const storepb::Manifest& m,
               WorkPool* pool, MoveObserver* observer, std::string* dest, std::string* note);

// Recovery's files aside (store/recovery_aside.cc). FindAsideFiles: where
// every file a migration set aside is, by id, when a record is a
// migration's (one walk of the logdir: a folder renamed through the mount
// took those in it along). SettleAside: the file aside whose store copy m
// is there goes where the copy is, with its attributes (true: the copy may
// go). PutAsideBack: the file aside is unlinked (`deleted`, still the
// journaled file) or goes back under its name in its folder; true, with
// *st, when that folder is not the journaled one.
std::map<uint64_t, std::string> FindAsideFiles(const std::vector<storepb::JournalRecord>& records,
                                               const std::string& logdir, RecoveryResult* result);
bool SettleAside(int root_fd, const std::map<uint64_t, std::string>& asides,
                 const storepb::JournalEntry& e, const storepb::Manifest& m,
                 const std::string& logdir, RecoveryResult* result);
bool PutAsideBack(int root_fd, const std::map<uint64_t, std::string>& asides,
                  const storepb::JournalEntry& e, const std::string& logdir, bool deleted,
                  struct stat* st, RecoveryResult* result);

}  // namespace tbfs::store
