#pragma once
/// Proxy accounting (NCCLINSP_PROXY=1, off by default): NCCL's ProxyOp and ProxyStep events turned
/// into per-peer network wait times (proxy_stats.hpp). For 1 op in NCCLINSP_PROXY_SAMPLE (chosen
/// by sequence number in the event adapter, so every rank samples the same ops) the ProxyOps get a
/// handle naming the (peer, direction) entry; the others get NULL, so NCCL emits no steps for them.
/// Each step's state transitions are timed on the proxy thread (CLOCK_MONOTONIC) into the
/// communicator's proxy_table, from the communicator's fixed step pool.
/// Thread-safety: called by the event adapter inside a reader section (comm_registry.hpp); NCCL
/// starts, records and stops a communicator's steps on its one proxy thread, so a step slot has
/// one writer. No lock, no allocation.

#include <sys/types.h>

#include <atomic>
#include <cstdint>

#include "ncclinsp/abi/nccl_profiler.hpp"
#include "ncclinsp/collector.hpp"
#include "ncclinsp/detail/clock.hpp"
#include "ncclinsp/no_index.hpp"
#include "ncclinsp/plugin/comm_registry.hpp"
#include "ncclinsp/plugin/handle.hpp"
#include "ncclinsp/proxy_stats.hpp"

namespace ncclinsp::plugin {

class proxy_events {
 public:
  /// `pid`: this process (ProxyOps with another pid are PXN ops of another process).
  proxy_events(const comm_registry& reg, collector<>& col, pid_t pid) noexcept : reg_(reg), col_(col), pid_(pid) {}

  /// ProxyOp start: a handle for a sampled op of ours, else none (PXN op of another process,
  /// unsampled, proxy accounting off, table full).
  void start_op(void** handle, const void* parent, pid_t pid, int peer, bool send, std::uint8_t channel) noexcept {
    if (pid != pid_) return;  // PXN: parent and context belong to another process
    const decoded k = decode(parent);
    if (k.kind != handle_kind::op) return;
    comm_state* cs = nullptr;
    const op_slot* s = reg_.find_op(k, cs);
    if (!s || !s->proxy_sampled || !cs->proxy) return;
    const std::uint32_t e = cs->proxy->entry(peer, send);
    if (e == no_index) NCCLINSP_UNLIKELY {
      col_.note_dropped(cs->handle, drop_reason::table_full);
      return;
    }
    static_assert(proxy_table::capacity <= 128, "the ProxyOp handle's slot is entry | channel << 7");
    *handle = as_handle(encode(handle_kind::auxiliary, cs->gen, cs->handle, e | (std::uint32_t(channel) << 7),
                               aux_proxy_op | (send ? aux_send : 0)));
  }

  /// ProxyStep start under a ProxyOp handle of ours: a step slot from the pool, or the open slot of
  /// the same step of the same ProxyOp (NCCL re-starts a recv step on every pass while irecv gives
  /// no request or a registered buffer is not ready, never stopping the earlier start).
  void start_step(void** handle, const void* parent, int step) noexcept {
    const decoded k = decode(parent);
    if (k.kind != handle_kind::auxiliary || (k.aux & aux_kind_mask) != aux_proxy_op) return;
    comm_state* cs = reg_.live(k.comm);
    const std::uint32_t entry = k.slot & (proxy_table::capacity - 1);
    if (!cs || handle_gen(cs->gen) != k.gen || !cs->proxy) return;
    const std::uint32_t key = (k.slot << 16) | (static_cast<std::uint32_t>(step) & 0xFFFF);
    std::uint32_t& open = cs->open_step[open_index(*cs, key)];
    if (open && cs->steps[open - 1].open && cs->steps[open - 1].key == key) {  // re-started
      const proxy_step_slot& st = cs->steps[open - 1];
      *handle = as_handle(
          encode(handle_kind::auxiliary, st.gen.load(std::memory_order_relaxed), cs->handle, open - 1, aux_proxy_step));
      return;
    }
    const std::uint32_t idx = cs->step_free.alloc();
    if (idx == no_index) NCCLINSP_UNLIKELY {
      col_.note_dropped(cs->handle, drop_reason::table_full);
      return;
    }
    proxy_step_slot& st = cs->steps[idx];
    st.entry = entry;
    st.wait = no_wait;
    st.since_ns = 0;
    st.bytes = 0;
    st.key = key;
    st.open = true;
    open = idx + 1;
    *handle = as_handle(
        encode(handle_kind::auxiliary, st.gen.load(std::memory_order_relaxed), cs->handle, idx, aux_proxy_step));
  }

  /// A step's state transition: the time since the previous one goes to the previous state.
  void record(const void* handle, proxy_wait w, const abi::state_args* args) noexcept {
    comm_state* cs = nullptr;
    proxy_step_slot* st = find_step(decode(handle), cs);
    if (!st) return;
    const std::uint64_t now = detail::steady_ns();
    close_wait(*cs, *st, now);
    st->wait = static_cast<std::uint8_t>(w);
    st->since_ns = now;
    if (args) st->bytes = args->proxyStep.transSize;
  }

  /// A step's stop: its last wait and its bytes are counted and its slot is freed.
  void stop_step(const decoded& k) noexcept {
    comm_state* cs = nullptr;
    proxy_step_slot* st = find_step(k, cs);
    if (!st) return;
    close_wait(*cs, *st, detail::steady_ns());
    cs->proxy->add_step(st->entry, st->bytes);
    st->open = false;
    if (std::uint32_t& open = cs->open_step[open_index(*cs, st->key)]; open == k.slot + 1) open = 0;
    // One proxy thread starts and stops a communicator's steps: a plain generation bump.
    st->gen.store(st->gen.load(std::memory_order_relaxed) + 1, std::memory_order_release);
    cs->step_free.release(k.slot);
  }

  /// Whether a decoded auxiliary handle names a ProxyStep (its stop goes to stop_step).
  static bool is_step(const decoded& k) noexcept { return (k.aux & aux_kind_mask) == aux_proxy_step; }

 private:
  /// The step slot a decoded ProxyStep handle names, or nullptr (stale, stopped, foreign, garbage).
  proxy_step_slot* find_step(const decoded& k, comm_state*& cs) const noexcept {
    if (k.kind != handle_kind::auxiliary || !is_step(k)) return nullptr;
    cs = reg_.live(k.comm);
    if (!cs || k.slot >= cs->step_count || !cs->proxy) return nullptr;
    proxy_step_slot& st = cs->steps[k.slot];
    return handle_gen(st.gen.load(std::memory_order_acquire)) == k.gen ? &st : nullptr;
  }
  static std::uint32_t open_index(const comm_state& cs, std::uint32_t key) noexcept {
    return static_cast<std::uint32_t>((static_cast<std::uint64_t>(key) * 0x9E3779B97F4A7C15ull) >> 40) % cs.step_count;
  }
  static void close_wait(comm_state& cs, const proxy_step_slot& st, std::uint64_t now) noexcept {
    if (st.wait != no_wait && now > st.since_ns)
      cs.proxy->add_wait(st.entry, static_cast<proxy_wait>(st.wait), now - st.since_ns);
  }

  const comm_registry& reg_;
  collector<>& col_;
  pid_t pid_;
};

}  // namespace ncclinsp::plugin
