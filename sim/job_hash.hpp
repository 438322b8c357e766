#pragma once
/// Deterministic hashing for ncclinsp-sim's job model: every rank derives the same jitter, fault choice and
/// communicator hash from the seed alone. Thread-safety: pure functions.

#include <cstddef>
#include <cstdint>
#include <string>

namespace ncclinsp::sim::job {

using u64 = std::uint64_t;
inline constexpr std::size_t mib = 1024 * 1024;

// ---- deterministic hashing -------------------------------------------------------------------------
constexpr u64 splitmix(u64 x) noexcept {
  x += 0x9E3779B97F4A7C15ull;
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
  return x ^ (x >> 31);
}
constexpr u64 mix(u64 a, u64 b) noexcept { return splitmix(a ^ splitmix(b)); }
inline u64 hash_str(const std::string& s) noexcept {
  u64 h = 0xCBF29CE484222325ull;
  for (unsigned char c : s) h = (h ^ c) * 0x100000001B3ull;
  return splitmix(h);
}
/// Uniform in [-1, 1].
inline double unit_jitter(u64 h) noexcept { return double(h >> 11) / double(1ull << 52) - 1.0; }
/// Uniform in [0, 1).
inline double unit01(u64 h) noexcept { return double(h >> 11) / double(1ull << 53); }

}  // namespace ncclinsp::sim::job
