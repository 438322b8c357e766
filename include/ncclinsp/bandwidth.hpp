#pragma once
/// Bandwidth formulas with the nccl-tests conventions. GB = 1e9 bytes.
///   algbw = traffic / time;  busbw = algbw x factor(n)
///   AllReduce: traffic = bytes, factor 2(n-1)/n
///   AllGather, ReduceScatter: traffic = per-rank bytes x n, factor (n-1)/n
///   AlltoAll: traffic = bytes, factor (n-1)/n
///   Broadcast, Reduce, Send, Recv, SendRecv: traffic = bytes, factor 1
///   anything else (Gather, Scatter, signals, unknown): no bandwidth (0)
/// Thread-safety: constexpr pure functions.

#include <cstdint>

#include "ncclinsp/model.hpp"

namespace ncclinsp {

/// Bus-bandwidth factor for `f` on a communicator of `nranks`.
constexpr double bus_factor(func f, int nranks) noexcept {
  if (nranks <= 0) return 0.0;
  const double n = nranks;
  switch (f) {
    case func::all_reduce:
      return 2.0 * (n - 1.0) / n;
    case func::all_gather:
    case func::reduce_scatter:
    case func::all_to_all:
      return (n - 1.0) / n;
    case func::broadcast:
    case func::reduce:
    case func::send:
    case func::recv:
    case func::send_recv:
      return 1.0;
    default:
      return 0.0;
  }
}

/// Bytes moved for the algorithm bandwidth, from the per-rank byte count NCCL reports.
constexpr double traffic_bytes(func f, std::uint64_t bytes, int nranks) noexcept {
  switch (f) {
    case func::all_gather:
    case func::reduce_scatter:
      return static_cast<double>(bytes) * (nranks > 0 ? nranks : 0);
    default:
      return bus_factor(f, nranks) > 0.0 ? static_cast<double>(bytes) : 0.0;
  }
}

/// Algorithm bandwidth in GB/s; 0 when the duration is 0 or the function has no bandwidth.
constexpr double algbw_gbs(func f, std::uint64_t bytes, int nranks, std::uint64_t duration_ns) noexcept {
  if (duration_ns == 0) return 0.0;
  return traffic_bytes(f, bytes, nranks) / static_cast<double>(duration_ns);  // bytes/ns == GB/s
}

/// Bus bandwidth in GB/s.
constexpr double busbw_gbs(func f, std::uint64_t bytes, int nranks, std::uint64_t duration_ns) noexcept {
  return algbw_gbs(f, bytes, nranks, duration_ns) * bus_factor(f, nranks);
}

/// Bus bytes of one op (traffic x factor): summed over ops and divided by summed seconds this is
/// the true window bus bandwidth.
constexpr double bus_bytes(func f, std::uint64_t bytes, int nranks) noexcept {
  return traffic_bytes(f, bytes, nranks) * bus_factor(f, nranks);
}

}  // namespace ncclinsp
