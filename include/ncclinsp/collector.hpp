#pragma once
/// collector<Traits>: aggregates completed ops into per-thread shards (hot path) and turns them
/// into a snapshot (exporter thread). It ties together the communicator table
/// (collector/comm_table.hpp: registration, retirement, reuse), the per-thread shards of cells
/// (collector/shard.hpp, keyed by collector/cell_key.hpp) and their per-op record rings
/// (collector/record_ring.hpp: growth, the doorbell at the high-water mark, drops when full).
///
/// Hot path (record, note_started, note_filtered, note_dropped): noexcept, no lock, no allocation
/// after a thread's first call (its shard is allocated then), and each thread writes only its own
/// shard's cache lines. Per-communicator completion counters live on their own cache line, written
/// by the thread that completes that communicator's ops (NCCL's proxy/profiler thread).
/// Cold path (add_comm, retire_comm): thread-safe, takes a mutex. A retired communicator is
/// exported with its final values for collector_options::retired_retention, then its slot and its
/// cells are reused (cells lazily, by the thread that owns them).
/// take_snapshot(), take_records(), discard_records(): one consumer thread at a time (the exporter).
/// Several exporters of one collector (the plugin's lingering final export beside the exporter of a
/// re-init) take turns through consumer_mutex().
///
/// Design: take_records hands out batches of 4,096 records, 512 with op_traces (3 KB each, ~2 KB
/// of JSON): a 4,096-record traced batch is 12 MiB of traces and 8 MiB of text, and first touching
/// it stalls the writer ~400 ms on a VM.

#include <algorithm>
#include <array>
#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <memory>
#include <mutex>
#include <new>
#include <unordered_map>
#include <vector>

#include "ncclinsp/bandwidth.hpp"
#include "ncclinsp/bucketing.hpp"
#include "ncclinsp/collector/cell_key.hpp"
#include "ncclinsp/collector/comm_table.hpp"
#include "ncclinsp/collector/record_ring.hpp"
#include "ncclinsp/collector/shard.hpp"
#include "ncclinsp/detail/clock.hpp"
#include "ncclinsp/detail/doorbell.hpp"
#include "ncclinsp/detail/platform.hpp"
#include "ncclinsp/detail/thread_slot.hpp"
#include "ncclinsp/histogram.hpp"
#include "ncclinsp/model.hpp"
#include "ncclinsp/proxy_stats.hpp"
#include "ncclinsp/snapshot.hpp"
#include "ncclinsp/traits.hpp"

namespace ncclinsp {

/// Runtime settings of a collector.
struct collector_options {
  /// Keep per-op records for JSON-lines output; capacity per thread shard (0 = off).
  std::uint32_t record_ring_capacity = 0;
  /// The ring may grow up to this many records per thread (0 or <= record_ring_capacity: fixed).
  std::uint32_t record_ring_max = 0;
  /// Keep the callback detail (op_trace) that record() is given with each per-op record (verbose
  /// JSON, per-channel trace tracks). Needs record_ring_capacity; costs a few KB per ring entry.
  bool record_traces = false;
  /// Turn v7 user tags into a bounded label (Traits::max_user_tags distinct values).
  bool user_tag_label = false;
  process_identity identity{};
  /// How long a retired (finalized) communicator stays in snapshots with its final values; 0 =
  /// exported once more, then dropped. Keep it above the scrape interval of whoever reads the
  /// exports, or the last values of a short-lived communicator may never be scraped.
  std::chrono::milliseconds retired_retention{std::chrono::seconds(120)};
  /// Give every communicator a proxy_table (about 6 KB) for network-step accounting, exported in
  /// snapshot::proxy (the plugin with NCCLINSP_PROXY=1).
  bool proxy_accounting = false;
};

template <class Traits = default_traits>
class collector {
 public:
  /// Returns the CPU steady time (ns) at which the oldest in-flight op of communicator `h` started,
  /// or 0 when none. Called on the exporter thread while the communicator is live.
  using inflight_probe = detail::inflight_probe;

  explicit collector(collector_options opts = {}) : opts_(std::move(opts)) {}
  ~collector() {
    for (auto& s : shards_) delete s.load(std::memory_order_acquire);
  }
  /// Records a recording thread's ring holds at most (record_ring_max, or record_ring_capacity when
  /// it does not grow), rounded up to whole chunks; 0 without records.
  std::uint64_t record_ring_limit() const noexcept {
    const detail::ring_geometry g = geometry();
    return std::uint64_t{g.chunk} * g.slots;
  }
  /// Bytes one ring entry takes (with its op_trace when `traced`): sizes record_ring_max from a
  /// memory budget.
  static constexpr std::size_t bytes_per_record(bool traced) noexcept {
    return sizeof(detail::record_slot) + (traced ? sizeof(op_trace) : 0);
  }
  /// Records per take_records batch: 4,096, or 512 with op_traces (Design, above).
  std::uint64_t record_batch() const noexcept { return opts_.record_traces ? 512 : 4096; }
  /// Bytes of ring storage allocated now (all threads; exporter thread or tests).
  std::uint64_t record_ring_bytes() const noexcept {
    std::uint64_t n = 0;
    for (auto& sp : shards_)
      if (const shard* s = sp.load(std::memory_order_acquire); s && s->ring) n += s->ring.bytes();
    return n;
  }
  collector(const collector&) = delete;
  collector& operator=(const collector&) = delete;

  /// Registers a communicator (cold). Returns no_index when the table is full (counted).
  comm_handle add_comm(comm_desc desc, inflight_probe probe = {}) noexcept {
    return comms_.add(std::move(desc), std::move(probe), opts_.proxy_accounting);
  }

  /// Marks a communicator finalized (cold): it is exported, flagged retired, for the retention
  /// period, then no more. `abandoned` = ops still in flight that will never complete.
  void retire_comm(comm_handle h, std::uint64_t abandoned) noexcept { comms_.retire(h, abandoned); }

  /// The proxy accounting table of `h` (collector_options::proxy_accounting), or nullptr. Cold: call
  /// after add_comm; the table lives as long as the collector.
  proxy_table* proxy_of(comm_handle h) noexcept { return h < Traits::max_comms ? comms_[h].proxy.get() : nullptr; }

  /// Hot: an op of `h` was handed to the GPU (in-flight accounting).
  void note_started(comm_handle h) noexcept { comms_.note_started(h); }
  /// Hot: an op was skipped on purpose. no_gpu_timing ops had started, so they complete here.
  void note_filtered(comm_handle h, filter_reason r) noexcept { comms_.note_filtered(h, r); }
  /// Hot (rare): an event was lost.
  NCCLINSP_COLD void note_dropped(comm_handle h, drop_reason r) noexcept { comms_.note_dropped(h, r); }

  /// Hot: one completed op of communicator `h`; `trace`, when given and record_traces is on, is
  /// kept with its per-op record.
  void record(comm_handle h, const op_record& op, const op_trace* trace = nullptr) noexcept {
    if (h >= Traits::max_comms) NCCLINSP_UNLIKELY {
      comms_.count_full();
      return;
    }
    detail::comm_slot& c = comms_[h];
    const std::uint32_t slot = detail::thread_slot();
    const bool exclusive = slot < Traits::max_shards - 1;
    shard* s = get_shard(exclusive ? slot : Traits::max_shards - 1);
    c.completed.fetch_add(1, std::memory_order_relaxed);
    c.last_seq_plus1[static_cast<std::size_t>(op.fn)].store(op.seq + 1, std::memory_order_relaxed);
    if (!s) NCCLINSP_UNLIKELY {
      c.dropped[static_cast<std::size_t>(drop_reason::table_full)].fetch_add(1, std::memory_order_relaxed);
      return;
    }
    const std::uint64_t dur = op.duration_ns();
    const bool valid = op.bytes_valid && op.bytes > 0 && dur > 0 && op.fn != func::unknown;
    const std::uint32_t tag = opts_.user_tag_label ? tags_.index(op.user_tag) : 0;
    const std::uint32_t gen = detail::gen_of(c.state_gen.load(std::memory_order_relaxed));
    const std::uint64_t key = cell_key::make(h, gen, op, valid ? inspector_bucketer::index(op.bytes) : 0, tag);
    detail::atomic_cell* cl = s->find(
        key, exclusive, [this](std::uint64_t k) { return comms_.stale(cell_key::comm.get(k), cell_key::gen.get(k)); });
    if (!cl) NCCLINSP_UNLIKELY {
      detail::bump(s->table_full, 1, exclusive);
      c.dropped[static_cast<std::size_t>(drop_reason::table_full)].fetch_add(1, std::memory_order_relaxed);
    } else {
      detail::add_op(*cl, op, dur, valid, c.desc.nranks, exclusive);
    }
    if (s->ring) {
      // The shared shard has several producers; per-op records there are dropped and counted.
      if (!exclusive || !s->ring.push(h, op, trace, bell_)) NCCLINSP_UNLIKELY
        c.dropped[static_cast<std::size_t>(drop_reason::record_ring_full)].fetch_add(1, std::memory_order_relaxed);
    }
  }

  /// Rung when a thread's record ring reaches its high-water mark or a multiple of it (the exporter sleeps on it).
  detail::doorbell& doorbell() noexcept { return bell_; }

  /// Held by an exporter around each take_snapshot / take_records / discard_records (and its
  /// prepare step), never around sink writes: two exporters of one collector consume in turn.
  std::mutex& consumer_mutex() noexcept { return consumer_mu_; }

  /// Whether any ring holds records (cheap; exporter thread).
  bool records_pending() const noexcept {
    return any_ring([](const detail::record_ring& r) { return r.pending(); });
  }
  /// Whether any ring holds records up to its high-water mark or more (cheap; exporter thread).
  bool records_above_mark() const noexcept {
    return any_ring([](const detail::record_ring& r) { return r.above_mark(); });
  }

  /// Cold: a records-only snapshot (snapshot::records_only) in `snap`, whose vectors are reused
  /// (cleared, capacity kept): the per-op records drained from the rings (at most `max_records`
  /// per ring, so the exporter's buffers stay bounded), with `identity`, `time_unix_ns` and
  /// `comms` (descriptions and the retired flag only; counts are zero) for them to refer to. No
  /// cells, no window. Same thread as take_snapshot().
  void take_records(snapshot& snap, std::uint64_t max_records = UINT64_MAX) {
    snap.records_only = true;
    snap.final = false;
    snap.time_unix_ns = unix_ns();
    snap.identity = opts_.identity;
    snap.comms.clear();
    snap.cells.clear();
    snap.records.clear();
    snap.traces.clear();
    comm_index_.assign(Traits::max_comms, no_index);
    comms_.list(snap, comm_index_);
    for (auto& sp : shards_)
      if (shard* s = sp.load(std::memory_order_acquire); s && s->ring)
        drain_records(*s, snap, comm_index_, max_records);
  }
  /// Exporter thread, when the final export runs out of time: empties the record rings, counting
  /// each record still queued as dropped (`why`) on its communicator, so the final statistics that
  /// follow account for every op. Returns how many were dropped.
  std::uint64_t discard_records(drop_reason why) noexcept {
    std::uint64_t n = 0;
    for (auto& sp : shards_) {
      shard* s = sp.load(std::memory_order_acquire);
      if (!s || !s->ring) continue;
      s->ring.drain(UINT64_MAX, [&](const detail::record_slot& r, const op_trace*) {
        if (r.comm < Traits::max_comms) {
          comms_[r.comm].dropped[static_cast<std::size_t>(why)].fetch_add(1, std::memory_order_relaxed);
          ++n;
        }
        return true;
      });
    }
    return n;
  }
  snapshot take_records() {
    snapshot snap;
    take_records(snap);
    return snap;
  }

  /// Cold: builds a snapshot. Call from one thread at a time (the exporter).
  snapshot take_snapshot(bool final = false) {
    snapshot snap;
    std::vector<std::uint32_t> gone_now;
    const auto retention_ns = static_cast<std::uint64_t>(std::chrono::nanoseconds(opts_.retired_retention).count());
    snap.final = final;
    snap.time_unix_ns = unix_ns();
    const std::uint64_t now_steady = steady_ns();
    snap.identity = opts_.identity;
    snap.comm_table_full = comms_.full();

    // Communicators: a retired one is exported (its final values) until its retention ends.
    std::vector<std::uint32_t> comm_index(Traits::max_comms, no_index);
    std::vector<std::uint8_t> comm_gen(Traits::max_comms, 0);
    std::vector<bool> keep_window(Traits::max_comms, false);  // window state still needed next time
    comms_.list_counts(snap, now_steady, retention_ns, comm_index, comm_gen, keep_window, gone_now);

    // Cells: merge the shards by key, then diff against the previous snapshot for the window.
    std::unordered_map<std::uint64_t, cell_stats> totals;
    for (auto& sp : shards_) {
      shard* s = sp.load(std::memory_order_acquire);
      if (!s) continue;
      s->sum_into(totals);
      if (s->ring) drain_records(*s, snap, comm_index);
    }
    for (auto& [key, t] : totals) {
      const std::uint32_t h = cell_key::comm.get(key);
      if (h >= Traits::max_comms || comm_index[h] == no_index || cell_key::gen.get(key) != comm_gen[h]) continue;
      cell_snapshot cs;
      cell_key::decode(key, cs);
      cs.comm = comm_index[h];
      cs.total = t;
      cell_stats& prev = prev_[key];
      cs.window = diff(t, prev);
      prev = t;
      snap.cells.push_back(cs);
    }
    // Forget the window state of communicators exported for the last time (or whose slot was
    // taken over), and free the slots of the former for reuse.
    std::erase_if(prev_, [&](const auto& kv) {
      const std::uint32_t h = cell_key::comm.get(kv.first);
      return h >= Traits::max_comms || !keep_window[h] || cell_key::gen.get(kv.first) != comm_gen[h];
    });
    comms_.release(gone_now);
    tags_.list(snap.user_tags);
    return snap;
  }

  const collector_options& options() const noexcept { return opts_; }

  /// CPU steady clock in ns (the clock inflight probes must use).
  static std::uint64_t steady_ns() noexcept { return detail::steady_ns(); }

 private:
  using shard = detail::shard<Traits>;
  using cell_key = detail::cell_key;
  static std::uint64_t unix_ns() noexcept { return detail::unix_ns(); }

  static_assert(Traits::max_comms <= (1u << 12), "comm handles use 12 key bits");
  static_assert(detail::comm_gen_mask == cell_key::gen.mask(), "the slot generation is the key's generation field");
  static_assert(Traits::max_shards >= 2);

  template <class Pred>
  bool any_ring(Pred pred) const noexcept {
    for (auto& sp : shards_) {
      const shard* s = sp.load(std::memory_order_acquire);
      if (s && s->ring && pred(s->ring)) return true;
    }
    return false;
  }
  detail::ring_geometry geometry() const noexcept {
    return detail::ring_geometry::of(opts_.record_ring_capacity, opts_.record_ring_max, opts_.record_traces);
  }

  shard* get_shard(std::uint32_t idx) noexcept {
    shard* s = shards_[idx].load(std::memory_order_acquire);
    if (s) NCCLINSP_LIKELY
      return s;
    return make_shard(idx);
  }
  NCCLINSP_COLD shard* make_shard(std::uint32_t idx) noexcept {
    shard* fresh = nullptr;
    try {
      fresh = new shard;
      if (opts_.record_ring_capacity) fresh->ring.init(geometry(), opts_.record_traces);
    } catch (...) {
      delete fresh;
      return nullptr;
    }
    shard* expected = nullptr;
    if (shards_[idx].compare_exchange_strong(expected, fresh, std::memory_order_acq_rel)) return fresh;
    delete fresh;  // another thread of the overflow shard won
    return expected;
  }

  void drain_records(shard& s, snapshot& snap, const std::vector<std::uint32_t>& comm_index,
                     std::uint64_t max_records = UINT64_MAX) {
    s.ring.drain(max_records, [&](const detail::record_slot& r, const op_trace* trace) {
      if (r.comm >= Traits::max_comms) return true;
      if (comm_index[r.comm] == no_index) {
        // Its communicator was added after this snapshot listed them (add_comm racing the
        // exporter): leave it, and what follows, for the next drain, which lists it; skipping it
        // would lose those records uncounted (test_reliability "JSON mode: N ops in ...").
        return !comms_.listed(r.comm);
      }
      std::int32_t ti = -1;
      if (trace) {
        ti = static_cast<std::int32_t>(snap.traces.size());
        copy_trace(snap.traces.emplace_back(), *trace);
      }
      snap.records.push_back({comm_index[r.comm], r.op, ti});
      return true;
    });
    (void)s.ring.provision();  // out of memory: the window stays as it is
  }

  static cell_stats diff(const cell_stats& a, const cell_stats& b) noexcept {
    cell_stats d = a;
    for_each_stat(d, b, [](auto& x, const auto& y) { x -= y; });
    return d;
  }

  collector_options opts_;
  detail::comm_table<Traits::max_comms> comms_;
  std::array<std::atomic<shard*>, Traits::max_shards> shards_{};
  detail::tag_table<Traits::max_user_tags> tags_;
  std::unordered_map<std::uint64_t, cell_stats> prev_;  // exporter only
  std::vector<std::uint32_t> comm_index_;               // exporter only (take_records)
  detail::doorbell bell_;
  std::mutex consumer_mu_;  // see consumer_mutex()
};

}  // namespace ncclinsp
