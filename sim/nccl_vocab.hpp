#pragma once
/// NCCL core's vocabulary as the simulator needs it: `ncclFunc_t` and `ncclDataType_t` numbering and
/// strings, the activation-mask gates of profiler.cc, and which events a profiler ABI version can receive.
/// Thread-safety: constants and pure functions only.

#include <ncclinsp/abi/nccl_profiler.hpp>
#include <ncclinsp/abi/versions.hpp>

#include <cstddef>
#include <cstdint>

namespace ncclinsp::sim {

// ---- NCCL vocabularies ---------------------------------------------------------------------------

/// NCCL core's `ncclFunc_t` numbering (nccl_common.h).
enum class nccl_func : std::uint8_t {
  broadcast = 0,
  reduce = 1,
  all_gather = 2,
  reduce_scatter = 3,
  all_reduce = 4,
  send_recv = 5,
  send = 6,
  recv = 7,
  all_to_all = 8,
  scatter = 9,
  gather = 10,
};
inline constexpr int num_funcs = 11;

/// `ncclFuncToString`.
constexpr const char* func_name(nccl_func f) noexcept {
  switch (f) {
    case nccl_func::broadcast:
      return "Broadcast";
    case nccl_func::reduce:
      return "Reduce";
    case nccl_func::all_gather:
      return "AllGather";
    case nccl_func::reduce_scatter:
      return "ReduceScatter";
    case nccl_func::all_reduce:
      return "AllReduce";
    case nccl_func::send_recv:
      return "SendRecv";
    case nccl_func::send:
      return "Send";
    case nccl_func::recv:
      return "Recv";
    case nccl_func::all_to_all:
      return "AlltoAll";
    case nccl_func::scatter:
      return "Scatter";
    case nccl_func::gather:
      return "Gather";
  }
  return "Invalid";
}

/// `ncclDataType_t` numbering.
enum class nccl_dtype : std::uint8_t {
  int8 = 0,
  uint8 = 1,
  int32 = 2,
  uint32 = 3,
  int64 = 4,
  uint64 = 5,
  float16 = 6,
  float32 = 7,
  float64 = 8,
  bfloat16 = 9,
  float8e4m3 = 10,
  float8e5m2 = 11,
};

constexpr std::size_t dtype_size(nccl_dtype t) noexcept {
  switch (t) {
    case nccl_dtype::int8:
    case nccl_dtype::uint8:
    case nccl_dtype::float8e4m3:
    case nccl_dtype::float8e5m2:
      return 1;
    case nccl_dtype::float16:
    case nccl_dtype::bfloat16:
      return 2;
    case nccl_dtype::int32:
    case nccl_dtype::uint32:
    case nccl_dtype::float32:
      return 4;
    case nccl_dtype::int64:
    case nccl_dtype::uint64:
    case nccl_dtype::float64:
      return 8;
  }
  return 1;
}

/// `ncclDatatypeToString` — note the NCCL quirk: ncclUint8 has no string and reports "Unknown".
constexpr const char* dtype_name(nccl_dtype t) noexcept {
  switch (t) {
    case nccl_dtype::int8:
      return "ncclInt8";
    case nccl_dtype::uint8:
      return "Unknown";
    case nccl_dtype::int32:
      return "ncclInt32";
    case nccl_dtype::uint32:
      return "ncclUint32";
    case nccl_dtype::int64:
      return "ncclInt64";
    case nccl_dtype::uint64:
      return "ncclUint64";
    case nccl_dtype::float16:
      return "ncclFloat16";
    case nccl_dtype::float32:
      return "ncclFloat32";
    case nccl_dtype::float64:
      return "ncclFloat64";
    case nccl_dtype::bfloat16:
      return "ncclBfloat16";
    case nccl_dtype::float8e4m3:
      return "ncclFloat8e4m3";
    case nccl_dtype::float8e5m2:
      return "ncclFloat8e5m2";
  }
  return "Unknown";
}

// ---- activation-mask gates (profiler.cc) ---------------------------------------------------------

namespace gate {
using namespace ncclinsp::abi;
inline constexpr int all_types = 0xFFFF;
inline constexpr int group_api = all_types & ~int(ev_proxy_ctrl);
inline constexpr int coll_api = ev_coll_api | ev_coll | ev_proxy_op | ev_proxy_step | ev_kernel_ch | ev_net_plugin |
                                ev_ce_coll | ev_ce_sync | ev_ce_batch | ev_kernel_phase;
inline constexpr int p2p_api = ev_p2p_api | ev_p2p | ev_proxy_op | ev_proxy_step | ev_kernel_ch | ev_net_plugin;
inline constexpr int group =
    ev_group | ev_coll | ev_p2p | ev_proxy_op | ev_proxy_step | ev_kernel_ch | ev_net_plugin | ev_kernel_phase;
inline constexpr int coll = ev_coll | ev_proxy_op | ev_proxy_step | ev_kernel_ch | ev_net_plugin | ev_kernel_phase;
inline constexpr int p2p = ev_p2p | ev_proxy_op | ev_proxy_step | ev_kernel_ch | ev_net_plugin;
inline constexpr int proxy_op = ev_proxy_op | ev_proxy_step | ev_net_plugin;
inline constexpr int proxy_step = ev_proxy_step | ev_net_plugin;
inline constexpr int ce_coll = ev_ce_coll | ev_ce_sync | ev_ce_batch;
}  // namespace gate

// ---- version traits --------------------------------------------------------------------------------

using abi::version;  // per-version descriptor and table types (ncclinsp/abi/versions.hpp)

/// Whether NCCL can deliver an event of `type` to a plugin of version V at all.
constexpr bool version_supports(int v, std::uint64_t type) noexcept {
  using namespace abi;
  if (type <= ev_net_plugin) return true;       // bits 0-7: every version >= 4
  if (type <= ev_kernel_launch) return v >= 5;  // API events
  if (type <= ev_ce_batch) return v >= 6;       // CE events
  return v >= 7;                                // KernelPhase
}
}  // namespace ncclinsp::sim
