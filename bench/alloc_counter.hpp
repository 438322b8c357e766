#pragma once
/// Heap-allocation counting for the benchmarks: alloc_counter.cpp replaces the global operator
/// new/delete of each benchmark executable (exported, so a dlopen'ed plugin's allocations are
/// counted too). Each thread counts its own allocations (thread_local, no contention); the
/// process-wide total is an atomic for threads we do not control.

#include <cstdint>

namespace ncclinsp::bench {
/// Allocations made so far by the calling thread.
std::uint64_t thread_allocs() noexcept;
/// Allocations made so far by all threads.
std::uint64_t total_allocs() noexcept;
}  // namespace ncclinsp::bench
