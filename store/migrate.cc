#include "base/time_util.h"
#include "store/migrate.h"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <set>

#include "base/failpoint.h"
#include "base/fs_util.h"
#include "base/work_pool.h"
#include "events/logdir_digest.h"
#include "events/verifier.h"
#include "fmt/format.h"
#include "spdlog/spdlog.h"
#include "store/file_io.h"
#include "store/format.h"

namespace tbfs::store {

namespace {

bool SameIdentity(const struct stat& st, const storepb::JournalEntry& e) {
  return st.st_ino == e.ino() && static_cast<uint64_t>(st.st_size) == e.size() &&
         ToNs(st.st_mtim) == e.mtime_ns() && ToNs(st.st_ctim) == e.ctime_ns();
}

// A manifest with just enough to remove whatever a file id left in the store.
storepb::Manifest Stub(const storepb::JournalEntry& e) {
  storepb::Manifest m;
  m.set_file_id(e.file_id());
  m.set_path(e.path());
  return m;
}

Status DropFromStore(ColdStore& store, const storepb::Manifest& m) {
  WriteBatch batch;
  store.RemoveFile(&batch, m);
  return store.Commit(batch, true);
}

// The tfevents files of every run that holds one of the candidates: those
// whose folder is the candidate's folder or one of its ancestors.
std::vector<std::string> AffectedEventFiles(const std::vector<std::string>& event_files,
                                            const std::vector<Candidate>& batch) {
  std::set<std::string> folders;
  for (const Candidate& c : batch) {
    std::string dir = ParentPath(c.path);
    for (;;) {
      folders.insert(dir);
      if (dir.empty()) break;
      dir = ParentPath(dir);
    }
  }
  std::vector<std::string> out;
  for (const std::string& f : event_files) {
    if (folders.count(ParentPath(f))) out.push_back(f);
  }
  return out;
}

// Writes a moved file back. When something new took its path meanwhile, the
// old content goes beside it, so neither is lost.
Status PutBack(ColdStore& store, const std::string& logdir, const storepb::Manifest& m,
               WorkPool* pool, std::string* note) {
  MaterializeOptions mo;
  mo.pool = pool;
  std::string dest = JoinPath(logdir, m.path());
  Status st = MaterializeFile(store, m, dest, mo);
  if (st.sys_errno() == EEXIST) {
    std::string aside = fmt::format("{}.tbfs-recovered-{}", dest, m.file_id());
    *note = fmt::format("{} was recreated meanwhile; the migrated content is back as {}", dest,
                        aside);
    st = MaterializeFile(store, m, aside, mo);
  }
  return st;
}

class BatchRunner {
 public:
  BatchRunner(ColdStore& store, const std::string& logdir, const MigrateOptions& options,
              WorkPool& pool)
      : store_(store), logdir_(logdir), options_(options), pool_(pool) {}

  BatchResult Run(const std::vector<Candidate>& batch,
                  const std::vector<std::string>& event_files, events::LogdirDigest* full);

 private:
  // Moves one file; returns its manifest when it was unlinked.
  std::optional<storepb::Manifest> MoveOne(const storepb::JournalEntry& entry, const Candidate& c,
                                           FileResult* result);
  void Rollback(const std::vector<storepb::Manifest>& moved, BatchResult* result);

  ColdStore& store_;
  const std::string& logdir_;
  const MigrateOptions& options_;
  WorkPool& pool_;
};

std::optional<storepb::Manifest> BatchRunner::MoveOne(const storepb::JournalEntry& entry,
                                                      const Candidate& c, FileResult* result) {
  std::string path = JoinPath(logdir_, c.path);
  auto give_up = [&](Outcome outcome, const std::string& reason) {
    result->outcome = outcome;
    result->reason = reason;
    Status st = DropFromStore(store_, Stub(entry));
    if (!st.ok()) spdlog::error("migrate: drop partial copy of {}: {}", path, st.message());
    return std::nullopt;
  };
  auto fd = OpenFile(path, O_RDONLY | O_NOFOLLOW);
  if (!fd.ok()) return give_up(Outcome::kChanged, fd.status().message());
  struct stat st;
  if (::fstat(fd->get(), &st) != 0) return give_up(Outcome::kFailed, "fstat failed");
  if (!SameIdentity(st, entry)) return give_up(Outcome::kChanged, "changed before the copy began");

  IngestOptions io;
  io.chunk_bytes = options_.chunk_bytes;
  io.level = options_.level;
  io.file_class = std::string(ClassName(c.cls));
  io.pool = &pool_;
  io.progress = options_.progress;
  auto manifest = IngestFile(store_, logdir_, c.path, fd->get(), st, entry.file_id(), io);
  if (!manifest.ok()) {
    bool changed = manifest.status().code() == Code::kAborted;
    return give_up(changed ? Outcome::kChanged : Outcome::kFailed, manifest.status().message());
  }
  MaybeCrash("migrate.stored");
  Status verified = VerifyStoredFile(store_, *manifest, &pool_);
  if (!verified.ok()) return give_up(Outcome::kFailed, verified.message());
  MaybeCrash("migrate.read_back");
  if (options_.after_copy_hook) options_.after_copy_hook(path);

  // I2: unlink only a file that is exactly the one copied.
  struct stat after, at_path;
  if (::fstat(fd->get(), &after) != 0 || ::lstat(path.c_str(), &at_path) != 0 ||
      !SameIdentity(after, entry) || !SameIdentity(at_path, entry)) {
    return give_up(Outcome::kChanged, "modified while it was copied; left in place");
  }
  result->dev = at_path.st_dev;
  result->ino = at_path.st_ino;
  if (options_.before_unlink && !options_.before_unlink(c.path, at_path)) {
    return give_up(Outcome::kChanged, "open through the mount; left in place");
  }
  if (::unlink(path.c_str()) != 0) {
    return give_up(Outcome::kFailed, Status::FromErrno(errno, "unlink", path).message());
  }
  MaybeCrash("migrate.unlinked");
  result->outcome = Outcome::kMoved;
  result->stored_bytes = manifest->stored_bytes();
  return *manifest;
}

void BatchRunner::Rollback(const std::vector<storepb::Manifest>& moved, BatchResult* result) {
  bool first = true;
  for (const storepb::Manifest& m : moved) {
    std::string note;
    Status st = PutBack(store_, logdir_, m, &pool_, &note);
    if (!note.empty()) spdlog::warn("migrate rollback: {}", note);
    if (!st.ok()) {
      // The store copy stays (and the journal record with it): recovery
      // tries again; nothing is lost.
      spdlog::error("migrate rollback of {}: {}", m.path(), st.message());
      continue;
    }
    if (first) MaybeCrash("migrate.rollback_one");
    first = false;
    st = DropFromStore(store_, m);
    if (!st.ok()) spdlog::error("migrate rollback: drop {}: {}", m.path(), st.message());
    for (FileResult& f : result->files) {
      if (f.path == m.path()) {
        f.outcome = Outcome::kRolledBack;
        f.reason = "verifier failure: batch rolled back";
      }
    }
  }
  result->rolled_back = true;
}

BatchResult BatchRunner::Run(const std::vector<Candidate>& batch,
                             const std::vector<std::string>& event_files,
                             events::LogdirDigest* full) {
  std::shared_lock<std::shared_mutex> lock;
  if (options_.batch_lock != nullptr) lock = std::shared_lock(*options_.batch_lock);
  BatchResult result;
  result.batch_id = store_.NewBatchId();
  for (const Candidate& c : batch) {
    FileResult f;
    f.path = c.path;
    f.bytes = c.size;
    result.files.push_back(std::move(f));
  }

  // 1. Baseline of every run the batch touches.
  std::vector<std::string> affected = AffectedEventFiles(event_files, batch);
  std::vector<events::FileDigest> before(affected.size());
  for (size_t i = 0; i < affected.size(); ++i) {
    Status st = events::DigestFile(JoinPath(logdir_, affected[i]), affected[i], &before[i]);
    if (!st.ok()) {
      for (FileResult& f : result.files) f.reason = "cannot take the verifier baseline: " + st.message();
      return result;
    }
    result.runs_verified.push_back(events::RunOf(affected[i]));
  }
  std::sort(result.runs_verified.begin(), result.runs_verified.end());
  result.runs_verified.erase(std::unique(result.runs_verified.begin(), result.runs_verified.end()),
                             result.runs_verified.end());

  // 2. Journal first.
  storepb::JournalRecord record;
  record.set_kind(storepb::JournalRecord::MIGRATE);
  record.set_batch_id(result.batch_id);
  record.set_started_ns(NowNs());
  std::vector<bool> present(batch.size(), false);
  for (size_t i = 0; i < batch.size(); ++i) {
    struct stat st;
    storepb::JournalEntry* e = record.add_entries();
    e->set_path(batch[i].path);
    e->set_file_id(store_.NewFileId());
    if (::lstat(JoinPath(logdir_, batch[i].path).c_str(), &st) == 0 && S_ISREG(st.st_mode)) {
      e->set_ino(st.st_ino);
      e->set_size(static_cast<uint64_t>(st.st_size));
      e->set_mtime_ns(ToNs(st.st_mtim));
      e->set_ctime_ns(ToNs(st.st_ctim));
      present[i] = true;
    }
  }
  Status st = store_.PutJournal(record);
  if (!st.ok()) {
    for (FileResult& f : result.files) f.reason = st.message();
    return result;
  }
  MaybeCrash("migrate.journaled");

  // 3. Move the files.
  std::vector<storepb::Manifest> moved;
  std::set<std::string> folders;
  for (size_t i = 0; i < batch.size(); ++i) {
    if (!present[i]) {
      result.files[i].outcome = Outcome::kChanged;
      result.files[i].reason = "gone before the batch began";
      continue;
    }
    auto m = MoveOne(record.entries(static_cast<int>(i)), batch[i], &result.files[i]);
    if (m) {
      moved.push_back(*m);
      folders.insert(ParentPath(JoinPath(logdir_, batch[i].path)));
    }
  }
  for (const std::string& dir : folders) {
    auto fd = OpenFile(dir, O_RDONLY | O_DIRECTORY);
    if (fd.ok()) ::fsync(fd->get());
  }
  MaybeCrash("migrate.all_unlinked");

  // 4. Verify every run the batch touched.
  std::vector<events::FileDigest> now;
  result.failures = events::VerifyFiles(logdir_, before, options_.threads, &now);
  for (size_t i = 0; i < affected.size(); ++i) {
    for (events::FileDigest& f : full->files) {
      if (f.path == affected[i] && now[i].offset_bytes > 0) f = now[i];
    }
  }
  events::MergeRuns(full);
  for (events::Failure& f : events::CheckMustHave(*full, options_.must_have)) {
    result.failures.push_back(std::move(f));
  }
  if (options_.inject_verify_failure) {
    result.failures.push_back({"*", "", "", 0, "failure injected for testing"});
  }

  // 5. Commit or roll back.
  if (!result.failures.empty()) {
    Rollback(moved, &result);
  } else {
    MaybeCrash("migrate.verified");
  }
  WriteBatch commit;
  commit.Delete(Space::kJournal, EncodeId(result.batch_id));
  commit.Put(Space::kBaselines, kLastBaselineKey,
             fmt::format("{{\"batch\":{},\"time_ns\":{},\"intact\":{},\"files_checked\":{}}}",
                         result.batch_id, NowNs(), result.failures.empty() ? "true" : "false",
                         before.size()));
  st = store_.Commit(commit, true);
  if (!st.ok()) spdlog::error("migrate: commit batch {}: {}", result.batch_id, st.message());
  MaybeCrash("migrate.committed");
  if (options_.after_batch) options_.after_batch(result);
  return result;
}

}  // namespace

bool MigrateResult::ok() const {
  for (const BatchResult& b : batches) {
    if (b.rolled_back) return false;
  }
  return true;
}

Status FindCandidates(const std::string& logdir, const CandidateOptions& options,
                      std::vector<Candidate>* candidates, std::vector<Skipped>* skipped) {
  candidates->clear();
  skipped->clear();
  const int64_t now_s = NowNs() / 1'000'000'000;
  return WalkTree(logdir, options.walk, [&](const WalkEntry& e) {
    FileClass cls = options.policy.Classify(e.rel);
    if (!IsTraceClass(cls)) return;
    if (!options.classes.empty() &&
        std::find(options.classes.begin(), options.classes.end(), cls) == options.classes.end()) {
      return;
    }
    auto skip = [&](std::string reason) { skipped->push_back({e.rel, std::move(reason)}); };
    if (options.policy.IsProtected(e.rel)) return skip("protected by a marker");
    if (BaseName(e.rel).find(".tbfs-tmp-") != std::string_view::npos) {
      return skip("a tbfs temporary file");
    }
    if (!S_ISREG(e.st.st_mode)) return skip("not a regular file");
    if (e.st.st_nlink > 1) return skip(fmt::format("has {} hard links", e.st.st_nlink));
    if (static_cast<uint64_t>(e.st.st_size) < options.min_size_bytes) {
      return skip("smaller than --min-size");
    }
    int64_t age = now_s - static_cast<int64_t>(e.st.st_mtim.tv_sec);
    if (age < options.older_than_s) return skip(fmt::format("modified {}s ago", age));
    candidates->push_back({e.rel, cls, static_cast<uint64_t>(e.st.st_size)});
  });
}

Result<MigrateResult> Migrate(ColdStore& store, const std::string& logdir,
                              const std::vector<Candidate>& candidates,
                              const MigrateOptions& options) {
  std::vector<std::string> event_files;
  uint64_t event_bytes = 0;
  TBFS_RETURN_IF_ERROR(events::ListEventFiles(logdir, options.walk, &event_files, &event_bytes));
  events::DigestOptions digest_options;
  digest_options.threads = options.threads;
  events::LogdirDigest full = events::DigestFiles(logdir, event_files, digest_options);

  WorkPool pool(options.threads);
  BatchRunner runner(store, logdir, options, pool);
  MigrateResult result;
  std::vector<Candidate> batch;
  uint64_t batch_bytes = 0;
  auto flush = [&] {
    if (batch.empty()) return;
    BatchResult b = runner.Run(batch, event_files, &full);
    for (const FileResult& f : b.files) {
      if (f.outcome == Outcome::kMoved) {
        result.files_moved++;
        result.bytes_moved += f.bytes;
        result.stored_bytes += f.stored_bytes;
      }
    }
    result.batches.push_back(std::move(b));
    batch.clear();
    batch_bytes = 0;
  };
  for (const Candidate& c : candidates) {
    if (options.stop != nullptr && options.stop->load()) break;
    bool in_skipped_dir =
        std::find(options.walk.skip_dirs.begin(), options.walk.skip_dirs.end(),
                  c.path.substr(0, c.path.find('/'))) != options.walk.skip_dirs.end();
    if (!IsSafeRelativePath(c.path) || !IsTraceClass(c.cls) || in_skipped_dir) {
      return Status::InvalidArgument("not a migration candidate: " + c.path);
    }
    if (events::IsEventsFileName(c.path)) {
      return Status::InvalidArgument("refusing to migrate a tfevents file: " + c.path);  // I1
    }
    batch.push_back(c);
    batch_bytes += c.size;
    if (batch_bytes >= options.batch_bytes || batch.size() >= options.batch_files) flush();
  }
  if (options.stop == nullptr || !options.stop->load()) flush();
  if (result.files_moved > 0) {
    Status st = store.backend().Flush();  // the WAL would hold a second copy
    if (!st.ok()) spdlog::warn("migrate: {}", st.message());
  }
  return result;
}

Result<RecoveryResult> Recover(ColdStore& store, const std::string& logdir) {
  RecoveryResult result;
  std::vector<storepb::JournalRecord> records;
  TBFS_RETURN_IF_ERROR(store.ListJournal(&records));
  if (records.empty()) return result;
  WorkPool pool(0);
  for (const storepb::JournalRecord& record : records) {
    result.batches++;
    const bool restoring = record.kind() == storepb::JournalRecord::RESTORE;
    for (const storepb::JournalEntry& e : record.entries()) {
      std::string path = JoinPath(logdir, e.path());
      ::unlink(TempPathFor(path, e.file_id()).c_str());  // a copy-out cut short
      auto manifest = store.GetManifest(e.file_id());
      if (!manifest.ok() && !manifest.status().IsNotFound()) return manifest.status();
      struct stat st;
      bool exists = ::lstat(path.c_str(), &st) == 0;

      if (restoring) {
        // Finished where the file is in place, undone (still cold) otherwise.
        if (exists && manifest.ok()) {
          TBFS_RETURN_IF_ERROR(DropFromStore(store, *manifest));
          result.dropped++;
        }
        continue;
      }
      // An unfinished migration is undone.
      if (exists && SameIdentity(st, e)) {
        TBFS_RETURN_IF_ERROR(DropFromStore(store, manifest.ok() ? *manifest : Stub(e)));
        result.dropped++;
        continue;
      }
      if (!manifest.ok()) {
        // Never unlinked without a synced manifest: a file missing here was
        // removed by someone else; drop partial chunks.
        TBFS_RETURN_IF_ERROR(DropFromStore(store, Stub(e)));
        if (!exists) result.notes.push_back(path + " is gone and was not in the store");
        continue;
      }
      if (exists && static_cast<uint64_t>(st.st_size) == manifest->size() && S_ISREG(st.st_mode)) {
        // Possibly our own put-back, cut short before the store copy was
        // dropped: the copy may go if the content is the same.
        uint64_t size = 0;
        Hash128 hash;
        bool same = HashFile(path, &size, &hash).ok() && size == manifest->size() &&
                    hash == ManifestHash(*manifest);
        if (same) {
          TBFS_RETURN_IF_ERROR(DropFromStore(store, *manifest));
          result.dropped++;
          continue;
        }
      }
      std::string note;
      TBFS_RETURN_IF_ERROR(PutBack(store, logdir, *manifest, &pool, &note));
      if (!note.empty()) result.notes.push_back(note);
      TBFS_RETURN_IF_ERROR(DropFromStore(store, *manifest));
      result.restored++;
    }
    TBFS_RETURN_IF_ERROR(store.DeleteJournal(record.batch_id()));
  }
  return result;
}

}  // namespace tbfs::store

namespace tbfs::store {

Result<double> EstimateRatio(const std::string& logdir, const std::vector<Candidate>& candidates,
                             uint32_t chunk_bytes, int level, uint64_t* sample_bytes) {
  *sample_bytes = 0;
  ChunkCodec codec;
  // Each sampled file stands for the candidates around it, by bytes.
  const size_t files = std::min<size_t>(32, candidates.size());
  double logical = 0, stored = 0;
  std::string raw(chunk_bytes, '\0'), value;
  for (size_t k = 0; k < files; ++k) {
    size_t lo = k * candidates.size() / files, hi = (k + 1) * candidates.size() / files;
    const Candidate& c = candidates[lo];
    uint64_t represented = 0;
    for (size_t i = lo; i < hi; ++i) represented += candidates[i].size;
    std::string path = JoinPath(logdir, c.path);
    auto fd = OpenFile(path, O_RDONLY);
    if (!fd.ok()) continue;
    uint64_t raw_bytes = 0, stored_bytes = 0;
    for (uint64_t offset : {uint64_t{0}, c.size / 2 / chunk_bytes * chunk_bytes}) {
      if (offset > 0 && offset < chunk_bytes) break;  // the file has one chunk
      size_t got = 0;
      TBFS_RETURN_IF_ERROR(PreadFull(fd->get(), raw.data(), raw.size(), offset, &got, path));
      if (got == 0) continue;
      codec.Encode(std::string_view(raw.data(), got), level, &value);
      raw_bytes += got;
      stored_bytes += value.size();
    }
    if (raw_bytes == 0) continue;
    *sample_bytes += raw_bytes;
    logical += static_cast<double>(represented);
    stored += static_cast<double>(represented) * static_cast<double>(stored_bytes) /
              static_cast<double>(raw_bytes);
  }
  return stored > 0 ? logical / stored : 1.0;
}

}  // namespace tbfs::store
