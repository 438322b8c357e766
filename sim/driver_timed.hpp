#pragma once
/// The proxy-thread side of `comm_driver` with timing (`complete_timed`): the ops of one group, every
/// KernelCh, ProxyOp and ProxyStep event at its own time, merged in time order across ops and channels.
/// Steps: collect the events of every op (`timed_events`), sort them, then emit them one by one
/// (`timed_emitter`), calling the caller's `wait(t, step)` before each.
/// Thread-safety: runs on the rank's proxy thread; allocates nothing (fixed-size tables on the stack).

#include "driver_types.hpp"
#include "event_emitter.hpp"
#include "nccl_vocab.hpp"

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <span>

namespace ncclinsp::sim::detail {

inline constexpr std::size_t max_timed_ops = 4, max_timed_plans = 32, max_timed_channels = 64;

struct timed_event {
  std::uint64_t t;
  std::uint8_t prio, kind, op, step;
  std::uint16_t idx;  ///< channel (kernel events) or plan index
};
enum : std::uint8_t {
  ev_pop_start,
  ev_kch_start,
  ev_step_post,
  ev_step_ready,
  ev_step_sent,
  ev_step_done,
  ev_pop_stop,
  ev_kch_stop
};

/// Every event of a group's ops, sorted by time (ties: ProxyOp start, KernelCh start, step states, ProxyOp
/// stop, KernelCh stop); events at `never_ns` never come (a hung op's stops, a stalled step's later states).
class timed_events {
 public:
  static constexpr std::size_t cap =
      max_timed_ops * (2 * max_timed_channels + max_timed_plans * (2 + 4 * max_proxy_steps));

  explicit timed_events(std::span<const timed_op> ops) : n_ops_(std::min(ops.size(), max_timed_ops)) {
    for (std::size_t o = 0; o < n_ops_; ++o) add_op(ops[o], o);
    std::stable_sort(ev_, ev_ + n_, [](const timed_event& a, const timed_event& b) {
      return a.t != b.t ? a.t < b.t : a.prio < b.prio;
    });
  }
  std::size_t n_ops() const noexcept { return n_ops_; }
  std::span<const timed_event> events() const noexcept { return {ev_, n_}; }

 private:
  void add(std::uint64_t t, std::uint8_t kind, std::size_t op, std::size_t idx, int step) {
    static constexpr std::uint8_t prio[] = {0, 1, 2, 2, 2, 2, 3, 4};
    if (t != never_ns && n_ < cap)
      ev_[n_++] = timed_event{t, prio[kind], kind, std::uint8_t(op), std::uint8_t(step), std::uint16_t(idx)};
  }
  void add_op(const timed_op& to, std::size_t o) {
    const pending_op& p = *to.op;
    if (!p.kernel_events || to.kernel.empty()) return;
    for (std::size_t ch = 0; ch < p.n_channels; ++ch) {
      const kernel_time& kt = to.kernel[std::min(ch, to.kernel.size() - 1)];
      add(kt.start_ns, ev_kch_start, o, ch, 0);
      add(kt.stop_ns, ev_kch_stop, o, ch, 0);
    }
    if (!p.network || !(p.mask & gate::proxy_op)) return;
    for (std::size_t i = 0; i < std::min(to.proxies.size(), max_timed_plans); ++i) {
      const proxy_plan& pl = to.proxies[i];
      add(pl.start, ev_pop_start, o, i, 0);
      std::uint64_t last = pl.start;
      for (int k = 0; k < std::min(pl.n_steps, max_proxy_steps); ++k) {
        const proxy_step_times& st = pl.steps[k];
        add(st.post, ev_step_post, o, i, k);
        add(st.ready, ev_step_ready, o, i, k);
        add(st.sent, ev_step_sent, o, i, k);
        add(st.done, ev_step_done, o, i, k);
        last = std::max(last, st.done);
      }
      add(last, ev_pop_stop, o, i, 0);
    }
  }

  timed_event ev_[cap];
  std::size_t n_ = 0;
  std::size_t n_ops_;
};

/// Emits sorted timed events, holding the open KernelCh, ProxyOp and ProxyStep handles.
template <int V>
class timed_emitter {
 public:
  timed_emitter(const emitter<V>& e, std::span<const timed_op> ops) : e_(e), ops_(ops) {}

  void emit(const timed_event& x) {
    const pending_op& p = *ops_[x.op].op;
    switch (x.kind) {
      case ev_kch_start:
        if (p.mask & abi::ev_kernel_ch)
          kch_[x.op][x.idx] =
              e_.kernel_ch(d_, p.task_handle, std::uint8_t(p.channel_lo + x.idx), sent(x.op, x.idx, x.t, true));
        break;
      case ev_kch_stop:
        e_.kernel_ch_stop(kch_[x.op][x.idx], sent(x.op, x.idx, x.t, false));
        break;
      case ev_pop_start: {
        const proxy_plan& pl = ops_[x.op].proxies[x.idx];
        pop_[x.op][x.idx] =
            e_.proxy_op(d_, p.task_handle, e_.cfg.rank, e_.cfg.pid, std::uint8_t(p.channel_lo + pl.channel), pl.peer,
                        pl.n_steps, int(pl.step_bytes), pl.is_send);
        break;
      }
      case ev_pop_stop:
        if (!p.proxy_unstopped) e_.stop(pop_[x.op][x.idx]);
        break;
      default:
        proxy_step(p, x);
        break;
    }
  }

 private:
  /// The GPU timestamp a KernelCh event carries: its time, or what the release's device ring gives.
  std::uint64_t sent(std::size_t op, std::size_t ch, std::uint64_t t, bool start) const noexcept {
    const auto& s = ops_[op].sent;
    if (s.empty()) return t;
    const kernel_time& k = s[std::min(ch, s.size() - 1)];
    return start ? k.start_ns : k.stop_ns;
  }

  /// ProxyStep start + first state, later states, stop. NCCL 2.28+ starts ProxySteps even under a NULL
  /// ProxyOp handle (parentObj NULL) but records their states only under a non-NULL one; 2.27 starts
  /// none there (nccl_behaviour::proxy_step_needs_op).
  void proxy_step(const pending_op& p, const timed_event& x) {
    const proxy_plan& pl = ops_[x.op].proxies[x.idx];
    void* const op_h = pop_[x.op][x.idx];
    void*& sh = step_[x.op][x.idx][x.step];
    if (!(p.mask & gate::proxy_step) || (e_.prof.has(nccl_behaviour::proxy_step_needs_op) && !op_h)) return;
    abi::state_args a{};
    // NCCL records sub->transSize, which is set when a step's isend is posted (send) or its data
    // arrives (recv): the earlier states of a step still carry the previous step's size.
    const std::size_t prev = x.step ? pl.step_bytes : 0;
    if (x.kind == ev_step_post) {
      sh = pl.is_send ? e_.proxy_step(d_, op_h, e_.cfg.rank, x.step)
                      : e_.proxy_step_restarted(d_, op_h, e_.cfg.rank, x.step);
      a.proxyStep.transSize = prev;
      if (op_h) e_.record(sh, abi::event_state(pl.is_send ? 8 : 10), &a);
    } else if (x.kind == ev_step_ready) {
      a.proxyStep.transSize = pl.is_send ? prev : pl.step_bytes;
      if (op_h) e_.record(sh, pl.is_send ? abi::st_proxy_step_send_peer_wait_v4 : abi::event_state(11), &a);
    } else if (x.kind == ev_step_sent) {
      a.proxyStep.transSize = pl.step_bytes;
      if (op_h) e_.record(sh, abi::event_state(pl.is_send ? 9 : 12), &a);
      if (p.mask & abi::ev_net_plugin) e_.net_plugin_event(d_, sh);
    } else {
      e_.stop(sh);
      sh = nullptr;
    }
  }

  const emitter<V>& e_;
  std::span<const timed_op> ops_;
  typename emitter<V>::descr d_;
  void* kch_[max_timed_ops][max_timed_channels] = {};
  void* pop_[max_timed_ops][max_timed_plans] = {};
  void* step_[max_timed_ops][max_timed_plans][max_proxy_steps] = {};
};

/// `wait(t, step)`: called with non-decreasing t before each event; `step` says whether it is a ProxyStep one.
template <int V, class Wait>
void complete_timed(const emitter<V>& e, std::span<const timed_op> ops, Wait& wait) {
  const timed_events ev(ops);
  const auto events = ev.events();
  if (load_mask() & abi::ev_proxy_ctrl) {
    if (!events.empty()) wait(events[0].t, false);
    int appended = 0;
    for (std::size_t o = 0; o < ev.n_ops(); ++o) appended += int(ops[o].proxies.size());
    e.proxy_ctrl(appended);
  }
  timed_emitter<V> out(e, ops);
  for (const timed_event& x : events) {
    wait(x.t, x.kind >= ev_step_post && x.kind <= ev_step_done);
    out.emit(x);
  }
}

}  // namespace ncclinsp::sim::detail
