#pragma once
/// The proxy-thread side of `comm_driver` without timing: a kernel's completion on every channel (KernelCh
/// start/record 22/stop, v7 KernelPhase children, network ProxyOps/ProxySteps inside the KernelCh window),
/// a hung or purged kernel's KernelCh start alone, and a foreign-process (PXN) ProxyOp.
/// Thread-safety: runs on the rank's proxy thread; reads only immutable state and the global mask.

#include "driver_types.hpp"
#include "event_emitter.hpp"
#include "nccl_vocab.hpp"

#include <cstddef>
#include <cstdint>
#include <span>

namespace ncclinsp::sim::detail {

/// One send and one recv ProxyOp of channel `ch`, with `cfg.proxy_steps` steps each (untimed).
template <int V>
void proxy_ops_for_channel(const emitter<V>& e, const pending_op& p, std::uint8_t ch, typename emitter<V>::descr& d) {
  const comm_config& cfg = e.cfg;
  for (int is_send = 1; is_send >= 0; --is_send) {
    const int peer =
        p.peer >= 0 ? p.peer : (cfg.rank + (is_send ? 1 : cfg.n_ranks - 1)) % (cfg.n_ranks > 0 ? cfg.n_ranks : 1);
    void* op_h = e.proxy_op(d, p.task_handle, cfg.rank, cfg.pid, ch, peer, cfg.proxy_steps, 1 << 19, is_send != 0);
    const std::size_t per_step = p.n_channels && cfg.proxy_steps > 0
                                     ? p.bytes / (std::size_t(p.n_channels) * std::size_t(cfg.proxy_steps))
                                     : p.bytes;
    for (int s = 0; s < cfg.proxy_steps; ++s) {
      if (!(p.mask & gate::proxy_step) || (e.prof.has(nccl_behaviour::proxy_step_needs_op) && !op_h)) continue;
      void* st = is_send ? e.proxy_step(d, op_h, cfg.rank, s) : e.proxy_step_restarted(d, op_h, cfg.rank, s);
      abi::state_args a{};
      a.proxyStep.transSize = per_step;
      static constexpr abi::event_state send_states[] = {abi::event_state(8), abi::st_proxy_step_send_peer_wait_v4,
                                                         abi::event_state(9)};
      static constexpr abi::event_state recv_states[] = {abi::event_state(10), abi::event_state(11),
                                                         abi::event_state(12)};
      for (abi::event_state es : is_send ? send_states : recv_states)
        if (op_h) e.record(st, es, &a);
      if (p.mask & abi::ev_net_plugin) e.net_plugin_event(d, st);
      e.stop(st);
    }
    if (!p.proxy_unstopped) e.stop(op_h);  // CollNet/SHM/P2P proxies never stop their ProxyOps
  }
}

/// v7 symmetric kernels: three KernelPhase children of a KernelCh (initial sync 5 %, compute, final sync
/// 5 % of the channel's time); zero-length phases are skipped.
template <int V>
void kernel_phases(const emitter<V>& e, void* kernel_ch, std::uint8_t ch, const kernel_time& kt,
                   typename emitter<V>::descr& d) {
  if constexpr (V >= 7) {
    if (!kernel_ch) return;  // a dropped KernelCh op (emitter::kernel_ch) gets no phases either
    static constexpr const char* names[3] = {"initial_sync", "compute", "final_sync"};
    const std::uint64_t len = kt.stop_ns > kt.start_ns ? kt.stop_ns - kt.start_ns : 0;
    const std::uint64_t b[4] = {kt.start_ns, kt.start_ns + len / 20, kt.stop_ns - len / 20, kt.stop_ns};
    for (std::uint8_t ph = 0; ph < 3; ++ph) {
      if (b[ph + 1] <= b[ph]) continue;
      e.clear(d);
      d.type = abi::ev_kernel_phase;
      d.parentObj = kernel_ch;
      d.kernelPhase.channelId = ch;
      d.kernelPhase.phaseId = ph;
      d.kernelPhase.phaseName = names[ph];
      d.kernelPhase.pTimer = b[ph];
      void* h = e.start(d);
      abi::state_args a{};
      a.kernelCh.pTimer = b[ph + 1];
      e.record(h, abi::st_kernel_phase_stop, &a);
      e.stop(h);
    }
  }
}

/// `finish`: the kernel completed (KernelCh start + stop per channel, ProxyOps); otherwise only KernelCh
/// starts (a hung kernel, or one NCCL 2.31 purges at comm destroy).
template <int V>
void complete_channels(const emitter<V>& e, const pending_op& p, std::span<const kernel_time> t, bool finish,
                       void** last_kch = nullptr) {
  if (!p.kernel_events) return;
  typename emitter<V>::descr d;
  const bool want_kch = (p.mask & abi::ev_kernel_ch) != 0;
  const bool want_proxy = finish && p.network && (p.mask & gate::proxy_op) != 0;
  const bool want_phase = V >= 7 && p.symmetric && (p.mask & abi::ev_kernel_phase) != 0;
  if (finish && (load_mask() & abi::ev_proxy_ctrl)) e.proxy_ctrl(p.n_channels);
  if (p.collnet && finish && want_kch) {
    // CollNet: the op announced no channel count; NCCL's proxy starts every channel's KernelCh in one
    // pass over the op's subs before any of them ends (its channels run in one kernel).
    void* kh[64] = {};
    const std::uint8_t n = p.n_channels < 64 ? p.n_channels : 64;
    for (std::uint8_t i = 0; i < n; ++i) {
      const kernel_time& kt = t[i < t.size() ? i : t.size() - 1];
      kh[i] = e.kernel_ch(d, p.task_handle, std::uint8_t(p.channel_lo + i), kt.start_ns);
      if (last_kch && kh[i]) last_kch[(p.channel_lo + i) % 64] = kh[i];
      if (want_proxy) proxy_ops_for_channel<V>(e, p, std::uint8_t(p.channel_lo + i), d);
    }
    for (std::uint8_t i = 0; i < n; ++i) e.kernel_ch_stop(kh[i], t[i < t.size() ? i : t.size() - 1].stop_ns);
    return;
  }
  for (std::uint8_t i = 0; i < p.n_channels; ++i) {
    const kernel_time& kt = t[i < t.size() ? i : t.size() - 1];
    const std::uint8_t ch = std::uint8_t(p.channel_lo + i);
    void* kh = want_kch ? e.kernel_ch(d, p.task_handle, ch, kt.start_ns) : nullptr;
    if (last_kch && kh) last_kch[ch % 64] = kh;  // sub->kernelEventHandle (see stale_kernel_ch_stop)
    if (want_proxy) proxy_ops_for_channel<V>(e, p, ch, d);
    if (!finish || !want_kch) continue;
    if (want_phase) kernel_phases<V>(e, kh, ch, kt, d);
    e.kernel_ch_stop(kh, kt.stop_ns);
  }
}

/// A PXN ProxyOp (one step) progressed here for another process: pid, parent and context are theirs.
template <int V>
void foreign_proxy_op(const emitter<V>& e, pid_t pid, std::uint8_t channel, int peer, int rank, void* parent) {
  const int m = load_mask();
  if (!(m & gate::proxy_op)) return;
  typename emitter<V>::descr d;
  void* h = e.proxy_op(d, parent, rank, pid, channel, peer, 1, 1 << 19, true, /*in_progress=*/false);
  if (m & gate::proxy_step) {
    void* sh = e.proxy_step(d, h, rank, 0);
    abi::state_args a{};
    a.proxyStep.transSize = 1 << 19;
    if (h) e.record(sh, abi::event_state(9), &a);
    e.stop(sh);
  }
  e.stop(h);
}

}  // namespace ncclinsp::sim::detail
