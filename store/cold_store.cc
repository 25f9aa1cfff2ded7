#include "store/cold_store.h"

#include <fcntl.h>
#include <sys/stat.h>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <thread>

#include "base/failpoint.h"
#include "base/fs_util.h"
#include "base/time_util.h"
#include "fmt/format.h"
#include "spdlog/spdlog.h"
#include "store/format.h"
#include "store/gzip_pieces.h"
#include "store/store_dir.h"

namespace tbfs::store {

namespace {

template <typename Msg>
Status ParseRecord(std::string_view bytes, Msg* msg, const std::string& what) {
  if (!msg->ParseFromArray(bytes.data(), static_cast<int>(bytes.size()))) {
    return Status::Corruption("store record does not parse: " + what);
  }
  return Status::OK();
}

}  // namespace

uint32_t ChunkLength(const storepb::Manifest& m, uint64_t index) {
  uint64_t start = index * m.chunk_bytes();
  if (start >= m.size()) return 0;
  return static_cast<uint32_t>(std::min<uint64_t>(m.chunk_bytes(), m.size() - start));
}

bool IsHoleChunk(const storepb::Manifest& m, uint64_t index) {
  const auto& runs = m.hole_runs();
  // The last run that starts at or before index (runs are ascending).
  size_t lo = 0, hi = static_cast<size_t>(runs.size()) / 2;
  while (lo < hi) {
    const size_t mid = (lo + hi) / 2;
    if (runs[static_cast<int>(2 * mid)] <= index) {
      lo = mid + 1;
    } else {
      hi = mid;
    }
  }
  return lo > 0 && index < runs[static_cast<int>(2 * (lo - 1) + 1)];
}

std::vector<ChunkRun> DataRuns(const storepb::Manifest& m) {
  std::vector<ChunkRun> runs;
  uint64_t next = 0;
  for (int i = 0; i + 1 < m.hole_runs_size(); i += 2) {
    if (m.hole_runs(i) > next) runs.push_back({next, m.hole_runs(i)});
    next = m.hole_runs(i + 1);
  }
  if (next < m.chunks()) runs.push_back({next, m.chunks()});
  return runs;
}

uint64_t DataBytes(const storepb::Manifest& m) {
  if (!HasHoles(m)) return m.size();
  uint64_t bytes = 0;
  for (const ChunkRun& r : DataRuns(m)) {
    bytes += (r.end - 1 - r.first) * m.chunk_bytes() + ChunkLength(m, r.end - 1);
  }
  return bytes;
}

bool WellFormed(const storepb::Manifest& m) {
  if (!IsSafeRelativePath(m.path())) return false;
  const uint64_t chunks = m.chunk_bytes() == 0 ? (m.size() == 0 ? 0 : ~uint64_t{0})
                                               : ChunkCount(m.size(), m.chunk_bytes());
  if (m.chunks() != chunks || !GzipContentWellFormed(m)) return false;
  const auto& runs = m.hole_runs();
  if (runs.size() % 2 != 0) return false;
  uint64_t after = 0;  // where the previous run ended
  for (int i = 0; i < runs.size(); i += 2) {
    if (runs[i] >= runs[i + 1] || runs[i + 1] > m.chunks() || (i > 0 && runs[i] < after)) {
      return false;
    }
    after = runs[i + 1];
  }
  return true;
}

ColdStore::~ColdStore() {
  backend_.reset();
  DropWriterRole();
}

Result<std::unique_ptr<ColdStore>> ColdStore::OpenShared(const std::string& url,
                                                         const OpenOptions& options) {
  auto where = ParseRadosUrl(url);
  if (!where.ok()) return where.status();
  BackendOptions bo;
  bo.create_if_missing = options.create_if_missing && !options.read_only;
  auto fence = std::make_shared<RadosFence>();
  auto backend = OpenRadosBackend(*where, bo, fence);
  if (!backend.ok()) return backend.status();
  std::unique_ptr<ColdStore> store(new ColdStore(url, std::move(backend).value()));
  store->fence_ = std::move(fence);
  store->rados_ = *where;
  if (!options.read_only) {
    Status st = store->TakeWriterRole(options);
    if (!st.ok() && !(st.code() == Code::kBusy && options.reader_if_busy)) return st;
  }
  // A shared store has no folder to say it existed: its format record does.
  std::string bytes;
  Status st = store->backend_->Get(Space::kMeta, kMetaInfoKey, &bytes);
  if (st.IsNotFound() && !store->writer())
    return Status::NotFound(url + ": no tbfs store there yet");
  TBFS_RETURN_IF_ERROR(store->Init(options, false));
  return store;
}

bool ColdStore::writer() const {
  if (!fence_) return !read_only_;
  auto lease = fence_->lease();
  return lease && lease->held();
}

std::string ColdStore::refusal() const {
  MutexLock lock(role_mu_);
  return refusal_;
}

Status ColdStore::TakeWriterRole(const OpenOptions& options) {
  if (!fence_ && until_room_ != nullptr) return OpenWriterWhenRoom();
  if (!fence_) return Status::NotSupported(dir_ + ": only a shared store changes writers");
  if (writer()) return Status::OK();
  DropWriterRole();  // a lease that ran out
  auto refused = [&](const Status& st) {
    MutexLock lock(role_mu_);
    refusal_ = st.message();
    return st;
  };
  const std::string holder = options.holder.empty() ? "a tbfs writer" : options.holder;
  auto lease = RadosLease::Acquire(rados_, holder, rados_.lease_s);
  for (int waited = 0;
       !lease.ok() && lease.status().code() == Code::kBusy && waited < options.lock_wait_ms;
       waited += 200) {
    std::this_thread::sleep_for(std::chrono::milliseconds(200));
    lease = RadosLease::Acquire(rados_, holder, rados_.lease_s);
  }
  if (!lease.ok()) return refused(lease.status());
  UniqueFd lock;
  if (!options.logdir.empty()) {
    auto taken = LockLogdir(options.logdir, holder);
    if (!taken.ok()) return refused(taken.status());
    lock = std::move(taken).value();
  }
  {
    MutexLock guard(role_mu_);
    refusal_.clear();
    logdir_lock_ = std::move(lock);
  }
  fence_->Set(std::move(lease).value());
  if (Status st = LoadIds(); !st.ok()) {
    DropWriterRole();
    return refused(st);
  }
  // Init converts a store its first writer opens; a reader that takes the
  // role over converts one that no newer writer has held since.
  if (info_.format_version() != 0) {  // not during Open (Init comes next)
    if (Status st = ConvertIfOlder(); !st.ok()) {
      DropWriterRole();
      return refused(st);
    }
  }
  return Status::OK();
}

Status ColdStore::OpenWriterWhenRoom() {
  if (!read_only_) return Status::OK();
  auto refused = [&](const Status& st) {
    MutexLock lock(role_mu_);
    refusal_ = "read-only: " + st.message();
    return st;
  };
  // Room for the engine's open (a new log and MANIFEST) and a first batch,
  // with the margin CheckRoom keeps.
  uint64_t free = 0, size = 0;
  TBFS_RETURN_IF_ERROR(backend_->FreeBytes(&free, &size));
  const uint64_t need = std::clamp<uint64_t>(size / 20, 2u << 20, 64u << 20) + (8u << 20);
  if (free < need) {
    return refused(Status::FromErrno(
        ENOSPC, "store",
        fmt::format("{} has no room for a writer: {} bytes free, {} needed", dir_, free, need)));
  }
  if (Status st = until_room_->OpenWriter(); !st.ok()) return refused(st);
  read_only_ = false;
  {
    MutexLock lock(role_mu_);
    refusal_.clear();
  }
  spdlog::warn("store {}: its filesystem has room again: writable", dir_);
  TBFS_RETURN_IF_ERROR(LoadIds());
  return ConvertIfOlder();
}

void ColdStore::DropWriterRole() {
  if (!fence_) return;
  fence_->Set(nullptr);  // the lease is given back when its last user lets go
  MutexLock lock(role_mu_);
  logdir_lock_.reset();
}

Result<std::unique_ptr<ColdStore>> ColdStore::Open(const std::string& dir,
                                                   const OpenOptions& options) {
  if (IsRadosUrl(dir)) return OpenShared(dir, options);
  if (LooksLikeAddress(dir)) {
    return Status::InvalidArgument(dir +
                                   ": not a store folder, and not a store address this tbfs knows "
                                   "(rados://POOL[/PREFIX]?conf=FILE)");
  }
  BackendOptions bo;
  bo.create_if_missing = options.create_if_missing;
  bo.read_only = options.read_only;
  UniqueFd lock;
  if (!options.read_only && !options.logdir.empty()) {
    auto taken = LockLogdir(options.logdir, options.holder);
    for (int waited = 0;
         !taken.ok() && taken.status().code() == Code::kBusy && waited < options.lock_wait_ms;
         waited += 50) {
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
      taken = LockLogdir(options.logdir, options.holder);
    }
    if (!taken.ok()) return taken.status();
    lock = std::move(taken).value();
  }
  if (options.create_if_missing) TBFS_RETURN_IF_ERROR(MakeDirs(dir, 0700));
  if (CreationCutShort(dir)) {
    if (options.read_only) {
      return Status::NotFound("no cold store at " + dir +
                              " (its creation was cut short; the next writer makes it anew)");
    }
    TBFS_RETURN_IF_ERROR(UndoCutShortCreation(dir));
  }
  if (!options.read_only) {
    struct stat st;
    if (::stat(dir.c_str(), &st) == 0) {
      // Only a store, or an empty folder that becomes one, is touched.
      TBFS_RETURN_IF_ERROR(CheckStoreFolder(dir));
      TBFS_RETURN_IF_ERROR(MakeStorePrivate(dir));
    }
  }
  // Damage gets the way out with it: fsck names what is damaged, salvage
  // writes out every file that verifies.
  auto damaged = [&](const Status& st) {
    if (st.code() != Code::kCorruption) return st;
    return Status::Corruption(st.message() +
                              " (the store is damaged: tbfs fsck names what, and "
                              "tbfs salvage writes out every intact file)");
  };
  struct stat current;
  const bool existed = ::stat(JoinPath(dir, "CURRENT").c_str(), &current) == 0;
  if (existed && !options.read_only) {
    // A writer's open changes the store (the engine may write a new
    // MANIFEST and drop files it does not list): first make sure, read-only,
    // that it opens to a store at all. An engine view without the format
    // record is a damaged MANIFEST describing an older, emptier store.
    BackendOptions check;
    check.read_only = true;
    auto reader = OpenRocksBackend(dir, check);
    // A damaged log keeps a reader out, not a writer (it sets the log
    // aside, and any file it does not list: store/rocks_backend.cc); the
    // format record is then checked after its open (Init).
    if (!reader.ok() && !(reader.status().code() == Code::kCorruption &&
                          LooksLikeLogDamage(reader.status().message()))) {
      return damaged(reader.status());
    }
    std::string bytes;
    Status st = reader.ok() ? (*reader)->Get(Space::kMeta, kMetaInfoKey, &bytes) : Status::OK();
    if (st.IsNotFound()) {
      st = Status::Corruption("store " + dir +
                              " opens without its format record (its engine "
                              "MANIFEST is damaged or cut short); nothing was changed");
    }
    if (!st.ok()) return damaged(st);
  }
  const bool creating = !existed && !options.read_only && options.create_if_missing;
  if (creating) TBFS_RETURN_IF_ERROR(MarkCreation(dir));
  auto backend = OpenRocksBackend(dir, bo);
  if (creating) MaybeCrash("store.create.engine");
  const int err = backend.ok() ? 0 : backend.status().sys_errno();
  if (!backend.ok() && existed && options.read_only_when_full && (err == ENOSPC || err == EDQUOT)) {
    // No room for the engine's open: read-only, until there is.
    auto reader = ReadOnlyUntilRoom::Open(dir);
    if (!reader.ok()) return damaged(reader.status());
    ReadOnlyUntilRoom* until_room = reader->get();
    std::unique_ptr<ColdStore> store(new ColdStore(dir, std::move(reader).value()));
    store->until_room_ = until_room;
    store->read_only_ = true;
    {
      MutexLock role(store->role_mu_);
      store->logdir_lock_ = std::move(lock);
      store->refusal_ = "read-only: " + backend.status().message() +
                        " (writable again once its filesystem has room)";
    }
    OpenOptions reading = options;
    reading.read_only = true;
    if (Status st = store->Init(reading, existed); !st.ok()) return damaged(st);
    spdlog::warn("store {}: opened read-only: {}", dir, store->refusal());
    return store;
  }
  if (!backend.ok()) return damaged(backend.status());
  std::unique_ptr<ColdStore> store(new ColdStore(dir, std::move(backend).value()));
  {
    MutexLock role(store->role_mu_);
    store->logdir_lock_ = std::move(lock);
  }
  store->read_only_ = options.read_only;
  if (Status st = store->Init(options, existed); !st.ok()) return damaged(st);
  if (creating) TBFS_RETURN_IF_ERROR(EndCreation(dir));
  return store;
}

Status ColdStore::Init(const OpenOptions& options, bool existed) {
  std::string bytes;
  Status st = backend_->Get(Space::kMeta, kMetaInfoKey, &bytes);
  if (st.IsNotFound()) {
    // Only a store made just now may lack it.
    if (options.read_only || existed)
      return Status::Corruption("store " + dir_ + " has no format record");
    info_.set_format_version(kNewStoreFormatVersion);
    info_.set_store_id(
        fmt::format("{:016x}", static_cast<uint64_t>(NowNs()) ^ 0x7462667300000000ull));
    info_.set_created_ns(NowNs());
    info_.set_chunk_bytes(options.chunk_bytes);
    info_.set_level(options.level);
    WriteBatch batch;
    batch.Put(Space::kMeta, kMetaInfoKey, info_.SerializeAsString());
    TBFS_RETURN_IF_ERROR(backend_->Commit(batch, true));
    MaybeCrash("store.create.record");
    // In the engine's tables at once: a store whose format record lived
    // only in a log that was then damaged would not open at all.
    TBFS_RETURN_IF_ERROR(backend_->Flush());
    tree_ = true;
  } else {
    TBFS_RETURN_IF_ERROR(st);
    TBFS_RETURN_IF_ERROR(ParseRecord(bytes, &info_, "store info"));
    if (info_.format_version() < kFormatVersionV1 ||
        info_.format_version() > kNewestFormatVersion) {
      return Status::NotSupported(
          fmt::format("store {} has format version {}; this tbfs reads versions {} to {} only",
                      dir_, info_.format_version(), kFormatVersionV1, kNewestFormatVersion));
    }
    if (info_.format_version() == kFormatVersionV1 && !options.read_only) {
      TBFS_RETURN_IF_ERROR(UpgradeFromV1());
    }
    tree_ = info_.format_version() >= kFormatVersionTree;
  }
  // A shared store's writer must know its ids (TakeWriterRole read them
  // already); a local store opens whatever its damage, as it always did
  // (fsck and salvage name the damage).
  if (Status ids = LoadIds(); !ids.ok() && !shared()) {
    spdlog::warn("store {}: reading the last ids: {}", dir_, ids.message());
  } else if (!ids.ok() && writer()) {
    return ids;
  }
  if (writer()) {
    TBFS_RETURN_IF_ERROR(ConvertIfOlder());
    if (tree_) info_.set_format_version(std::max(info_.format_version(), kFormatVersionTree));
  }
  dict_format_ = info_.format_version() >= kFormatVersionDict;
  format_put_ = info_.format_version();
  MutexLock lock(dict_mu_);
  if (Status d = LoadDictionaries(); !d.ok()) {
    // The chunks that need them are Corruption; fsck names them.
    spdlog::warn("store {}: reading the dictionaries: {}", dir_, d.message());
  }
  return Status::OK();
}

Status ColdStore::ConvertIfOlder() {
  if (!tree_) {
    // Another writer of a shared store may have converted it since.
    std::string bytes;
    storepb::StoreInfo info;
    TBFS_RETURN_IF_ERROR(backend_->Get(Space::kMeta, kMetaInfoKey, &bytes));
    TBFS_RETURN_IF_ERROR(ParseRecord(bytes, &info, "store info"));
    if (info.format_version() >= kFormatVersionTree) {
      tree_ = true;
    } else {
      return ConvertToTree(info);
    }
  }
  // Keys of the old namespace a conversion cut short left behind: they
  // sort before or after every tree key.
  bool old_keys = false;
  TBFS_RETURN_IF_ERROR(
      backend_->Scan(Space::kNamespace, "", [&](std::string_view key, std::string_view) {
        old_keys = !key.starts_with(kTreeKeyPrefix);
        return false;
      }));
  std::string last;
  Status st = backend_->LastKey(Space::kNamespace, &last);
  if (st.ok() && !last.starts_with(kTreeKeyPrefix)) old_keys = true;
  if (!st.ok() && !st.IsNotFound()) return st;
  return old_keys ? DropPathKeys() : Status::OK();
}

Status ColdStore::LoadIds() {
  // Every read counts (an id started too low could be one in use): the
  // first error is returned, after what could be read is taken.
  Status first;
  auto keep = [&](const Status& st) {
    if (first.ok() && !st.ok() && !st.IsNotFound()) first = st;
  };
  auto next_after_last = [&](Space space, uint64_t* next) {
    std::string key;
    uint64_t id = 0;
    Status st = backend_->LastKey(space, &key);
    keep(st);
    if (st.ok() && DecodeId(key, &id)) *next = std::max(*next, id + 1);
  };
  uint64_t next = 1;
  std::string bytes;
  Status st = backend_->Get(Space::kMeta, kMetaNextFileIdKey, &bytes);
  keep(st);
  uint64_t floor = 1;
  const bool has_floor = st.ok() && DecodeId(bytes, &floor);
  if (has_floor) next = floor;
  std::vector<storepb::JournalRecord> journal;
  keep(ListJournal(&journal));
  for (const auto& record : journal) {
    for (const auto& e : record.entries()) next = std::max(next, e.file_id() + 1);
  }
  next_after_last(Space::kManifests, &next);
  // Chunks are written only under ids a journal record or an added file
  // put below the floor: with one, the chunk space (a listing of the
  // whole pool on RADOS) need not be read. Stores from before it have none.
  if (!has_floor) next_after_last(Space::kChunks, &next);
  uint64_t batch = 1;
  next_after_last(Space::kJournal, &batch);
  next_file_id_ = next;
  next_batch_id_ = batch;
  return first;
}

Status ColdStore::UpgradeFromV1() {
  // Format 2 binds every chunk's checksum to its file id and index, keeps a
  // second copy of every manifest with the chunks, and names are bytes (the
  // same records on the wire). Chunks are rebound in
  // place, file by file (a crash leaves a mix that format 1 reading accepts
  // and the next open finishes); the version changes last.
  std::vector<storepb::Manifest> files;
  TBFS_RETURN_IF_ERROR(ForEachManifest([&](const storepb::Manifest& m) {
    files.push_back(m);
    return true;
  }));
  ChunkCodec codec;
  WriteBatch batch;
  std::string value, bound;
  uint64_t rebound = 0;
  for (const storepb::Manifest& m : files) {
    PutManifest(&batch, m);  // format 2 keeps a second copy with the chunks
    for (uint64_t index = 0; index < m.chunks(); ++index) {
      Status st = backend_->Get(Space::kChunks, ChunkKey(m.file_id(), index), &value);
      if (st.IsNotFound()) continue;  // fsck names the file
      TBFS_RETURN_IF_ERROR(st);
      if (!codec.Rebind(value, ChunkLength(m, index), {m.file_id(), index}, &bound).ok()) {
        continue;  // a damaged chunk stays as it is: its reads fail, fsck names it
      }
      if (bound == value) continue;
      batch.Put(Space::kChunks, ChunkKey(m.file_id(), index), bound);
      rebound++;
      if (batch.bytes() > (16u << 20)) {
        TBFS_RETURN_IF_ERROR(CheckRoom(batch.bytes()));
        TBFS_RETURN_IF_ERROR(backend_->Commit(batch, false));
        batch.Clear();
      }
    }
  }
  info_.set_format_version(kFormatVersion);
  batch.Put(Space::kMeta, kMetaInfoKey, info_.SerializeAsString());
  TBFS_RETURN_IF_ERROR(CheckRoom(batch.bytes()));
  TBFS_RETURN_IF_ERROR(backend_->Commit(batch, true));
  spdlog::warn("store {}: upgraded from format 1 to 2 ({} chunks bound to their place)", dir_,
               rebound);
  return Status::OK();
}

Status ColdStore::CheckRoom(uint64_t bytes) {
  uint64_t free = 0, size = 0;
  Status known = backend_->FreeBytes(&free, &size);
  if (known.code() == Code::kNotSupported) return Status::OK();  // the engine's writes say it
  TBFS_RETURN_IF_ERROR(known);
  const uint64_t margin = std::clamp<uint64_t>(size / 20, 2u << 20, 64u << 20);
  // The bytes go to the log first, then to the engine's files once more,
  // with all the log holds already: room for both.
  const uint64_t need = 2 * bytes + backend_->UnflushedBytes();
  if (free >= need + margin) return Status::OK();
  return Status::FromErrno(ENOSPC, "store",
                           fmt::format("{} has no room: {} bytes free, {} needed (twice the {} to "
                                       "write, and {} of the engine's log "
                                       "to flush) and {} kept free",
                                       dir_, free, need, bytes, need - 2 * bytes, margin));
}

Result<storepb::Manifest> ColdStore::GetManifest(uint64_t file_id) {
  std::string bytes;
  Status st = backend_->Get(Space::kManifests, EncodeId(file_id), &bytes);
  if (!st.ok()) {
    if (st.IsNotFound())
      return Status::NotFound(fmt::format("no manifest for file id {}", file_id));
    return st;
  }
  storepb::Manifest m;
  TBFS_RETURN_IF_ERROR(ParseRecord(bytes, &m, fmt::format("manifest {}", file_id)));
  TBFS_RETURN_IF_ERROR(DerivePath(&m, nullptr));
  if (!WellFormed(m)) {
    return Status::Corruption(fmt::format(
        "manifest {} is damaged (an unsafe path, or chunks that do not add up)", file_id));
  }
  return m;
}

Status ColdStore::ForEachManifest(const std::function<bool(const storepb::Manifest&)>& fn) {
  Status inner;
  std::map<uint64_t, std::string> folders;  // paths by folder id
  TBFS_RETURN_IF_ERROR(
      backend_->Scan(Space::kManifests, "", [&](std::string_view key, std::string_view value) {
        storepb::Manifest m;
        if (!m.ParseFromArray(value.data(), static_cast<int>(value.size())) ||
            !(inner = DerivePath(&m, &folders)).ok() || !WellFormed(m)) {
          uint64_t id = 0;
          DecodeId(key, &id);
          if (inner.ok()) inner = Status::Corruption(fmt::format("manifest {} does not parse", id));
          return false;
        }
        return fn(m);
      }));
  return inner;
}

Status ColdStore::ForEachManifestCopy(const std::function<bool(const storepb::Manifest&)>& fn) {
  std::map<uint64_t, std::string> folders;  // paths by folder id
  return backend_->Scan(Space::kChunks, "", [&](std::string_view key, std::string_view value) {
    uint64_t id = 0, index = 0;
    std::string bytes;
    storepb::Manifest m;
    if (!DecodeChunkKey(key, &id, &index) || index != kManifestCopyIndex) return true;
    if (!ParseManifestCopy(id, value, &bytes) || !m.ParseFromString(bytes) || m.file_id() != id) {
      return true;  // fsck finds the file damaged through its first copy
    }
    storepb::Manifest derived = m;
    // Where the namespace places it; where it was when the copy was
    // written when the namespace cannot tell.
    if (DerivePath(&derived, &folders).ok()) m = std::move(derived);
    if (!WellFormed(m)) return true;
    return fn(m);
  });
}

Status ColdStore::ForEachChunkKey(const std::function<bool(uint64_t, uint64_t)>& fn) {
  return backend_->Scan(Space::kChunks, "", [&](std::string_view key, std::string_view) {
    uint64_t id = 0, index = 0;
    if (!DecodeChunkKey(key, &id, &index) || index == kManifestCopyIndex) return true;
    return fn(id, index);
  });
}

bool ColdStore::IsRetired(uint64_t file_id) {
  std::string ignored;
  return backend_->Get(Space::kMeta, RetiredKey(file_id), &ignored).ok();
}

Status ColdStore::RemoveFile(WriteBatch* batch, const storepb::Manifest& m) {
  TBFS_RETURN_IF_ERROR(RemoveEntryOf(batch, m));
  RemoveChunks(batch, m.file_id(), StoredRuns(m));
  batch->Delete(Space::kManifests, EncodeId(m.file_id()));
  return Status::OK();
}

void ColdStore::PutManifest(WriteBatch* batch, const storepb::Manifest& m) {
  const std::string bytes = m.SerializeAsString();
  batch->Put(Space::kManifests, EncodeId(m.file_id()), bytes);
  batch->Put(Space::kChunks, ChunkKey(m.file_id(), kManifestCopyIndex),
             ManifestCopyValue(m.file_id(), bytes));
}

Status ColdStore::Retire(WriteBatch* batch, const storepb::Manifest& m) {
  TBFS_RETURN_IF_ERROR(RemoveEntryOf(batch, m));
  batch->Delete(Space::kManifests, EncodeId(m.file_id()));
  // Its chunks stay for the readers; the copy goes, so that nothing (salvage
  // reading the blob files) takes the file for one still in the store.
  batch->Delete(Space::kChunks, ChunkKey(m.file_id(), kManifestCopyIndex));
  // The mark keeps which chunks have values, for DropRetired.
  std::string runs;
  for (const ChunkRun& r : StoredRuns(m)) runs += EncodeId(r.first) + EncodeId(r.end);
  batch->Put(Space::kMeta, RetiredKey(m.file_id()), runs);
  return Status::OK();
}

Status ColdStore::DropRetired(WriteBatch* batch, uint64_t file_id) {
  std::string mark;
  TBFS_RETURN_IF_ERROR(backend_->Get(Space::kMeta, RetiredKey(file_id), &mark));
  batch->Delete(Space::kMeta, RetiredKey(file_id));
  // A mark that names a file the store still holds is not that file's: its
  // chunks stay.
  std::string manifest;
  Status live = backend_->Get(Space::kManifests, EncodeId(file_id), &manifest);
  if (!live.IsNotFound()) {
    spdlog::warn(
        "store {}: file {} is marked retired but still in the store: its mark goes, its "
        "chunks stay{}",
        dir_, file_id, live.ok() ? "" : " (" + live.message() + ")");
    return Status::OK();
  }
  std::vector<ChunkRun> runs;
  if (!RunsOfMark(file_id, mark, &runs)) {
    // A mark from before the runs were kept is empty; such marks are gone
    // after the first mount or recovery of this version. A damaged one is
    // read as if it were one.
    if (!mark.empty()) {
      spdlog::warn(
          "store {}: the retired mark of file {} is damaged: its chunks are found by "
          "their keys",
          dir_, file_id);
    }
    runs = ScanRuns(file_id);
  }
  RemoveChunks(batch, file_id, runs);
  return Status::OK();
}

bool ColdStore::RunsOfMark(uint64_t file_id, std::string_view mark, std::vector<ChunkRun>* runs) {
  if (mark.empty() || mark.size() % 16 != 0) return false;
  uint64_t after = 0;  // where the previous run ended
  for (size_t at = 0; at < mark.size(); at += 16) {
    ChunkRun r;
    if (!DecodeId(mark.substr(at, 8), &r.first) || !DecodeId(mark.substr(at + 8, 8), &r.end) ||
        r.first >= r.end || r.first < after || r.end == kManifestCopyIndex) {
      return false;
    }
    // Each run's first and last chunk are in the store (a damaged value
    // still has its key): a mark whose bounds name no chunk is not trusted
    // with a delete per index in between.
    for (uint64_t index : {r.first, r.end - 1}) {
      std::string value;
      if (backend_->Get(Space::kChunks, ChunkKey(file_id, index), &value).IsNotFound()) {
        return false;
      }
    }
    after = r.end;
    runs->push_back(r);
  }
  return true;
}

Status ColdStore::ListRetired(std::vector<uint64_t>* ids) {
  ids->clear();
  const std::string prefix = kRetiredPrefix;
  return backend_->Scan(Space::kMeta, prefix, [&](std::string_view key, std::string_view) {
    uint64_t id = 0;
    if (DecodeId(key.substr(prefix.size()), &id)) ids->push_back(id);
    return true;
  });
}

Status ColdStore::DropAllRetired() {
  std::vector<uint64_t> ids;
  TBFS_RETURN_IF_ERROR(ListRetired(&ids));
  if (ids.empty()) return Status::OK();
  WriteBatch batch;
  for (uint64_t id : ids) TBFS_RETURN_IF_ERROR(DropRetired(&batch, id));
  return Commit(batch, true);
}

std::vector<ChunkRun> ColdStore::StoredRuns(const storepb::Manifest& m) {
  const storepb::Manifest stored = ContentManifest(m);
  // A manifest of no chunks: an empty file, or a stub for a file whose copy
  // was given up or cut short by a crash (its chunks are what was written).
  if (stored.chunks() == 0) return ScanRuns(m.file_id());
  return DataRuns(stored);
}

std::vector<ChunkRun> ColdStore::ScanRuns(uint64_t file_id) {
  std::vector<ChunkRun> runs;
  Status st = backend_->Scan(Space::kChunks, EncodeId(file_id),
                             [&](std::string_view key, std::string_view) {
                               uint64_t id = 0, index = 0;
                               if (!DecodeChunkKey(key, &id, &index) || index == kManifestCopyIndex)
                                 return true;
                               if (!runs.empty() && runs.back().end == index) {
                                 runs.back().end = index + 1;
                               } else {
                                 runs.push_back({index, index + 1});
                               }
                               return true;
                             });
  if (!st.ok()) {
    // The scan reads the values too: a damaged one ends it. What it did not
    // reach stays, garbage for `tbfs gc --garbage` (the file is gone
    // either way; a writer must still open).
    spdlog::warn("store {}: the chunks of removed file {} past chunk {} stay as garbage: {}", dir_,
                 file_id, runs.empty() ? 0 : runs.back().end, st.message());
  }
  return runs;
}

void ColdStore::RemoveChunks(WriteBatch* batch, uint64_t file_id,
                             const std::vector<ChunkRun>& runs) {
  // One delete per chunk that has a value, never a range: RocksDB 7.8
  // (Debian 12) aborts or frees twice in a scan that meets both a range
  // deletion and a table file it cannot read (docs/format.md, "No range
  // deletions"). Holes have no value, hence no delete.
  for (const ChunkRun& r : runs) {
    for (uint64_t index = r.first; index < r.end; ++index) {
      batch->Delete(Space::kChunks, ChunkKey(file_id, index));
    }
  }
  batch->Delete(Space::kChunks, ChunkKey(file_id, kManifestCopyIndex));
}

void ColdStore::PutFormat(WriteBatch* batch, uint32_t version) {
  uint32_t put = format_put_.load();
  while (put < version && !format_put_.compare_exchange_weak(put, version)) {
  }
  storepb::StoreInfo info = info_;
  info.set_format_version(std::max({put, version, info_.format_version()}));
  batch->Put(Space::kMeta, kMetaInfoKey, info.SerializeAsString());
}

std::shared_ptr<GzipPieces> ColdStore::PiecesOf(const storepb::Manifest& m, uint64_t index) {
  // At most kGzipCursors remakers (the most recently used), kGzipPerFile of
  // them for one file; each holds zlib's state and kGzipWindowBytes of
  // pieces.
  constexpr size_t kGzipCursors = 8, kGzipPerFile = 4;
  // The file's remakers, asked their cost without pieces_mu_ held: one busy
  // making pieces holds its own lock for as long, and readers of other
  // files must not wait for it.
  std::vector<std::shared_ptr<GzipPieces>> mine;
  {
    MutexLock lock(pieces_mu_);
    for (const auto& p : pieces_) {
      const storepb::Manifest& held = p->manifest();
      if (held.file_id() == m.file_id() && held.size() == m.size() &&
          ManifestHash(held) == ManifestHash(m)) {
        mine.push_back(p);
      }
    }
  }
  std::shared_ptr<GzipPieces> best;
  uint64_t best_cost = index + 1;  // what a new one costs
  for (const auto& p : mine) {
    const uint64_t cost = p->CostOf(index);
    if (best == nullptr || cost <= best_cost) {  // ties: the least recent
      best = p;
      best_cost = cost;
    }
  }
  // One that starts again from the top when no other is free to.
  const bool reuse = best != nullptr && (best_cost <= index || mine.size() >= kGzipPerFile);
  if (!reuse) {
    const storepb::Manifest content = ContentManifest(m);
    best = std::make_shared<GzipPieces>(
        m,
        [this, content](uint64_t i, ChunkCodec* codec, std::string* raw) {
          return ReadChunk(content, i, codec, raw);
        },
        gzip_window_bytes_ / m.chunk_bytes(), &gzip_pieces_made_);
  }
  MutexLock lock(pieces_mu_);  // the most recently used first
  auto it = std::find(pieces_.begin(), pieces_.end(), best);
  if (it != pieces_.end()) pieces_.erase(it);
  pieces_.insert(pieces_.begin(), best);
  if (pieces_.size() > kGzipCursors) pieces_.pop_back();
  return best;
}

Status ColdStore::ReadChunkInto(const storepb::Manifest& m, uint64_t index, ChunkCodec* codec,
                                char* out) {
  if (IsGzipContent(m)) return PiecesOf(m, index)->ReadInto(index, out);
  if (IsHoleChunk(m, index)) {  // zeros, and nothing in the store
    std::memset(out, 0, ChunkLength(m, index));
    return Status::OK();
  }
  // The stored value goes to a buffer this thread keeps: a fresh one for
  // every read would fault its pages in every time (see fs/chunk_buffers.h).
  thread_local std::string value;
  if (value.capacity() > (4u << 20)) std::string().swap(value);
  Status st = backend_->Get(Space::kChunks, ChunkKey(m.file_id(), index), &value);
  if (st.IsNotFound()) {
    return Status::Corruption(
        fmt::format("{}: chunk {} is missing from the store", m.path(), index));
  }
  TBFS_RETURN_IF_ERROR(st);
  st = codec->DecodeInto(value, out, ChunkLength(m, index), {m.file_id(), index},
                         info_.format_version() == kFormatVersionV1, find_dict_);
  if (!st.ok())
    return Status::Corruption(fmt::format("{}: chunk {}: {}", m.path(), index, st.message()));
  return Status::OK();
}

Status ColdStore::ReadChunk(const storepb::Manifest& m, uint64_t index, ChunkCodec* codec,
                            std::string* raw) {
  raw->resize(ChunkLength(m, index));
  return ReadChunkInto(m, index, codec, raw->data());
}

Status ColdStore::ReadRange(const storepb::Manifest& m, uint64_t offset, size_t length, char* out,
                            size_t* got, ChunkCodec* codec) {
  *got = 0;
  if (offset >= m.size() || length == 0) return Status::OK();
  length = static_cast<size_t>(std::min<uint64_t>(length, m.size() - offset));
  const uint64_t cb = m.chunk_bytes();
  std::string raw;
  while (*got < length) {
    uint64_t pos = offset + *got;
    uint64_t index = pos / cb;
    TBFS_RETURN_IF_ERROR(ReadChunk(m, index, codec, &raw));
    size_t within = static_cast<size_t>(pos - index * cb);
    size_t n = std::min(raw.size() - within, length - *got);
    std::memcpy(out + *got, raw.data() + within, n);
    *got += n;
  }
  return Status::OK();
}

Status ColdStore::PutJournal(const storepb::JournalRecord& record) {
  WriteBatch batch;
  batch.Put(Space::kJournal, EncodeId(record.batch_id()), record.SerializeAsString());
  // A journaled file id may have chunks written under it next: the record
  // that makes it unavailable to every later writer is durable first, in
  // the same (fenced) commit. Read and committed under one lock, so these
  // records land in increasing order.
  MutexLock lock(journal_mu_);
  uint64_t next = next_file_id_.load();
  for (const auto& e : record.entries()) next = std::max(next, e.file_id() + 1);
  batch.Put(Space::kMeta, kMetaNextFileIdKey, EncodeId(next));
  return backend_->Commit(batch, true);
}

Status ColdStore::DeleteJournal(uint64_t batch_id) {
  WriteBatch batch;
  batch.Delete(Space::kJournal, EncodeId(batch_id));
  return backend_->Commit(batch, true);
}

Status ColdStore::ListJournal(std::vector<storepb::JournalRecord>* out) {
  out->clear();
  Status inner;
  TBFS_RETURN_IF_ERROR(
      backend_->Scan(Space::kJournal, "", [&](std::string_view, std::string_view v) {
        storepb::JournalRecord r;
        if (!r.ParseFromArray(v.data(), static_cast<int>(v.size()))) {
          inner = Status::Corruption("journal record does not parse");
          return false;
        }
        out->push_back(std::move(r));
        return true;
      }));
  return inner;
}

}  // namespace tbfs::store
