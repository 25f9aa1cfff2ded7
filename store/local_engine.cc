// A writer's hold of a local RocksDB store: room checked before the
// engine's log is written, the engine reopened after a write it failed, a
// store opened read-only for want of room made writable in place
// (store/backend.h: LocalEngine).
#include <cerrno>
#include <chrono>
#include <thread>

#include "base/failpoint.h"
#include "fmt/format.h"
#include "spdlog/spdlog.h"
#include "store/backend.h"
#include "store/rocks_env.h"

namespace tbfs::store {

std::unique_ptr<LocalEngine> LocalEngine::Writing(std::string dir, UniqueFd hold,
                                                  std::unique_ptr<Backend> writer) {
  return std::unique_ptr<LocalEngine>(
      new LocalEngine(std::move(dir), std::move(hold), std::move(writer), true));
}

Result<std::unique_ptr<LocalEngine>> LocalEngine::OpenReader(const std::string& dir) {
  auto hold = HoldStoreForWriting(dir, false);
  if (!hold.ok()) return hold.status();
  BackendOptions o;
  o.read_only = true;
  auto reader = OpenRocksEngine(dir, o);
  if (!reader.ok()) return reader.status();
  return std::unique_ptr<LocalEngine>(
      new LocalEngine(dir, std::move(hold).value(), std::move(reader).value(), false));
}

bool LocalEngine::Replace(std::unique_ptr<Backend>* next, bool writable) {
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(5);
  while (!mu_.try_lock()) {
    if (std::chrono::steady_clock::now() > deadline) return false;
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  inner_.swap(*next);
  writable_ = writable;
  mu_.unlock();
  return true;
}

Status LocalEngine::OpenInPlace(const BackendOptions& options, bool writable) {
  auto opened = OpenRocksEngine(dir_, options);
  if (!opened.ok()) return opened.status();
  std::unique_ptr<Backend> engine = std::move(opened).value();
  if (!Replace(&engine, writable)) {
    return Status::FromErrno(EBUSY, "reopen store " + dir_ + ":",
                             "calls in flight held its engine for 5 s; tried again later");
  }
  return Status::OK();  // the engine replaced closes here, outside the lock
}

Status LocalEngine::OpenWriter() {
  MutexLock one(renew_mu_);
  {
    ReaderMutexLock lock(mu_);
    if (writable_) return Status::OK();
  }
  // Opened beside the reader (a read-only engine takes no lock), then put
  // in its place: no call sees the store missing.
  return OpenInPlace(BackendOptions(), true);
}

Status LocalEngine::Renew() {
  MutexLock one(renew_mu_);
  const Status failed = Failed();
  if (failed.ok()) return Status::OK();  // another call renewed it
  const auto now = std::chrono::steady_clock::now();
  if (now < next_renewal_) return failed;
  next_renewal_ = now + std::chrono::seconds(1);
  // Room for the engine's open: a new log and MANIFEST, and the tables of
  // what its log replays (its memtables now).
  uint64_t free = 0, size = 0;
  const uint64_t need = UnflushedBytes() + (8u << 20);
  if (FreeBytes(&free, &size).ok() && free < need) {
    return StaysFailed(failed, fmt::format("{} bytes free, {} needed to reopen it", free, need),
                       now);
  }
  bool writable = false;
  {
    ReaderMutexLock lock(mu_);
    writable = writable_;
  }
  if (writable) {
    // A reader in the broken writer's place first (the broken writer closes
    // as it goes): reads go on while the writer is opened anew (which only
    // one engine can be).
    BackendOptions reader;
    reader.read_only = true;
    if (Status st = OpenInPlace(reader, false); !st.ok()) {
      return StaysFailed(failed, st.message(), now);
    }
  }
  BackendOptions writer;
  writer.after_failed_write = true;
  if (Status st = OpenInPlace(writer, true); !st.ok())
    return StaysFailed(failed, st.message(), now);
  {
    MutexLock lock(failed_mu_);
    failed_ = Status::OK();
  }
  said_.clear();
  spdlog::warn("store {}: its engine reopened after a failed write ({}): writable again", dir_,
               failed.message());
  return Status::OK();
}

Status LocalEngine::StaysFailed(const Status& failed, const std::string& why,
                                std::chrono::steady_clock::time_point now) {
  if (why != said_ || now - said_at_ >= std::chrono::minutes(1)) {
    spdlog::warn("store {}: read-only until its engine reopens (after a failed write: {}): {}",
                 dir_, failed.message(), why);
    said_ = why;
    said_at_ = now;
  }
  return failed;
}

bool LocalEngine::writable() const {
  ReaderMutexLock lock(mu_);
  return writable_;
}

Status LocalEngine::ReadOnly() const {
  return Status::FromErrno(EROFS, "write to store",
                           dir_ + ": read-only until its filesystem has room");
}

Status LocalEngine::Failed() const {
  MutexLock lock(failed_mu_);
  return failed_;
}

// One that fails there leaves the log's writer broken (Renew); the reserve
// covers the record's framing and what other writers take between this
// check and the write. Another process may still take more: the write
// then fails, and the engine is reopened.
Status LocalEngine::RoomForLog(uint64_t bytes) {
  constexpr uint64_t kLogReserve = 1 << 20;
  uint64_t free = 0, size = 0;
  if (!FreeBytes(&free, &size).ok() || free >= bytes + kLogReserve) return Status::OK();
  return Status::FromErrno(
      ENOSPC, "write to store " + dir_ + ":",
      fmt::format("{} bytes free, {} needed for the engine's log", free, bytes + kLogReserve));
}

Status LocalEngine::Commit(const WriteBatch& batch, bool sync) {
  if (!Failed().ok()) TBFS_RETURN_IF_ERROR(Renew());
  // Armed to fail, the check passes whatever the room: as when another
  // process takes the room after it (a test of a daemon's).
  if (!ShouldFail("store.room_checked")) TBFS_RETURN_IF_ERROR(RoomForLog(batch.bytes()));
  FailpointHook("store.room_checked", dir_);
  ReaderMutexLock lock(mu_);
  if (!writable_) return ReadOnly();
  // A write that failed meanwhile: not into that engine (the engine stops
  // its own writes as the failed one returns; its recovery from a full
  // disk would let them in again).
  if (Status failed = Failed(); !failed.ok()) return failed;
  Status st = inner_->Commit(batch, sync);
  if (!st.ok()) {
    MutexLock f(failed_mu_);
    if (failed_.ok()) failed_ = st;
  }
  return st;
}

Status LocalEngine::Get(Space space, std::string_view key, std::string* value) {
  ReaderMutexLock lock(mu_);
  return inner_->Get(space, key, value);
}

Status LocalEngine::Scan(Space space, std::string_view prefix,
                         const std::function<bool(std::string_view, std::string_view)>& fn) {
  ReaderMutexLock lock(mu_);
  return inner_->Scan(space, prefix, fn);
}

Status LocalEngine::LastKey(Space space, std::string* key) {
  ReaderMutexLock lock(mu_);
  return inner_->LastKey(space, key);
}

uint64_t LocalEngine::DiskBytes() {
  ReaderMutexLock lock(mu_);
  return inner_->DiskBytes();
}

Status LocalEngine::FreeBytes(uint64_t* free, uint64_t* size) {
  ReaderMutexLock lock(mu_);
  return inner_->FreeBytes(free, size);
}

uint64_t LocalEngine::UnflushedBytes() {
  ReaderMutexLock lock(mu_);
  return writable_ ? inner_->UnflushedBytes() : 0;
}

Status LocalEngine::Compact() {
  if (!Failed().ok()) TBFS_RETURN_IF_ERROR(Renew());
  ReaderMutexLock lock(mu_);
  if (!writable_) return ReadOnly();
  if (Status failed = Failed(); !failed.ok()) return failed;
  return inner_->Compact();
}

Status LocalEngine::Flush() {
  if (!Failed().ok()) TBFS_RETURN_IF_ERROR(Renew());
  ReaderMutexLock lock(mu_);
  if (!writable_) return Status::OK();  // a reader holds nothing unflushed
  if (Status failed = Failed(); !failed.ok()) return failed;
  return inner_->Flush();
}

Backend::Memory LocalEngine::MemoryUse() {
  ReaderMutexLock lock(mu_);
  return inner_->MemoryUse();
}

void LocalEngine::OpenReaders(const std::function<bool()>& stop) {
  ReaderMutexLock lock(mu_);
  inner_->OpenReaders(stop);
}

Status LocalEngine::VerifyTables() {
  ReaderMutexLock lock(mu_);
  return inner_->VerifyTables();
}

std::string LocalEngine::LogDamage() {
  ReaderMutexLock lock(mu_);
  return inner_->LogDamage();
}

std::vector<std::string> LocalEngine::UnlistedBlobFiles() {
  ReaderMutexLock lock(mu_);
  return inner_->UnlistedBlobFiles();
}

}  // namespace tbfs::store
