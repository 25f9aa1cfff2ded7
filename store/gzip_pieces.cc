#include "store/gzip_pieces.h"

#include <xxhash.h>

#include <cstring>

#include "fmt/format.h"
#include "store/cold_store.h"

namespace tbfs::store {

storepb::Manifest ContentManifest(const storepb::Manifest& m) {
  if (!IsGzipContent(m)) return m;
  storepb::Manifest c = m;
  c.clear_gzip();
  c.clear_hole_runs();
  c.set_size(m.gzip().content_bytes());
  c.set_chunk_bytes(m.gzip().content_chunk_bytes());
  c.set_chunks(m.gzip().content_chunks());
  c.set_hash_low(m.gzip().content_hash_low());
  c.set_hash_high(m.gzip().content_hash_high());
  return c;
}

GzipRecipe RecipeOf(const storepb::Manifest& m) {
  GzipRecipe r;
  r.header = m.gzip().header();
  r.level = m.gzip().level();
  r.mem_level = m.gzip().mem_level();
  r.sync_flushes.assign(m.gzip().sync_flushes().begin(), m.gzip().sync_flushes().end());
  r.content_bytes = m.gzip().content_bytes();
  r.gzip_bytes = m.size();
  return r;
}

bool GzipContentWellFormed(const storepb::Manifest& m) {
  if (!IsGzipContent(m)) return true;
  const storepb::GzipContent& g = m.gzip();
  if (m.chunk_bytes() == 0 || g.content_chunk_bytes() == 0 || HasHoles(m)) return false;
  if (g.content_chunks() != ChunkCount(g.content_bytes(), g.content_chunk_bytes())) return false;
  if (static_cast<uint64_t>(g.piece_hashes_size()) != m.chunks()) return false;
  if (g.level() < 1 || g.level() > 9 || g.mem_level() < 1 || g.mem_level() > 9) return false;
  uint64_t last = 0;
  for (uint64_t f : g.sync_flushes()) {
    if (f < last || f > g.content_bytes()) return false;
    last = f;
  }
  return GzipHeaderLength(g.header()) == static_cast<int64_t>(g.header().size());
}

bool MayBeGzip(std::string_view rel_path) {
  return rel_path.size() > 3 && rel_path.substr(rel_path.size() - 3) == ".gz";
}

std::string_view ContentPath(std::string_view rel_path) {
  return MayBeGzip(rel_path) ? rel_path.substr(0, rel_path.size() - 3) : rel_path;
}

uint64_t PieceHash(std::string_view piece) { return XXH3_64bits(piece.data(), piece.size()); }

GzipPieces::GzipPieces(storepb::Manifest m, ContentReader read, size_t window,
                       std::atomic<uint64_t>* made)
    : m_(std::move(m)),
      content_(ContentManifest(m_)),
      read_(std::move(read)),
      window_(std::max<size_t>(window, 1)),
      also_made_(made) {
  MutexLock lock(mu_);
  Restart();
}

GzipPieces::~GzipPieces() = default;

uint64_t GzipPieces::made() const {
  MutexLock lock(mu_);
  return made_;
}

uint64_t GzipPieces::CostOf(uint64_t index) const {
  MutexLock lock(mu_);
  if (!broken_.ok()) return index + 1;
  if (Kept(index) != nullptr) return 0;
  return index >= next_piece_ ? index - next_piece_ + 1 : index + 1;
}

void GzipPieces::Restart() {
  remaker_ = std::make_unique<GzipRemaker>(RecipeOf(m_));
  next_chunk_ = 0;
  next_piece_ = 0;
  finished_ = false;
  pending_.clear();
  kept_.clear();
  broken_ = Status::OK();
}

const std::string* GzipPieces::Kept(uint64_t index) const {
  if (index >= next_piece_ || next_piece_ - index > kept_.size()) return nullptr;
  return &kept_[kept_.size() - (next_piece_ - index)];
}

Status GzipPieces::Cut(bool last, uint64_t up_to) {
  const uint64_t cb = m_.chunk_bytes();
  size_t at = 0;
  while (next_piece_ < m_.chunks() && next_piece_ <= up_to) {
    const size_t len = ChunkLength(m_, next_piece_);
    if (pending_.size() - at < len && !(last && pending_.size() - at > 0)) break;
    if (pending_.size() - at < len) {
      return Status::Corruption(fmt::format("{}: made again, the file ends {} bytes short",
                                            m_.path(), len - (pending_.size() - at)));
    }
    std::string piece = pending_.substr(at, len);
    at += len;
    if (PieceHash(piece) !=
        static_cast<uint64_t>(m_.gzip().piece_hashes(static_cast<int>(next_piece_)))) {
      return Status::Corruption(
          fmt::format("{}: piece {} (bytes {}..) made again from the content differs from the "
                      "file (a zlib other than the one that stored it?)",
                      m_.path(), next_piece_, next_piece_ * cb));
    }
    kept_.push_back(std::move(piece));
    if (kept_.size() > window_) kept_.pop_front();
    next_piece_++;
    made_++;
    if (also_made_ != nullptr) also_made_->fetch_add(1, std::memory_order_relaxed);
  }
  pending_.erase(0, at);
  const bool ended = next_piece_ == m_.chunks();
  if (last && (ended ? !pending_.empty() : next_piece_ <= up_to)) {
    return Status::Corruption(
        fmt::format("{}: made again, the file is not {} bytes long", m_.path(), m_.size()));
  }
  return Status::OK();
}

Status GzipPieces::MakeUpTo(uint64_t index) {
  // What is pending first: one content chunk can make more pieces than a
  // window keeps (1 MiB of random digits deflates to about 9 pieces), so
  // only those up to `index` are cut, the rest wait in pending_.
  TBFS_RETURN_IF_ERROR(Cut(finished_, index));
  while (next_piece_ <= index) {
    if (next_chunk_ < content_.chunks()) {
      Status st = read_(next_chunk_, &codec_, &raw_);
      if (st.ok()) st = remaker_->Add(raw_, &pending_);
      if (!st.ok()) {
        return Status::Corruption(
            fmt::format("{}: content chunk {}: {}", m_.path(), next_chunk_, st.message()));
      }
      next_chunk_++;
    } else if (!finished_) {
      TBFS_RETURN_IF_ERROR(remaker_->Finish(&pending_));
      finished_ = true;
    } else {
      return Status::Corruption(fmt::format("{}: no piece {}", m_.path(), index));
    }
    TBFS_RETURN_IF_ERROR(Cut(finished_, index));
  }
  return Status::OK();
}

Status GzipPieces::ReadInto(uint64_t index, char* out) {
  if (index >= m_.chunks()) {
    return Status::InvalidArgument(fmt::format("{}: no piece {}", m_.path(), index));
  }
  MutexLock lock(mu_);
  const std::string* piece = broken_.ok() ? Kept(index) : nullptr;
  if (piece == nullptr) {
    if (!broken_.ok() || index < next_piece_) Restart();
    Status st = MakeUpTo(index);
    if (!st.ok()) {
      broken_ = st;
      return st;
    }
    piece = Kept(index);
  }
  std::memcpy(out, piece->data(), piece->size());
  return Status::OK();
}

Status GzipPieces::Read(uint64_t index, std::string* out) {
  out->resize(index < m_.chunks() ? ChunkLength(m_, index) : 0);
  return ReadInto(index, out->data());
}

}  // namespace tbfs::store
