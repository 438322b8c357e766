#pragma once
/// The handles and contexts the plugin gives NCCL: tagged 64-bit integers, never pointers, so that
/// nothing NCCL passes back (stale, a PXN op of another process, garbage) is ever dereferenced: it
/// is decoded here and then bounds- and generation-checked by the caller, or ignored.
/// Thread-safety: pure functions.

#include <cstdint>

namespace ncclinsp::plugin {

/// Layout, high to low bits (never 0 for a live handle): kind:2 | gen:22 | comm:16 | slot:16 | aux:8.
/// `aux` is the channel id of a channel handle, flags of an op handle (aux_ends_at_channels), or says
/// which object an auxiliary handle names (aux_kind_mask: a Group, a ProxyOp, a ProxyStep, a
/// captured API event).
enum class handle_kind : std::uint64_t { none = 0, op = 1, channel = 2, auxiliary = 3 };
inline constexpr unsigned kind_shift = 62, gen_shift = 40, comm_shift = 24, slot_shift = 8;
inline constexpr std::uint32_t gen_mask = (1u << 22) - 1;  // 0x3FFFFF: generations wrap at 22 bits
inline constexpr std::uint32_t comm_mask = 0xFFFF;
inline constexpr std::uint32_t slot_mask = 0xFFFF;
inline constexpr std::uint32_t aux_mask = 0xFF;
/// The slot field of a communicator context (an op handle naming no op).
inline constexpr std::uint32_t context_slot = slot_mask;
/// Most op slots per communicator: every slot index stays below context_slot.
inline constexpr std::uint32_t max_op_slots = context_slot;

/// `aux` of an auxiliary handle: a Group (the inert v4 one; at ABI 7 one per plan, gen = its
/// thread's tag, comm and slot = its plan count: event_adapter::plan_handle), a sampled ProxyOp (slot = proxy_table entry |
/// channel << 7, gen = communicator generation, aux_send set for a send), a ProxyStep (slot = step
/// slot, gen = its generation), the inert CollApi/P2pApi of a CUDA-graph capture (a replay's Coll
/// carries it as parentObj). aux_kind_mask selects which.
inline constexpr std::uint32_t aux_inert_group = 0, aux_proxy_op = 1, aux_proxy_step = 2, aux_captured_api = 3,
                               aux_send = 0x80;
inline constexpr std::uint32_t aux_kind_mask = 3;
/// `aux` of an op handle: its channels complete the op and its stopEvent has nothing to do.
inline constexpr std::uint32_t aux_ends_at_channels = 1;

struct decoded {
  handle_kind kind = handle_kind::none;
  std::uint32_t gen = 0, comm = 0, slot = 0, aux = 0;
  /// A channel handle's channel id (its aux byte).
  std::uint32_t channel_id() const noexcept { return aux; }
};

/// A generation as a handle carries it (the low gen bits).
constexpr std::uint32_t handle_gen(std::uint32_t gen) noexcept { return gen & gen_mask; }

constexpr std::uint64_t encode(handle_kind k, std::uint32_t gen, std::uint32_t comm, std::uint32_t slot,
                               std::uint32_t aux = 0) noexcept {
  return static_cast<std::uint64_t>(k) << kind_shift | (std::uint64_t{gen & gen_mask} << gen_shift) |
         (std::uint64_t{comm & comm_mask} << comm_shift) | (std::uint64_t{slot & slot_mask} << slot_shift) |
         (aux & aux_mask);
}
inline decoded decode(const void* h) noexcept {
  const auto v = static_cast<std::uint64_t>(reinterpret_cast<std::uintptr_t>(h));
  return {static_cast<handle_kind>(v >> kind_shift), static_cast<std::uint32_t>((v >> gen_shift) & gen_mask),
          static_cast<std::uint32_t>((v >> comm_shift) & comm_mask),
          static_cast<std::uint32_t>((v >> slot_shift) & slot_mask), static_cast<std::uint32_t>(v & aux_mask)};
}
/// The kind alone (hot: the KernelCh stop needs nothing else).
inline handle_kind kind_of(const void* h) noexcept {
  return static_cast<handle_kind>(static_cast<std::uint64_t>(reinterpret_cast<std::uintptr_t>(h)) >> kind_shift);
}
/// The aux byte alone (hot).
inline std::uint32_t aux_of(const void* h) noexcept {
  return static_cast<std::uint32_t>(reinterpret_cast<std::uintptr_t>(h)) & aux_mask;
}
inline void* as_handle(std::uint64_t v) noexcept { return reinterpret_cast<void*>(static_cast<std::uintptr_t>(v)); }

}  // namespace ncclinsp::plugin
