// Names are bytes (a file name need not be UTF-8); some outputs are not:
// Prometheus label values and JSON must be UTF-8, and a terminal obeys the
// control characters it is sent.
#pragma once

#include <string>
#include <string_view>

namespace tbfs {

// `s` with every byte that does not start or continue a well-formed UTF-8
// sequence (overlong forms, surrogates and code points above U+10FFFF
// included) replaced by U+FFFD; valid text comes back unchanged.
std::string ValidUtf8(std::string_view s);

// ValidUtf8(s) with control characters (C0, DEL, C1) written as \xNN, the
// line and paragraph separators and bidirectional controls (U+2028,
// U+202E, ...) as \uNNNN, and the backslash as \\, so a name prints on
// one line, as it is, and cannot drive the terminal.
std::string Printable(std::string_view s);

}  // namespace tbfs
