#pragma once
/// no_index: the library's one "none" for every index, slot and handle it hands out (a communicator
/// handle when the table is full or the inspector is disabled, an in-flight or event slot when the
/// pool is full or the op is not tracked, a proxy table entry when the table is full).

#include <cstdint>

namespace ncclinsp {

/// No index, slot or handle: all ones, never a valid index (tables hold fewer than 2^32 - 1 entries).
inline constexpr std::uint32_t no_index = ~std::uint32_t{0};

}  // namespace ncclinsp
