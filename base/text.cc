#include "base/text.h"

#include <fmt/format.h>

namespace tbfs {

namespace {

constexpr std::string_view kReplacement = "\xEF\xBF\xBD";  // U+FFFD

// The length of the well-formed UTF-8 sequence at s[i], or 0 if there is none.
size_t SequenceAt(std::string_view s, size_t i, uint32_t* code) {
  const auto b = [&](size_t k) { return static_cast<unsigned char>(s[i + k]); };
  const unsigned char c = b(0);
  size_t len;
  uint32_t cp;
  if (c < 0x80) {
    *code = c;
    return 1;
  } else if (c >= 0xC2 && c <= 0xDF) {
    len = 2, cp = c & 0x1F;
  } else if (c >= 0xE0 && c <= 0xEF) {
    len = 3, cp = c & 0x0F;
  } else if (c >= 0xF0 && c <= 0xF4) {
    len = 4, cp = c & 0x07;
  } else {
    return 0;  // a continuation byte, or a lead byte that only starts overlong or too large forms
  }
  if (i + len > s.size()) return 0;
  for (size_t k = 1; k < len; ++k) {
    if ((b(k) & 0xC0) != 0x80) return 0;
    cp = (cp << 6) | (b(k) & 0x3F);
  }
  if ((len == 3 && cp < 0x800) || (len == 4 && (cp < 0x10000 || cp > 0x10FFFF)) ||
      (cp >= 0xD800 && cp <= 0xDFFF)) {
    return 0;
  }
  *code = cp;
  return len;
}

// s, each byte outside a well-formed sequence replaced by U+FFFD and each
// well-formed sequence (seq, its code point) written by emit(out, seq, cp).
template <typename Emit>
std::string Transcode(std::string_view s, Emit emit) {
  std::string out;
  out.reserve(s.size());
  for (size_t i = 0; i < s.size();) {
    uint32_t cp;
    const size_t n = SequenceAt(s, i, &cp);
    if (n == 0) {
      out += kReplacement;
      ++i;
    } else {
      emit(out, s.substr(i, n), cp);
      i += n;
    }
  }
  return out;
}

// Characters that change how the text around them is laid out: line and
// paragraph separators, and the bidirectional marks, embeddings, overrides
// and isolates (a name could end a line, or show itself reversed).
bool IsLayoutControl(uint32_t cp) {
  return cp == 0x061C || cp == 0x200E || cp == 0x200F || (cp >= 0x2028 && cp <= 0x202E) ||
         (cp >= 0x2066 && cp <= 0x2069);
}

}  // namespace

std::string ValidUtf8(std::string_view s) {
  return Transcode(s, [](std::string& out, std::string_view seq, uint32_t) { out.append(seq); });
}

std::string Printable(std::string_view s) {
  return Transcode(s, [](std::string& out, std::string_view seq, uint32_t cp) {
    if (cp < 0x20 || cp == 0x7F || (cp >= 0x80 && cp < 0xA0)) {
      out += fmt::format("\\x{:02x}", cp);  // C1 as its code point, not its two bytes
    } else if (IsLayoutControl(cp)) {
      out += fmt::format("\\u{:04x}", cp);
    } else if (cp == '\\') {
      out += "\\\\";
    } else {
      out.append(seq);
    }
  });
}

}  // namespace tbfs
