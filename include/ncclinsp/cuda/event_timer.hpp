#pragma once
/// CUDA-event timing for embedded mode: measures each NCCL call on its stream with a pair of CUDA
/// events and hands the measured op to an inspector once the GPU has passed the stop event.
///
///   start(comm, stream)  caller thread, before the NCCL call: cudaStreamIsCapturing, then
///                        cudaEventRecord(start, stream). Hot: no lock, no allocation.
///   stop(token, stream, op)  caller thread, after the NCCL call returned: cudaEventRecord(stop,
///                        stream) and publish. Hot: no lock, no allocation.
///   poll()               the resolver: the inspector's exporter thread calls it before every
///                        snapshot (registered at construction); cudaEventQuery(stop) and, once
///                        ready, cudaEventElapsedTime(start, stop) -> inspector::end().
///
/// It never synchronises a stream, an event or the device, and never blocks the caller: a full
/// event pool means the op is not timed (counted: pool_exhausted and
/// ncclinsp_dropped_events_total{reason="op_pool_full"}). Ops enqueued while the stream is being
/// captured into a CUDA graph are not timed either (an event recorded during capture becomes a
/// graph node, and the op runs later, at each replay): they are counted (captured) and appear as
/// ncclinsp_filtered_ops_total{reason="no_gpu_timing"}.
///
/// What the span measures: from the moment the stream reaches the start event to the moment it
/// reaches the stop event, i.e. the NCCL kernel(s) including waiting for peers, plus any gap while
/// the stream sat idle waiting for the host to launch (small unless the host is slow).
/// CUDA event resolution is about 0.5 us.
///
/// Events belong to the device current when the timer is constructed: use one timer per device,
/// and streams of that device. The timer is generic over its CUDA API (`Api`, see
/// `event_api`) so it is unit-tested with a fake on machines without a GPU; `cuda_runtime_api` and
/// `event_timer` exist where <cuda_runtime_api.h> is available (NCCLINSP_HAS_CUDA_RUNTIME, which
/// can be predefined to 0 to turn it off).

#include <algorithm>
#include <atomic>
#include <concepts>
#include <cstdint>
#include <memory>
#include <mutex>
#include <utility>
#include <vector>

#include "ncclinsp/collector.hpp"
#include "ncclinsp/detail/platform.hpp"
#include "ncclinsp/detail/slot_bitmap.hpp"
#include "ncclinsp/model.hpp"
#include "ncclinsp/no_index.hpp"

#ifndef NCCLINSP_HAS_CUDA_RUNTIME
#if defined(__has_include)
#if __has_include(<cuda_runtime_api.h>)
#define NCCLINSP_HAS_CUDA_RUNTIME 1
#endif
#endif
#endif
#ifndef NCCLINSP_HAS_CUDA_RUNTIME
#define NCCLINSP_HAS_CUDA_RUNTIME 0
#endif

#if NCCLINSP_HAS_CUDA_RUNTIME
#include <cuda_runtime_api.h>
#endif

namespace ncclinsp::cuda {

enum class event_status { ready, not_ready, error };
enum class capture_status { none, active, error };

/// The CUDA calls the timer makes. All must be non-blocking.
template <class A>
concept event_api = requires(A& a, typename A::event_t& out, typename A::event_t e, typename A::stream_t s, float& ms) {
  { a.create(out) }
  noexcept->std::same_as<bool>;
  { a.destroy(e) }
  noexcept;
  { a.record(e, s) }
  noexcept->std::same_as<bool>;
  { a.query(e) }
  noexcept->std::same_as<event_status>;
  { a.elapsed_ms(ms, e, e) }
  noexcept->std::same_as<bool>;
  { a.capturing(s) }
  noexcept->std::same_as<capture_status>;
};

struct event_timer_options {
  /// Event pairs: ops that may be pending (enqueued, not yet resolved) at once. With the default
  /// 1 s export interval, size it for one second of NCCL calls on this device.
  std::uint32_t pool_size = 1024;
  /// Register poll() with the inspector's exporter (runs before each snapshot).
  bool register_poller = true;
};

/// Counters of a timer (exporter thread and tests). All monotonic.
struct event_timer_stats {
  std::uint64_t timed = 0;           ///< ops measured and recorded
  std::uint64_t captured = 0;        ///< skipped: the stream was capturing a CUDA graph
  std::uint64_t pool_exhausted = 0;  ///< skipped: no free event pair
  std::uint64_t cuda_errors = 0;     ///< a CUDA call failed; that op was not timed
  std::uint64_t pending = 0;         ///< currently waiting for the GPU (a gauge)
};

template <class Inspector, event_api Api>
class basic_event_timer {
 public:
  using event_t = typename Api::event_t;
  using stream_t = typename Api::stream_t;
  using inflight = typename Inspector::inflight;
  /// Handed from start() to stop()/abort() on the caller's thread. Plain data.
  struct token {
    std::uint32_t slot = no_index;
    comm_handle comm = no_index;
  };

  /// Creates the event pool on the current device and registers the resolver. Cold; events that
  /// cannot be created shrink the pool (reported through cuda_errors).
  explicit basic_event_timer(Inspector& insp, Api api = {}, event_timer_options o = {})
      : insp_(insp), api_(std::move(api)), size_(o.pool_size ? o.pool_size : 1), slots_(new slot[size_]), free_(size_) {
    ready_.reserve(size_);
    for (std::uint32_t i = 0; i < size_; ++i) {
      slot& s = slots_[i];
      s.ok = api_.create(s.start) && (api_.create(s.stop) || (api_.destroy(s.start), false));
      if (!s.ok) {
        cuda_errors_.fetch_add(1, std::memory_order_relaxed);
        free_.retire(i);  // never handed out
      }
    }
    if (o.register_poller) poller_ = insp_.add_poller([this] { poll(); });
  }

  /// Unregisters the resolver, resolves what the GPU has finished, cancels what it has not (they
  /// leave the in-flight count as filtered), destroys the events (CUDA frees a pending event
  /// when it completes). Synchronise your streams first if every op must be counted.
  ~basic_event_timer() {
    if (poller_) insp_.remove_poller(poller_);
    poll();
    for (std::uint32_t i = 0; i < size_; ++i) {
      slot& s = slots_[i];
      const int st = s.state.load(std::memory_order_acquire);
      if (st != st_free) insp_.cancel(s.inf);
      if (s.ok) {
        api_.destroy(s.start);
        api_.destroy(s.stop);
      }
    }
  }
  basic_event_timer(const basic_event_timer&) = delete;
  basic_event_timer& operator=(const basic_event_timer&) = delete;

  /// Before the NCCL call. `f`/`bytes` let the inspector apply its filters and in-flight
  /// accounting now. Never blocks; returns an untimed token when capturing or out of events.
  token start(comm_handle comm, stream_t stream, func f = func::unknown, std::uint64_t bytes = 0) noexcept {
    token t;
    t.comm = comm;
    if (!insp_.enabled()) return t;
    const capture_status cap = api_.capturing(stream);
    if (cap != capture_status::none) NCCLINSP_UNLIKELY {
      if (cap == capture_status::active) {
        captured_.fetch_add(1, std::memory_order_relaxed);
        insp_.note_unmeasured(comm);
      } else {
        cuda_errors_.fetch_add(1, std::memory_order_relaxed);
      }
      return t;
    }
    const std::uint32_t idx = alloc();
    if (idx == no_index) NCCLINSP_UNLIKELY {
      pool_exhausted_.fetch_add(1, std::memory_order_relaxed);
      insp_.note_dropped(comm, drop_reason::op_pool_full);
      return t;
    }
    slot& s = slots_[idx];
    if (!api_.record(s.start, stream)) NCCLINSP_UNLIKELY {
      cuda_errors_.fetch_add(1, std::memory_order_relaxed);
      free_slot(idx);
      return t;
    }
    s.inf = insp_.begin(comm, f, bytes);
    s.cpu_start_ns = collector<>::steady_ns();
    s.state.store(st_armed, std::memory_order_relaxed);
    t.slot = idx;
    return t;
  }

  /// After the NCCL call returned ncclSuccess: records the stop event on the same stream and
  /// queues the op for resolution. `op` carries func/count/dtype/algo/seq...; its times are set
  /// from the events. Untimed tokens are ignored.
  void stop(token& t, stream_t stream, const op_record& op) noexcept {
    if (t.slot == no_index) return;
    slot& s = slots_[t.slot];
    t.slot = no_index;
    if (!api_.record(s.stop, stream)) NCCLINSP_UNLIKELY {
      cuda_errors_.fetch_add(1, std::memory_order_relaxed);
      insp_.cancel(s.inf);
      free_slot(static_cast<std::uint32_t>(&s - slots_.get()));
      return;
    }
    s.op = op;
    s.comm = t.comm;
    s.ticket = next_ticket_.fetch_add(1, std::memory_order_relaxed);
    s.state.store(st_pending, std::memory_order_release);  // publish op/comm/ticket to the resolver
  }

  /// The NCCL call failed: forget the op.
  void abort(token& t) noexcept {
    if (t.slot == no_index) return;
    slot& s = slots_[t.slot];
    insp_.cancel(s.inf);
    free_slot(t.slot);
    t.slot = no_index;
  }

  /// Resolves every op whose stop event the GPU has passed, in enqueue order, into the inspector.
  /// Non-blocking (cudaEventQuery only); concurrent calls return 0 at once. Returns ops resolved.
  std::size_t poll() noexcept {
    std::unique_lock lk(poll_mu_, std::try_to_lock);
    if (!lk.owns_lock()) return 0;
    ready_.clear();
    for (std::uint32_t i = 0; i < size_; ++i) {
      slot& s = slots_[i];
      if (s.state.load(std::memory_order_acquire) != st_pending) continue;
      const event_status st = api_.query(s.stop);
      if (st == event_status::not_ready) continue;
      float ms = 0;
      if (st == event_status::error || !api_.elapsed_ms(ms, s.start, s.stop) || !(ms >= 0)) {
        cuda_errors_.fetch_add(1, std::memory_order_relaxed);
        insp_.cancel(s.inf);
        free_slot(i);
        continue;
      }
      ready_.push_back({s.ticket, i, ms});  // reserved for every slot: never allocates
    }
    std::sort(ready_.begin(), ready_.end(), [](const ready& a, const ready& b) { return a.ticket < b.ticket; });
    for (const ready& r : ready_) {
      slot& s = slots_[r.idx];
      op_record op = s.op;
      op.start_ns = s.cpu_start_ns;
      op.end_ns = s.cpu_start_ns + static_cast<std::uint64_t>(static_cast<double>(r.ms) * 1e6 + 0.5);
      op.timing = timing_source::kernel_gpu;
      insp_.end(s.inf, op);
      timed_.fetch_add(1, std::memory_order_relaxed);
      free_slot(r.idx);
    }
    return ready_.size();
  }

  event_timer_stats stats() const noexcept {
    event_timer_stats st;
    st.timed = timed_.load(std::memory_order_relaxed);
    st.captured = captured_.load(std::memory_order_relaxed);
    st.pool_exhausted = pool_exhausted_.load(std::memory_order_relaxed);
    st.cuda_errors = cuda_errors_.load(std::memory_order_relaxed);
    for (std::uint32_t i = 0; i < size_; ++i)
      st.pending += slots_[i].state.load(std::memory_order_relaxed) == st_pending;
    return st;
  }

  Api& api() noexcept { return api_; }

 private:
  static constexpr int st_free = 0, st_armed = 1, st_pending = 2;

  struct alignas(detail::cache_line) slot {
    std::atomic<int> state{st_free};
    bool ok = false;
    event_t start{}, stop{};
    std::uint64_t cpu_start_ns = 0, ticket = 0;
    comm_handle comm = no_index;
    inflight inf{};
    op_record op{};
  };
  struct ready {
    std::uint64_t ticket;
    std::uint32_t idx;
    float ms;
  };

  // acquire inside alloc(): the resolver's writes to the slot (free_slot) happen before our reuse
  std::uint32_t alloc() noexcept { return free_.alloc(); }
  void free_slot(std::uint32_t idx) noexcept {
    slots_[idx].state.store(st_free, std::memory_order_relaxed);
    free_.release(idx);
  }

  Inspector& insp_;
  Api api_;
  std::uint32_t size_;
  std::unique_ptr<slot[]> slots_;
  detail::slot_bitmap free_;  // which slots are taken
  std::atomic<std::uint64_t> next_ticket_{0};
  alignas(detail::cache_line) std::atomic<std::uint64_t> timed_{0}, captured_{0}, pool_exhausted_{0}, cuda_errors_{0};
  std::mutex poll_mu_;
  std::vector<ready> ready_;  // resolver only; reserved once
  std::uint64_t poller_ = 0;
};

#if NCCLINSP_HAS_CUDA_RUNTIME
/// The real CUDA runtime. cudaEventQuery's cudaErrorNotReady also lands in the calling thread's
/// last-error slot; the resolver clears it (it runs on the exporter thread, never the caller's).
struct cuda_runtime_api {
  using event_t = cudaEvent_t;
  using stream_t = cudaStream_t;
  bool create(event_t& e) noexcept { return cudaEventCreateWithFlags(&e, cudaEventDefault) == cudaSuccess; }
  void destroy(event_t e) noexcept { (void)cudaEventDestroy(e); }
  bool record(event_t e, stream_t s) noexcept { return cudaEventRecord(e, s) == cudaSuccess; }
  event_status query(event_t e) noexcept {
    const cudaError_t r = cudaEventQuery(e);
    if (r == cudaSuccess) return event_status::ready;
    (void)cudaGetLastError();
    return r == cudaErrorNotReady ? event_status::not_ready : event_status::error;
  }
  bool elapsed_ms(float& ms, event_t a, event_t b) noexcept { return cudaEventElapsedTime(&ms, a, b) == cudaSuccess; }
  capture_status capturing(stream_t s) noexcept {
    cudaStreamCaptureStatus st = cudaStreamCaptureStatusNone;
    if (cudaStreamIsCapturing(s, &st) != cudaSuccess) return capture_status::error;
    return st == cudaStreamCaptureStatusNone ? capture_status::none : capture_status::active;
  }
};

/// The timer on the real CUDA runtime.
template <class Inspector>
using event_timer = basic_event_timer<Inspector, cuda_runtime_api>;
#endif

}  // namespace ncclinsp::cuda
