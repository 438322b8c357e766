#pragma once
/// `detail::emitter<V>`: one communicator's calls into a version-V plugin table (start/stop/record with
/// NULL-handle rules, descriptor clearing with the shim's garbage bytes) and the event descriptors that
/// the user-thread and proxy-thread sequences share (ProxyOp, ProxyStep, KernelCh, NetPlugin, ProxyCtrl).
/// Thread-safety: const, holds no mutable state; each caller owns its descriptor.

#include "driver_types.hpp"
#include "nccl_process.hpp"
#include "plugin_library.hpp"
#include "trace_sink.hpp"

#include <ncclinsp/abi/callback_text.hpp>
#include <ncclinsp/abi/nccl_profiler.hpp>
#include <ncclinsp/abi/versions.hpp>

#include <cstdint>
#include <cstring>

namespace ncclinsp::sim::detail {

template <int V>
struct emitter {
  static constexpr int version = V;
  using descr = typename ncclinsp::abi::version<V>::descr;

  const typename ncclinsp::abi::version<V>::table* table;
  void* ctx;  ///< the plugin's context (a foreign process's for PXN)
  const comm_config& cfg;
  nccl_profile prof;  ///< the behaviours reproduced (nccl_release.hpp): every version decision reads it

  /// Zeroes the descriptor; garbage (0xA5) where a newer NCCL's shim leaves bytes of an old struct unset.
  void clear(descr& d) const noexcept {
    std::memset(static_cast<void*>(&d), prof.has(nccl_behaviour::shim_garbage_bytes) ? 0xA5 : 0, sizeof d);
  }
  /// The three event calls; each is also written to the process's trace sink (`--trace`), if any.
  void* start(descr& d) const {
    void* h = nullptr;
    trace_sink* t = trace_sink::current();
    const std::uint64_t at = t ? trace_sink::now() : 0;
    table->startEvent(ctx, &h, &d);
    if (t) {
      char buf[abi::callback_text::max_line];
      t->write(buf, abi::callback_text::start_line(buf, at, trace_sink::tid(), abi::callback_text::id_of(ctx),
                                                   abi::callback_text::id_of(h), d));
    }
    return h;
  }
  void stop(void* h) const {
    if (!h) return;
    trace_sink* t = trace_sink::current();
    const std::uint64_t at = t ? trace_sink::now() : 0;
    table->stopEvent(h);
    if (t) {
      char buf[abi::callback_text::max_line];
      t->write(buf, abi::callback_text::stop_line(buf, at, trace_sink::tid(), abi::callback_text::id_of(h)));
    }
  }
  void record(void* h, abi::event_state s, abi::state_args* a) const {
    if (!h) return;
    trace_sink* t = trace_sink::current();
    const std::uint64_t at = t ? trace_sink::now() : 0;
    table->recordEventState(h, s, a);
    if (t) {
      char buf[abi::callback_text::max_line];
      t->write(buf,
               abi::callback_text::record_line(buf, at, trace_sink::tid(), abi::callback_text::id_of(h), int(s), a));
    }
  }
  /// Args for states NCCL sends without args (19, 23, 24): NULL natively; a garbage struct via the v5 shim.
  abi::state_args* no_args(abi::state_args& scratch) const noexcept {
    if (prof.has(nccl_behaviour::shim_garbage_args)) {
      std::memset(static_cast<void*>(&scratch), 0xA5, sizeof scratch);
      return &scratch;
    }
    return nullptr;
  }

  /// One NetPlugin event (an IB transfer update) under a ProxyStep, as NCCL's net plugin emits it.
  void net_plugin_event(descr& d, void* step) const {
    static char net_data[64] = {};  // network-plugin-defined blob
    clear(d);
    d.type = abi::ev_net_plugin;
    d.parentObj = step;
    d.rank = cfg.rank;
    d.netPlugin.id = (std::int64_t(1) << 16) | 1;  // NCCL_PROFILER_NET_TYPE_IB | v1
    d.netPlugin.data = net_data;
    void* nh = start(d);
    abi::state_args na{};
    na.netPlugin.data = net_data;
    record(nh, abi::st_net_plugin_update, &na);
    stop(nh);
  }

  /// ProxyOp start (append) followed by its ProxyOpInProgress state, as NCCL's proxy thread does.
  void* proxy_op(descr& d, void* parent, int rank, pid_t pid, std::uint8_t channel, int peer, int n_steps, int chunk,
                 bool is_send, bool in_progress = true) const {
    clear(d);
    d.type = abi::ev_proxy_op;
    d.parentObj = parent;
    d.rank = rank;
    d.proxyOp.pid = pid;
    d.proxyOp.channelId = channel;
    d.proxyOp.peer = peer;
    d.proxyOp.nSteps = n_steps;
    d.proxyOp.chunkSize = chunk;
    d.proxyOp.isSend = is_send ? 1 : 0;
    void* h = start(d);
    if (in_progress) {
      abi::state_args scratch{};
      abi::state_args* args = no_args(scratch);  // garbage via the v5 shim
      record(h, abi::st_proxy_op_in_progress_v4, args ? args : &scratch);
    }
    return h;
  }

  void* proxy_step(descr& d, void* proxy_op_handle, int rank, int step) const {
    clear(d);
    d.type = abi::ev_proxy_step;
    d.parentObj = proxy_op_handle;
    d.rank = rank;
    d.proxyStep.step = step;
    return start(d);
  }

  /// A recv step as transport/net.cc recvProxyProgress starts it: re-started on every pass while a
  /// registered buffer is not ready or irecv gives no request (`cfg.recv_step_restarts` passes; the
  /// earlier handles are never stopped), then the start that sticks.
  void* proxy_step_restarted(descr& d, void* proxy_op_handle, int rank, int step) const {
    for (int i = 0; i < cfg.recv_step_restarts; ++i) (void)proxy_step(d, proxy_op_handle, rank, step);
    return proxy_step(d, proxy_op_handle, rank, step);
  }

  /// A KernelCh start; nullptr where NCCL's profiler thread could not allocate the op (--drop-kernel-ch:
  /// profilerEnqueueOp counts it dropped, the channel's work counter still advanced), so neither its
  /// start nor its stop comes (kernel_ch_stop, kernel_phases and stop skip a NULL handle).
  void* kernel_ch(descr& d, void* task, std::uint8_t channel, std::uint64_t start_ns) const {
    if (cfg.drop_kernel_ch > 0 && prof.has(nccl_behaviour::kernel_ch_dropped_on_alloc_failure) &&
        ++cfg.kernel_ch_ops % std::uint64_t(cfg.drop_kernel_ch) == 0)
      return nullptr;
    clear(d);
    d.type = abi::ev_kernel_ch;
    d.parentObj = task;
    d.kernelCh.channelId = channel;
    d.kernelCh.pTimer = start_ns;
    return start(d);
  }
  /// Record 22 (KernelChStop with the GPU stop time) and stop.
  void kernel_ch_stop(void* h, std::uint64_t stop_ns) const {
    abi::state_args a{};
    a.kernelCh.pTimer = stop_ns;
    record(h, abi::st_kernel_ch_stop, &a);
    stop(h);
  }

  /// One ProxyCtrl Append → AppendEnd cycle (reads the global mask, as NCCL).
  void proxy_ctrl(int appended) const {
    if (!(load_mask() & abi::ev_proxy_ctrl)) return;
    descr d;
    clear(d);
    d.type = abi::ev_proxy_ctrl;
    void* h = start(d);
    abi::state_args a{};
    record(h, abi::event_state(17), &a);  // ProxyCtrlAppend
    a.proxyCtrl.appendedProxyOps = appended;
    record(h, abi::event_state(18), &a);  // ProxyCtrlAppendEnd
    stop(h);
  }
};

}  // namespace ncclinsp::sim::detail
