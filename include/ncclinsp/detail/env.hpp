#pragma once
/// Reading the environment, for every configuration struct (env_options, otlp_http_options,
/// inspector_options): the getter type and the process getter, typed parsers that report a bad
/// value once through the logger and keep the default, comma-list splitting and ASCII case
/// folding. Cold path; reentrant.

#include <cctype>
#include <charconv>
#include <cstdint>
#include <cstdlib>
#include <functional>
#include <string>
#include <string_view>
#include <system_error>

#include "ncclinsp/log.hpp"

namespace ncclinsp {

/// Looks up an environment variable (nullptr: unset). Tests pass a map lookup.
using getenv_fn = std::function<const char*(const char*)>;

/// The process environment.
inline const char* process_env(const char* name) { return std::getenv(name); }

namespace detail {

/// `s` with A-Z folded to a-z (no locale).
inline std::string ascii_lower(std::string_view s) {
  std::string r(s);
  for (auto& c : r) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return r;
}

/// Calls `f(item)` for each `sep`-separated item of `list`, empty ones included ("a,,b": a, "", b;
/// a trailing separator adds none).
template <class F>
void for_each_item(std::string_view list, char sep, F&& f) {
  while (!list.empty()) {
    const auto at = list.find(sep);
    f(list.substr(0, at));
    list = at == std::string_view::npos ? std::string_view() : list.substr(at + 1);
  }
}

/// Decimal or 0x-hex integer, the whole string; false if malformed or out of range.
inline bool parse_int(std::string_view s, long long& n) {
  int base = 10;
  if (s.size() > 2 && s[0] == '0' && (s[1] == 'x' || s[1] == 'X')) {
    s.remove_prefix(2);
    base = 16;
  }
  auto r = std::from_chars(s.data(), s.data() + s.size(), n, base);
  return r.ec == std::errc() && r.ptr == s.data() + s.size();
}

/// "5s", "500ms", "2m" or plain microseconds -> microseconds; false if malformed.
inline bool parse_duration_us(std::string_view s, std::int64_t& us) {
  std::size_t i = 0;
  while (i < s.size() && std::isdigit(static_cast<unsigned char>(s[i]))) ++i;
  long long n = 0;
  if (i == 0 || !parse_int(s.substr(0, i), n)) return false;
  const std::string_view unit = s.substr(i);
  long long mul = unit.empty() || unit == "us" ? 1
                  : unit == "ms"               ? 1000
                  : unit == "s"                ? 1000000
                  : unit == "m"                ? 60000000
                                               : 0;
  if (!mul || n > INT64_MAX / mul) return false;
  us = n * mul;
  return true;
}

/// Typed reads of one environment: a set, valid value replaces `out`; an invalid one is reported
/// through the logger ("ignoring K=...: expected ...; using the default") and `out` is kept.
class env_reader {
 public:
  env_reader(const log_fn& log, const getenv_fn& get) : log_(log), get_(get) {}
  /// The value, or nullptr when unset or empty.
  const char* raw(const char* k) const {
    const char* v = get_(k);
    return (v && *v) ? v : nullptr;
  }
  const log_fn& log() const { return log_; }
  void warn(const char* k, const char* v, std::string_view want) const {
    emitf(log_, log_level::warn, "ignoring {}=\"{}\": expected {}; using the default", k,
          std::string_view(v).substr(0, 64), want);
  }
  void boolean(const char* k, bool& out) const {
    const char* v = raw(k);
    if (!v) return;
    const std::string s = ascii_lower(v);
    long long n = 0;
    if (s == "true" || s == "yes" || s == "on")
      out = true;
    else if (s == "false" || s == "no" || s == "off")
      out = false;
    else if (parse_int(s, n))
      out = n != 0;
    else
      warn(k, v, "0 or 1");
  }
  template <class I>
  void integer(const char* k, I& out, long long lo, long long hi) const {
    const char* v = raw(k);
    if (!v) return;
    long long n = 0;
    if (parse_int(v, n) && n >= lo && n <= hi)
      out = static_cast<I>(n);
    else
      warn(k, v, "an integer in [" + std::to_string(lo) + ", " + std::to_string(hi) + "]");
  }
  void string(const char* k, std::string& out) const {
    if (const char* v = raw(k)) out = v;
  }
  /// An identity value (a job key, a node or pod name): printable text of at most 256 bytes (no
  /// control characters; any other byte, UTF-8 included, is kept and escaped where it is written).
  /// True when it was set and valid; a malformed one is reported and `out` is kept.
  bool text(const char* k, std::string& out) const {
    const char* v = raw(k);
    if (!v) return false;
    const std::string_view s(v);
    bool ok = s.size() <= 256;
    for (char ch : s) {
      const auto c = static_cast<unsigned char>(ch);
      ok = ok && c >= 0x20 && c != 0x7f;
    }
    if (!ok) {
      std::string shown(s.substr(0, 64));
      for (auto& c : shown)
        if (static_cast<unsigned char>(c) < 0x20 || c == 0x7f) c = '?';  // the warning stays one line
      emitf(
          log_, log_level::warn,
          "ignoring {}=\"{}\": expected printable text of at most 256 bytes (it has {} bytes{}); using the next source",
          k, shown, s.size(), s.size() <= 256 ? ", control characters among them" : "");
      return false;
    }
    out = v;
    return true;
  }

 private:
  const log_fn& log_;
  const getenv_fn& get_;
};

}  // namespace detail
}  // namespace ncclinsp
