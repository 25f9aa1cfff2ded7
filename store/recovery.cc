// Finishing or undoing what a killed migration left: every journaled batch
// (store/migrate.h: Recover); then the files a damaged MANIFEST dropped,
// found again in what a writer's open set aside.
#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <map>
#include <set>

#include "base/failpoint.h"
#include "base/fs_util.h"
#include "base/time_util.h"
#include "fmt/format.h"
#include "spdlog/spdlog.h"
#include "store/file_io.h"
#include "store/format.h"
#include "store/migrate.h"
#include "store/migrate_internal.h"
#include "store/salvager.h"
#include "store/set_aside.h"
#include "store/store_dir.h"

namespace tbfs::store {

namespace {

// A file at `name` in dir_fd that holds m's content and owner: a write-back
// of ours (under the file's name, or beside a new file that took it) cut
// short before the store copy was dropped. Another user's copy of the
// bytes is not: they could delete it, and the content would be gone.
bool OursAlready(int dir_fd, const std::string& name, const std::string& path,
                 const storepb::Manifest& m) {
  // Judged on the fd it reads: a file renamed over the name meanwhile is
  // judged whole, owner and bytes.
  UniqueFd fd(OpenAtOwnRead(dir_fd, name.c_str(), O_RDONLY | O_NOFOLLOW | O_NONBLOCK | kOwnRead));
  struct stat st;
  return fd.valid() && ::fstat(fd.get(), &st) == 0 && st.st_uid == m.uid() &&
         SameContent(fd.get(), path, m);
}

// The temporary file of a write-back cut short (under the name or beside
// it) in folder dfd, which a crash left.
void TidyUp(int dfd, const std::string& name, uint64_t file_id) {
  ::unlinkat(dfd, TempNameFor(name, file_id).c_str(), 0);
  ::unlinkat(dfd, TempNameFor(RecoveredName(name, file_id), file_id).c_str(), 0);
}

Mark MarkOf(const std::map<uint64_t, Mark>& marks, uint64_t file_id) {
  auto it = marks.find(file_id);
  return it == marks.end() ? Mark::kNone : it->second;
}

// Drops the marks of files of unfinished batches (store/journal_index.h)
// but those of the entries of records kept, then returns `result`.
Result<RecoveryResult> DropSettledMarks(ColdStore& store, const std::map<uint64_t, Mark>& marks,
                                        RecoveryResult& result) {
  std::vector<storepb::JournalRecord> kept;
  if (!marks.empty()) TBFS_RETURN_IF_ERROR(store.ListJournal(&kept));
  std::set<uint64_t> waiting;
  for (const storepb::JournalRecord& r : kept) {
    for (const storepb::JournalEntry& e : r.entries()) waiting.insert(e.file_id());
  }
  WriteBatch drop;
  for (const auto& [id, mark] : marks) {
    if (!waiting.count(id)) DropBatchMark(&drop, id);
  }
  if (!drop.empty()) TBFS_RETURN_IF_ERROR(store.Commit(drop, true));
  return std::move(result);
}

// A journaled file found neither in the logdir nor in the store.
Status RecordLost(ColdStore& store, uint64_t batch_id, const storepb::JournalEntry& e,
                  RecoveryResult* result) {
  ColdStore::LostFile lost;
  lost.file_id = e.file_id();
  lost.path = e.path();
  lost.batch_id = batch_id;
  lost.found_ns = NowNs();
  lost.why = "journaled by an unfinished migration, found neither in the logdir nor in the store";
  TBFS_RETURN_IF_ERROR(store.RecordLost(lost));
  result->lost.push_back(e.path());
  return Status::OK();
}

// An entry left unresolved, into the record written again.
void Keep(const storepb::JournalEntry& e, bool cold, storepb::JournalRecord* kept) {
  storepb::JournalEntry* k = kept->add_entries();
  *k = e;
  k->set_cold_when_kept(cold || e.cold_when_kept());
}

Result<RecoveryResult> RecoverJournal(ColdStore& store, const std::string& logdir, bool retire) {
  RecoveryResult result;
  std::vector<storepb::JournalRecord> records;
  TBFS_RETURN_IF_ERROR(store.ListJournal(&records));
  std::map<uint64_t, Mark> marks;  // files deleted, or left in place, by unfinished batches
  TBFS_RETURN_IF_ERROR(store.ListBatchMarks(&marks));
  if (records.empty()) return DropSettledMarks(store, marks, result);
  auto root = OpenFile(logdir, O_PATH | O_DIRECTORY);
  if (!root.ok()) return root.status();
  const std::map<uint64_t, std::string> asides = FindAsideFiles(records, logdir, &result);
  WorkPool pool(0);
  for (const storepb::JournalRecord& record : records) {
    result.batches++;
    const bool restoring = record.kind() == storepb::JournalRecord::RESTORE;
    // The entries still unresolved: a record that must stay is written
    // again with only them, so that the next recovery does not judge again
    // a file this one settled (it may have moved since, under another id).
    storepb::JournalRecord kept = record;
    kept.clear_entries();
    for (const storepb::JournalEntry& e : record.entries()) {
      const std::string path = JoinPath(logdir, e.path());  // for notes
      auto manifest = store.GetManifest(e.file_id());
      if (!manifest.ok() && !manifest.status().IsNotFound()) return manifest.status();
      const Mark mark = restoring || manifest.ok() ? Mark::kNone : MarkOf(marks, e.file_id());
      const bool deleted = mark == Mark::kDeleted;
      // Beneath the logdir, through its folder's fd: a folder now a symlink is not followed.
      std::string name;
      auto dir = OpenParentBeneath(root->get(), e.path(), &name);
      struct stat st;
      bool exists = false;
      if (!restoring && manifest.ok() &&
          SettleAside(root->get(), asides, e, *manifest, logdir, &result)) {
        TBFS_RETURN_IF_ERROR(DropFromStore(store, *manifest, retire));
        result.dropped++;
        result.changed.push_back(manifest->path());
        continue;
      }
      if (dir.ok()) TidyUp(dir->get(), name, e.file_id());
      if (!restoring) exists = PutAsideBack(root->get(), asides, e, logdir, deleted, &st, &result);
      if (dir.ok() && !exists)
        exists = ::fstatat(dir->get(), name.c_str(), &st, AT_SYMLINK_NOFOLLOW) == 0;
      if (!restoring && !dir.ok() && dir.status().sys_errno() != ENOENT) {
        // Its folder cannot be reached beneath the logdir (a symlink now):
        // nothing can be told of the file; judged once the folder is back.
        result.notes.push_back(path + " waits: its folder cannot be reached (" +
                               dir.status().message() + ")");
        Keep(e, manifest.ok(), &kept);
        continue;
      }
      if (restoring) {
        // Finished where the file in place is the one restored (its bytes
        // and owner), undone (still cold) otherwise: a file of someone
        // else's at the name, which the restore left alone, keeps the copy.
        if (exists && manifest.ok() && OursAlready(dir->get(), name, path, *manifest)) {
          TBFS_RETURN_IF_ERROR(DropFromStore(store, *manifest, retire));
          result.dropped++;
          result.changed.push_back(e.path());
        }
        continue;
      }
      // An unfinished migration is undone.
      if (exists && SameIdentity(st, e)) {
        TBFS_RETURN_IF_ERROR(
            DropFromStore(store, manifest.ok() ? *manifest : Stub(e), retire && manifest.ok()));
        result.dropped++;
        result.changed.push_back(e.path());
        continue;
      }
      if (!manifest.ok()) {
        // Never unlinked before its manifest was in the engine's flushed
        // files (I2): gone from both places, it was deleted by someone else
        // before its copy, or the store lost it. Nothing tells which, so it
        // is a loss until an admin says otherwise (fsck --clear-lost).
        TBFS_RETURN_IF_ERROR(DropFromStore(store, Stub(e)));
        if (!exists && mark != Mark::kNone) {
          result.notes.push_back(
              path + (deleted ? " was deleted before its batch committed"
                              : " was left in place by its batch, and deleted or renamed since"));
        } else if (!exists && e.cold_when_kept()) {
          result.notes.push_back(path + " was deleted from the store since the last recovery");
        } else if (!exists) {
          TBFS_RETURN_IF_ERROR(RecordLost(store, record.batch_id(), e, &result));
        }
        continue;
      }
      // Possibly our own write-back, cut short before the store copy was
      // dropped: the copy may go if the content is the same.
      if (dir.ok() &&
          ((exists && OursAlready(dir->get(), name, path, *manifest)) ||
           OursAlready(dir->get(), RecoveredName(name, e.file_id()), path, *manifest))) {
        TBFS_RETURN_IF_ERROR(DropFromStore(store, *manifest, retire));
        result.dropped++;
        result.changed.push_back(e.path());
        continue;
      }
      std::string dest, note;
      Status put = PutBack(store, logdir, *manifest, &pool, nullptr, &dest, &note);
      if (!put.ok() && put.sys_errno() != 0 && put.sys_errno() != ENOSPC &&
          put.sys_errno() != EDQUOT && put.sys_errno() != EIO) {
        // Its folder cannot be reached beneath the logdir (a symlink now):
        // it stays cold, visible through a mount, and is tried again later.
        result.notes.push_back(path + " stays in the store: " + put.message());
        Keep(e, true, &kept);
        continue;
      }
      TBFS_RETURN_IF_ERROR(put);
      MaybeCrash("recovery.written_back");
      if (!note.empty()) result.notes.push_back(note);
      TBFS_RETURN_IF_ERROR(DropFromStore(store, *manifest, retire));
      result.restored++;
      result.changed.push_back(e.path());
    }
    if (kept.entries().empty()) {
      TBFS_RETURN_IF_ERROR(store.DeleteJournal(record.batch_id()));
    } else if (kept.SerializeAsString() != record.SerializeAsString()) {
      TBFS_RETURN_IF_ERROR(store.PutJournal(kept));
    }
  }
  return DropSettledMarks(store, marks, result);
}

// Writes m (found set aside) back into the logdir, hot, as an unfinished
// migration is undone: under its name, or beside a file that took it (or
// a cold file of the store that holds the name). Nothing when one of the
// two names holds it already (our own write-back, or the file never left).
// *dest: where it is written; empty when nothing was.
Status WriteBackFound(ColdStore& store, const std::string& logdir, int root_fd,
                      const storepb::Manifest& m, const ChunkSource& read, WorkPool* pool,
                      std::string* dest) {
  const std::string path = JoinPath(logdir, m.path());  // for messages
  const std::string beside = RecoveredName(m.path(), m.file_id());
  std::string name;
  if (auto dir = OpenParentBeneath(root_fd, m.path(), &name); dir.ok()) {
    if (OursAlready(dir->get(), name, path, m) ||
        OursAlready(dir->get(), RecoveredName(name, m.file_id()), path, m)) {
      return Status::OK();
    }
  }
  MaterializeOptions mo;
  mo.pool = pool;
  mo.folders_as_stored = true;
  mo.root_fd = root_fd;
  // A folder made on the way as the store remembers it; one it does not
  // know (made after the cut) is the file's owner's alone, never more open
  // than it may have been (red team: a 0700 folder came back 0755).
  const auto as_stored = FoldersAsStored(store, logdir, mo);
  auto made = [&](const std::string& folder, int fd) {
    if (store.GetEntry(folder).ok()) return as_stored(folder, fd);
    if (::fchown(fd, m.uid(), m.gid()) != 0 || ::fchmod(fd, 0700) != 0)
      spdlog::warn("{}: folder {}: {}", logdir, folder, std::strerror(errno));
  };
  const bool taken = store.Lookup(m.path()).ok();  // a cold file by that name
  *dest = taken ? beside : m.path();
  Status st = MaterializeFrom(m, read, made, logdir, *dest, mo);
  if (st.sys_errno() == EEXIST && !taken) {
    *dest = beside;
    st = MaterializeFrom(m, read, made, logdir, *dest, mo);
  }
  if (!st.ok()) dest->clear();
  return st;
}

// The files a MANIFEST cut back lost (SetAside::LostByTheStore), found in
// the blob files a writer's open set aside, are written back into the
// logdir, hot. First, in one synced commit, each is recorded lost and the
// store's next file id is raised past them: the cut store would hand their
// ids out again, and a file whose id went to another could no longer be
// told from one deleted since (red team). One written back loses its
// record; one that cannot be keeps it (fsck, status and the exit status
// say so) and is tried again by the next writer: while any file is
// recorded lost, every set-aside blob file is read; otherwise each once
// (kSetAsideReadPrefix), so a file written back and deleted since stays
// deleted.
Status PutBackSetAside(ColdStore& store, const std::string& logdir, RecoveryResult* result) {
  const std::string folder = JoinPath(store.dir(), kLostFoundName);
  std::vector<std::string> names;
  if (!ListFiles(folder, &names).ok()) return Status::OK();  // nothing set aside, or no folder
  std::set<std::string> read_before;
  TBFS_RETURN_IF_ERROR(store.ListSetAsideRead(&read_before));
  std::vector<ColdStore::LostFile> recorded;
  TBFS_RETURN_IF_ERROR(store.ListLost(&recorded));
  SetAside found(store);
  WriteBatch done;
  for (const std::string& n : names) {
    if (!n.ends_with(".blob") || (read_before.count(n) && recorded.empty())) continue;
    if (Status st = found.Read(JoinPath(folder, n)); !st.ok()) {
      result->notes.push_back(fmt::format("set-aside {}: {} (tbfs salvage reads what it can)",
                                          JoinPath(folder, n), st.message()));
      continue;  // read again by the next writer
    }
    if (!read_before.count(n)) ColdStore::MarkSetAsideRead(&done, n);
  }
  std::vector<uint64_t> nameless;
  auto lost = found.LostByTheStore(&nameless);
  if (!lost.ok()) return lost.status();
  auto said_lost = [result](const std::string& path) {  // once, the journal's too
    if (std::find(result->lost.begin(), result->lost.end(), path) == result->lost.end())
      result->lost.push_back(path);
  };
  std::vector<ColdStore::LostFile> pending;
  uint64_t next = 0;
  const uint64_t now = static_cast<uint64_t>(NowNs());
  for (const storepb::Manifest& m : *lost) {
    pending.push_back({m.file_id(), m.path(), 0, now,
                       fmt::format("the store lost it (a MANIFEST cut back); its records are in "
                                   "{}: the next writer writes it back into the logdir, and tbfs "
                                   "salvage writes it out",
                                   folder)});
    next = std::max(next, m.file_id() + 1);
  }
  for (uint64_t id : nameless) {  // no name to write it back under
    const std::string what = fmt::format("(file id {})", id);
    pending.push_back({id, what, 0, now,
                       fmt::format("the store lost it (a MANIFEST cut back); its chunks are in {}, "
                                   "its manifest copy there is damaged: tbfs salvage reads what it "
                                   "can",
                                   folder)});
    next = std::max(next, id + 1);
    result->notes.push_back(pending.back().why + ": " + what);
    said_lost(what);
  }
  if (!pending.empty()) TBFS_RETURN_IF_ERROR(store.RecordLost(pending, next));
  auto root = OpenFile(logdir, O_PATH | O_DIRECTORY);
  if (!root.ok()) return root.status();
  WorkPool pool(0);
  std::vector<ColdStore::LostFile> failed;  // their records say why now
  for (const storepb::Manifest& m : *lost) {
    auto read = [&, content = ContentManifest(m)](uint64_t index, ChunkCodec* codec,
                                                  std::string* raw) {
      return found.ReadChunk(content, index, codec, raw);
    };
    std::string dest;
    Status st = WriteBackFound(store, logdir, root->get(), m, read, &pool, &dest);
    const std::string path = JoinPath(logdir, m.path());
    if (!st.ok()) {
      failed.push_back({m.file_id(), m.path(), 0, now,
                        fmt::format("the store lost it (a MANIFEST cut back); what {} holds of it "
                                    "could not be written back: {} ({})",
                                    folder, st.message(),
                                    st.IsCorruption() ? "tbfs salvage writes out what verifies"
                                                      : "the next writer tries again")});
      result->notes.push_back(path + ": " + failed.back().why);
      said_lost(m.path());
      continue;
    }
    // Its record, and those of older versions of the same path (a batch
    // journaled under another id before the cut).
    for (const ColdStore::LostFile& f : recorded) {
      if (f.path == m.path() && f.file_id < m.file_id())
        done.Delete(Space::kMeta, kLostPrefix + EncodeId(f.file_id));
    }
    done.Delete(Space::kMeta, kLostPrefix + EncodeId(m.file_id()));
    std::erase(result->lost, m.path());
    if (dest.empty()) continue;  // in place already
    result->found_again++;
    result->changed.push_back(dest);
    result->notes.push_back(
        fmt::format("{}: the store had lost it (its records were in engine files a damaged "
                    "MANIFEST no longer listed, set aside in {}); written back as {}",
                    path, folder, JoinPath(logdir, dest)));
  }
  if (!failed.empty()) TBFS_RETURN_IF_ERROR(store.RecordLost(failed));
  return done.empty() ? Status::OK() : store.Commit(done, true);
}

Result<RecoveryResult> Recover(ColdStore& store, const std::string& logdir, bool retire) {
  auto result = RecoverJournal(store, logdir, retire);
  if (!result.ok()) return result;
  TBFS_RETURN_IF_ERROR(PutBackSetAside(store, logdir, &*result));
  return result;
}

}  // namespace

Result<RecoveryResult> Recover(ColdStore& store, const std::string& logdir) {
  // No open handle survives a restart: retired chunks can all go.
  TBFS_RETURN_IF_ERROR(store.DropAllRetired());
  return Recover(store, logdir, false);
}

Result<RecoveryResult> RecoverServing(ColdStore& store, const std::string& logdir) {
  return Recover(store, logdir, true);
}

}  // namespace tbfs::store
