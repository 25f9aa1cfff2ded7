// A store opened read-only for want of room, made writable in place when
// room comes back (store/backend.h: ReadOnlyUntilRoom).
#include <cerrno>

#include "store/backend.h"

namespace tbfs::store {

Result<std::unique_ptr<ReadOnlyUntilRoom>> ReadOnlyUntilRoom::Open(const std::string& dir) {
  BackendOptions o;
  o.read_only = true;
  auto reader = OpenRocksBackend(dir, o);
  if (!reader.ok()) return reader.status();
  return std::unique_ptr<ReadOnlyUntilRoom>(new ReadOnlyUntilRoom(dir, std::move(reader).value()));
}

Status ReadOnlyUntilRoom::OpenWriter() {
  {
    ReaderMutexLock lock(mu_);
    if (writable_) return Status::OK();
  }
  // Opened beside the reader (a read-only engine takes no lock), then put
  // in its place: no call sees the store missing.
  BackendOptions o;
  auto writer = OpenRocksBackend(dir_, o);
  if (!writer.ok()) return writer.status();
  std::unique_ptr<Backend> reader;
  {
    WriterMutexLock lock(mu_);
    reader = std::move(inner_);
    inner_ = std::move(writer).value();
    writable_ = true;
  }
  return Status::OK();  // the reader closes here, outside the lock
}

bool ReadOnlyUntilRoom::writable() const {
  ReaderMutexLock lock(mu_);
  return writable_;
}

Status ReadOnlyUntilRoom::ReadOnly() const {
  return Status::FromErrno(EROFS, "write to store",
                           dir_ + ": read-only until its filesystem has room");
}

Status ReadOnlyUntilRoom::Commit(const WriteBatch& batch, bool sync) {
  ReaderMutexLock lock(mu_);
  return writable_ ? inner_->Commit(batch, sync) : ReadOnly();
}

Status ReadOnlyUntilRoom::Get(Space space, std::string_view key, std::string* value) {
  ReaderMutexLock lock(mu_);
  return inner_->Get(space, key, value);
}

Status ReadOnlyUntilRoom::Scan(Space space, std::string_view prefix,
                               const std::function<bool(std::string_view, std::string_view)>& fn) {
  ReaderMutexLock lock(mu_);
  return inner_->Scan(space, prefix, fn);
}

Status ReadOnlyUntilRoom::LastKey(Space space, std::string* key) {
  ReaderMutexLock lock(mu_);
  return inner_->LastKey(space, key);
}

uint64_t ReadOnlyUntilRoom::DiskBytes() {
  ReaderMutexLock lock(mu_);
  return inner_->DiskBytes();
}

Status ReadOnlyUntilRoom::FreeBytes(uint64_t* free, uint64_t* size) {
  ReaderMutexLock lock(mu_);
  return inner_->FreeBytes(free, size);
}

uint64_t ReadOnlyUntilRoom::UnflushedBytes() {
  ReaderMutexLock lock(mu_);
  return writable_ ? inner_->UnflushedBytes() : 0;
}

Status ReadOnlyUntilRoom::Compact() {
  ReaderMutexLock lock(mu_);
  return writable_ ? inner_->Compact() : ReadOnly();
}

Status ReadOnlyUntilRoom::Flush() {
  ReaderMutexLock lock(mu_);
  return writable_ ? inner_->Flush() : Status::OK();  // a reader holds nothing unflushed
}

Backend::Memory ReadOnlyUntilRoom::MemoryUse() {
  ReaderMutexLock lock(mu_);
  return inner_->MemoryUse();
}

Status ReadOnlyUntilRoom::VerifyTables() {
  ReaderMutexLock lock(mu_);
  return inner_->VerifyTables();
}

std::string ReadOnlyUntilRoom::LogDamage() {
  ReaderMutexLock lock(mu_);
  return inner_->LogDamage();
}

}  // namespace tbfs::store
