#pragma once
/// The key of a collector cell: one 64-bit word naming a series (tag, communicator slot and its
/// generation, function, algorithm, protocol, timing source, message size), and the table that
/// turns v7 user tags into the key's bounded tag field.
///
/// Thread-safety: cell_key is constexpr arithmetic. tag_table: index() from any thread (hot with
/// collector_options::user_tag_label: lock-free, a compare-exchange only on a tag's first use);
/// for_each() on the exporter.

#include <array>
#include <atomic>
#include <cstdint>
#include <vector>

#include "ncclinsp/model.hpp"
#include "ncclinsp/snapshot.hpp"

namespace ncclinsp::detail {

/// One field of a collector cell key: its lowest bit and its width.
struct key_field {
  unsigned shift, bits;
  constexpr std::uint64_t mask() const noexcept { return (std::uint64_t{1} << bits) - 1; }
  constexpr std::uint64_t put(std::uint64_t v) const noexcept { return (v & mask()) << shift; }
  constexpr std::uint32_t get(std::uint64_t k) const noexcept {
    return static_cast<std::uint32_t>((k >> shift) & mask());
  }
};

/// key: 1 (valid) | tag 5 | comm 12 | comm generation 4 | func 4 | algo 4 | proto 3 | timing 2 | size 29
struct cell_key {
  static constexpr std::uint64_t valid = std::uint64_t{1} << 63;  // never 0 for a used cell
  static constexpr key_field tag{58, 5}, comm{46, 12}, gen{42, 4}, fn{38, 4}, alg{34, 4}, pro{31, 3}, timing{29, 2},
      size{0, 29};

  static constexpr std::uint64_t make(std::uint32_t h, std::uint32_t g, const op_record& op, std::uint32_t size_idx,
                                      std::uint32_t tag_idx) noexcept {
    return valid | tag.put(tag_idx) | comm.put(h) | gen.put(g) | fn.put(static_cast<std::uint8_t>(op.fn)) |
           alg.put(static_cast<std::uint8_t>(op.alg)) | pro.put(static_cast<std::uint8_t>(op.pro)) |
           timing.put(static_cast<std::uint8_t>(op.timing)) | size.put(size_idx);
  }
  static void decode(std::uint64_t k, cell_snapshot& c) noexcept {
    c.tag_index = tag.get(k);
    c.fn = static_cast<func>(fn.get(k));
    c.alg = static_cast<algo>(alg.get(k));
    c.pro = static_cast<proto>(pro.get(k));
    c.timing = static_cast<timing_source>(timing.get(k));
    c.size_index = size.get(k);
  }
};

/// The first MaxTags distinct user tags, in order of first use: tag index i + 1 is entry i.
template <std::uint32_t MaxTags>
class tag_table {
 public:
  /// Tag index of a user tag that found no free entry (more than MaxTags distinct tags): the
  /// serializers render it "other" (it is past snapshot::user_tags).
  static constexpr std::uint32_t other_tag = 31;
  static_assert(other_tag == cell_key::tag.mask(), "other_tag is the tag field's largest value");
  static_assert(MaxTags < other_tag, "tags use 5 key bits; other_tag is \"other\"");

  /// The key's tag index of `tag`: 0 for untagged, other_tag when the table is full.
  std::uint32_t index(std::uint64_t tag) noexcept {
    if (tag == 0) return 0;
    for (std::uint32_t i = 0; i < MaxTags; ++i) {
      std::uint64_t v = tags_[i].load(std::memory_order_acquire);
      if (v == tag) return i + 1;
      if (v == 0) {
        if (tags_[i].compare_exchange_strong(v, tag, std::memory_order_acq_rel) || v == tag) return i + 1;
      }
    }
    return other_tag;
  }
  /// The tags seen so far, in index order (snapshot::user_tags).
  void list(std::vector<std::uint64_t>& out) const {
    for (std::uint32_t i = 0; i < MaxTags; ++i) {
      const std::uint64_t v = tags_[i].load(std::memory_order_acquire);
      if (v == 0) break;
      out.push_back(v);
    }
  }

 private:
  std::array<std::atomic<std::uint64_t>, MaxTags> tags_{};
};

}  // namespace ncclinsp::detail
