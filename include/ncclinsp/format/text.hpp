#pragma once
/// Text helpers shared by the serializers: locale-independent numbers, UTF-8 repair, Prometheus
/// label escaping (JSON strings: format/json_writer.hpp).
/// Thread-safety: pure functions appending to a caller-owned string (cold path).
/// Digits are appended as (pointer, count), not as an iterator pair: the latter goes through
/// basic_string::replace, whose aliasing branch GCC 12 at -O3 misreads as an overlapping memcpy
/// (-Wrestrict); the (pointer, count) overload has no such branch.

#include <charconv>
#include <cmath>
#include <cstdint>
#include <string>
#include <string_view>

namespace ncclinsp::format {

/// Appends a finite double in shortest round-trip form; NaN and Inf are written as 0.
inline void append_double(std::string& out, double v) {
  if (!std::isfinite(v)) v = 0;
  char buf[64];
  auto r = std::to_chars(buf, buf + sizeof buf, v);
  out.append(buf, static_cast<std::size_t>(r.ptr - buf));
}

/// Appends a double with a fixed number of decimals (JSON compat fields).
inline void append_fixed(std::string& out, double v, int decimals) {
  if (!std::isfinite(v)) v = 0;
  char buf[96];
  auto r = std::to_chars(buf, buf + sizeof buf, v, std::chars_format::fixed, decimals);
  out.append(buf, static_cast<std::size_t>(r.ptr - buf));
}

/// Appends a double as printf's %.<precision>g would (an ostream's default); NaN and Inf as 0.
inline void append_general(std::string& out, double v, int precision) {
  if (!std::isfinite(v)) v = 0;
  char buf[96];
  auto r = std::to_chars(buf, buf + sizeof buf, v, std::chars_format::general, precision);
  out.append(buf, static_cast<std::size_t>(r.ptr - buf));
}

template <class I>
inline void append_int(std::string& out, I v) {
  char buf[32];
  auto r = std::to_chars(buf, buf + sizeof buf, v);
  out.append(buf, static_cast<std::size_t>(r.ptr - buf));
}

inline void append_hex64(std::string& out, std::uint64_t v) {
  char buf[17];
  for (int i = 15; i >= 0; --i, v >>= 4) buf[i] = "0123456789abcdef"[v & 15];
  out.append(buf, 16);
}

/// Returns `s` as valid UTF-8 (invalid sequences become U+FFFD), cut to at most `max_bytes`
/// on a character boundary. Hostile communicator names stay readable and never break a file.
inline std::string sanitize_utf8(std::string_view s, std::size_t max_bytes = 256) {
  std::string out;
  out.reserve(s.size() < max_bytes ? s.size() : max_bytes);
  std::size_t i = 0;
  while (i < s.size()) {
    const auto c = static_cast<unsigned char>(s[i]);
    std::size_t len = c < 0x80 ? 1 : (c >> 5) == 6 ? 2 : (c >> 4) == 14 ? 3 : (c >> 3) == 30 ? 4 : 0;
    bool ok = len != 0 && i + len <= s.size();
    for (std::size_t k = 1; ok && k < len; ++k) ok = (static_cast<unsigned char>(s[i + k]) >> 6) == 2;
    if (ok && len > 1) {  // reject overlong forms and surrogates
      const auto c1 = static_cast<unsigned char>(s[i + 1]);
      if ((len == 2 && c < 0xC2) || (len == 3 && c == 0xE0 && c1 < 0xA0) || (len == 3 && c == 0xED && c1 >= 0xA0) ||
          (len == 4 && c == 0xF0 && c1 < 0x90) || (len == 4 && (c > 0xF4 || (c == 0xF4 && c1 >= 0x90))))
        ok = false;
    }
    const std::string_view piece = ok ? s.substr(i, len) : std::string_view("\xEF\xBF\xBD");
    if (out.size() + piece.size() > max_bytes) break;
    out.append(piece);
    i += ok ? len : 1;
  }
  return out;
}

/// Prometheus label value escaping: backslash, double quote, newline.
inline void append_label_value(std::string& out, std::string_view v) {
  for (char ch : v) {
    switch (ch) {
      case '\\':
        out += "\\\\";
        break;
      case '"':
        out += "\\\"";
        break;
      case '\n':
        out += "\\n";
        break;
      default:
        out += ch;
    }
  }
}

}  // namespace ncclinsp::format
