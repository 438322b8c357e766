#pragma once
// A strict little JSON parser for the tests (objects keep key order; numbers keep their text).
// Throws std::runtime_error on malformed input, so a test fails loudly on invalid JSON.
#include <map>
#include <memory>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

namespace mini_json {

struct member;

struct value {
  enum kind_t { null, boolean, number, string, array, object } kind = null;
  bool b = false;
  std::string text;  // number text or string value
  std::vector<value> items;
  std::vector<member> members;  // not std::pair<std::string, value>: clang rejects that recursion (libstdc++'s pair checks value while it is incomplete)

  bool has(std::string_view k) const;
  const value& operator[](std::string_view k) const;
  const value& operator[](std::size_t i) const { return items.at(i); }
  std::size_t size() const;
};

/// One object member, in document order.
struct member {
  std::string first;
  value second;
};

inline bool value::has(std::string_view k) const {
  for (const auto& [mk, mv] : members)
    if (mk == k) return true;
  return false;
}
inline const value& value::operator[](std::string_view k) const {
  for (const auto& [mk, mv] : members)
    if (mk == k) return mv;
  throw std::runtime_error(std::string("missing key ").append(k));
}
inline std::size_t value::size() const { return kind == array ? items.size() : members.size(); }

class parser {
 public:
  explicit parser(std::string_view s) : s_(s) {}
  value parse() {
    value v = parse_value();
    ws();
    if (i_ != s_.size()) fail("trailing characters");
    return v;
  }

 private:
  [[noreturn]] void fail(const std::string& m) { throw std::runtime_error("JSON: " + m + " at " + std::to_string(i_)); }
  void ws() {
    while (i_ < s_.size() && (s_[i_] == ' ' || s_[i_] == '\n' || s_[i_] == '\t' || s_[i_] == '\r')) ++i_;
  }
  char peek() {
    ws();
    if (i_ >= s_.size()) fail("unexpected end");
    return s_[i_];
  }
  void expect(char c) {
    if (peek() != c) fail(std::string("expected ") + c);
    ++i_;
  }
  value parse_value() {
    const char c = peek();
    value v;
    if (c == '{') {
      v.kind = value::object;
      ++i_;
      if (peek() == '}') return ++i_, v;
      for (;;) {
        if (peek() != '"') fail("expected key");
        std::string k = parse_string();
        expect(':');
        v.members.push_back({std::move(k), parse_value()});
        if (peek() == ',') { ++i_; continue; }
        expect('}');
        return v;
      }
    }
    if (c == '[') {
      v.kind = value::array;
      ++i_;
      if (peek() == ']') return ++i_, v;
      for (;;) {
        v.items.push_back(parse_value());
        if (peek() == ',') { ++i_; continue; }
        expect(']');
        return v;
      }
    }
    if (c == '"') {
      v.kind = value::string;
      v.text = parse_string();
      return v;
    }
    if (s_.substr(i_, 4) == "true") return i_ += 4, v.kind = value::boolean, v.b = true, v;
    if (s_.substr(i_, 5) == "false") return i_ += 5, v.kind = value::boolean, v;
    if (s_.substr(i_, 4) == "null") return i_ += 4, v;
    const std::size_t b = i_;
    if (i_ < s_.size() && s_[i_] == '-') ++i_;
    while (i_ < s_.size() && std::string_view("0123456789.eE+-").find(s_[i_]) != std::string_view::npos) ++i_;
    if (b == i_) fail("unexpected character");
    v.kind = value::number;
    v.text = std::string(s_.substr(b, i_ - b));
    return v;
  }
  std::string parse_string() {
    expect('"');
    std::string out;
    while (i_ < s_.size() && s_[i_] != '"') {
      const char c = s_[i_++];
      if (static_cast<unsigned char>(c) < 0x20) fail("control character in string");
      if (c != '\\') { out += c; continue; }
      if (i_ >= s_.size()) fail("bad escape");
      const char e = s_[i_++];
      switch (e) {
        case '"': out += '"'; break;
        case '\\': out += '\\'; break;
        case '/': out += '/'; break;
        case 'n': out += '\n'; break;
        case 't': out += '\t'; break;
        case 'r': out += '\r'; break;
        case 'b': out += '\b'; break;
        case 'f': out += '\f'; break;
        case 'u': out += '?'; i_ += 4; break;
        default: fail("bad escape");
      }
    }
    if (i_ >= s_.size()) fail("unterminated string");
    ++i_;
    return out;
  }
  std::string_view s_;
  std::size_t i_ = 0;
};

inline value parse(std::string_view s) { return parser(s).parse(); }

}  // namespace mini_json
