#include "store/maintenance.h"

#include <sys/stat.h>

#include <algorithm>
#include <chrono>
#include <filesystem>
#include <map>
#include <set>
#include <tuple>

#include "base/time_util.h"
#include "fmt/format.h"
#include "store/file_io.h"
#include "store/format.h"
#include "store/gzip_pieces.h"
#include "store/rocks_env.h"
#include "store/set_aside.h"
#include "store/store_dir.h"

namespace tbfs::store {

namespace {

// The files a MANIFEST cut back lost (store/set_aside.h) whose records are
// in the store's blob files its engine does not list, or in set-aside ones
// no recovery has read yet: one problem each. Judged only while no writer
// holds the store, and only from blob files last written before `since`:
// a writer's newer files are not in this reader's view.
void FindFilesTheStoreLost(ColdStore& store, int64_t since_ns, WorkPool* pool, FsckResult* result) {
  if (HoldStoreForWriting(store.dir(), false).status().code() == Code::kBusy) return;
  std::vector<std::string> files;
  for (const std::string& path : store.UnlistedBlobFiles()) {
    struct stat st;
    if (::lstat(path.c_str(), &st) == 0 && ToNs(st.st_mtim) < since_ns) files.push_back(path);
  }
  std::set<std::string> read;
  const std::string folder = store.dir() + "/" + kLostFoundName;
  std::vector<std::string> names;
  if (ListFiles(folder, &names).ok() && store.ListSetAsideRead(&read).ok()) {
    for (const std::string& n : names) {
      if (n.ends_with(".blob") && !read.count(n)) files.push_back(folder + "/" + n);
    }
  }
  if (files.empty()) return;
  SetAside found(store);
  for (const std::string& path : files) {
    if (Status st = found.Read(path); !st.ok()) result->problems.push_back(st.message());
  }
  std::vector<uint64_t> nameless;
  auto lost = found.LostByTheStore(&nameless);
  if (!lost.ok()) {
    result->problems.push_back("unlisted blob files: " + lost.status().message());
    return;
  }
  std::set<uint64_t> recorded;  // said in LOST lines already
  for (const ColdStore::LostFile& f : result->lost) recorded.insert(f.file_id);
  for (const storepb::Manifest& m : *lost) {
    if (recorded.count(m.file_id())) continue;
    auto read = [&, content = ContentManifest(m)](uint64_t index, ChunkCodec* codec,
                                                  std::string* raw) {
      return found.ReadChunk(content, index, codec, raw);
    };
    Status intact = VerifyFrom(m, read, pool);
    result->problems.push_back(fmt::format(
        "{}: not in the store, whose engine's MANIFEST no longer lists the files that hold it "
        "(in {} or its {}: a MANIFEST cut back); {}",
        m.path(), store.dir(), kLostFoundName,
        intact.ok() ? "the next writer (tbfs migrate --apply, a mount) writes it back into the "
                      "logdir, and tbfs salvage writes it out"
                    : "its chunks there do not verify (" + intact.message() +
                          "): tbfs salvage writes out what it can"));
  }
  for (uint64_t id : nameless) {
    if (recorded.count(id)) continue;
    result->problems.push_back(fmt::format(
        "file id {}: not in the store, whose engine's MANIFEST no longer lists the files that "
        "hold its chunks (in {} or its {}: a MANIFEST cut back), and its manifest copy there "
        "is damaged: tbfs salvage reads what it can",
        id, store.dir(), kLostFoundName));
  }
}

}  // namespace

Result<FsckResult> Fsck(ColdStore& store, WorkPool* pool, std::atomic<uint64_t>* progress) {
  const int64_t started_ns = NowNs();
  FsckResult result;
  // What a writer's open needs beyond what the file reads below touch: the
  // small spaces' tables too (a damaged one keeps every writer out).
  if (Status st = store.VerifyTables(); !st.ok()) {
    result.problems.push_back(st.message() + " (a writer's open may refuse the store)");
  }
  if (std::string log = store.LogDamage(); !log.empty()) {
    result.problems.push_back("the engine's log has damaged records (" + log +
                              "): skipped; what they held since the last flush is gone (never a "
                              "moved file's copy; a writer's next open leaves a sound log)");
  }
  for (const std::string& line : store.CheckDictionaries()) {
    result.problems.push_back(line + " (the chunks that need a lost dictionary are named below)");
  }
  std::vector<storepb::Manifest> manifests;
  std::set<uint64_t> ids;
  auto collect = [&](const storepb::Manifest& m) {
    if (ids.insert(m.file_id()).second) manifests.push_back(m);
    return true;
  };
  if (Status st = store.ForEachManifest(collect); !st.ok()) {
    result.problems.push_back("manifests: " + st.message());
    result.manifests_from_copies = true;
    if (Status copies = store.ForEachManifestCopy(collect); !copies.ok()) {
      result.problems.push_back("manifest copies: " + copies.message());
    }
  }
  for (const storepb::Manifest& m : manifests) {
    result.files++;
    result.bytes += m.size();
    Status st = VerifyStoredFile(store, m, pool);
    if (!st.ok()) result.damaged.push_back({m.path(), st.message()});
    auto entry = store.GetEntry(m.path());
    if (!entry.ok() || entry->file_id() != m.file_id()) {
      result.damaged.push_back(
          {m.path(), entry.ok() || entry.status().IsNotFound()
                         ? "no namespace entry points to this file"
                         : "its namespace entry: " + entry.status().message()});
    }
    if (progress) progress->fetch_add(m.size(), std::memory_order_relaxed);
  }
  std::vector<uint64_t> retired;
  if (Status st = store.ListRetired(&retired); !st.ok())
    result.problems.push_back("retired files: " + st.message());
  result.retired_files = retired.size();
  std::set<uint64_t> chunk_ids;
  Status chunks = store.ForEachChunkKey([&](uint64_t id, uint64_t) {
    if (!ids.count(id) && !std::binary_search(retired.begin(), retired.end(), id))
      chunk_ids.insert(id);
    return true;
  });
  if (!chunks.ok()) result.problems.push_back("chunks: " + chunks.message());
  result.orphan_chunk_files = chunk_ids.size();
  Status names = store.ForEachEntry([&](const std::string&, const storepb::Entry& e) {
    if (e.kind() == storepb::Entry::FILE && !ids.count(e.file_id())) result.dangling_entries++;
    return true;
  });
  if (!names.ok()) result.problems.push_back("namespace: " + names.message());
  std::vector<storepb::JournalRecord> journal;
  if (Status st = store.ListJournal(&journal); !st.ok())
    result.problems.push_back("journal: " + st.message());
  result.journal_records = journal.size();
  if (Status st = store.ListLost(&result.lost); !st.ok())
    result.problems.push_back("lost-file records: " + st.message());
  std::error_code ec;
  for (const auto& e :
       std::filesystem::directory_iterator(store.dir() + "/" + kLostFoundName, ec)) {
    (void)e;
    result.set_aside_files++;
  }
  FindFilesTheStoreLost(store, started_ns, pool, &result);
  return result;
}

Status FindGarbage(ColdStore& store, Garbage* out) {
  *out = Garbage();
  std::set<uint64_t> named;
  TBFS_RETURN_IF_ERROR(store.ForEachManifest([&](const storepb::Manifest& m) {
    named.insert(m.file_id());
    return true;
  }));
  std::vector<uint64_t> retired;
  TBFS_RETURN_IF_ERROR(store.ListRetired(&retired));
  named.insert(retired.begin(), retired.end());
  std::vector<storepb::JournalRecord> journal;
  TBFS_RETURN_IF_ERROR(store.ListJournal(&journal));
  for (const auto& record : journal) {
    for (const auto& e : record.entries()) named.insert(e.file_id());
  }
  std::set<uint64_t> files;
  TBFS_RETURN_IF_ERROR(store.ForEachChunkKey([&](uint64_t id, uint64_t index) {
    if (!named.count(id)) {
      out->chunks.emplace_back(id, index);
      files.insert(id);
    }
    return true;
  }));
  out->files = files.size();
  return Status::OK();
}

Status RemoveGarbage(ColdStore& store, const Garbage& garbage) {
  WriteBatch batch;
  uint64_t last = 0;
  for (const auto& [id, index] : garbage.chunks) {
    batch.Delete(Space::kChunks, ChunkKey(id, index));
    if (id != last) batch.Delete(Space::kChunks, ChunkKey(id, kManifestCopyIndex));
    last = id;
    if (batch.bytes() > (1u << 20)) {
      TBFS_RETURN_IF_ERROR(store.Commit(batch, true));
      batch.Clear();
    }
  }
  return batch.empty() ? Status::OK() : store.Commit(batch, true);
}

std::string ProfileOf(const std::string& path) {
  static constexpr std::string_view kMarker = "/plugins/profile/";
  size_t at = ("/" + path).find(kMarker);
  if (at != std::string::npos) {
    const size_t session = at + kMarker.size() - 1;  // in path (no leading '/')
    const size_t end = path.find('/', session);
    if (end != std::string::npos) return path.substr(0, end);
  }
  return path;
}

std::string RunOfProfile(const std::string& profile) {
  static constexpr std::string_view kMarker = "/plugins/profile/";
  size_t at = ("/" + profile).find(kMarker);
  if (at != std::string::npos && profile.find('/', at + kMarker.size() - 1) == std::string::npos) {
    return at == 0 ? std::string(".") : profile.substr(0, at - 1);
  }
  const std::string parent = ParentPath(profile);
  return parent.empty() ? "." : parent;
}

Status SelectForRetention(ColdStore& store, const Retention& policy,
                          std::vector<storepb::Manifest>* out, std::vector<std::string>* why) {
  out->clear();
  why->clear();
  std::vector<storepb::Manifest> all;
  TBFS_RETURN_IF_ERROR(store.ForEachManifest([&](const storepb::Manifest& m) {
    all.push_back(m);
    return true;
  }));
  // Longest in the store first: the order max_store deletes in, and the order listed.
  std::sort(all.begin(), all.end(), [](const auto& a, const auto& b) {
    return std::make_tuple(a.migrated_ns(), a.file_id()) <
           std::make_tuple(b.migrated_ns(), b.file_id());
  });
  const int64_t now = NowNs();
  // Budgets and keep_last count per owner unless asked otherwise.
  auto owner_of = [&](const storepb::Manifest& m) -> uint32_t {
    return policy.across_owners ? 0 : m.uid();
  };
  std::map<uint64_t, std::string> chosen;  // file id -> first reason
  auto choose = [&](const storepb::Manifest& m, std::string reason) {
    chosen.emplace(m.file_id(), std::move(reason));
  };
  for (const auto& m : all) {
    if (policy.older_than_s && m.mtime_ns() < now - *policy.older_than_s * 1'000'000'000) {
      choose(m, "modified before the --older-than cutoff");
    }
    if (policy.migrated_before_s &&
        m.migrated_ns() < now - *policy.migrated_before_s * 1'000'000'000) {
      choose(m, "migrated before the --migrated-before cutoff");
    }
  }
  if (policy.keep_last) {
    // (owner, run) -> (owner, profile) -> newest mtime of its files
    using Key = std::pair<uint32_t, std::string>;
    std::map<Key, std::map<Key, int64_t>> runs;
    for (const auto& m : all) {
      const uint32_t owner = owner_of(m);
      const std::string profile = ProfileOf(m.path());
      int64_t& newest = runs[{owner, RunOfProfile(profile)}][{owner, profile}];
      newest = std::max(newest, m.mtime_ns());
    }
    std::set<Key> dropped;
    for (auto& [run, profiles] : runs) {
      std::vector<std::pair<int64_t, Key>> by_age;
      for (const auto& [p, t] : profiles) by_age.push_back({t, p});
      std::sort(by_age.rbegin(), by_age.rend());
      for (size_t i = *policy.keep_last; i < by_age.size(); ++i) dropped.insert(by_age[i].second);
    }
    for (const auto& m : all) {
      if (dropped.count({owner_of(m), ProfileOf(m.path())}))
        choose(m, "an older profile of its run (--keep-last)");
    }
  }
  if (policy.max_store_bytes) {
    std::map<uint32_t, uint64_t> kept;  // owner -> stored bytes kept
    for (const auto& m : all) {
      if (!chosen.count(m.file_id())) kept[owner_of(m)] += m.stored_bytes();
    }
    for (const auto& m : all) {
      uint64_t& left = kept[owner_of(m)];
      if (left <= *policy.max_store_bytes || chosen.count(m.file_id())) continue;
      choose(m, policy.across_owners ? "oldest in the store over the --max-store budget"
                                     : "oldest of its owner's over the --max-store budget");
      left -= m.stored_bytes();
    }
  }
  for (const auto& m : all) {
    auto it = chosen.find(m.file_id());
    if (it == chosen.end()) continue;
    out->push_back(m);
    why->push_back(it->second);
  }
  return Status::OK();
}

bool HoldsGarbage(ColdStore& store) {
  auto totals = store.GetTotals();
  if (!totals.ok()) return true;
  return store.DiskBytes() > totals->stored_bytes + totals->stored_bytes / 4 + (256 << 10);
}

Status DeleteCold(ColdStore& store, const std::vector<storepb::Manifest>& files,
                  std::string* compact_error) {
  WriteBatch batch;
  for (const storepb::Manifest& m : files) {
    TBFS_RETURN_IF_ERROR(store.RemoveFile(&batch, m));
    if (batch.bytes() > (1 << 20)) {
      TBFS_RETURN_IF_ERROR(store.Commit(batch, true));
      batch.Clear();
    }
  }
  TBFS_RETURN_IF_ERROR(store.Commit(batch, true));
  Status compacted = store.Compact();
  compact_error->assign(compacted.ok() ? "" : compacted.message());
  return Status::OK();
}

}  // namespace tbfs::store
