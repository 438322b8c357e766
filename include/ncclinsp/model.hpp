#pragma once
/// The data model: NCCL function and datatype names, algorithms/protocols, timing sources and the
/// plain op record every path (plugin, embedded API, simulator) produces. Header-only, no CUDA.
/// Thread-safety: pure functions and plain structs.

#include <array>
#include <cstdint>
#include <string_view>

#include "ncclinsp/detail/platform.hpp"

namespace ncclinsp {

/// Every function string NCCL reports (`ncclFuncToString`) plus the v6 copy-engine ones.
enum class func : std::uint8_t {
  unknown = 0,
  all_reduce,
  all_gather,
  reduce_scatter,
  broadcast,
  reduce,
  all_to_all,
  gather,
  scatter,
  send,
  recv,
  send_recv,
  put_signal,
  signal,
  wait_signal,
  count_
};
inline constexpr std::size_t func_count = static_cast<std::size_t>(func::count_);

inline constexpr std::array<std::string_view, func_count> func_names = {
    "unknown", "AllReduce", "AllGather", "ReduceScatter", "Broadcast", "Reduce", "AlltoAll",  "Gather",
    "Scatter", "Send",      "Recv",      "SendRecv",      "PutSignal", "Signal", "WaitSignal"};

namespace detail {
/// The enumerator (unknown = 0) named `s` among names[1, end): NCCL's spellings, compared exactly.
/// Flattened: each comparison stays a length check and inline bytes, never a memcmp call, however
/// large the caller (hot: the plugin parses four names per op; bench/README.md, "Where a
/// collective's time goes").
template <class E, std::size_t N>
NCCLINSP_FLATTEN constexpr E parse_name(const std::array<std::string_view, N>& names, std::string_view s,
                                        std::size_t end = N) noexcept {
  for (std::size_t i = 1; i < end; ++i)
    if (names[i] == s) return static_cast<E>(i);
  return E{};
}
}  // namespace detail

constexpr std::string_view to_string(func f) noexcept { return func_names[static_cast<std::size_t>(f)]; }

/// Parses NCCL's function string; anything else (including "Invalid" and NULL) is `unknown`.
constexpr func parse_func(std::string_view s) noexcept { return detail::parse_name<func>(func_names, s); }
inline func parse_func(const char* s) noexcept { return s ? parse_func(std::string_view(s)) : func::unknown; }

constexpr bool is_p2p(func f) noexcept { return f == func::send || f == func::recv; }

/// Datatypes as NCCL names them. NCCL reports ncclUint8 as "Unknown", so its size is unknown.
enum class dtype : std::uint8_t {
  unknown = 0,
  int8,
  uint8,
  int32,
  uint32,
  int64,
  uint64,
  float16,
  float32,
  float64,
  bfloat16,
  float8e4m3,
  float8e5m2,
  count_
};
inline constexpr std::size_t dtype_count = static_cast<std::size_t>(dtype::count_);
inline constexpr std::array<std::string_view, dtype_count> dtype_names = {
    "Unknown",     "ncclInt8",    "ncclUint8",   "ncclInt32",    "ncclUint32",     "ncclInt64",     "ncclUint64",
    "ncclFloat16", "ncclFloat32", "ncclFloat64", "ncclBfloat16", "ncclFloat8e4m3", "ncclFloat8e5m2"};
inline constexpr std::array<std::uint8_t, dtype_count> dtype_sizes = {0, 1, 1, 4, 4, 8, 8, 2, 4, 8, 2, 1, 1};

constexpr std::string_view to_string(dtype d) noexcept { return dtype_names[static_cast<std::size_t>(d)]; }
/// Element size in bytes; 0 when unknown.
constexpr std::size_t size_of(dtype d) noexcept { return dtype_sizes[static_cast<std::size_t>(d)]; }

constexpr dtype parse_dtype(std::string_view s) noexcept { return detail::parse_name<dtype>(dtype_names, s); }
inline dtype parse_dtype(const char* s) noexcept { return s ? parse_dtype(std::string_view(s)) : dtype::unknown; }

/// Algorithms (`ncclAlgoToString`) plus `sym` for symmetric kernels and `none` for P2P/CE ops.
enum class algo : std::uint8_t {
  unknown = 0,
  tree,
  ring,
  collnet_direct,
  collnet_chain,
  nvls,
  nvls_tree,
  pat,
  sym,
  none,
  count_
};
inline constexpr std::array<std::string_view, static_cast<std::size_t>(algo::count_)> algo_names = {
    "Unknown", "TREE", "RING", "COLLNET_DIRECT", "COLLNET_CHAIN", "NVLS", "NVLS_TREE", "PAT", "SYM", "none"};
constexpr std::string_view to_string(algo a) noexcept { return algo_names[static_cast<std::size_t>(a)]; }
/// NCCL's algorithm names only: "SYM" and "none" are ours, never parsed.
constexpr algo parse_algo(std::string_view s) noexcept {
  return detail::parse_name<algo>(algo_names, s, static_cast<std::size_t>(algo::sym));
}

/// Protocols (`ncclProtoToString`); `none` for P2P/CE ops and symmetric kernels (empty proto).
enum class proto : std::uint8_t { unknown = 0, ll, ll128, simple, none, count_ };
inline constexpr std::array<std::string_view, static_cast<std::size_t>(proto::count_)> proto_names = {
    "Unknown", "LL", "LL128", "SIMPLE", "none"};
constexpr std::string_view to_string(proto p) noexcept { return proto_names[static_cast<std::size_t>(p)]; }
constexpr proto parse_proto(std::string_view s) noexcept {
  return s.empty() ? proto::none : detail::parse_name<proto>(proto_names, s, static_cast<std::size_t>(proto::none));
}

/// Where an op's duration came from (Inspector's `*_timing_source` values).
enum class timing_source : std::uint8_t { kernel_gpu = 0, kernel_cpu, collective_cpu, count_ };
inline constexpr std::array<std::string_view, 3> timing_names = {"kernel_gpu", "kernel_cpu", "collective_cpu"};
constexpr std::string_view to_string(timing_source t) noexcept { return timing_names[static_cast<std::size_t>(t)]; }

/// One completed op. Plain data; `bytes` is what NCCL reports per rank (count x element size;
/// AllGather/Broadcast counts are already bytes). `start_ns`/`end_ns` are on one clock (GPU
/// globaltimer for kernel_gpu, CPU steady clock otherwise).
struct op_record {
  std::uint64_t seq = 0;
  std::uint64_t count = 0;
  std::uint64_t bytes = 0;
  std::uint64_t start_ns = 0;
  std::uint64_t end_ns = 0;
  std::uint64_t user_tag = 0;
  std::int32_t peer = -1;  ///< P2P peer rank, -1 for collectives
  std::uint16_t channels = 0;
  func fn = func::unknown;
  dtype dt = dtype::unknown;
  algo alg = algo::unknown;
  proto pro = proto::unknown;
  timing_source timing = timing_source::kernel_gpu;
  bool bytes_valid = true;  ///< false when count x size overflowed or the size is unknown

  constexpr std::uint64_t duration_ns() const noexcept { return end_ns > start_ns ? end_ns - start_ns : 0; }
};

/// Computes bytes from count and datatype with overflow detection (NCCL's ncclUint8 -> "Unknown"
/// would otherwise give 2^64 - count, Inspector's defect).
constexpr void set_size(op_record& op, std::uint64_t count, dtype dt) noexcept {
  op.count = count;
  op.dt = dt;
  const std::uint64_t sz = size_of(dt);
  if (sz == 0 || (count != 0 && count > UINT64_MAX / sz)) {
    op.bytes = 0;
    op.bytes_valid = false;
  } else {
    op.bytes = count * sz;
    op.bytes_valid = true;
  }
}

/// Fills an op record from what a wrapper knows: function, element count, datatype and the
/// measured span (any one clock, ns). Bytes are computed with overflow detection.
constexpr op_record make_op(func f, std::uint64_t count, dtype dt, std::uint64_t start_ns, std::uint64_t end_ns,
                            timing_source timing = timing_source::kernel_gpu) noexcept {
  op_record r;
  r.fn = f;
  set_size(r, count, dt);
  r.start_ns = start_ns;
  r.end_ns = end_ns;
  r.timing = timing;
  if (is_p2p(f)) {
    r.alg = algo::none;
    r.pro = proto::none;
  }
  return r;
}

}  // namespace ncclinsp
