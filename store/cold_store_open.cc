// Opening a store and its roles: the logdir lock, the writer's role and
// lease, the format check and upgrades, the next ids (store/cold_store.h).
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
#include "store/cold_store.h"
#include "store/format.h"
#include "store/gzip_pieces.h"
#include "store/open_checks.h"
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
  {
    // A batch this writer could not finish is the next writer's recovery's
    // to undo (even when that is this mount again): not to commit.
    MutexLock lock(deferred_mu_);
    deferred_.Clear();
    has_deferred_.store(false, std::memory_order_release);
  }
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
    TBFS_RETURN_IF_ERROR(CheckBeforeLock(dir, options));
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
  } else if (struct stat marker;
             !options.read_only && ::lstat(JoinPath(dir, kCreatingName).c_str(), &marker) == 0) {
    spdlog::warn("store {}: a creation marker in a store that holds files: removed", dir);
    TBFS_RETURN_IF_ERROR(EndCreation(dir));
  }
  struct stat current;
  const bool existed = ::stat(JoinPath(dir, "CURRENT").c_str(), &current) == 0;
  if (!options.read_only && (existed || options.create_if_missing)) {
    struct stat st;
    if (::stat(dir.c_str(), &st) == 0) {
      // Only a store, or an empty folder that becomes one, is touched: a
      // folder that holds none and is not to become one is left as it is.
      TBFS_RETURN_IF_ERROR(CheckStoreFolder(dir));
      TBFS_RETURN_IF_ERROR(MakeStorePrivate(dir));
    }
  }
  if (existed && !options.read_only) {
    TBFS_RETURN_IF_ERROR(CheckBeforeWriterOpen(dir));
    RemoveStaleScratch(dir);
  }
  const bool creating = !existed && !options.read_only && options.create_if_missing;
  if (creating) TBFS_RETURN_IF_ERROR(MarkCreation(dir));
  auto backend = OpenRocksBackend(dir, bo);
  if (creating) MaybeCrash("store.create.engine");
  const int err = backend.ok() ? 0 : backend.status().sys_errno();
  if (!backend.ok() && existed && options.read_only_when_full && (err == ENOSPC || err == EDQUOT)) {
    // No room for the engine's open: read-only, until there is.
    auto reader = LocalEngine::OpenReader(dir);
    if (!reader.ok()) return Damaged(reader.status());
    LocalEngine* until_room = reader->get();
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
    if (Status st = store->Init(reading, existed); !st.ok()) return Damaged(st);
    spdlog::warn("store {}: opened read-only: {}", dir, store->refusal());
    return store;
  }
  if (!backend.ok()) return Damaged(backend.status());
  std::unique_ptr<ColdStore> store(new ColdStore(dir, std::move(backend).value()));
  {
    MutexLock role(store->role_mu_);
    store->logdir_lock_ = std::move(lock);
  }
  store->read_only_ = options.read_only;
  if (Status st = store->Init(options, existed); !st.ok()) return Damaged(st);
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
    TBFS_RETURN_IF_ERROR(ParseInfo(bytes, dir_, &info_));
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
    journal_index_.Add(record);
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
      if (!codec.Rebind(value, ChunkLength(m, index), ChunkPosOf(m, index), &bound).ok()) {
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

}  // namespace tbfs::store
