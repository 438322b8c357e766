#pragma once
/// comm_hash_of_unique_id: the communicator id (`comm_hash` label) a framework gives
/// inspector::add_comm, from the ncclUniqueId its ranks share. It is the value NCCL itself computes
/// as commHash for a communicator made with ncclCommInitRank/ncclCommInitAll from that id (DJB2a
/// over the id's 128 bytes, each byte taken as a `char`, as NCCL's getHash does), so an embedded
/// process and the profiler plugin label the same communicator alike. Equal on every rank that
/// holds the same id; no allocation, any thread.
///
/// \code
/// ncclUniqueId id; /* ncclGetUniqueId on rank 0, broadcast */
/// insp.add_comm({.name = "tp", .hash = ncclinsp::comm_hash_of_unique_id(id), .rank = r, .nranks = n});
/// \endcode

#include <cstddef>
#include <cstdint>

namespace ncclinsp {

/// DJB2a (h = h * 33 ^ byte, from 5381) over `n` bytes read as `char`.
inline std::uint64_t comm_hash_of_unique_id(const void* bytes, std::size_t n) noexcept {
  const auto* p = static_cast<const char*>(bytes);
  std::uint64_t h = 5381;
  for (std::size_t i = 0; i < n; ++i)
    h = (h * 33) ^ static_cast<std::uint64_t>(static_cast<std::int64_t>(p[i]));  // a negative char extends, as in NCCL
  return h;
}

/// The same from an ncclUniqueId (any type with a `char internal[N]` member), without <nccl.h>.
template <class UniqueId>
requires requires(const UniqueId& id) { sizeof(id.internal); }
std::uint64_t comm_hash_of_unique_id(const UniqueId& id) noexcept {
  return comm_hash_of_unique_id(id.internal, sizeof(id.internal));
}

}  // namespace ncclinsp
