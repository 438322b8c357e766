#pragma once
/// The NCCL profiler plugin: event adapter (profiler ABI v4-v7 -> op records) plus the process
/// state that owns the collector and the exporter. Built into libnccl-profiler-ncclinsp.so by
/// plugin/exports.cpp, or into an application for NCCL_PROFILER_PLUGIN=STATIC_PLUGIN.
///
/// Rules kept here (nccl-profiler-abi.md §7-§9, nccl-newest-delta.md §3):
///  - Handles and contexts we give NCCL are tagged integers, never pointers: nothing NCCL passes
///    back (stale, foreign-process PXN, garbage) is ever dereferenced; it is decoded, bounds- and
///    generation-checked, or ignored.
///  - Coll/P2p stop means "enqueued"; an op completes when all its KernelCh channels stopped.
///    Duration = latest GPU channel stop - earliest GPU channel start (the span, not Inspector's
///    max-of-channels); channels are keyed by their real id, which need not start at 0.
///  - No throw crosses the C ABI; only init may return an error; no I/O on NCCL's threads.
///  - NCCL's threads may deliver events while (or after) a communicator is finalized: every event
///    runs inside a reader_gate section, and finalize frees a communicator's state only once no
///    such section can still hold it (reader_gate::quiesce).
/// Hot path (startEvent/stopEvent/recordEventState for Coll, P2p, KernelCh): no lock, no
/// allocation, a few relaxed atomics on the op's own slot.
/// Proxy accounting (NCCLINSP_PROXY=1, off by default): ProxyOp/ProxyStep are subscribed, and
/// for 1 op in NCCLINSP_PROXY_SAMPLE (by sequence number, so every rank samples the same ops) the
/// ProxyOps get a handle; the others get NULL, so NCCL emits no steps for them. Each step's state
/// transitions are timed on the proxy thread (CLOCK_MONOTONIC) into the communicator's
/// proxy_table: per peer and direction, no lock, no allocation (a fixed step pool per communicator).

#include <dlfcn.h>
#include <pthread.h>
#include <time.h>
#include <unistd.h>

#include <array>
#include <atomic>
#include <cstdarg>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <type_traits>
#include <vector>

#include "ncclinsp/abi/nccl_profiler.hpp"
#include "ncclinsp/collector.hpp"
#include "ncclinsp/detector.hpp"
#include "ncclinsp/exporter.hpp"
#include "ncclinsp/options.hpp"
#include "ncclinsp/detail/reader_gate.hpp"
#include "ncclinsp/detail/slot_bitmap.hpp"
#include "ncclinsp/plugin/device_identity.hpp"
#include "ncclinsp/sinks/from_options.hpp"
#include "ncclinsp/version.hpp"

namespace ncclinsp::plugin {

using abi::result_t;

/// Handle layout (never 0): kind:2 | gen:22 | comm:12 | slot:16 | channel:8 ... packed in 64 bits.
/// `group` handles are auxiliary: their low byte says which (aux_* below).
enum class handle_kind : std::uint64_t { none = 0, op = 1, channel = 2, group = 3 };
/// Low byte of a `group` handle: the inert v4 Group, a sampled ProxyOp (slot = proxy_table entry,
/// gen = communicator generation, bit 7 = send), a ProxyStep (slot = step slot, gen = its generation).
inline constexpr std::uint32_t aux_group = 0, aux_proxy_op = 1, aux_proxy_step = 2, aux_send = 0x80;
struct decoded {
  handle_kind kind = handle_kind::none;
  std::uint32_t gen = 0, comm = 0, slot = 0, channel = 0;
};
constexpr std::uint64_t encode(handle_kind k, std::uint32_t gen, std::uint32_t comm, std::uint32_t slot, std::uint32_t ch = 0) noexcept {
  return static_cast<std::uint64_t>(k) << 62 | (std::uint64_t{gen & 0x3FFFFFu} << 40) | (std::uint64_t{comm & 0xFFFFu} << 24) |
         (std::uint64_t{slot & 0xFFFFu} << 8) | (ch & 0xFFu);
}
inline decoded decode(const void* h) noexcept {
  const auto v = reinterpret_cast<std::uintptr_t>(h);
  return {static_cast<handle_kind>(v >> 62), static_cast<std::uint32_t>((v >> 40) & 0x3FFFFF), static_cast<std::uint32_t>((v >> 24) & 0xFFFF),
          static_cast<std::uint32_t>((v >> 8) & 0xFFFF), static_cast<std::uint32_t>(v & 0xFF)};
}
inline void* as_handle(std::uint64_t v) noexcept { return reinterpret_cast<void*>(static_cast<std::uintptr_t>(v)); }

/// CLOCK_MONOTONIC_COARSE in ns: a vDSO read (~ns), same epoch as steady_clock; used for in-flight ages.
inline std::uint64_t coarse_ns() noexcept {
  timespec ts;
  ::clock_gettime(CLOCK_MONOTONIC_COARSE, &ts);
  return static_cast<std::uint64_t>(ts.tv_sec) * 1000000000ull + static_cast<std::uint64_t>(ts.tv_nsec);
}
inline std::uint64_t clock_ns(clockid_t id) noexcept {
  timespec ts;
  ::clock_gettime(id, &ts);
  return static_cast<std::uint64_t>(ts.tv_sec) * 1000000000ull + static_cast<std::uint64_t>(ts.tv_nsec);
}
inline std::uint64_t precise_ns() noexcept { return clock_ns(CLOCK_MONOTONIC); }

inline constexpr std::uint32_t max_plugin_comms = default_traits::max_comms;

/// One in-flight op. Written by the enqueuing thread at start, by the completing thread after.
struct alignas(detail::cache_line) op_slot {
  std::atomic<std::uint32_t> gen{1};
  std::atomic<std::uint32_t> refs{0};        // enqueue-stop + kernel completion
  std::atomic<std::uint32_t> ch_stopped{0};
  std::atomic<std::uint64_t> enqueued_at{0};  // coarse CPU ns, 0 = free or completed
  std::atomic<std::uint64_t> gpu_lo{0}, gpu_hi{0}, cpu_lo{0}, cpu_hi{0};
  std::atomic<bool> gpu_missing{false};
  std::atomic<bool> enq_stopped{false};       // the op's own stopEvent was seen (a second one is ignored)
  std::uint32_t expected_ch = 0;
  bool is_ce = false;
  bool proxy_sampled = false;                 // its ProxyOps get handles (NCCLINSP_PROXY)
  op_record rec;
};

/// One network step in flight (ProxyStep start -> state transitions -> stop), on the proxy thread.
struct proxy_step_slot {
  std::atomic<std::uint32_t> gen{1};
  std::uint32_t entry = 0;           // proxy_table entry (peer, direction)
  std::uint8_t wait = 0xFF;          // current proxy_wait, 0xFF = none yet
  std::uint64_t since_ns = 0;        // CLOCK_MONOTONIC at the last transition
  std::uint64_t bytes = 0;           // latest transSize
};

/// Callback detail of one in-flight op, only when traces are recorded (verbose JSON, trace sink).
/// The op's start/stop fields are written by the enqueuing thread, the channel entries by the
/// thread that delivers channel events, which also completes the op and reads them all.
struct traced_op {
  op_trace t;
  std::atomic<std::uint16_t> last_sn{0};
  std::atomic<std::uint16_t> stop_sn{0};
  std::atomic<std::uint64_t> stop_cpu_ns{0};
  std::array<std::uint8_t, 256> entry_of{};  // channel id -> index in t.channels + 1 (0 = none)

  std::uint16_t next_sn() noexcept { return static_cast<std::uint16_t>(last_sn.fetch_add(1, std::memory_order_relaxed) + 1); }
  channel_trace* channel(std::uint32_t id) noexcept { return id < entry_of.size() && entry_of[id] ? &t.channels[entry_of[id] - 1] : nullptr; }
};

/// One communicator on this rank.
struct comm_state {
  comm_state(std::uint32_t pool, bool traced, std::uint32_t proxy_steps)
      : pool_size(pool), slots(new op_slot[pool]), traces(traced ? new traced_op[pool] : nullptr), free(pool),
        step_count(proxy_steps), steps(proxy_steps ? new proxy_step_slot[proxy_steps] : nullptr), step_free(proxy_steps) {}
  comm_handle handle = invalid_comm;
  std::uint32_t gen = 0;  // generation of this comm table entry
  int nranks = 1;
  std::uint32_t pool_size;
  std::unique_ptr<op_slot[]> slots;
  std::unique_ptr<traced_op[]> traces;  // parallel to slots, or null
  detail::slot_bitmap free;  // which slots are in use
  std::atomic<std::uint64_t> p2p_seq{0};
  proxy_table* proxy = nullptr;  // owned by the collector; null without NCCLINSP_PROXY
  std::uint32_t step_count;
  std::unique_ptr<proxy_step_slot[]> steps;
  detail::slot_bitmap step_free;

  /// Lock-free slot allocation; UINT32_MAX when the pool is full.
  std::uint32_t alloc() noexcept { return free.alloc(); }
  void release(std::uint32_t idx) noexcept {
    slots[idx].enqueued_at.store(0, std::memory_order_relaxed);
    // Only the last reference holder releases, and the slot stays marked used until free.release
    // below, so gen has one writer here: a plain increment, no locked RMW (hot path).
    std::atomic<std::uint32_t>& g = slots[idx].gen;
    g.store(g.load(std::memory_order_relaxed) + 1, std::memory_order_relaxed);
    free.release(idx);
  }
  /// Coarse start time of the oldest in-flight op, 0 if none (exporter thread).
  std::uint64_t oldest() const noexcept {
    std::uint64_t best = 0;
    for (std::uint32_t i = 0; i < pool_size; ++i) {
      const std::uint64_t t = slots[i].enqueued_at.load(std::memory_order_relaxed);
      if (t && (!best || t < best)) best = t;
    }
    return best;
  }
  std::uint64_t inflight() const noexcept {
    std::uint64_t n = 0;
    for (std::uint32_t i = 0; i < pool_size; ++i) n += slots[i].enqueued_at.load(std::memory_order_relaxed) != 0;
    return n;
  }
};

/// Process-wide plugin state: options, collector, exporter, communicator table. Created at the
/// first init and kept for the life of the process (the library pins itself in memory), so a
/// later communicator reuses it and counters continue.
class plugin_state {
 public:
  static plugin_state& get() {
    static plugin_state* s = new plugin_state();  // never destroyed: NCCL threads may outlive static destructors
    return *s;
  }

  // ---- init / finalize (cold) ------------------------------------------------------------------
  result_t init(void** context, int* mask, const char* name, std::uint64_t hash, int nnodes, int nranks, int rank, abi::logger_t logfn,
                int abi_version) noexcept {
    if (context) *context = nullptr;
    if (forked_child_.load(std::memory_order_relaxed)) return abi::success;  // inert after fork(), see on_fork_child
    try {
      std::lock_guard lk(mu_);
      if (logfn) logger_.store(logfn, std::memory_order_release);
      if (!configured_) configure(abi_version);
      if (!opts_.enable) return abi::success;  // inert, as Inspector with NCCL_INSPECTOR_ENABLE unset
      if (!context || nranks <= 0 || rank < 0 || rank >= nranks || nnodes <= 0) {
        log(log_level::warn, "init called with invalid arguments (nranks=" + std::to_string(nranks) + ", rank=" + std::to_string(rank) +
                                 "); running without ncclinsp for this communicator");
        return abi::invalid_argument;
      }
      const std::uint32_t pool = opts_.coll_pool_size + (opts_.enable_p2p ? opts_.p2p_pool_size : 0);
      auto cs = std::make_unique<comm_state>(pool > 65535 ? 65535 : pool, col_->options().record_traces,  // 16 handle bits
                                             opts_.proxy ? proxy_steps_per_comm : 0);
      cs->nranks = nranks;
      const device_identity dev = identify_device(opts_.cuda_driver, opts_.node_name);
      comm_state* raw = cs.get();
      const comm_handle h = col_->add_comm({.name = name ? std::string(name) : std::string(), .hash = hash, .rank = rank, .nranks = nranks,
                                            .nnodes = nnodes, .device = dev.ordinal, .uuid = dev.uuid},
                                           [raw](comm_handle) { return raw->oldest(); });
      if (h == invalid_comm || h >= max_plugin_comms) {
        log(log_level::warn, "communicator table full (" + std::to_string(max_plugin_comms) + " in this process); running without ncclinsp for it");
        return abi::internal_error;
      }
      cs->handle = h;
      cs->gen = ++comm_gen_;
      cs->proxy = col_->proxy_of(h);
      comms_[h].store(cs.release(), std::memory_order_release);
      *context = as_handle(encode(handle_kind::op, comms_[h].load()->gen, h, 0xFFFF));
      if (live_comms_++ == 0) start_exporter();
      if (mask) {
        int m = static_cast<int>(abi::ev_coll | abi::ev_kernel_ch);
        if (opts_.enable_p2p) m |= static_cast<int>(abi::ev_p2p);
        if (abi_version >= 6) m |= static_cast<int>(abi::ev_ce_coll);
        if (opts_.proxy) m |= static_cast<int>(abi::ev_proxy_op | abi::ev_proxy_step);  // bits 3 and 4 in every ABI version
        // NCCL's mask is one process-wide int that other threads read (atomically, relaxed) while
        // another communicator initializes: store it atomically too.
        std::atomic_ref<int>(*mask).store(m, std::memory_order_relaxed);
      }
      return abi::success;
    } catch (...) {
      return abi::internal_error;  // NCCL unloads us for this communicator and carries on
    }
  }

  result_t finalize(void* context) noexcept {
    try {
      comm_state* cs = comm_from_context(context);
      if (!cs || forked_child_.load(std::memory_order_relaxed)) return abi::success;
      std::unique_lock lk(mu_);
      if (comms_[cs->handle].load() != cs) return abi::success;  // finalize twice
      comms_[cs->handle].store(nullptr, std::memory_order_seq_cst);
      // NCCL's proxy/profiler thread may still be inside an event that found cs: wait (bounded)
      // until it has left. Afterwards no event can touch cs, so the in-flight count is exact: those
      // ops never complete now (NCCL >= 2.31 purges them) and are counted as abandoned.
      const bool quiet = gate_.quiesce(std::chrono::milliseconds(20));
      col_->retire_comm(cs->handle, cs->inflight());
      if (quiet) {
        delete cs;
        for (comm_state* old : limbo_) delete old;  // unpublished before this quiesce began
        limbo_.clear();
      } else {
        limbo_.push_back(cs);  // a reader was preempted inside: freed by a later finalize
      }
      if (--live_comms_ == 0 && exporter_) {
        auto ex = std::move(exporter_);
        lk.unlock();
        // Final flush, bounded: never stalls teardown. If the sinks are stuck (a hung filesystem),
        // the detached exporter thread keeps its own state alive (shared); the library is pinned in
        // memory. It is kept in lingering_ so that exit_flush() (at process exit) gives its final
        // export a bounded chance to land; finished ones are dropped (stop is idempotent, so
        // destroying them neither blocks nor leaks).
        if (!ex->stop(std::chrono::milliseconds(100))) {
          lk.lock();
          std::erase_if(lingering_, [](const auto& e) { return e->wait_finished(std::chrono::milliseconds(0)); });
          lingering_.push_back(std::move(ex));
        }
      }
    } catch (...) {
    }
    return abi::success;
  }

  // ---- events (hot) ----------------------------------------------------------------------------
  template <class Descr>
  result_t start_event(void* context, void** handle, const Descr* d) noexcept {
    if (!handle) return abi::success;
    *handle = nullptr;
    if (!d) return abi::success;
    const auto in = gate_.enter();
    const std::uint64_t type = d->type;
    if (type == abi::ev_kernel_ch) return start_channel(handle, d->parentObj, d->kernelCh.channelId, d->kernelCh.pTimer);
    if (type == abi::ev_coll) return start_coll(context, handle, d);
    if (type == abi::ev_p2p) return start_p2p(context, handle, d);
    if (type == abi::ev_proxy_step) return start_step(handle, d->parentObj);
    if (type == abi::ev_proxy_op) return start_proxy_op(handle, d->parentObj, d->proxyOp.pid, d->proxyOp.peer, d->proxyOp.isSend != 0);
    if constexpr (std::is_same_v<Descr, abi::descr_v4>) {
      // NCCL 2.27 starts Coll/P2p only under a non-NULL Group handle: give a constant, inert one.
      if (type == abi::ev_group) *handle = as_handle(encode(handle_kind::group, 0, 0, 0));
    }
    if constexpr (requires { d->ceColl; }) {
      if (type == abi::ev_ce_coll) return start_ce(context, handle, d);
    }
    // Everything else (ancestors NCCL emits anyway, ProxyOp incl. foreign-pid PXN ops, types a RAS
    // mask override enables, KernelPhase): no handle, nothing dereferenced.
    return abi::success;
  }

  result_t stop_event(void* handle) noexcept {
    const decoded k = decode(handle);
    if (k.kind == handle_kind::none) return abi::success;
    const auto in = gate_.enter();
    if (k.kind == handle_kind::channel) return stop_channel(k);
    if (k.kind == handle_kind::group) return (k.channel & 3u) == aux_proxy_step ? stop_step(k) : abi::success;
    if (k.kind != handle_kind::op) return abi::success;
    comm_state* cs = nullptr;
    op_slot* op = find_op(k, cs);
    if (!op) return abi::success;  // stale or already released
    op_slot& s = *op;
    // Stopped twice: one reference only. NCCL stops an op from one thread, so no locked RMW here.
    if (s.enq_stopped.load(std::memory_order_relaxed)) return abi::success;
    s.enq_stopped.store(true, std::memory_order_relaxed);
    if (cs->traces) NCCLINSP_UNLIKELY {
      traced_op& tr = cs->traces[k.slot];
      tr.stop_cpu_ns.store(clock_ns(CLOCK_REALTIME), std::memory_order_relaxed);
      tr.stop_sn.store(tr.next_sn(), std::memory_order_release);
    }
    if (s.is_ce || s.expected_ch == 0) complete(*cs, s, /*enqueue_only=*/true);
    drop_ref(*cs, k.slot, s);
    return abi::success;
  }

  result_t record_state(void* handle, int state, const abi::state_args* args) noexcept {
    const auto in = gate_.enter();
    if (state != abi::st_kernel_ch_stop) {
      proxy_wait w;
      return proxy_wait_of(state, w) ? record_step(handle, w, args) : abi::success;
    }
    const decoded k = decode(handle);
    if (k.kind != handle_kind::channel) return abi::success;
    comm_state* cs = nullptr;
    op_slot* s = find_op(k, cs);
    if (!s) return abi::success;
    const std::uint64_t t = args ? args->kernelCh.pTimer : 0;
    if (t) relaxed_max(s->gpu_hi, t);
    else s->gpu_missing.store(true, std::memory_order_relaxed);
    if (cs->traces) NCCLINSP_UNLIKELY {
      traced_op& tr = cs->traces[k.slot];
      if (channel_trace* c = tr.channel(k.channel)) {
        c->record_sn = tr.next_sn();
        c->record_cpu_ns = clock_ns(CLOCK_REALTIME);
        c->gpu_stop_ns = t;
      }
    }
    return abi::success;
  }

  const options& opts() const noexcept { return opts_; }
  collector<>* get_collector() noexcept { return col_.get(); }
  /// Forces an export now (tests, STATIC_PLUGIN users).
  bool flush() {
    if (forked_child_.load(std::memory_order_relaxed)) return false;
    std::lock_guard lk(mu_);
    return exporter_ && exporter_->flush();
  }

 private:
  plugin_state() = default;

  void configure(int abi_version) {
    configured_ = true;
    pin_library();
    opts_ = options::from_env([this](log_level l, std::string_view m) { log(l, std::string(m)); });
    pid_ = ::getpid();
    collector_options co;
    co.record_ring_capacity = record_ring_for(opts_);
    co.record_traces = traces_for(opts_);
    co.record_ring_max = co.record_ring_capacity ? record_ring_max_for(opts_, collector<>::bytes_per_record(co.record_traces)) : 0;
    co.user_tag_label = opts_.user_tag_label;
    co.retired_retention = std::chrono::seconds(opts_.retain_finalized_s);
    co.proxy_accounting = opts_.proxy;
    char host[256] = {};
    if (::gethostname(host, sizeof host - 1) != 0) host[0] = 0;
    co.identity = {.node = opts_.node_name, .hostname = host[0] ? host : "unknown", .slurm_job_id = opts_.slurm_job_id,
                   .abi = "v" + std::to_string(abi_version), .labels = opts_.labels, .pid = static_cast<long>(::getpid())};
    col_ = std::make_unique<collector<>>(std::move(co));
    detector_ = std::make_unique<change_detector>(detector_options_from(opts_));
    // A final export that outlived finalize's 100 ms (slow disk, a large last batch) gets a bounded
    // chance to finish at process exit instead of being cut off mid-write. The library is pinned,
    // so the handler stays mapped.
    std::atexit([] { plugin_state::get().exit_flush(); });
    ::pthread_atfork(nullptr, nullptr, [] { plugin_state::get().on_fork_child(); });
    std::string banner = "ncclinsp " NCCLINSP_VERSION_STRING " loaded through profiler ABI v" + std::to_string(abi_version);
    banner += opts_.enable ? "; configuration:\n" + opts_.describe() : "; disabled (set NCCL_INSPECTOR_ENABLE=1 or NCCLINSP_ENABLE=1)";
    log(log_level::info, banner);
  }

  void start_exporter() {
    auto lg = [this](log_level l, std::string_view m) { log(l, std::string(m)); };
    std::vector<any_sink> sinks = sinks_from_options(opts_, lg);
    // The detector runs on the exporter thread; its state changes go to NCCL's log (WARN when a
    // communicator degrades, so they show without NCCL_DEBUG=INFO).
    auto prepare = [this](snapshot& s) {
      detector_->update(s);
      for (const auto& e : s.busbw_events) log(e.degraded ? log_level::warn : log_level::info, describe(e));
    };
    exporter_ = std::make_unique<exporter<collector<>>>(
        *col_, std::move(sinks),
        exporter_options{.interval = std::chrono::milliseconds(opts_.interval_ms()), .log = lg, .prepare = std::move(prepare)});
    exporter_->start();
  }

  /// In a child made by fork() (a data-loader worker, a subprocess launcher): only the forking
  /// thread exists, so the exporter threads this state refers to are gone and its mutexes may have
  /// been copied locked. The child never touches them: it runs without ncclinsp (init succeeds
  /// with no context, as when disabled), leaves the parent's files alone and exits at once.
  void on_fork_child() noexcept { forked_child_.store(true, std::memory_order_relaxed); }

  void exit_flush() noexcept {
    if (forked_child_.load(std::memory_order_relaxed)) return;
    std::vector<exporter<collector<>>*> pending;
    {
      std::lock_guard lk(mu_);
      for (auto& e : lingering_) pending.push_back(e.get());
    }
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(opts_.exit_flush_ms);
    // Per-op records still queued get the first half of the wait; the rest are counted as dropped
    // (reason exit_deadline), so the final statistics land before the exit.
    for (auto* e : pending) e->stop_records_at(std::chrono::steady_clock::now() + std::chrono::milliseconds(opts_.exit_flush_ms / 2));
    for (auto* e : pending) {
      const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - std::chrono::steady_clock::now());
      if (left.count() <= 0 || !e->wait_finished(left)) {
        log(log_level::warn, "final export did not finish before process exit; the last interval may be incomplete");
        break;
      }
    }
  }

  /// Keeps this library mapped after NCCL's dlclose: the exporter thread may outlive the last
  /// finalize (bounded wait), and a later communicator finds its state again.
  static void pin_library() {
    Dl_info info{};
    if (::dladdr(reinterpret_cast<void*>(&pin_library), &info) && info.dli_fname) ::dlopen(info.dli_fname, RTLD_NOW | RTLD_NODELETE | RTLD_NOLOAD);
  }

  void log(log_level lvl, const std::string& msg) noexcept {
    if (auto fn = logger_.load(std::memory_order_acquire))
      fn(lvl == log_level::warn ? abi::log_warn : abi::log_info, abi::subsys_profile, __FILE__, __LINE__, "ncclinsp: %s", msg.c_str());
    else
      stderr_log(lvl, msg);
  }

  comm_state* live_comm(std::uint32_t idx) const noexcept {
    // seq_cst (a plain load on x86): ordered after this thread's reader_gate mark, see finalize.
    return idx < max_plugin_comms ? comms_[idx].load(std::memory_order_seq_cst) : nullptr;
  }
  /// The live op a decoded handle names, or nullptr (unknown comm, out of range, stale generation).
  op_slot* find_op(const decoded& k, comm_state*& cs) const noexcept {
    cs = live_comm(k.comm);
    if (!cs || k.slot >= cs->pool_size) return nullptr;
    op_slot& s = cs->slots[k.slot];
    return (s.gen.load(std::memory_order_acquire) & 0x3FFFFFu) == k.gen ? &s : nullptr;
  }

  comm_state* comm_from_context(void* context) const noexcept {
    const decoded k = decode(context);
    if (k.kind != handle_kind::op || k.slot != 0xFFFF) return nullptr;
    comm_state* cs = live_comm(k.comm);
    return cs && (cs->gen & 0x3FFFFF) == k.gen ? cs : nullptr;
  }

  // Channel timestamps of one op are delivered by one thread (NCCL's proxy thread, or the
  // communicator's profiler thread since 2.31), so min/max are plain load+store: no locked
  // instruction per channel. Were two threads ever to race here, the span could only come out
  // slightly short; completion itself is an exact atomic count (ch_stopped).
  static void relaxed_min(std::atomic<std::uint64_t>& a, std::uint64_t v) noexcept {
    const std::uint64_t cur = a.load(std::memory_order_relaxed);
    if (cur == 0 || v < cur) a.store(v, std::memory_order_relaxed);
  }
  static void relaxed_max(std::atomic<std::uint64_t>& a, std::uint64_t v) noexcept {
    if (v > a.load(std::memory_order_relaxed)) a.store(v, std::memory_order_relaxed);
  }

  /// Takes a slot and fills the common fields; returns the slot index or UINT32_MAX.
  std::uint32_t begin_op(comm_state& cs, func f, std::uint64_t count, const char* dtype_name, std::uint32_t channels, bool ce) noexcept {
    op_record rec;
    rec.fn = f;
    set_size(rec, count, parse_dtype(dtype_name));
    if (rec.bytes_valid && rec.bytes < opts_.min_size_bytes) {
      col_->note_filtered(cs.handle, filter_reason::min_size);
      return UINT32_MAX;
    }
    const std::uint32_t idx = cs.alloc();
    if (idx == UINT32_MAX) NCCLINSP_UNLIKELY {
      col_->note_dropped(cs.handle, drop_reason::op_pool_full);
      return UINT32_MAX;
    }
    op_slot& s = cs.slots[idx];
    rec.channels = static_cast<std::uint16_t>(channels);
    s.rec = rec;
    s.expected_ch = channels;
    s.is_ce = ce;
    s.proxy_sampled = false;
    s.ch_stopped.store(0, std::memory_order_relaxed);
    s.gpu_lo.store(0, std::memory_order_relaxed);
    s.gpu_hi.store(0, std::memory_order_relaxed);
    s.cpu_lo.store(0, std::memory_order_relaxed);
    s.cpu_hi.store(0, std::memory_order_relaxed);
    s.gpu_missing.store(false, std::memory_order_relaxed);
    s.enq_stopped.store(false, std::memory_order_relaxed);
    s.refs.store(channels && !ce ? 2 : 1, std::memory_order_relaxed);
    if (cs.traces) NCCLINSP_UNLIKELY {
      traced_op& tr = cs.traces[idx];
      tr.t.n_channels = 0;
      tr.t.start_sn = 1;
      tr.t.start_cpu_ns = clock_ns(CLOCK_REALTIME);
      tr.entry_of.fill(0);
      tr.stop_sn.store(0, std::memory_order_relaxed);
      tr.stop_cpu_ns.store(0, std::memory_order_relaxed);
      tr.last_sn.store(1, std::memory_order_relaxed);
    }
    s.enqueued_at.store(coarse_ns(), std::memory_order_release);
    col_->note_started(cs.handle);
    return idx;
  }

  void* op_handle(const comm_state& cs, std::uint32_t idx) noexcept {
    return as_handle(encode(handle_kind::op, cs.slots[idx].gen.load(std::memory_order_relaxed), cs.handle, idx));
  }

  template <class Descr>
  result_t start_coll(void* context, void** handle, const Descr* d) noexcept {
    comm_state* cs = comm_from_context(context);
    if (!cs) return abi::success;
    const func f = parse_func(d->coll.func);
    const std::uint32_t idx = begin_op(*cs, f, d->coll.count, d->coll.datatype, d->coll.nChannels, false);
    if (idx == UINT32_MAX) return abi::success;
    op_record& r = cs->slots[idx].rec;
    r.seq = d->coll.seqNumber;
    cs->slots[idx].proxy_sampled = cs->proxy && r.seq % opts_.proxy_sample == 0;  // same ops on every rank
    r.alg = d->coll.algo ? parse_algo(d->coll.algo) : algo::unknown;
    r.pro = d->coll.proto ? parse_proto(d->coll.proto) : proto::unknown;
    if constexpr (requires { d->coll.userTag; }) {
      r.user_tag = d->coll.userTag;
      if (d->coll.isSymColl) {
        r.alg = algo::sym;
        r.pro = proto::none;
      }
    }
    *handle = op_handle(*cs, idx);
    return abi::success;
  }

  template <class Descr>
  result_t start_p2p(void* context, void** handle, const Descr* d) noexcept {
    if (!opts_.enable_p2p) return abi::success;
    comm_state* cs = comm_from_context(context);
    if (!cs) return abi::success;
    const func f = parse_func(d->p2p.func);
    const std::uint32_t idx = begin_op(*cs, f, d->p2p.count, d->p2p.datatype, d->p2p.nChannels, false);
    if (idx == UINT32_MAX) return abi::success;
    op_record& r = cs->slots[idx].rec;
    r.peer = d->p2p.peer;
    r.seq = cs->p2p_seq.fetch_add(1, std::memory_order_relaxed) + 1;
    cs->slots[idx].proxy_sampled = cs->proxy && r.seq % opts_.proxy_sample == 0;
    r.alg = algo::none;
    r.pro = proto::none;
    if constexpr (requires { d->p2p.userTag; }) r.user_tag = d->p2p.userTag;
    *handle = op_handle(*cs, idx);
    return abi::success;
  }

  template <class Descr>
  result_t start_ce(void* context, void** handle, const Descr* d) noexcept {
    comm_state* cs = comm_from_context(context);
    if (!cs) return abi::success;
    const std::uint32_t idx = begin_op(*cs, parse_func(d->ceColl.func), d->ceColl.count, d->ceColl.datatype, 0, true);
    if (idx == UINT32_MAX) return abi::success;
    op_slot& s = cs->slots[idx];
    s.rec.seq = d->ceColl.seqNumber;
    s.rec.alg = algo::none;
    s.rec.pro = proto::none;
    if constexpr (requires { d->ceColl.userTag; }) s.rec.user_tag = d->ceColl.userTag;
    s.cpu_lo.store(precise_ns(), std::memory_order_relaxed);
    *handle = op_handle(*cs, idx);
    return abi::success;
  }

  result_t start_channel(void** handle, void* parent, std::uint8_t channel, std::uint64_t gpu_start) noexcept {
    const decoded k = decode(parent);
    if (k.kind != handle_kind::op) return abi::success;
    comm_state* cs = nullptr;
    op_slot* s = find_op(k, cs);
    if (!s) return abi::success;
    if (gpu_start)
      relaxed_min(s->gpu_lo, gpu_start);
    else {
      s->gpu_missing.store(true, std::memory_order_relaxed);
      relaxed_min(s->cpu_lo, precise_ns());
    }
    if (cs->traces) NCCLINSP_UNLIKELY {
      traced_op& tr = cs->traces[k.slot];
      if (!tr.entry_of[channel] && tr.t.n_channels < max_traced_channels) {
        tr.entry_of[channel] = static_cast<std::uint8_t>(tr.t.n_channels + 1);
        tr.t.channels[tr.t.n_channels++] = {.start_cpu_ns = clock_ns(CLOCK_REALTIME), .gpu_start_ns = gpu_start, .start_sn = tr.next_sn(), .channel = channel};
      }
    }
    *handle = as_handle(encode(handle_kind::channel, k.gen, k.comm, k.slot, channel));
    return abi::success;
  }

  result_t stop_channel(const decoded& k) noexcept {
    comm_state* cs = nullptr;
    op_slot* op = find_op(k, cs);
    if (!op) return abi::success;
    op_slot& s = *op;
    if (s.gpu_missing.load(std::memory_order_relaxed)) relaxed_max(s.cpu_hi, precise_ns());
    if (cs->traces) NCCLINSP_UNLIKELY {
      traced_op& tr = cs->traces[k.slot];
      if (channel_trace* c = tr.channel(k.channel)) {
        c->stop_sn = tr.next_sn();
        c->stop_cpu_ns = clock_ns(CLOCK_REALTIME);
      }
    }
    const std::uint32_t stopped = s.ch_stopped.fetch_add(1, std::memory_order_acq_rel) + 1;
    if (stopped == s.expected_ch) {
      complete(*cs, s, false);
      drop_ref(*cs, k.slot, s);
    }
    return abi::success;
  }

  // ---- proxy accounting (proxy thread) ---------------------------------------------------------
  static constexpr std::uint32_t proxy_steps_per_comm = 1024;  // steps in flight per communicator

  /// ProxyOp of a sampled op of ours: a handle naming the (peer, direction) entry; NULL otherwise
  /// (unsampled, PXN op of another process, proxy accounting off), so NCCL emits no steps for it.
  result_t start_proxy_op(void** handle, void* parent, pid_t pid, int peer, bool send) noexcept {
    if (pid != pid_) return abi::success;  // PXN: parent and context belong to another process
    const decoded k = decode(parent);
    if (k.kind != handle_kind::op) return abi::success;
    comm_state* cs = nullptr;
    op_slot* s = find_op(k, cs);
    if (!s || !s->proxy_sampled || !cs->proxy) return abi::success;
    const std::uint32_t e = cs->proxy->entry(peer, send);
    if (e == proxy_table::none) NCCLINSP_UNLIKELY {
      col_->note_dropped(cs->handle, drop_reason::table_full);
      return abi::success;
    }
    *handle = as_handle(encode(handle_kind::group, cs->gen, cs->handle, e, aux_proxy_op | (send ? aux_send : 0)));
    return abi::success;
  }

  result_t start_step(void** handle, void* parent) noexcept {
    const decoded k = decode(parent);
    if (k.kind != handle_kind::group || (k.channel & 3u) != aux_proxy_op) return abi::success;
    comm_state* cs = live_comm(k.comm);
    if (!cs || (cs->gen & 0x3FFFFFu) != k.gen || !cs->proxy || k.slot >= proxy_table::capacity) return abi::success;
    const std::uint32_t idx = cs->step_free.alloc();
    if (idx == detail::slot_bitmap::none) NCCLINSP_UNLIKELY {
      col_->note_dropped(cs->handle, drop_reason::table_full);
      return abi::success;
    }
    proxy_step_slot& st = cs->steps[idx];
    st.entry = k.slot;
    st.wait = 0xFF;
    st.since_ns = 0;
    st.bytes = 0;
    *handle = as_handle(encode(handle_kind::group, st.gen.load(std::memory_order_relaxed), cs->handle, idx, aux_proxy_step));
    return abi::success;
  }

  /// The step slot a decoded ProxyStep handle names, or nullptr (stale, stopped, foreign, garbage).
  proxy_step_slot* find_step(const decoded& k, comm_state*& cs) const noexcept {
    if (k.kind != handle_kind::group || (k.channel & 3u) != aux_proxy_step) return nullptr;
    cs = live_comm(k.comm);
    if (!cs || k.slot >= cs->step_count || !cs->proxy) return nullptr;
    proxy_step_slot& st = cs->steps[k.slot];
    return (st.gen.load(std::memory_order_acquire) & 0x3FFFFFu) == k.gen ? &st : nullptr;
  }

  /// A transition: the time since the previous one goes to the previous state.
  result_t record_step(void* handle, proxy_wait w, const abi::state_args* args) noexcept {
    comm_state* cs = nullptr;
    proxy_step_slot* st = find_step(decode(handle), cs);
    if (!st) return abi::success;
    const std::uint64_t now = precise_ns();
    if (st->wait != 0xFF && now > st->since_ns) cs->proxy->add_wait(st->entry, static_cast<proxy_wait>(st->wait), now - st->since_ns);
    st->wait = static_cast<std::uint8_t>(w);
    st->since_ns = now;
    if (args) st->bytes = args->proxyStep.transSize;
    return abi::success;
  }

  result_t stop_step(const decoded& k) noexcept {
    comm_state* cs = nullptr;
    proxy_step_slot* st = find_step(k, cs);
    if (!st) return abi::success;
    const std::uint64_t now = precise_ns();
    if (st->wait != 0xFF && now > st->since_ns) cs->proxy->add_wait(st->entry, static_cast<proxy_wait>(st->wait), now - st->since_ns);
    cs->proxy->add_step(st->entry, st->bytes);
    // One proxy thread starts and stops a communicator's steps: a plain generation bump.
    st->gen.store(st->gen.load(std::memory_order_relaxed) + 1, std::memory_order_release);
    cs->step_free.release(k.slot);
    return abi::success;
  }

  /// Builds the record from the channel timestamps and hands it to the collector.
  void complete(comm_state& cs, op_slot& s, bool enqueue_only) noexcept {
    op_record r = s.rec;
    const std::uint64_t glo = s.gpu_lo.load(std::memory_order_relaxed), ghi = s.gpu_hi.load(std::memory_order_relaxed);
    if (!enqueue_only && !s.gpu_missing.load(std::memory_order_relaxed) && glo && ghi > glo) {
      r.timing = timing_source::kernel_gpu;
      r.start_ns = glo;
      r.end_ns = ghi;
    } else if (!enqueue_only && s.cpu_lo.load(std::memory_order_relaxed)) {
      r.timing = timing_source::kernel_cpu;  // proxy-observed channel times
      r.start_ns = s.cpu_lo.load(std::memory_order_relaxed);
      r.end_ns = s.cpu_hi.load(std::memory_order_relaxed);
    } else {
      r.timing = timing_source::collective_cpu;  // CE ops, ops without channels: enqueue span only
      r.start_ns = s.cpu_lo.load(std::memory_order_relaxed);
      r.end_ns = precise_ns();
      if (!r.start_ns) r.start_ns = r.end_ns;
    }
    s.enqueued_at.store(0, std::memory_order_relaxed);
    if (r.timing != timing_source::kernel_gpu && opts_.require_kernel_timing && !s.is_ce)
      col_->note_filtered(cs.handle, filter_reason::no_gpu_timing);
    else if (cs.traces) NCCLINSP_UNLIKELY {
      traced_op& tr = cs.traces[&s - cs.slots.get()];
      tr.t.stop_sn = tr.stop_sn.load(std::memory_order_acquire);  // 0: the op's stop came later
      tr.t.stop_cpu_ns = tr.stop_cpu_ns.load(std::memory_order_relaxed);
      col_->record(cs.handle, r, &tr.t);
    } else {
      col_->record(cs.handle, r);
    }
  }

  void drop_ref(comm_state& cs, std::uint32_t idx, op_slot& s) noexcept {
    // refs only decrease after begin_op; reading 1 (acquire, pairs with the other holder's acq_rel
    // decrement) means we hold the last reference: skip the locked RMW (the common case at
    // completion, since Coll stop comes first). begin_op resets refs when the slot is reused.
    if (s.refs.load(std::memory_order_acquire) == 1 || s.refs.fetch_sub(1, std::memory_order_acq_rel) == 1) cs.release(idx);
  }

  std::mutex mu_;
  bool configured_ = false;
  options opts_;
  std::unique_ptr<collector<>> col_;
  std::unique_ptr<change_detector> detector_;  // exporter thread only
  std::unique_ptr<exporter<collector<>>> exporter_;
  std::atomic<abi::logger_t> logger_{nullptr};
  std::unique_ptr<std::atomic<comm_state*>[]> comms_{new std::atomic<comm_state*>[max_plugin_comms]()};
  std::uint32_t comm_gen_ = 0;
  pid_t pid_ = 0;  // ours: ProxyOps with another pid are PXN ops of another process
  std::uint32_t live_comms_ = 0;
  std::atomic<bool> forked_child_{false};
  detail::reader_gate gate_;            // events inside a communicator's state (see finalize)
  std::vector<comm_state*> limbo_;      // finalized while a reader was still inside: freed later
  std::vector<std::unique_ptr<exporter<collector<>>>> lingering_;  // stopped with a timeout, still finishing
};

}  // namespace ncclinsp::plugin
