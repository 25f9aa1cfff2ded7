#include "store/gzip_recipe.h"

#include <fmt/format.h>

#include <algorithm>
#include <cstring>

namespace tbfs::store {

namespace {

constexpr uint8_t kFlagHcrc = 0x02, kFlagExtra = 0x04, kFlagName = 0x08, kFlagComment = 0x10;
constexpr uint8_t kFlagReserved = 0xe0;
constexpr size_t kTrailerBytes = 8;
constexpr size_t kInflateOut = 256 << 10;
// zlib counts input in uInt: what is bigger goes in pieces of this.
constexpr size_t kZlibPiece = size_t{1} << 30;

uint32_t LittleEndian32(const char* p) {
  const auto* u = reinterpret_cast<const unsigned char*>(p);
  return uint32_t{u[0]} | uint32_t{u[1]} << 8 | uint32_t{u[2]} << 16 | uint32_t{u[3]} << 24;
}

void AppendLittleEndian32(uint32_t v, std::string* out) {
  for (int i = 0; i < 4; i++) out->push_back(static_cast<char>(v >> (8 * i)));
}

uint32_t Crc32(uint32_t crc, std::string_view bytes) {
  // zlib's crc32 takes a uInt length: feed it in pieces.
  while (!bytes.empty()) {
    const size_t n = std::min<size_t>(bytes.size(), 1 << 30);
    crc = static_cast<uint32_t>(
        crc32(crc, reinterpret_cast<const Bytef*>(bytes.data()), static_cast<uInt>(n)));
    bytes.remove_prefix(n);
  }
  return crc;
}

// Runs deflate over `in` (at most kZlibPiece bytes) with `flush` until it
// is all taken and nothing is pending, handing each piece made to `made`,
// which returns false to stop. The finder's candidates and the remaker both
// come through here, so a recipe is remade with the very calls that found
// it. Z_BUF_ERROR is no progress (nothing to do), not a failure: false only
// for a zlib error.
template <typename Made>
bool DeflateAll(z_stream& z, std::string_view in, int flush, const Made& made) {
  char buf[16 << 10];
  z.next_in = reinterpret_cast<Bytef*>(const_cast<char*>(in.data()));
  z.avail_in = static_cast<uInt>(in.size());
  do {
    z.next_out = reinterpret_cast<Bytef*>(buf);
    z.avail_out = sizeof(buf);
    const int rc = deflate(&z, flush);
    if (rc != Z_OK && rc != Z_STREAM_END && rc != Z_BUF_ERROR) return false;
    if (!made(std::string_view(buf, sizeof(buf) - z.avail_out))) return true;
  } while (z.avail_in > 0 || z.avail_out == 0);
  return true;
}

// The levels whose writers set the header's XFL byte to `xfl`: zlib and
// Python write 2 for level 9, 4 for levels 0 and 1, 0 otherwise. Level 0
// is not tried: its stored blocks follow the writer's buffer sizes, and a
// file of stored blocks compresses as well as its content anyway.
std::vector<int> LevelsFor(uint8_t xfl) {
  if (xfl == 2) return {9};
  if (xfl == 4) return {1};
  if (xfl == 0) return {6, 2, 3, 4, 5, 7, 8};
  return {};
}

}  // namespace

int64_t GzipHeaderLength(std::string_view b) {
  auto byte = [&](size_t i) { return static_cast<uint8_t>(b[i]); };
  if (b.size() >= 1 && byte(0) != 0x1f) return -1;
  if (b.size() >= 2 && byte(1) != 0x8b) return -1;
  if (b.size() >= 3 && byte(2) != 8) return -1;  // CM: deflate
  if (b.size() < 10) return 0;
  const uint8_t flags = byte(3);
  if (flags & kFlagReserved) return -1;
  size_t at = 10;
  if (flags & kFlagExtra) {
    if (b.size() < at + 2) return 0;
    at += 2 + (size_t{byte(at)} | size_t{byte(at + 1)} << 8);
  }
  for (uint8_t field : {kFlagName, kFlagComment}) {
    if (!(flags & field)) continue;
    const size_t end = at < b.size() ? b.find('\0', at) : std::string_view::npos;
    if (end == std::string_view::npos) return b.size() > kMaxGzipHeader ? -1 : 0;
    at = end + 1;
  }
  if (flags & kFlagHcrc) at += 2;
  if (at > kMaxGzipHeader) return -1;
  return b.size() < at ? 0 : static_cast<int64_t>(at);
}

// One set of settings under trial: a deflater fed the content as it is
// inflated, whose every output byte must equal the stream's.
struct GzipRecipeFinder::Candidate {
  int level = 0;
  int mem_level = 0;
  z_stream z{};
  uint64_t matched = 0;   // stream bytes made and checked
  std::string unchecked;  // made beyond what has been read of the stream
  bool alive = true;
  ~Candidate() { deflateEnd(&z); }
};

GzipRecipeFinder::GzipRecipeFinder(size_t feed_bytes)
    : feed_bytes_(std::max<size_t>(feed_bytes, 1)) {}

GzipRecipeFinder::~GzipRecipeFinder() {
  if (inflate_ready_) inflateEnd(&inflate_);
}

void GzipRecipeFinder::Reject(std::string why) {
  if (why_not_.empty()) why_not_ = std::move(why);
  candidates_.clear();
  raw_.clear();
  feed_.clear();
}

void GzipRecipeFinder::Add(std::string_view gz) {
  if (gz.size() > kZlibPiece) {
    for (size_t at = 0; at < gz.size(); at += kZlibPiece) Add(gz.substr(at, kZlibPiece));
    return;
  }
  if (!why_not_.empty()) return;
  gzip_bytes_ += gz.size();
  if (in_header_) {
    const size_t before = header_.size();
    header_.append(gz.substr(0, kMaxGzipHeader + 1 - before));
    const int64_t n = GzipHeaderLength(header_);
    if (n < 0) return Reject("not a gzip header this version keeps");
    if (n == 0) {
      if (header_.size() > kMaxGzipHeader) Reject("gzip header too long");
      return;
    }
    gz = gz.substr(static_cast<size_t>(n) - before);
    header_.resize(static_cast<size_t>(n));
    in_header_ = false;
    if (inflateInit2(&inflate_, -MAX_WBITS) != Z_OK) return Reject("inflateInit2 failed");
    inflate_ready_ = true;
    for (int level : LevelsFor(static_cast<uint8_t>(header_[8]))) {
      for (int mem_level : {8, 9}) {
        auto c = std::make_unique<Candidate>();
        c->level = level;
        c->mem_level = mem_level;
        if (deflateInit2(&c->z, level, Z_DEFLATED, -MAX_WBITS, mem_level, Z_DEFAULT_STRATEGY) !=
            Z_OK) {
          return Reject("deflateInit2 failed");
        }
        candidates_.push_back(std::move(c));
      }
    }
    if (candidates_.empty()) return Reject("the header's XFL byte names no zlib level");
  }
  if (!stream_end_) {
    Inflate(gz);
  } else if (trailer_.size() <= kTrailerBytes) {  // one more says there are bytes after it
    trailer_.append(gz.substr(0, kTrailerBytes + 1 - trailer_.size()));
  }
}

// Inflates `in` block by block: the content goes to the candidates, and a
// block that makes no content and is not the last is a flush.
void GzipRecipeFinder::Inflate(std::string_view in) {
  std::string out(kInflateOut, '\0');
  inflate_.next_in = reinterpret_cast<Bytef*>(const_cast<char*>(in.data()));
  inflate_.avail_in = static_cast<uInt>(in.size());
  while (why_not_.empty() && !stream_end_ && inflate_.avail_in > 0) {
    const Bytef* before = inflate_.next_in;
    inflate_.next_out = reinterpret_cast<Bytef*>(out.data());
    inflate_.avail_out = static_cast<uInt>(out.size());
    const int rc = inflate(&inflate_, Z_BLOCK);
    raw_.append(reinterpret_cast<const char*>(before), inflate_.next_in - before);
    if (rc != Z_OK && rc != Z_STREAM_END && rc != Z_BUF_ERROR) {
      return Reject(fmt::format("damaged deflate stream ({})", inflate_.msg ? inflate_.msg : "?"));
    }
    const size_t made = out.size() - inflate_.avail_out;
    content_bytes_ += made;
    crc_ = Crc32(crc_, {out.data(), made});
    Feed({out.data(), made});
    if (rc == Z_STREAM_END) {
      stream_end_ = true;
    } else if (inflate_.data_type & 128) {  // at the end of a block
      if (content_bytes_ == block_start_out_ && !(inflate_.data_type & 64)) {
        // zlib makes no second flush where nothing came in between (it
        // answers Z_BUF_ERROR): such a stream came from elsewhere.
        if (!flushes_.empty() && flushes_.back() == content_bytes_) {
          return Reject("two flushes at one content offset");
        }
        flushes_.push_back(content_bytes_);
        FeedCandidates(feed_.size());
        for (auto& c : candidates_) Deflate(*c, {}, Z_SYNC_FLUSH);
        Trim();
      }
      block_start_out_ = content_bytes_;
    }
  }
  if (stream_end_) {
    trailer_.append(reinterpret_cast<const char*>(inflate_.next_in),
                    std::min<size_t>(inflate_.avail_in, kTrailerBytes + 1 - trailer_.size()));
  }
}

void GzipRecipeFinder::Feed(std::string_view content) {
  content_hash_.Update(content);
  feed_.append(content);
  // Up to each multiple of feed_bytes_ it reaches.
  while (!candidates_.empty() && feed_.size() >= feed_bytes_ - fed_ % feed_bytes_) {
    FeedCandidates(feed_bytes_ - fed_ % feed_bytes_);
  }
}

// Gives the candidates the first n bytes of feed_ (none: no call, as a
// remaker makes none for nothing).
void GzipRecipeFinder::FeedCandidates(size_t n) {
  if (n == 0) return;
  for (auto& c : candidates_) Deflate(*c, std::string_view(feed_).substr(0, n), Z_NO_FLUSH);
  feed_.erase(0, n);
  fed_ += n;
  Trim();
}

// Deflates `in` with candidate c and checks what it makes.
void GzipRecipeFinder::Deflate(Candidate& c, std::string_view in, int flush) {
  if (!c.alive) return;
  if (!DeflateAll(c.z, in, flush, [&](std::string_view out) {
        Check(c, out);
        return c.alive;
      })) {
    c.alive = false;
  }
}

// Compares what candidate c made with the stream read so far; what is
// beyond the stream's end read so far waits in c.unchecked.
void GzipRecipeFinder::Check(Candidate& c, std::string_view out) {
  if (!c.alive) return;
  c.unchecked.append(out);
  const uint64_t available = raw_base_ + raw_.size() - c.matched;
  const size_t n = static_cast<size_t>(std::min<uint64_t>(available, c.unchecked.size()));
  if (std::memcmp(raw_.data() + (c.matched - raw_base_), c.unchecked.data(), n) != 0) {
    c.alive = false;
    return;
  }
  c.matched += n;
  c.unchecked.erase(0, n);
}

// Drops the candidates that failed, and the stream bytes all the others
// have matched.
void GzipRecipeFinder::Trim() {
  std::erase_if(candidates_, [](const auto& c) { return !c->alive; });
  if (candidates_.empty()) return Reject("no zlib settings make this deflate stream");
  uint64_t low = candidates_.front()->matched;
  for (const auto& c : candidates_) low = std::min(low, c->matched);
  raw_.erase(0, static_cast<size_t>(low - raw_base_));
  raw_base_ = low;
}

Result<GzipRecipe> GzipRecipeFinder::Finish() {
  if (why_not_.empty() && in_header_) Reject("shorter than a gzip header");
  if (why_not_.empty() && !stream_end_) Reject("the deflate stream is cut short");
  if (why_not_.empty() && trailer_.size() != kTrailerBytes) {
    Reject(trailer_.size() < kTrailerBytes ? "the gzip trailer is cut short"
                                           : "bytes after the gzip member");
  }
  if (why_not_.empty() && (LittleEndian32(trailer_.data()) != crc_ ||
                           LittleEndian32(trailer_.data() + 4) != uint32_t(content_bytes_))) {
    Reject("the gzip trailer does not match the content");
  }
  if (why_not_.empty()) FeedCandidates(feed_.size());
  for (auto& c : candidates_) {
    if (!why_not_.empty()) break;
    Deflate(*c, {}, Z_FINISH);
    // The whole stream, and nothing more.
    if (c->alive && c->unchecked.empty() && c->matched == raw_base_ + raw_.size()) {
      GzipRecipe r;
      r.header = header_;
      r.level = c->level;
      r.mem_level = c->mem_level;
      r.sync_flushes = flushes_;
      r.content_bytes = content_bytes_;
      r.gzip_bytes = gzip_bytes_;
      return r;
    }
  }
  if (why_not_.empty()) Reject("no zlib settings make this deflate stream");
  return Status::NotFound(why_not_);
}

GzipRemaker::GzipRemaker(GzipRecipe recipe) : recipe_(std::move(recipe)) {
  ready_ = deflateInit2(&deflate_, recipe_.level, Z_DEFLATED, -MAX_WBITS, recipe_.mem_level,
                        Z_DEFAULT_STRATEGY) == Z_OK;
}

GzipRemaker::~GzipRemaker() {
  if (ready_) deflateEnd(&deflate_);
}

Status GzipRemaker::Deflate(std::string_view in, int flush, std::string* out) {
  if (!DeflateAll(deflate_, in, flush, [out](std::string_view made) {
        out->append(made);
        return true;
      })) {
    return Status::Corruption("gzip remake: deflate failed");
  }
  return Status::OK();
}

Status GzipRemaker::Add(std::string_view content, std::string* out) {
  if (!ready_) return Status::Corruption("gzip remake: bad settings");
  if (!header_written_) {
    out->append(recipe_.header);
    header_written_ = true;
  }
  if (fed_ + content.size() > recipe_.content_bytes) {
    return Status::Corruption("gzip remake: more content than the recipe's");
  }
  crc_ = Crc32(crc_, content);
  const std::vector<uint64_t>& flushes = recipe_.sync_flushes;
  while (!content.empty()) {
    // The flushes due here, then the content up to the next one.
    while (next_flush_ < flushes.size() && flushes[next_flush_] <= fed_) {
      TBFS_RETURN_IF_ERROR(Deflate({}, Z_SYNC_FLUSH, out));
      next_flush_++;
    }
    const uint64_t next =
        next_flush_ < flushes.size() ? flushes[next_flush_] : recipe_.content_bytes;
    const size_t n = static_cast<size_t>(
        std::min<uint64_t>({content.size(), next - fed_, uint64_t{kZlibPiece}}));
    TBFS_RETURN_IF_ERROR(Deflate(content.substr(0, n), Z_NO_FLUSH, out));
    fed_ += n;
    content.remove_prefix(n);
  }
  return Status::OK();
}

Status GzipRemaker::Finish(std::string* out) {
  TBFS_RETURN_IF_ERROR(Add({}, out));
  if (fed_ != recipe_.content_bytes) {
    return Status::Corruption(fmt::format(
        "gzip remake: {} bytes of content where the recipe has {}", fed_, recipe_.content_bytes));
  }
  for (; next_flush_ < recipe_.sync_flushes.size(); next_flush_++) {  // flushes at the end
    TBFS_RETURN_IF_ERROR(Deflate({}, Z_SYNC_FLUSH, out));
  }
  TBFS_RETURN_IF_ERROR(Deflate({}, Z_FINISH, out));
  AppendLittleEndian32(crc_, out);
  AppendLittleEndian32(static_cast<uint32_t>(fed_), out);
  return Status::OK();
}

}  // namespace tbfs::store
