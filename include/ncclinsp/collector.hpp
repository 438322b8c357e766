#pragma once
/// collector<Traits>: aggregates completed ops into per-thread shards (hot path) and turns them
/// into a snapshot (exporter thread).
///
/// Hot path (record, note_started, note_filtered, note_dropped): noexcept, no lock, no allocation
/// after a thread's first call (its shard is allocated then), and each thread writes only its own
/// shard's cache lines. Per-communicator completion counters live on their own cache line, written
/// by the thread that completes that communicator's ops (NCCL's proxy/profiler thread).
/// Cold path (add_comm, retire_comm): thread-safe, takes a mutex. A retired communicator keeps
/// being exported with its final values for collector_options::retired_retention (so a scraper
/// polling less often than the exporter writes still sees them), then its slot and its cells are
/// reused (cells lazily, by the thread that owns them). When the table is full, the oldest retired
/// communicator gives up its slot early, so creating and destroying communicators keeps memory
/// bounded.
/// take_snapshot(), take_records(): one consumer thread at a time (the exporter).
/// Per-op records (record_ring_capacity > 0) go to a ring per thread; when a ring reaches a
/// quarter of its capacity (its high-water mark) record() rings doorbell() once, so the exporter
/// drains it (take_records) long before it is full instead of waiting for the next export. The
/// crossing is the only extra work: one locked increment, plus a futex wake only if the exporter
/// sleeps. Records that find their ring full are dropped and counted (record_ring_full).
/// With record_ring_max above record_ring_capacity the ring grows: its storage is chunks of up to
/// 1,024 records (256 with traces) that only the exporter allocates and frees, in take_records and
/// take_snapshot. The exporter keeps the ring's writable window at about one second of the rate it
/// measures (at least record_ring_capacity, at most record_ring_max records) ahead of what it has
/// drained, so a writer that is late (descheduled, a slow disk) costs memory, not records; chunks
/// outside the window are freed. The recording thread never allocates: it writes inside the window
/// the exporter published or drops and counts, and rings the doorbell once more when the window
/// has one chunk left.

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <new>
#include <type_traits>
#include <unordered_map>
#include <vector>

#include "ncclinsp/bandwidth.hpp"
#include "ncclinsp/bucketing.hpp"
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

/// Handle of a registered communicator; cheap to copy.
using comm_handle = std::uint32_t;
inline constexpr comm_handle invalid_comm = ~comm_handle{0};

namespace detail {
/// One field of a collector cell key: its lowest bit and its width.
struct key_field {
  unsigned shift, bits;
  constexpr std::uint64_t mask() const noexcept { return (std::uint64_t{1} << bits) - 1; }
  constexpr std::uint64_t put(std::uint64_t v) const noexcept { return (v & mask()) << shift; }
  constexpr std::uint32_t get(std::uint64_t k) const noexcept {
    return static_cast<std::uint32_t>((k >> shift) & mask());
  }
};
}  // namespace detail

template <class Traits = default_traits>
class collector {
 public:
  /// Returns the CPU steady time (ns) at which the oldest in-flight op of communicator `h` started,
  /// or 0 when none. Called on the exporter thread while the communicator is live.
  using inflight_probe = std::function<std::uint64_t(comm_handle h)>;

  explicit collector(collector_options opts = {}) : opts_(std::move(opts)), comms_(new comm_slot[Traits::max_comms]) {
    free_comms_.reserve(Traits::max_comms);
  }
  ~collector() {
    for (auto& s : shards_) delete s.load(std::memory_order_acquire);
  }
  /// Records a recording thread's ring holds at most (record_ring_max, or record_ring_capacity when
  /// it does not grow), rounded up to whole chunks; 0 without records.
  std::uint64_t record_ring_limit() const noexcept {
    const ring_geometry g = geometry();
    return std::uint64_t{g.chunk} * g.slots;
  }
  /// Bytes one ring entry takes (with its op_trace when `traced`): sizes record_ring_max from a
  /// memory budget.
  static constexpr std::size_t bytes_per_record(bool traced) noexcept {
    return sizeof(record_slot) + (traced ? sizeof(op_trace) : 0);
  }
  /// Records per take_records batch: 4,096, or 512 with op_traces (3 KB each, ~2 KB of JSON): a
  /// 4,096-record traced batch was 12 MiB of traces and 8 MiB of text, and first touching it
  /// stalled the writer ~400 ms on a VM.
  std::uint64_t record_batch() const noexcept { return opts_.record_traces ? 512 : 4096; }
  /// Bytes of ring storage allocated now (all threads; exporter thread or tests).
  std::uint64_t record_ring_bytes() const noexcept {
    std::uint64_t n = 0;
    for (auto& sp : shards_)
      if (const shard* s = sp.load(std::memory_order_acquire); s && s->ring)
        n += std::uint64_t{s->allocated} * chunk_bytes(s->chunk);
    return n;
  }
  collector(const collector&) = delete;
  collector& operator=(const collector&) = delete;

  /// Registers a communicator (cold). Returns invalid_comm when the table is full (counted).
  comm_handle add_comm(comm_desc desc, inflight_probe probe = {}) noexcept {
    std::lock_guard lk(mu_);
    comm_handle h = invalid_comm;
    if (!free_comms_.empty()) {  // oldest freed first: stale cells of a slot get time to be reclaimed
      h = free_comms_.front();
      free_comms_.erase(free_comms_.begin());
    } else if (n_comms_ < Traits::max_comms) {
      h = n_comms_++;
    } else if ((h = oldest_retired()) != invalid_comm) {
      // Table full: the longest-retired communicator stops being exported early.
    } else {
      comm_table_full_.fetch_add(1, std::memory_order_relaxed);
      return invalid_comm;
    }
    comm_slot& c = comms_[h];
    try {
      c.desc = std::move(desc);
      c.probe = std::move(probe);
    } catch (...) {
      free_comms_.push_back(h);  // capacity reserved in the constructor: never reallocates
      comm_table_full_.fetch_add(1, std::memory_order_relaxed);
      return invalid_comm;
    }
    c.reset_counters();
    if (opts_.proxy_accounting) {
      if (c.proxy)
        c.proxy->reset();
      else
        c.proxy.reset(new (std::nothrow) proxy_table);  // without memory: no proxy accounting for it
    }
    const std::uint32_t gen = gen_of(c.state_gen.load(std::memory_order_relaxed)) + 1;
    c.state_gen.store(comm_live | (gen & comm_gen_mask) << state_bits, std::memory_order_release);
    return h;
  }

  /// Marks a communicator finalized (cold): it is exported, flagged retired, for the retention
  /// period, then no more. `abandoned` = ops still in flight that will never complete.
  void retire_comm(comm_handle h, std::uint64_t abandoned) noexcept {
    if (h >= Traits::max_comms) return;
    std::lock_guard lk(mu_);
    comm_slot& c = comms_[h];
    c.abandoned.fetch_add(abandoned, std::memory_order_relaxed);
    c.probe = nullptr;
    if (state_of(c.state_gen.load(std::memory_order_relaxed)) == comm_live) {
      c.retired_steady = steady_ns();
      c.state_gen.store(with_state(c.state_gen.load(std::memory_order_relaxed), comm_retired),
                        std::memory_order_release);
    }
  }

  /// The proxy accounting table of `h` (collector_options::proxy_accounting), or nullptr. Cold: call
  /// after add_comm; the table lives as long as the collector.
  proxy_table* proxy_of(comm_handle h) noexcept { return h < Traits::max_comms ? comms_[h].proxy.get() : nullptr; }

  /// Hot: an op of `h` was handed to the GPU (in-flight accounting).
  void note_started(comm_handle h) noexcept {
    if (h >= Traits::max_comms) NCCLINSP_UNLIKELY
      return;
    comms_[h].started.fetch_add(1, std::memory_order_relaxed);
  }

  /// Hot: an op was skipped on purpose. no_gpu_timing ops had started, so they complete here.
  void note_filtered(comm_handle h, filter_reason r) noexcept {
    if (h >= Traits::max_comms) NCCLINSP_UNLIKELY
      return;
    comm_slot& c = comms_[h];
    if (r == filter_reason::min_size)
      c.filtered_min_size.fetch_add(1, std::memory_order_relaxed);
    else {
      c.filtered_no_gpu.fetch_add(1, std::memory_order_relaxed);
      c.completed.fetch_add(1, std::memory_order_relaxed);
    }
  }

  /// Hot (rare): an event was lost.
  NCCLINSP_COLD void note_dropped(comm_handle h, drop_reason r) noexcept {
    if (h >= Traits::max_comms) {
      comm_table_full_.fetch_add(1, std::memory_order_relaxed);
      return;
    }
    comms_[h].dropped[static_cast<std::size_t>(r)].fetch_add(1, std::memory_order_relaxed);
  }

  /// Hot: one completed op of communicator `h`; `trace`, when given and record_traces is on, is
  /// kept with its per-op record.
  void record(comm_handle h, const op_record& op, const op_trace* trace = nullptr) noexcept {
    if (h >= Traits::max_comms) NCCLINSP_UNLIKELY {
      comm_table_full_.fetch_add(1, std::memory_order_relaxed);
      return;
    }
    comm_slot& c = comms_[h];
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
    const std::uint32_t tag = opts_.user_tag_label ? tag_index(op.user_tag) : 0;
    const std::uint32_t gen = gen_of(c.state_gen.load(std::memory_order_relaxed));
    const std::uint64_t key = make_key(h, gen, op, valid ? inspector_bucketer::index(op.bytes) : 0, tag);
    cell* cl = find_cell(*s, key, exclusive);
    if (!cl) NCCLINSP_UNLIKELY {
      bump(s->table_full, 1, exclusive);
      c.dropped[static_cast<std::size_t>(drop_reason::table_full)].fetch_add(1, std::memory_order_relaxed);
    } else {
      bump(cl->ops, 1, exclusive);
      if (!valid) NCCLINSP_UNLIKELY {
        bump(cl->invalid, 1, exclusive);
      } else {
        const int n = c.desc.nranks;
        bump(cl->bytes, op.bytes, exclusive);
        bump(cl->busy_ns, dur, exclusive);
        bump(cl->hist[duration_bucket(dur)], 1, exclusive);
        const double bb = bus_bytes(op.fn, op.bytes, n);
        if (bb > 0) {
          bump(cl->bus_bytes, bb, exclusive);
          bump(cl->bw_count, 1, exclusive);
          bump(cl->log_busbw_sum, std::log(bb / static_cast<double>(dur)), exclusive);
        }
      }
    }
    if (s->ring) push_record(*s, h, op, trace, exclusive, c);
  }

  /// Rung when a thread's record ring crosses its high-water mark (the exporter sleeps on it).
  detail::doorbell& doorbell() noexcept { return bell_; }

  /// Whether any ring holds records (cheap; exporter thread).
  bool records_pending() const noexcept {
    for (auto& sp : shards_) {
      const shard* s = sp.load(std::memory_order_acquire);
      if (s && s->ring && s->head.load(std::memory_order_acquire) != s->tail.load(std::memory_order_relaxed))
        return true;
    }
    return false;
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
    comm_index_.assign(Traits::max_comms, ~0u);
    {
      std::lock_guard lk(mu_);
      for (std::uint32_t i = 0; i < n_comms_; ++i) {
        const std::uint32_t st = state_of(comms_[i].state_gen.load(std::memory_order_acquire));
        if (st != comm_live && st != comm_retired) continue;
        comm_index_[i] = static_cast<std::uint32_t>(snap.comms.size());
        snap.comms.push_back({.desc = comms_[i].desc, .retired = st == comm_retired});
      }
    }
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
      const std::uint64_t head = s->head.load(std::memory_order_acquire);
      std::uint64_t tail = s->tail.load(std::memory_order_relaxed);
      for (; tail != head; ++tail) {
        const record_slot& r =
            s->ring[(tail / s->chunk) % s->slots].load(std::memory_order_relaxed)->rec[tail % s->chunk];
        if (r.comm >= Traits::max_comms) continue;
        comms_[r.comm].dropped[static_cast<std::size_t>(why)].fetch_add(1, std::memory_order_relaxed);
        ++n;
      }
      s->tail.store(tail, std::memory_order_release);
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
    snap.comm_table_full = comm_table_full_.load(std::memory_order_relaxed);

    // Communicators: a retired one is exported (its final values) until its retention ends.
    std::vector<std::uint32_t> comm_index(Traits::max_comms, ~0u);
    std::vector<std::uint8_t> comm_gen(Traits::max_comms, 0);
    std::vector<bool> keep_window(Traits::max_comms, false);  // window state still needed next time
    {
      std::lock_guard lk(mu_);
      snap.departed = departed_;  // before this snapshot's last appearances are folded in
      for (std::uint32_t i = 0; i < n_comms_; ++i) {
        comm_slot& c = comms_[i];
        const std::uint32_t sg = c.state_gen.load(std::memory_order_acquire);
        const std::uint32_t st = state_of(sg);
        if (st != comm_live && st != comm_retired) continue;
        comm_gen[i] = static_cast<std::uint8_t>(gen_of(sg));
        comm_snapshot cs;
        cs.desc = c.desc;
        cs.retired = st == comm_retired;
        cs.newly_retired = cs.retired && !c.retired_reported;
        c.retired_reported = cs.retired;
        cs.started = c.started.load(std::memory_order_relaxed);
        cs.completed = c.completed.load(std::memory_order_relaxed);
        cs.abandoned = c.abandoned.load(std::memory_order_relaxed);
        const std::uint64_t done = cs.completed + cs.abandoned;
        cs.inflight = cs.started > done ? cs.started - done : 0;
        if (cs.inflight && c.probe) {
          std::uint64_t oldest = 0;
          try {
            oldest = c.probe(i);
          } catch (...) {}
          if (oldest && oldest < now_steady) cs.oldest_inflight_age_s = static_cast<double>(now_steady - oldest) * 1e-9;
        }
        if (cs.completed != c.seen_completed) {
          c.seen_completed = cs.completed;
          c.last_change_steady = now_steady;
        }
        if (c.last_change_steady)
          cs.since_last_completion_s = static_cast<double>(now_steady - c.last_change_steady) * 1e-9;
        for (std::size_t f = 0; f < func_count; ++f)
          cs.last_seq_plus1[f] = c.last_seq_plus1[f].load(std::memory_order_relaxed);
        for (std::size_t r = 0; r < cs.dropped.size(); ++r)
          cs.dropped[r] = c.dropped[r].load(std::memory_order_relaxed);
        cs.filtered[0] = c.filtered_min_size.load(std::memory_order_relaxed);
        cs.filtered[1] = c.filtered_no_gpu.load(std::memory_order_relaxed);
        if (cs.retired && now_steady - c.retired_steady >= retention_ns) {
          c.state_gen.store(with_state(sg, comm_gone), std::memory_order_release);
          fold_departed(cs.desc, cs.dropped, cs.filtered);
          gone_now.push_back(i);
        } else {
          keep_window[i] = true;
        }
        comm_index[i] = static_cast<std::uint32_t>(snap.comms.size());
        if (c.proxy)
          c.proxy->for_each([&](const proxy_table::peer_totals& t) {
            snap.proxy.push_back({.comm = comm_index[i],
                                  .peer = t.peer,
                                  .send = t.send,
                                  .wait_ns = t.wait_ns,
                                  .bytes = t.bytes,
                                  .steps = t.steps});
          });
        snap.comms.push_back(std::move(cs));
      }
    }

    // Cells: merge the shards by key, then diff against the previous snapshot for the window.
    std::unordered_map<std::uint64_t, cell_stats> totals;
    for (auto& sp : shards_) {
      shard* s = sp.load(std::memory_order_acquire);
      if (!s) continue;
      for (std::uint32_t i = 0; i < Traits::cells_per_shard; ++i) {
        const std::uint64_t key = s->cells[i].key.load(std::memory_order_acquire);
        if (key == 0) continue;
        for_each_stat(totals[key], s->cells[i],
                      [](auto& sum, const auto& v) { sum += v.load(std::memory_order_relaxed); });
      }
      if (s->ring) drain_records(*s, snap, comm_index);
    }
    for (auto& [key, t] : totals) {
      const std::uint32_t h = key_comm(key);
      if (h >= Traits::max_comms || comm_index[h] == ~0u || key_gen(key) != comm_gen[h]) continue;
      cell_snapshot cs;
      decode_key(key, cs);
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
      const std::uint32_t h = key_comm(kv.first);
      return h >= Traits::max_comms || !keep_window[h] || key_gen(kv.first) != comm_gen[h];
    });
    if (!gone_now.empty()) {
      std::lock_guard lk(mu_);
      for (auto g : gone_now) free_comms_.push_back(g);
    }
    for (std::uint32_t i = 0; i < Traits::max_user_tags; ++i) {
      const std::uint64_t v = tags_[i].load(std::memory_order_acquire);
      if (v == 0) break;
      snap.user_tags.push_back(v);
    }
    return snap;
  }

  const collector_options& options() const noexcept { return opts_; }

  /// CPU steady clock in ns (the clock inflight probes must use).
  static std::uint64_t steady_ns() noexcept { return detail::steady_ns(); }

 private:
  static std::uint64_t unix_ns() noexcept { return detail::unix_ns(); }
  static constexpr std::uint32_t comm_free = 0, comm_live = 1, comm_retired = 2, comm_gone = 3;
  // comm_slot::state_gen = state (low byte: comm_free .. comm_gone) | generation << state_bits.
  static constexpr unsigned state_bits = 8;                            // bits of the state byte
  static constexpr std::uint32_t state_mask = (1u << state_bits) - 1;  // selects the state byte
  static constexpr std::uint32_t comm_gen_mask = 15;                   // generations wrap at 4 bits (the key's field)
  static constexpr std::uint32_t state_of(std::uint32_t sg) noexcept { return sg & state_mask; }
  static constexpr std::uint32_t gen_of(std::uint32_t sg) noexcept { return (sg >> state_bits) & comm_gen_mask; }
  /// `sg` with its state replaced by `st`, generation kept.
  static constexpr std::uint32_t with_state(std::uint32_t sg, std::uint32_t st) noexcept {
    return st | (sg & ~state_mask);
  }
  /// Tag index of a user tag that found no free entry (more than max_user_tags distinct tags): the
  /// serializers render it "other" (it is past snapshot::user_tags).
  static constexpr std::uint32_t other_tag = 31;

  struct alignas(detail::cache_line) cell {  // cell_stats' fields as atomics (for_each_stat walks both)
    std::atomic<std::uint64_t> key{0};
    std::atomic<std::uint64_t> ops{0}, invalid{0}, bytes{0}, busy_ns{0}, bw_count{0};
    std::atomic<double> bus_bytes{0}, log_busbw_sum{0};
    std::array<std::atomic<std::uint64_t>, duration_buckets> hist{};
  };

  struct record_slot {
    comm_handle comm;
    op_record op;
    bool traced;  // shard::traces holds this entry's op_trace
  };

  // One chunk of ring storage: `chunk` records, and their op_traces when record_traces.
  struct ring_chunk {
    std::unique_ptr<record_slot[]> rec;
    std::unique_ptr<op_trace[]> traces;
  };
  struct ring_geometry {
    std::uint32_t chunk = 0, slots = 0, floor = 0;  // records per chunk, chunk slots, always-writable records
    bool grows = false;
  };

  struct shard {
    ~shard() {
      if (ring)
        for (std::uint32_t i = 0; i < slots; ++i) delete ring[i].load(std::memory_order_relaxed);
      for (ring_chunk* k : spare) delete k;
    }
    std::unique_ptr<cell[]> cells{new cell[Traits::cells_per_shard]};
    // Ring position p lives in chunk ring[(p / chunk) % slots] at p % chunk. Chunks are allocated
    // and freed by the exporter only (and by the thread that makes the shard, before publishing it).
    std::unique_ptr<std::atomic<ring_chunk*>[]> ring;
    std::uint32_t chunk = 0, slots = 0, floor = 0;
    std::uint32_t ring_high = 0;  // high-water mark: rings the doorbell when the ring fills to it
    std::uint32_t ring_low = 0;   // growing rings: rings the doorbell when this much window is left
    bool traced = false;
    std::uint32_t allocated = 0;               // chunks allocated, spares included (exporter)
    std::vector<ring_chunk*> spare;            // exporter: chunks out of the window kept for reuse (capacity: slots)
    std::uint64_t rate_t0 = 0, rate_pos0 = 0;  // exporter: rate measurement
    double rate = 0;                           // exporter: records per second, recent
    alignas(detail::cache_line) std::atomic<std::uint64_t> head{0};  // written by the recording thread
    std::atomic<std::uint64_t> table_full{0};
    alignas(detail::cache_line) std::atomic<std::uint64_t> tail{0};  // written by the exporter
    std::atomic<std::uint64_t> limit{0};  // written by the exporter: positions below it are writable
  };

  ring_geometry geometry() const noexcept {
    ring_geometry g;
    if (!opts_.record_ring_capacity) return g;
    const std::uint32_t want = opts_.record_ring_capacity;
    std::uint32_t c = 1;
    while (c * 2 <= std::min<std::uint32_t>(want, opts_.record_traces ? 256 : 1024)) c *= 2;
    g.chunk = c;
    g.floor = static_cast<std::uint32_t>((std::uint64_t{want} + c - 1) / c * c);
    const std::uint64_t max = std::max<std::uint64_t>(g.floor, opts_.record_ring_max);
    g.slots = static_cast<std::uint32_t>((max + c - 1) / c);
    g.grows = g.slots * std::uint64_t{c} > g.floor;
    return g;
  }
  std::uint64_t chunk_bytes(std::uint32_t chunk) const noexcept {
    return std::uint64_t{chunk} * (sizeof(record_slot) + (opts_.record_traces ? sizeof(op_trace) : 0)) +
           sizeof(ring_chunk);
  }

  // One communicator. Lines are split by writer: enqueue thread / completing thread / cold.
  struct comm_slot {
    alignas(detail::cache_line) std::atomic<std::uint64_t> started{0};
    std::atomic<std::uint64_t> filtered_min_size{0};
    alignas(detail::cache_line) std::atomic<std::uint64_t> completed{0};
    std::atomic<std::uint64_t> filtered_no_gpu{0};
    std::array<std::atomic<std::uint64_t>, func_count> last_seq_plus1{};
    alignas(detail::cache_line)
        std::array<std::atomic<std::uint64_t>, static_cast<std::size_t>(drop_reason::count_)> dropped{};
    std::atomic<std::uint64_t> abandoned{0};
    std::atomic<std::uint32_t> state_gen{comm_free};  // state (8 bits) | generation (4 bits) << 8
    comm_desc desc;
    inflight_probe probe;
    std::unique_ptr<proxy_table> proxy;    // collector_options::proxy_accounting; written by the proxy thread
    std::uint64_t retired_steady = 0;      // under the collector mutex
    bool retired_reported = false;         // under the collector mutex
    std::uint64_t seen_completed = 0;      // exporter only
    std::uint64_t last_change_steady = 0;  // exporter only

    void reset_counters() noexcept {  // slot reuse (cold, under the collector mutex)
      started.store(0, std::memory_order_relaxed);
      filtered_min_size.store(0, std::memory_order_relaxed);
      completed.store(0, std::memory_order_relaxed);
      filtered_no_gpu.store(0, std::memory_order_relaxed);
      for (auto& v : last_seq_plus1) v.store(0, std::memory_order_relaxed);
      for (auto& v : dropped) v.store(0, std::memory_order_relaxed);
      abandoned.store(0, std::memory_order_relaxed);
      retired_steady = 0;
      retired_reported = false;
      seen_completed = 0;
      last_change_steady = 0;
    }
  };

  // key: 1 (valid) | tag 5 | comm 12 | comm generation 4 | func 4 | algo 4 | proto 3 | timing 2 | size 29
  static constexpr std::uint64_t key_valid = std::uint64_t{1} << 63;  // never 0 for a used cell
  static constexpr detail::key_field key_tag{58, 5}, key_comm_f{46, 12}, key_gen_f{42, 4}, key_fn{38, 4},
      key_alg{34, 4}, key_pro{31, 3}, key_timing{29, 2}, key_size{0, 29};
  static constexpr std::uint64_t make_key(comm_handle h, std::uint32_t gen, const op_record& op, std::uint32_t size_idx,
                                          std::uint32_t tag) noexcept {
    return key_valid | key_tag.put(tag) | key_comm_f.put(h) | key_gen_f.put(gen) |
           key_fn.put(static_cast<std::uint8_t>(op.fn)) | key_alg.put(static_cast<std::uint8_t>(op.alg)) |
           key_pro.put(static_cast<std::uint8_t>(op.pro)) | key_timing.put(static_cast<std::uint8_t>(op.timing)) |
           key_size.put(size_idx);
  }
  static constexpr std::uint32_t key_comm(std::uint64_t k) noexcept { return key_comm_f.get(k); }
  static constexpr std::uint32_t key_gen(std::uint64_t k) noexcept { return key_gen_f.get(k); }
  static void decode_key(std::uint64_t k, cell_snapshot& c) noexcept {
    c.tag_index = key_tag.get(k);
    c.fn = static_cast<func>(key_fn.get(k));
    c.alg = static_cast<algo>(key_alg.get(k));
    c.pro = static_cast<proto>(key_pro.get(k));
    c.timing = static_cast<timing_source>(key_timing.get(k));
    c.size_index = key_size.get(k);
  }
  /// A cell whose communicator slot was freed or reused (its key's generation is not current).
  bool stale(std::uint64_t k) const noexcept {
    const std::uint32_t sg = comms_[key_comm(k)].state_gen.load(std::memory_order_relaxed);
    return state_of(sg) == comm_gone || state_of(sg) == comm_free || gen_of(sg) != key_gen(k);
  }
  static_assert(Traits::max_comms <= (1u << 12), "comm handles use 12 key bits");
  static_assert(comm_gen_mask == key_gen_f.mask(), "the slot generation is the key's generation field");
  static_assert(other_tag == key_tag.mask(), "other_tag is the tag field's largest value");
  static_assert(Traits::max_user_tags < other_tag, "tags use 5 key bits; other_tag is \"other\"");
  static_assert((Traits::cells_per_shard & (Traits::cells_per_shard - 1)) == 0,
                "cells_per_shard must be a power of two");
  static_assert(Traits::max_shards >= 2);

  // Single-writer shards use a plain load+store (no lock prefix); the shared overflow shard uses RMW.
  template <class T>
  static void bump(std::atomic<T>& a, std::type_identity_t<T> v, bool exclusive) noexcept {
    if (exclusive) NCCLINSP_LIKELY
      a.store(a.load(std::memory_order_relaxed) + v, std::memory_order_relaxed);
    else
      a.fetch_add(v, std::memory_order_relaxed);
  }

  /// The communicator retired longest ago, marked gone so its slot can be taken over; invalid_comm
  /// when none is retired. Caller holds mu_.
  comm_handle oldest_retired() noexcept {
    comm_handle best = invalid_comm;
    for (std::uint32_t i = 0; i < n_comms_; ++i)
      if (state_of(comms_[i].state_gen.load(std::memory_order_relaxed)) == comm_retired &&
          (best == invalid_comm || comms_[i].retired_steady < comms_[best].retired_steady))
        best = i;
    if (best == invalid_comm) return best;
    comm_slot& c = comms_[best];
    c.state_gen.store(with_state(c.state_gen.load(std::memory_order_relaxed), comm_gone), std::memory_order_release);
    decltype(comm_snapshot::dropped) dropped{};
    for (std::size_t r = 0; r < dropped.size(); ++r) dropped[r] = c.dropped[r].load(std::memory_order_relaxed);
    fold_departed(
        c.desc, dropped,
        {c.filtered_min_size.load(std::memory_order_relaxed), c.filtered_no_gpu.load(std::memory_order_relaxed)});
    return best;
  }

  /// Adds a communicator that stops being exported to its GPU's departed counts (one entry per GPU,
  /// made on its first departure; without memory for it, these counts are lost). Caller holds mu_.
  void fold_departed(const comm_desc& d, const decltype(comm_snapshot::dropped)& dropped,
                     const decltype(comm_snapshot::filtered)& filtered) noexcept {
    auto it = std::find_if(departed_.begin(), departed_.end(),
                           [&](const departed_counts& x) { return x.gpu.uuid == d.uuid && x.gpu.device == d.device; });
    if (it == departed_.end()) {
      try {
        it = departed_.insert(departed_.end(), departed_counts{.gpu = {.device = d.device, .uuid = d.uuid}});
      } catch (...) {
        return;
      }
    }
    for (std::size_t r = 0; r < dropped.size(); ++r) it->dropped[r] += dropped[r];
    for (std::size_t r = 0; r < filtered.size(); ++r) it->filtered[r] += filtered[r];
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
      if (opts_.record_ring_capacity) {
        const ring_geometry g = geometry();
        fresh->chunk = g.chunk;
        fresh->slots = g.slots;
        fresh->floor = g.floor;
        fresh->traced = opts_.record_traces;
        fresh->ring_high = std::max<std::uint32_t>(1, g.floor / 4);
        fresh->ring_low = g.grows ? g.chunk : 0;
        fresh->ring.reset(new std::atomic<ring_chunk*>[g.slots]);
        fresh->spare.reserve(g.slots);
        for (std::uint32_t i = 0; i < g.slots; ++i) fresh->ring[i].store(nullptr, std::memory_order_relaxed);
        fresh->rate_t0 = steady_ns();
        if (!provision(*fresh)) throw std::bad_alloc();
      }
    } catch (...) {
      delete fresh;
      return nullptr;
    }
    shard* expected = nullptr;
    if (shards_[idx].compare_exchange_strong(expected, fresh, std::memory_order_acq_rel)) return fresh;
    delete fresh;  // another thread of the overflow shard won
    return expected;
  }

  cell* find_cell(shard& s, std::uint64_t key, bool exclusive) noexcept {
    constexpr std::uint32_t mask = Traits::cells_per_shard - 1;
    std::uint32_t i = static_cast<std::uint32_t>((key * 0x9E3779B97F4A7C15ull) >> 40) & mask;
    cell* reusable = nullptr;
    for (std::uint32_t probe = 0; probe < Traits::cells_per_shard; ++probe, i = (i + 1) & mask) {
      cell& c = s.cells[i];
      std::uint64_t k = c.key.load(std::memory_order_relaxed);
      if (k == key) NCCLINSP_LIKELY
        return &c;
      if (k != 0) {
        // Only the owner rewrites its cells; a stale one (finalized communicator) is reclaimed
        // if the key is not found further on.
        if (exclusive && !reusable && stale(k)) reusable = &c;
        continue;
      }
      if (reusable) break;
      if (exclusive) {
        c.key.store(key, std::memory_order_release);  // publish: the exporter reads keys with acquire
        return &c;
      }
      if (c.key.compare_exchange_strong(k, key, std::memory_order_acq_rel) || k == key) return &c;
    }
    if (reusable) NCCLINSP_UNLIKELY {
      reusable->key.store(0, std::memory_order_release);  // the exporter skips it while it is rewritten
      for_each_stat(*reusable, *reusable, [](auto& v, auto&) { v.store(0, std::memory_order_relaxed); });
      reusable->key.store(key, std::memory_order_release);
      return reusable;
    }
    return nullptr;
  }

  void push_record(shard& s, comm_handle h, const op_record& op, const op_trace* trace, bool exclusive,
                   comm_slot& c) noexcept {
    if (!exclusive) {
      // The shared shard has several producers; per-op records there are dropped and counted.
      c.dropped[static_cast<std::size_t>(drop_reason::record_ring_full)].fetch_add(1, std::memory_order_relaxed);
      return;
    }
    const std::uint64_t head = s.head.load(std::memory_order_relaxed);
    const std::uint64_t used = head - s.tail.load(std::memory_order_acquire);
    // The window the exporter provisioned: every position below `limit` has its chunk allocated
    // (the acquire pairs with the exporter's release after it stored the chunk pointers).
    const std::uint64_t limit = s.limit.load(std::memory_order_acquire);
    if (head >= limit) NCCLINSP_UNLIKELY {
      c.dropped[static_cast<std::size_t>(drop_reason::record_ring_full)].fetch_add(1, std::memory_order_relaxed);
      return;
    }
    ring_chunk& k = *s.ring[(head / s.chunk) % s.slots].load(std::memory_order_relaxed);
    const std::uint64_t at = head % s.chunk;
    const bool traced = trace && s.traced;
    if (traced) copy_trace(k.traces[at], *trace);
    k.rec[at] = record_slot{h, op, traced};
    s.head.store(head + 1, std::memory_order_release);
    // The fill level only rises one at a time (the exporter only lowers it), so it meets the mark
    // exactly once per crossing: one ring per `ring_high` records at most. Likewise the window
    // left only shrinks one at a time (the exporter only widens it).
    if (used + 1 == s.ring_high || (s.ring_low && limit - head - 1 == s.ring_low)) NCCLINSP_UNLIKELY
      bell_.ring();
  }

  /// Exporter (and make_shard): widens the ring's writable window to about one second of the
  /// measured record rate past the tail (at least `floor`, at most the whole ring), allocating the
  /// chunks it covers, and frees the chunks outside it. The recording thread writes only at
  /// positions in [tail, limit), which this never narrows, so a freed chunk is never in use.
  /// Returns false when not even the floor could be allocated.
  bool provision(shard& s) noexcept {
    const std::uint64_t tail = s.tail.load(std::memory_order_relaxed);
    const std::uint64_t head = s.head.load(std::memory_order_acquire);
    const std::uint64_t whole = std::uint64_t{s.chunk} * s.slots;
    std::uint64_t span = s.floor;
    if (whole > s.floor) {
      const std::uint64_t now = steady_ns();
      if (now - s.rate_t0 >= 10'000'000) {  // the rate over at least 10 ms: fast rise, slow decay
        const double r = static_cast<double>(head - s.rate_pos0) * 1e9 / static_cast<double>(now - s.rate_t0);
        s.rate = r > s.rate ? r : 0.9 * s.rate + 0.1 * r;
        s.rate_t0 = now;
        s.rate_pos0 = head;
      }
      // One second of records, and twice the backlog found, past the tail.
      span =
          std::max<std::uint64_t>(span, std::max<std::uint64_t>(static_cast<std::uint64_t>(s.rate), 2 * (head - tail)));
      span = std::min(whole, (span + s.chunk - 1) / s.chunk * s.chunk);
    }
    const std::uint64_t old_limit = s.limit.load(std::memory_order_relaxed);
    std::uint64_t want = std::max(old_limit, tail + span);
    // Chunks no position of [tail, want) maps to (drained, and not in the window) become spares.
    if (s.allocated > s.spare.size() + (want - tail + 2 * s.chunk - 1) / s.chunk) {
      const std::uint64_t first = tail / s.chunk, last = (want - 1) / s.chunk;  // chunks of the window
      for (std::uint32_t i = 0; i < s.slots; ++i) {
        // Slot i holds window chunks first..last whose number is i modulo slots.
        const std::uint64_t lo = first + (i + s.slots - first % s.slots) % s.slots;
        if (lo <= last) continue;
        if (ring_chunk* k = s.ring[i].load(std::memory_order_relaxed)) {
          s.ring[i].store(nullptr, std::memory_order_relaxed);
          s.spare.push_back(k);  // never reallocates: capacity is slots
        }
      }
    }
    // The chunks of [old_limit, want) (those of [tail, old_limit) exist already): spares first.
    // The window widens chunk by chunk as each is ready: a large first allocation (the rate just
    // measured, ~16 MiB at 200,000 records/s) takes tens of milliseconds of page faults, and the
    // recording thread must not wait at the old limit for all of it (it dropped ~14,000 records).
    for (std::uint64_t p = old_limit - old_limit % s.chunk; p < want; p += s.chunk) {
      std::atomic<ring_chunk*>& slot = s.ring[(p / s.chunk) % s.slots];
      if (!slot.load(std::memory_order_relaxed)) {
        if (!s.spare.empty()) {
          slot.store(s.spare.back(), std::memory_order_relaxed);
          s.spare.pop_back();
        } else {
          try {
            auto* k = new ring_chunk;
            k->rec.reset(new record_slot[s.chunk]);
            if (s.traced) k->traces.reset(new op_trace[s.chunk]);
            slot.store(k, std::memory_order_relaxed);
            ++s.allocated;
          } catch (...) {
            want = std::max(p, old_limit);
            break;
          }
        }
      }
      if (p + s.chunk > old_limit) s.limit.store(std::min(want, p + s.chunk), std::memory_order_release);
    }
    s.limit.store(want, std::memory_order_release);
    if (want < tail + s.floor) return false;
    // Spares beyond a quarter of the window are freed (the rate fell): memory follows the rate.
    while (s.spare.size() > (want - tail) / s.chunk / 4 + 1) {
      delete s.spare.back();
      s.spare.pop_back();
      --s.allocated;
    }
    return true;
  }

  void drain_records(shard& s, snapshot& snap, const std::vector<std::uint32_t>& comm_index,
                     std::uint64_t max_records = UINT64_MAX) {
    std::uint64_t head = s.head.load(std::memory_order_acquire);
    std::uint64_t tail = s.tail.load(std::memory_order_relaxed);
    if (head - tail > max_records) head = tail + max_records;
    for (; tail != head; ++tail) {
      const ring_chunk& k = *s.ring[(tail / s.chunk) % s.slots].load(std::memory_order_relaxed);
      const record_slot& r = k.rec[tail % s.chunk];
      if (r.comm >= Traits::max_comms) continue;
      if (comm_index[r.comm] == ~0u) {
        // Its communicator was added after this snapshot listed them (add_comm racing the
        // exporter): leave it, and what follows, for the next drain, which lists it. Skipping it
        // lost those records uncounted (test_reliability "JSON mode: N ops in ...", under ASan).
        const std::uint32_t st = state_of(comms_[r.comm].state_gen.load(std::memory_order_acquire));
        if (st == comm_live || st == comm_retired) break;
        continue;
      }
      std::int32_t ti = -1;
      if (r.traced) {
        ti = static_cast<std::int32_t>(snap.traces.size());
        copy_trace(snap.traces.emplace_back(), k.traces[tail % s.chunk]);
      }
      snap.records.push_back({comm_index[r.comm], r.op, ti});
    }
    s.tail.store(tail, std::memory_order_release);
    (void)provision(s);  // out of memory: the window stays as it is
  }

  std::uint32_t tag_index(std::uint64_t tag) noexcept {
    if (tag == 0) return 0;
    for (std::uint32_t i = 0; i < Traits::max_user_tags; ++i) {
      std::uint64_t v = tags_[i].load(std::memory_order_acquire);
      if (v == tag) return i + 1;
      if (v == 0) {
        if (tags_[i].compare_exchange_strong(v, tag, std::memory_order_acq_rel) || v == tag) return i + 1;
      }
    }
    return other_tag;
  }

  static cell_stats diff(const cell_stats& a, const cell_stats& b) noexcept {
    cell_stats d = a;
    for_each_stat(d, b, [](auto& x, const auto& y) { x -= y; });
    return d;
  }

  collector_options opts_;
  std::unique_ptr<comm_slot[]> comms_;
  std::uint32_t n_comms_ = 0;              // guarded by mu_
  std::vector<comm_handle> free_comms_;    // guarded by mu_: slots exported for the last time
  std::vector<departed_counts> departed_;  // guarded by mu_: one entry per GPU seen
  std::mutex mu_;
  std::array<std::atomic<shard*>, Traits::max_shards> shards_{};
  std::array<std::atomic<std::uint64_t>, Traits::max_user_tags> tags_{};
  alignas(detail::cache_line) std::atomic<std::uint64_t> comm_table_full_{0};
  std::unordered_map<std::uint64_t, cell_stats> prev_;  // exporter only
  std::vector<std::uint32_t> comm_index_;               // exporter only (take_records)
  detail::doorbell bell_;
};

}  // namespace ncclinsp
