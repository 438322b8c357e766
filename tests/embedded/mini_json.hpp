#pragma once
// A JSON tree for the tests, parsed by simdjson (a validating parser): objects keep key order,
// numbers keep a text form (integers exactly, doubles in their shortest round-trip form).
// Throws std::runtime_error on malformed input, so a test fails loudly on invalid JSON.
#include <fmt/format.h>
#include <simdjson.h>

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
  std::vector<member>
      members;  // not std::pair<std::string, value>: clang rejects that recursion (libstdc++'s pair checks value while it is incomplete)

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

inline value from_simdjson(simdjson::dom::element e) {
  value v;
  switch (e.type()) {
    case simdjson::dom::element_type::ARRAY:
      v.kind = value::array;
      for (simdjson::dom::element x : simdjson::dom::array(e)) v.items.push_back(from_simdjson(x));
      break;
    case simdjson::dom::element_type::OBJECT:
      v.kind = value::object;
      for (simdjson::dom::key_value_pair kv : simdjson::dom::object(e))
        v.members.push_back({std::string(kv.key), from_simdjson(kv.value)});
      break;
    case simdjson::dom::element_type::INT64:
      v.kind = value::number, v.text = std::to_string(int64_t(e));
      break;
    case simdjson::dom::element_type::UINT64:
      v.kind = value::number, v.text = std::to_string(uint64_t(e));
      break;
    case simdjson::dom::element_type::DOUBLE:
      v.kind = value::number, v.text = fmt::format("{}", double(e));
      break;
    case simdjson::dom::element_type::STRING:
      v.kind = value::string, v.text = std::string(std::string_view(e));
      break;
    case simdjson::dom::element_type::BOOL:
      v.kind = value::boolean, v.b = bool(e);
      break;
    case simdjson::dom::element_type::NULL_VALUE:
      break;
  }
  return v;
}

inline value parse(std::string_view s) {
  simdjson::dom::parser p;
  simdjson::dom::element root;
  if (const auto err = p.parse(simdjson::padded_string(s)).get(root))
    throw std::runtime_error(std::string("JSON: ") + simdjson::error_message(err));
  return from_simdjson(root);
}

}  // namespace mini_json
