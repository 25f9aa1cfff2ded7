#include "store/number_deltas.h"

#include <algorithm>
#include <array>
#include <bit>
#include <charconv>
#include <cstdint>
#include <cstring>
#include <vector>

#if defined(__SSE2__)
#include <emmintrin.h>
#endif

namespace tbfs::store {

namespace {

constexpr size_t kMaxKeyBytes = 64;
constexpr size_t kMaxSequences = 64;  // keys (with digits after the point) per chunk
constexpr int kMaxDigits = 18;        // so that every value and difference fits an int64_t
constexpr int kMaxFraction = 9;

// A key's numbers in a chunk (those with `fraction` digits after the
// point): the last value, and what choosing them costs. Keys are views of
// the text being read or written, which outlives this.
struct Sequence {
  std::string_view key;
  int fraction = 0;
  int64_t last = 0;
  int64_t plain = 0;    // bytes of its numbers as they are
  int64_t deltas = 0;   // and as differences
  bool varies = false;  // not the same number every time
  bool chosen = false;
};

class Sequences {
 public:
  // The sequence of (key, fraction), new with last 0 if it was not there;
  // null when a new one finds no room. Keys come back in the order they
  // came (an event's fields): the one after the last found is tried first.
  Sequence* Of(std::string_view key, int fraction) {
    for (size_t k = 0; k < n_; ++k) {
      const size_t i = next_ + k < n_ ? next_ + k : next_ + k - n_;
      if (seq_[i].fraction == fraction && seq_[i].key == key) {
        next_ = i + 1;
        return &seq_[i];
      }
    }
    if (n_ == kMaxSequences) return nullptr;
    seq_[n_] = Sequence{key, fraction};
    next_ = n_ + 1;
    return &seq_[n_++];
  }
  // The one Of would try first (null before any), and telling it that
  // one was taken without asking it.
  Sequence* Guess() { return n_ == 0 ? nullptr : &seq_[next_ < n_ ? next_ : 0]; }
  void Took(const Sequence* s) { next_ = static_cast<size_t>(s - seq_.data()) + 1; }
  Sequence* begin() { return seq_.data(); }
  Sequence* end() { return seq_.data() + n_; }

 private:
  std::array<Sequence, kMaxSequences> seq_;
  size_t n_ = 0;
  size_t next_ = 0;
};

bool IsDigit(char c) { return c >= '0' && c <= '9'; }

bool IsDelimiter(char c) {
  return c == ',' || c == '}' || c == ']' || c == ' ' || c == '\n' || c == '\r' || c == '\t';
}

// The key of `"KEY":` whose colon is at `colon`, in text starting at `begin`.
bool KeyBefore(const char* begin, const char* colon, std::string_view* key) {
  if (colon - begin < 3 || colon[-1] != '"') return false;
  const char* close = colon - 1;
  const char* stop =
      close - begin > static_cast<ptrdiff_t>(kMaxKeyBytes) + 1 ? close - kMaxKeyBytes - 1 : begin;
  for (const char* q = close - 1; q >= stop; --q) {
    if (*q == '\\') return false;
    if (*q == '"') {
      if (q + 1 == close) return false;
      *key = std::string_view(q + 1, static_cast<size_t>(close - q - 1));
      return true;
    }
  }
  return false;
}

// Whether the text before `colon` (in text starting at `begin`) is `key`
// in quotes.
bool EndsWithKey(const char* begin, const char* colon, std::string_view key) {
  const size_t n = key.size();
  return static_cast<size_t>(colon - begin) >= n + 2 && colon[-1] == '"' &&
         colon[-2 - static_cast<ptrdiff_t>(n)] == '"' &&
         std::memcmp(colon - 1 - n, key.data(), n) == 0;
}

struct Number {
  int64_t value = 0;  // every digit, the point left out
  int fraction = 0;   // digits after the point
};

// The number written at `v` as the rewrite takes it (no sign, no leading
// zero, no exponent); returns where it ends, or null.
const char* ParseNumber(const char* v, const char* end, Number* num) {
  if (v >= end || !IsDigit(*v)) return nullptr;
  const char* q = v;
  int digits = 0;
  int64_t n = 0;
  if (*q == '0') {
    ++q;
    digits = 1;
    if (q < end && IsDigit(*q)) return nullptr;
  } else {
    for (; q < end && IsDigit(*q); ++q) {
      if (++digits > kMaxDigits) return nullptr;
      n = n * 10 + (*q - '0');
    }
  }
  int fraction = 0;
  if (q < end && *q == '.') {
    for (++q; q < end && IsDigit(*q); ++q) {
      if (++fraction > kMaxFraction || ++digits > kMaxDigits) return nullptr;
      n = n * 10 + (*q - '0');
    }
    if (fraction == 0) return nullptr;
  }
  num->value = n;
  num->fraction = fraction;
  return q;
}

// The text of n with `fraction` digits after the point; returns its end.
char* FormatNumber(int64_t n, int fraction, char* out) {
  if (fraction == 0) return std::to_chars(out, out + 20, n).ptr;
  char digits[24];
  const size_t len =
      static_cast<size_t>(std::to_chars(digits, digits + sizeof(digits), n).ptr - digits);
  const size_t f = static_cast<size_t>(fraction);
  char* o = out;
  if (len > f) {
    std::memcpy(o, digits, len - f);
    o += len - f;
  } else {
    *o++ = '0';
  }
  *o++ = '.';
  if (len < f) {
    std::memset(o, '0', f - len);
    o += f - len;
  }
  const size_t tail = std::min(len, f);
  std::memcpy(o, digits + len - tail, tail);
  return o + tail;
}

// Calls visit(v, after, sequence, number) for each number of `raw` the
// rewrite may take, in order: the number's text is [v, after).
template <typename Visit>
void ForEachNumber(std::string_view raw, Sequences& seq, const Visit& visit) {
  const char* const begin = raw.data();
  const char* const end = begin + raw.size();
  for (const void* hit = std::memchr(begin, ':', raw.size()); hit != nullptr;) {
    const char* colon = static_cast<const char*>(hit);
    const char* next = colon + 1;
    std::string_view key;
    Number num;
    const char* v = next < end && *next == ' ' ? next + 1 : next;
    // The number first: most values are not one, and it is cheaper to see.
    const char* after = ParseNumber(v, end, &num);
    Sequence* s = nullptr;
    if (after != nullptr && after < end && IsDelimiter(*after) && KeyBefore(begin, colon, &key) &&
        (s = seq.Of(key, num.fraction)) != nullptr) {
      visit(v, after, *s, num);
      next = after;
    }
    hit = next < end ? std::memchr(next, ':', static_cast<size_t>(end - next)) : nullptr;
  }
}

// The length of DeltaText's text.
int64_t DeltaLength(int64_t delta, int fraction) {
  uint64_t m = delta < 0 ? 0 - static_cast<uint64_t>(delta) : static_cast<uint64_t>(delta);
  int64_t len = 2 + (delta < 0) + (fraction != 0 ? 2 : 0);
  for (; m >= 10; m /= 10) ++len;
  return len;
}

// The text of a difference: ~D, or ~D'k.
size_t DeltaText(int64_t delta, int fraction, char* out) {
  char* o = out;
  *o++ = '~';
  o = std::to_chars(o, o + 20, delta).ptr;
  if (fraction != 0) {
    *o++ = '\'';
    *o++ = static_cast<char>('0' + fraction);
  }
  return static_cast<size_t>(o - out);
}

// Copies the text at p up to the next '~' (or `end`) to o and moves both
// past it; false when it does not fit before out_end. The text between two
// differences is a few dozen to a few hundred bytes: one call to memchr
// and one to memcpy for each cost more than the bytes, so where both sides
// have room it goes 64 bytes at a time (then 16), storing them all and
// then moving past those before the '~' (what was stored past o is
// written again after it).
bool CopyToTilde(const char*& p, const char* end, char*& o, char* out_end) {
#if defined(__SSE2__)
  const __m128i tilde = _mm_set1_epi8('~');
  auto load = [](const char* at) { return _mm_loadu_si128(reinterpret_cast<const __m128i*>(at)); };
  auto store = [](char* at, __m128i v) { _mm_storeu_si128(reinterpret_cast<__m128i*>(at), v); };
  auto hits = [&](__m128i v) {
    return static_cast<uint64_t>(
        static_cast<unsigned>(_mm_movemask_epi8(_mm_cmpeq_epi8(v, tilde))));
  };
  while (end - p >= 64 && out_end - o >= 64) {
    const __m128i a = load(p), b = load(p + 16), c = load(p + 32), d = load(p + 48);
    store(o, a);
    store(o + 16, b);
    store(o + 32, c);
    store(o + 48, d);
    const __m128i any =
        _mm_or_si128(_mm_or_si128(_mm_cmpeq_epi8(a, tilde), _mm_cmpeq_epi8(b, tilde)),
                     _mm_or_si128(_mm_cmpeq_epi8(c, tilde), _mm_cmpeq_epi8(d, tilde)));
    if (_mm_movemask_epi8(any) == 0) {
      p += 64;
      o += 64;
      continue;
    }
    const uint64_t at = hits(a) | hits(b) << 16 | hits(c) << 32 | hits(d) << 48;
    const int n = std::countr_zero(at);
    p += n;
    o += n;
    return true;
  }
  while (end - p >= 16 && out_end - o >= 16) {
    const __m128i v = load(p);
    store(o, v);
    const uint64_t at = hits(v);
    const int n = at != 0 ? std::countr_zero(at) : 16;
    p += n;
    o += n;
    if (at != 0) return true;
  }
#endif
  const void* hit = std::memchr(p, '~', static_cast<size_t>(end - p));
  const char* stop = hit != nullptr ? static_cast<const char*>(hit) : end;
  const size_t n = static_cast<size_t>(stop - p);
  if (n > static_cast<size_t>(out_end - o)) return false;
  std::memcpy(o, p, n);
  o += n;
  p = stop;
  return true;
}

}  // namespace

bool EncodeNumberDeltas(std::string_view raw, std::string* out) {
  if (raw.size() > UINT32_MAX) return false;
  // First: the keys whose numbers, all of the chunk's, are shorter as
  // differences (a timestamp's 16 digits against 2-4; a counter; not an
  // id drawn at random, whose differences are as long and signed), and
  // differ: a number the same all through the chunk (a pid, a device)
  // zstd takes as well as a repeated ~0, and each difference costs the
  // decoder a stop (the real Kineto trace stores as small, 355.7 KB
  // against 355.9, and decodes faster: tbfs-bench decode).
  Sequences seq;
  // Where each number is, for the second pass (a chunk is at most 4 GiB;
  // a number's text at most 20 bytes).
  struct Found {
    uint32_t at;
    uint8_t length;
    uint8_t sequence;
    int64_t value;
  };
  std::vector<Found> found;
  found.reserve(raw.size() / 32);
  ForEachNumber(raw, seq, [&](const char* v, const char* after, Sequence& s, const Number& num) {
    s.varies = s.varies || (s.plain > 0 && num.value != s.last);
    s.plain += after - v;
    s.deltas += DeltaLength(num.value - s.last, num.fraction);
    s.last = num.value;
    found.push_back({static_cast<uint32_t>(v - raw.data()), static_cast<uint8_t>(after - v),
                     static_cast<uint8_t>(&s - seq.begin()), num.value});
  });
  bool any = false;
  for (Sequence& s : seq) {
    s.chosen = s.varies && s.deltas < s.plain;
    s.last = 0;
    any = any || s.chosen;
  }
  if (!any) return false;
  // The chosen keys' differences are shorter in all than their numbers:
  // the text only shrinks.
  out->resize(raw.size());
  char* o = out->data();
  const char* copied = raw.data();
  for (const Found& f : found) {
    Sequence& s = seq.begin()[f.sequence];
    if (!s.chosen) continue;
    const char* v = raw.data() + f.at;
    std::memcpy(o, copied, static_cast<size_t>(v - copied));
    o += v - copied;
    o += DeltaText(f.value - s.last, s.fraction, o);
    s.last = f.value;
    copied = v + f.length;
  }
  const size_t rest = static_cast<size_t>(raw.data() + raw.size() - copied);
  std::memcpy(o, copied, rest);
  out->resize(static_cast<size_t>(o + rest - out->data()));
  return true;
}

Status DecodeNumberDeltas(std::string_view in, char* out, size_t out_len) {
  const char* p = in.data();
  const char* const end = p + in.size();
  char* o = out;
  char* const out_end = out + out_len;
  Sequences seq;
  for (;;) {
    if (!CopyToTilde(p, end, o, out_end)) {
      return Status::Corruption("number deltas decode to more bytes than the chunk holds");
    }
    if (p == end) break;
    // A difference follows `"KEY": ` or `"KEY":`; any other '~' is text.
    // The key is most often the one Of would try first (events repeat
    // their fields in order), and is that one when the text before the
    // colon is exactly it in quotes: KeyBefore would find the same.
    const char* colon = o - out >= 2 && o[-1] == ' ' && o[-2] == ':' ? o - 2 : o - 1;
    Sequence* guess = seq.Guess();
    std::string_view key;
    if (o != out && *colon == ':' && guess != nullptr && EndsWithKey(out, colon, guess->key)) {
      key = guess->key;
    } else if (o == out || *colon != ':' || !KeyBefore(out, colon, &key)) {
      if (o == out_end) return Status::Corruption("number deltas decode to too many bytes");
      *o++ = *p++;
      continue;
    }
    const char* q = p + 1;
    const bool negative = q < end && *q == '-';
    if (negative) ++q;
    int64_t delta = 0;
    int digits = 0;
    for (; q < end && IsDigit(*q); ++q) {
      if (++digits > kMaxDigits) return Status::Corruption("a number delta is too long");
      delta = delta * 10 + (*q - '0');
    }
    if (digits == 0) return Status::Corruption("a number delta has no digits");
    int fraction = 0;
    if (q + 1 < end && *q == '\'' && q[1] >= '1' && q[1] <= '0' + kMaxFraction) {
      fraction = q[1] - '0';
      q += 2;
    }
    Sequence* last = nullptr;
    if (guess != nullptr && guess->key.data() == key.data() && guess->fraction == fraction) {
      last = guess;
      seq.Took(guess);
    } else {
      last = seq.Of(key, fraction);
    }
    if (last == nullptr) return Status::Corruption("number deltas name too many keys");
    const int64_t value = last->last + (negative ? -delta : delta);
    if (value < 0 || value > 999'999'999'999'999'999) {
      return Status::Corruption("a number delta leads out of range");
    }
    if (out_end - o >= 32) {  // a number's text takes 20 bytes at most
      o = FormatNumber(value, fraction, o);
    } else {
      char text[32];
      const size_t len = static_cast<size_t>(FormatNumber(value, fraction, text) - text);
      if (len > static_cast<size_t>(out_end - o)) {
        return Status::Corruption("number deltas decode to more bytes than the chunk holds");
      }
      std::memcpy(o, text, len);
      o += len;
    }
    last->last = value;
    p = q;
  }
  if (o != out_end) return Status::Corruption("number deltas decode to fewer bytes than the chunk");
  return Status::OK();
}

}  // namespace tbfs::store
