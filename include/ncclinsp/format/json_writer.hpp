#pragma once
/// json_writer: the one JSON writer of the serializers (Inspector JSON lines, OTLP/JSON, Chrome
/// trace) and the simulator's summary. It appends to a caller-owned std::string and places the
/// commas and colons itself; strings are made valid UTF-8 (format::sanitize_utf8, at most 4096
/// bytes) and escaped (quote, backslash, every control character and DEL), so a hostile
/// communicator name can never break a line. Numbers are locale-independent (format/text.hpp).
/// Layout: compact by default; `json_style` sets the separators (the simulator writes ", " and
/// ": "), and a container opened with a `json_lines` layout puts each item on its own line.
/// Thread-safety: an object per output, used by one thread (cold path).

#include <cassert>
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <type_traits>

#include "ncclinsp/format/text.hpp"

namespace ncclinsp::format {

/// JSON string body escaping (quotes not included); the input must already be valid UTF-8.
inline void append_json_escaped(std::string& out, std::string_view v) {
  for (char ch : v) {
    const auto c = static_cast<unsigned char>(ch);
    switch (ch) {
      case '"':
        out += "\\\"";
        break;
      case '\\':
        out += "\\\\";
        break;
      case '\n':
        out += "\\n";
        break;
      case '\r':
        out += "\\r";
        break;
      case '\t':
        out += "\\t";
        break;
      default:
        if (c < 0x20 || c == 0x7F) {
          out += "\\u00";
          out += "0123456789abcdef"[c >> 4];
          out += "0123456789abcdef"[c & 15];
        } else {
          out += ch;
        }
    }
  }
}

/// `v` as a quoted JSON string: repaired to valid UTF-8 (at most 4096 bytes), then escaped.
inline void append_json_string(std::string& out, std::string_view v) {
  out += '"';
  bool ascii = v.size() <= 4096;  // the common case needs no repair copy
  for (std::size_t i = 0; ascii && i < v.size(); ++i) ascii = static_cast<unsigned char>(v[i]) < 0x80;
  if (ascii)
    append_json_escaped(out, v);
  else
    append_json_escaped(out, sanitize_utf8(v, 4096));
  out += '"';
}

/// Separators between items and after keys (compact by default).
struct json_style {
  std::string_view comma = ",";
  std::string_view colon = ":";
};

/// A container with one item per line: `item` is written before each item (after its comma),
/// `close` before the closing bracket, e.g. {"\n  ", "\n"}.
struct json_lines {
  std::string_view item = "\n";
  std::string_view close = "\n";
};

class json_writer {
 public:
  static constexpr std::size_t max_depth = 16;

  explicit json_writer(std::string& out, json_style style = {}) noexcept : out_(out), style_(style) {}

  std::string& buffer() noexcept { return out_; }
  /// Nesting depth now (0: no container open).
  std::size_t depth() const noexcept { return depth_; }

  json_writer& begin_object(json_lines lines = {"", ""}) { return open('{', lines); }
  json_writer& end_object() { return close('}'); }
  json_writer& begin_array(json_lines lines = {"", ""}) { return open('[', lines); }
  json_writer& end_array() { return close(']'); }

  /// An object member's name; the next call writes its value.
  json_writer& key(std::string_view k) {
    separate();
    append_json_string(out_, k);
    out_ += style_.colon;
    after_key_ = true;
    return *this;
  }

  json_writer& value(std::string_view s) {
    separate();
    append_json_string(out_, s);
    return *this;
  }
  json_writer& value(const char* s) { return value(std::string_view(s)); }
  json_writer& value(const std::string& s) { return value(std::string_view(s)); }
  json_writer& value(bool b) {
    separate();
    out_ += b ? "true" : "false";
    return *this;
  }
  template <class I>
  requires(std::is_integral_v<I> && !std::is_same_v<I, bool> && !std::is_same_v<I, char>) json_writer& value(I v) {
    separate();
    append_int(out_, v);
    return *this;
  }
  /// Shortest round-trip form; NaN and Inf are written as 0.
  json_writer& value(double v) {
    separate();
    append_double(out_, v);
    return *this;
  }
  /// A fixed number of decimals; NaN and Inf are written as 0.
  json_writer& fixed(double v, int decimals) {
    separate();
    append_fixed(out_, v, decimals);
    return *this;
  }
  /// printf's %.<precision>g (what an ostream writes by default).
  json_writer& general(double v, int precision) {
    separate();
    append_general(out_, v, precision);
    return *this;
  }
  /// `v / 10^decimals` written exactly with `decimals` decimals (nanoseconds as microseconds: 3).
  json_writer& scaled(std::uint64_t v, int decimals) {
    separate();
    std::uint64_t div = 1;
    for (int i = 0; i < decimals; ++i) div *= 10;
    append_int(out_, v / div);
    if (decimals > 0) {
      out_ += '.';
      char buf[20];
      std::uint64_t frac = v % div;
      for (int i = decimals - 1; i >= 0; --i, frac /= 10) buf[i] = static_cast<char>('0' + frac % 10);
      out_.append(buf, static_cast<std::size_t>(decimals));
    }
    return *this;
  }
  /// An integer as a JSON string (protobuf's JSON mapping of 64-bit integers, Inspector's user tag).
  template <class I>
  requires std::is_integral_v<I> json_writer& quoted(I v) {
    separate();
    out_ += '"';
    append_int(out_, v);
    out_ += '"';
    return *this;
  }
  /// "0x" and 16 lower-case hex digits, as a JSON string.
  json_writer& hex64(std::uint64_t v) {
    separate();
    out_ += "\"0x";
    append_hex64(out_, v);
    out_ += '"';
    return *this;
  }
  json_writer& null() {
    separate();
    out_ += "null";
    return *this;
  }
  /// A value already written as JSON (by another json_writer), inserted as it is.
  json_writer& raw(std::string_view json) {
    separate();
    out_ += json;
    return *this;
  }
  /// Re-opens an object whose opening and first members were written by another json_writer and
  /// left open (a prefix shared by many records): the next member gets its comma.
  json_writer& resume_object(std::string_view opened) {
    separate();
    out_ += opened;
    push({"", ""});
    levels_[depth_ - 1].empty = false;
    return *this;
  }

 private:
  struct level {
    json_lines lines;
    bool empty = true;
  };

  void separate() {
    if (after_key_) {
      after_key_ = false;
      return;
    }
    if (depth_ == 0) return;
    level& l = levels_[depth_ - 1];
    if (!l.empty) out_ += l.lines.item.empty() ? style_.comma : std::string_view(",");
    l.empty = false;
    out_ += l.lines.item;
  }
  void push(json_lines lines) {
    assert(depth_ < max_depth && "json_writer: nesting deeper than max_depth");
    levels_[depth_ < max_depth ? depth_++ : max_depth - 1] = level{lines, true};
  }
  json_writer& open(char bracket, json_lines lines) {
    separate();
    out_ += bracket;
    push(lines);
    return *this;
  }
  json_writer& close(char bracket) {
    assert(depth_ > 0 && !after_key_ && "json_writer: close without open, or a key without its value");
    if (depth_ == 0) return *this;
    out_ += levels_[--depth_].lines.close;
    out_ += bracket;
    return *this;
  }

  std::string& out_;
  json_style style_;
  level levels_[max_depth]{};
  std::size_t depth_ = 0;
  bool after_key_ = false;
};

}  // namespace ncclinsp::format
