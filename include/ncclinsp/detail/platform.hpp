#pragma once
/// Small portability helpers shared by every header. No state.
#include <cstddef>

namespace ncclinsp::detail {
/// One cache line; shards and per-thread data are aligned to it so no two writers share a line.
inline constexpr std::size_t cache_line = 64;
}  // namespace ncclinsp::detail

#define NCCLINSP_LIKELY [[likely]]
#define NCCLINSP_UNLIKELY [[unlikely]]
#if defined(__GNUC__)
#define NCCLINSP_COLD [[gnu::cold, gnu::noinline]]
#define NCCLINSP_INLINE [[gnu::always_inline]] inline
/// Not inlined, so a hot caller's fast path keeps few registers (no spills for a branch that calls out).
#define NCCLINSP_OUTLINE [[gnu::noinline]]
/// Everything this function calls is inlined into it (a small loop whose callees must not be calls).
#define NCCLINSP_FLATTEN [[gnu::flatten]]
#else
#define NCCLINSP_COLD
#define NCCLINSP_INLINE inline
#define NCCLINSP_OUTLINE
#define NCCLINSP_FLATTEN
#endif
