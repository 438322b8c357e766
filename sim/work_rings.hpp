#pragma once
/// `detail::work_rings`: one communicator's device work rings (src/include/device.h struct
/// ncclDevProfiler: workStarted and workCompleted, {counter, timestamp} per slot, 64 slots per
/// channel, written by the kernel's profiler() in src/device/common.h) and the two ways its works are
/// numbered: as the host counts them (the slot the reader polls) and as the device does (the slot the
/// kernel stamps). From them, the timestamps each KernelCh carries.
/// Thread-safety: `number` runs on the enqueuing thread, the rest on the proxy thread; the two share
/// nothing but the numbers `number` wrote into the ops it hands over.

#include "driver_timed.hpp"
#include "driver_types.hpp"

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <iterator>
#include <memory>
#include <span>

namespace ncclinsp::sim::detail {

class work_rings {
 public:
  static constexpr std::size_t slots = 64;  ///< device.h MAX_PROFILER_EVENTS_PER_CHANNEL

  /// The kernel ran op `p`'s work on each of its channels: started at `t[i].start_ns` (slot
  /// dev_work % 64 of workStarted) and, if `ended`, finished at `t[i].stop_ns` (workCompleted).
  void device_run(const pending_op& p, std::span<const kernel_time> t, bool ended) noexcept {
    if (!p.dev_work || t.empty()) return;
    const std::size_t n = std::min<std::size_t>(p.n_channels, max_timed_channels);
    for (std::size_t i = 0; i < n; ++i) {
      const kernel_time own = t[std::min(i, t.size() - 1)];
      const std::size_t at = index(p.channel_lo + i, p.dev_work);
      started_[at] = {p.dev_work, own.start_ns};
      if (ended) completed_[at] = {p.dev_work, own.stop_ns};
    }
  }

  /// The reader's view of op `p` (slots of its host number): false while a channel's slot has not
  /// both started and ended; else `out[i]` gets channel i's stamps.
  bool read(const pending_op& p, kernel_time* out) const noexcept {
    const std::size_t n = std::min<std::size_t>(p.n_channels, max_timed_channels);
    for (std::size_t i = 0; i < n; ++i) {
      const std::size_t at = index(p.channel_lo + i, p.work);
      if (started_[at].counter < p.work || completed_[at].counter < p.work) return false;
      out[i] = {started_[at].timestamp, completed_[at].timestamp};
    }
    return true;
  }

  /// The timestamps the KernelCh events of `p` carry: the op's own (`t`, per channel), or, where the
  /// release reads another work's device-ring slot, the channel's previous work's (0 where none: NCCL
  /// then has no timestamp) or, with the 2.31 drift, the op's start and the previous work's end.
  /// A `shifted` op reads the slot of its host number (`work`) before its own work runs: once the
  /// channel ran uncounted works, that slot was written long ago, by the work that many places earlier
  /// (or, 64 or more behind, by the newest work to reuse the slot), so its KernelCh come at once with
  /// those stamps (`*at_once`; the previous work's stamps if the caller never ran that slot's work).
  /// Then the op's work runs: its stamps go to the slot of its device number (`dev_work`), where a
  /// later reader finds them. Keeps the last real work per channel. Returns `t` itself when nothing
  /// changes.
  std::span<const kernel_time> carried(const pending_op& p, std::span<const kernel_time> t, kernel_time* out,
                                       bool* at_once = nullptr) noexcept {
    const std::size_t n = std::min<std::size_t>(p.n_channels, max_timed_channels);
    const bool changed = p.stale_timestamps || p.drifted || p.shifted;
    bool read_at_once = p.shifted && n > 0;
    for (std::size_t i = 0; i < n; ++i) {
      const kernel_time own = t[std::min(i, t.size() - 1)];
      kernel_time& prev = last_[(p.channel_lo + i) % max_timed_channels];
      if (p.shifted) {
        const std::size_t at = index(p.channel_lo + i, p.work);
        const bool written = started_[at].counter >= p.work && completed_[at].counter >= p.work;
        out[i] = written ? kernel_time{started_[at].timestamp, completed_[at].timestamp} : prev;
        read_at_once &= written;
        prev = own;
      } else if (p.stale_timestamps) {
        out[i] = prev;
      } else if (p.drifted) {
        out[i] = {own.start_ns, prev.stop_ns};
        prev = own;
      } else {
        out[i] = own;
        prev = own;
      }
      if (p.dev_work) {  // the kernel stamps its work's slots
        const std::size_t at = index(p.channel_lo + i, p.dev_work);
        started_[at] = {p.dev_work, own.start_ns};
        completed_[at] = {p.dev_work, own.stop_ns};
      }
    }
    if (at_once) *at_once = read_at_once;
    if (!changed || n == 0) return t;
    return {out, n};
  }

  /// Numbers the works of one launch in plan order (pending_op::plan_pos), per channel, twice: as the
  /// host counts them (`work`: ops with KernelCh children; proxy.cc incWorkCounter / 2.31.2
  /// ncclProfilerPostPlanWork) and as the device does (`dev_work`: every work the kernel runs, and so
  /// also a self P2P's where `self_shifts` says the host skips it, silent replays included). The Send
  /// and Recv of one pair are one work per channel over the larger channel count. An op's channels are
  /// numbered by its first channel's counters: exact where the ops of a communicator use the same or
  /// disjoint channel ranges (every workload here). `shifted`: one of its channels is behind.
  void number(std::span<pending_op> out, bool self_shifts) noexcept {
    std::uint16_t order[256];
    std::size_t n = 0;
    for (std::size_t i = 0; i < out.size() && n < std::size(order); ++i)
      if (out[i].plan_pos != 0xFFFF) order[n++] = std::uint16_t(i);
    std::sort(order, order + n, [&](std::uint16_t a, std::uint16_t b) { return out[a].plan_pos < out[b].plan_pos; });
    for (std::size_t j = 0; j < n; ++j) {
      pending_op& p = out[order[j]];
      pending_op* second = j + 1 < n && out[order[j + 1]].pair_second ? &out[order[j + 1]] : nullptr;
      const bool host = (p.kernel_events && p.n_channels) || (second && second->kernel_events && second->n_channels);
      const bool self = p.self_p2p && self_shifts;
      const std::size_t nch = std::min<std::size_t>(
          std::max(p.n_channels, second ? second->n_channels : std::uint8_t(0)), max_timed_channels);
      if ((host || self) && nch > 0) {
        bool behind = false;
        for (std::size_t i = 0; i < nch; ++i) {
          const std::size_t c = (p.channel_lo + i) % max_timed_channels;
          behind |= dev_work_[c] != host_work_[c];
          if (host) ++host_work_[c];
          ++dev_work_[c];
        }
        const std::size_t c0 = p.channel_lo % max_timed_channels;
        p.work = host ? host_work_[c0] : 0;
        p.dev_work = dev_work_[c0];
        p.shifted = host && behind;
      }
      if (second) {
        second->work = p.work;
        second->dev_work = p.dev_work;
        second->shifted = p.shifted;
        ++j;
      }
    }
  }

 private:
  struct slot {
    std::uint64_t counter = 0;
    std::uint64_t timestamp = 0;
  };
  static std::size_t index(std::size_t channel, std::uint64_t work) noexcept {
    return (channel % max_timed_channels) * slots + work % slots;
  }

  kernel_time last_[max_timed_channels] = {};         ///< last real work per channel (proxy thread)
  std::uint64_t host_work_[max_timed_channels] = {};  ///< works the host counted per channel (enqueue side)
  std::uint64_t dev_work_[max_timed_channels] = {};   ///< works the device ran per channel (enqueue side)
  std::unique_ptr<slot[]> started_{new slot[max_timed_channels * slots]};
  std::unique_ptr<slot[]> completed_{new slot[max_timed_channels * slots]};
};

}  // namespace ncclinsp::sim::detail
