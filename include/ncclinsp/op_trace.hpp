#pragma once
/// op_trace: the callback-level detail of one op, for Inspector's verbose JSON (`event_trace_sn`,
/// `event_trace_ts`) and the trace sink's per-channel tracks. Opt-in (collector_options::
/// record_traces): a copy of up to a few KB per op, so it is off unless asked for.
///
/// `*_sn`: the order in which NCCL's callbacks for this op arrived (1 = the op's start event;
/// 0 = not seen before the op completed). `*_cpu_ns`: CLOCK_REALTIME when the callback ran.
/// `gpu_*_ns`: the channel's GPU timestamps (the op record's kernel_gpu clock; 0 = not reported).
/// Channels are listed in the order they started, with their real NCCL channel ids.
/// Plain data; no thread-safety of its own.

#include <array>
#include <cstddef>
#include <cstdint>

namespace ncclinsp {

struct channel_trace {
  std::uint64_t start_cpu_ns = 0;
  std::uint64_t stop_cpu_ns = 0;
  std::uint64_t record_cpu_ns = 0;  ///< KernelCh "stop" state recorded (the GPU stop time arrived)
  std::uint64_t gpu_start_ns = 0;
  std::uint64_t gpu_stop_ns = 0;
  std::uint16_t start_sn = 0, stop_sn = 0, record_sn = 0;
  std::uint8_t channel = 0;
};

/// NCCL's MAXCHANNELS: no op runs on more.
inline constexpr std::size_t max_traced_channels = 64;

struct op_trace {
  std::uint64_t start_cpu_ns = 0;  ///< the op's start event (enqueue)
  std::uint64_t stop_cpu_ns = 0;   ///< the op's stop event (enqueued)
  std::uint16_t start_sn = 0, stop_sn = 0;
  std::uint8_t n_channels = 0;  ///< valid entries in `channels`
  std::array<channel_trace, max_traced_channels> channels{};
};

/// Copies the used part of `src` (the header and n_channels entries) into `dst`.
inline void copy_trace(op_trace& dst, const op_trace& src) noexcept {
  dst.start_cpu_ns = src.start_cpu_ns;
  dst.stop_cpu_ns = src.stop_cpu_ns;
  dst.start_sn = src.start_sn;
  dst.stop_sn = src.stop_sn;
  dst.n_channels = src.n_channels <= max_traced_channels ? src.n_channels : max_traced_channels;
  for (std::size_t i = 0; i < dst.n_channels; ++i) dst.channels[i] = src.channels[i];
}

}  // namespace ncclinsp
