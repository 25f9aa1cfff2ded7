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

ColdStore::~ColdStore() {
  backend_.reset();
  DropWriterRole();
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
  if (!m.ParseFromArray(bytes.data(), static_cast<int>(bytes.size())))
    return Status::Corruption(fmt::format("store record does not parse: manifest {}", file_id));
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
  // The stored value goes to the codec's buffer: a fresh one for every read
  // would fault its pages in every time (see fs/chunk_buffers.h).
  std::string& value = codec->value_buffer();
  if (value.capacity() > (4u << 20)) std::string().swap(value);
  Status st = backend_->Get(Space::kChunks, ChunkKey(m.file_id(), index), &value);
  if (st.IsNotFound()) {
    return Status::Corruption(
        fmt::format("{}: chunk {} is missing from the store", m.path(), index));
  }
  // The engine's own check of the value, or a store that cannot be read:
  // either way the error names the file and the chunk.
  if (st.IsCorruption()) {
    return Status::Corruption(fmt::format("{}: chunk {}: {}", m.path(), index, st.message()));
  }
  if (st.code() == Code::kIOError) {
    return Status::IOError(st.sys_errno(),
                           fmt::format("{}: chunk {}: {}", m.path(), index, st.message()));
  }
  TBFS_RETURN_IF_ERROR(st);
  st = codec->DecodeInto(value, out, ChunkLength(m, index), ChunkPosOf(m, index),
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
  const ChunkGeometry g = GeometryOf(m);
  std::string raw;
  while (*got < length) {
    uint64_t pos = offset + *got;
    uint64_t index = g.IndexAt(pos);
    TBFS_RETURN_IF_ERROR(ReadChunk(m, index, codec, &raw));
    size_t within = static_cast<size_t>(pos - g.Start(index));
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
  TBFS_RETURN_IF_ERROR(Write(batch, true));
  journal_index_.Add(record);
  return Status::OK();
}

Status ColdStore::DeleteJournal(uint64_t batch_id) {
  WriteBatch batch;
  batch.Delete(Space::kJournal, EncodeId(batch_id));
  journal_index_.DropMarks(&batch, batch_id);
  TBFS_RETURN_IF_ERROR(Write(batch, true));
  journal_index_.Forget(batch_id);
  return Status::OK();
}

uint64_t ColdStore::Defer(const WriteBatch& batch) {
  MutexLock lock(deferred_mu_);
  deferred_.Append(batch);
  has_deferred_.store(!deferred_.empty(), std::memory_order_release);
  return deferred_landed_.load();
}

Status ColdStore::CommitDeferred() {
  if (!has_deferred_.load(std::memory_order_acquire)) return Status::OK();
  return Write(WriteBatch(), true);
}

Status ColdStore::Write(const WriteBatch& batch, bool sync) {
  if (!has_deferred_.load(std::memory_order_acquire)) return backend_->Commit(batch, sync);
  MutexLock lock(deferred_mu_);
  if (deferred_.empty()) return backend_->Commit(batch, sync);
  WriteBatch both;
  both.Append(deferred_);
  both.Append(batch);
  Status st = backend_->Commit(both, true);  // the deferred commit was synced
  if (st.ok()) {
    deferred_.Clear();
    has_deferred_.store(false, std::memory_order_release);
    deferred_landed_.fetch_add(1);
  }
  return st;
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

Status ColdStore::Compact() {
  if (ShouldFail("store.compact")) {
    return Status::FromErrno(ENOSPC, "compact (failpoint store.compact) store", dir());
  }
  return backend_->Compact();
}

}  // namespace tbfs::store
