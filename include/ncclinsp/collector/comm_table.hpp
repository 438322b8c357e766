#pragma once
/// comm_table: the collector's communicators: registration, retirement, slot reuse, the counts
/// of communicators no longer exported (departed_counts), and the communicator part of a snapshot.
///
/// Thread-safety: add(), retire() and the snapshot listings take the table's mutex (cold). Hot:
/// note_started(), note_filtered(), note_dropped(), stale() and the comm_slot counters the
/// collector's record() writes: atomics without a lock, written by NCCL's threads (started by the
/// enqueueing thread, completed/last_seq by the completing thread, each group on its own cache
/// line). A retired communicator keeps being exported with its final values for
/// the retention period, then its slot is freed for reuse (oldest freed first); when the table is
/// full, the oldest retired communicator gives up its slot early, so creating and destroying
/// communicators keeps memory bounded. A slot's generation (4 bits, part of the cell key) tells
/// the cells of a reused slot's previous communicator from its own.

#include <algorithm>
#include <array>
#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <new>
#include <vector>

#include "ncclinsp/detail/clock.hpp"
#include "ncclinsp/detail/platform.hpp"
#include "ncclinsp/model.hpp"
#include "ncclinsp/no_index.hpp"
#include "ncclinsp/proxy_stats.hpp"
#include "ncclinsp/snapshot.hpp"

namespace ncclinsp {

/// Handle of a registered communicator; cheap to copy. no_index: none (the table was full).
using comm_handle = std::uint32_t;

}  // namespace ncclinsp

namespace ncclinsp::detail {

/// Returns the CPU steady time (ns) at which the oldest in-flight op of communicator `h` started,
/// or 0 when none. Called on the exporter thread while the communicator is live.
using inflight_probe = std::function<std::uint64_t(comm_handle h)>;

/// comm_slot::state_gen = state (low byte: comm_free .. comm_gone) | generation << state_bits.
inline constexpr std::uint32_t comm_free = 0, comm_live = 1, comm_retired = 2, comm_gone = 3;
inline constexpr unsigned state_bits = 8;                            // bits of the state byte
inline constexpr std::uint32_t state_mask = (1u << state_bits) - 1;  // selects the state byte
inline constexpr std::uint32_t comm_gen_mask = 15;                   // generations wrap at 4 bits (the key's field)
constexpr std::uint32_t state_of(std::uint32_t sg) noexcept { return sg & state_mask; }
constexpr std::uint32_t gen_of(std::uint32_t sg) noexcept { return (sg >> state_bits) & comm_gen_mask; }
/// `sg` with its state replaced by `st`, generation kept.
constexpr std::uint32_t with_state(std::uint32_t sg, std::uint32_t st) noexcept { return st | (sg & ~state_mask); }

/// One communicator. Lines are split by writer: enqueue thread / completing thread / cold.
struct comm_slot {
  alignas(cache_line) std::atomic<std::uint64_t> started{0};
  std::atomic<std::uint64_t> filtered_min_size{0};
  alignas(cache_line) std::atomic<std::uint64_t> completed{0};
  /// filter_reason::no_gpu_timing and after (ops that started, counted where they complete).
  std::array<std::atomic<std::uint64_t>, static_cast<std::size_t>(filter_reason::count_) - 1> filtered_done{};
  std::array<std::atomic<std::uint64_t>, func_count> last_seq_plus1{};
  alignas(cache_line) std::array<std::atomic<std::uint64_t>, static_cast<std::size_t>(drop_reason::count_)> dropped{};
  std::atomic<std::uint64_t> abandoned{0};
  std::atomic<std::uint32_t> state_gen{comm_free};  // state (8 bits) | generation (4 bits) << 8
  comm_desc desc;
  inflight_probe probe;
  std::unique_ptr<proxy_table> proxy;    // collector_options::proxy_accounting; written by the proxy thread
  std::uint64_t retired_steady = 0;      // under the table mutex
  bool retired_reported = false;         // under the table mutex
  std::uint64_t seen_completed = 0;      // exporter only
  std::uint64_t last_change_steady = 0;  // exporter only

  void reset_counters() noexcept {  // slot reuse (cold, under the table mutex)
    started.store(0, std::memory_order_relaxed);
    filtered_min_size.store(0, std::memory_order_relaxed);
    completed.store(0, std::memory_order_relaxed);
    for (auto& v : filtered_done) v.store(0, std::memory_order_relaxed);
    for (auto& v : last_seq_plus1) v.store(0, std::memory_order_relaxed);
    for (auto& v : dropped) v.store(0, std::memory_order_relaxed);
    abandoned.store(0, std::memory_order_relaxed);
    retired_steady = 0;
    retired_reported = false;
    seen_completed = 0;
    last_change_steady = 0;
  }
};

/// A slot's filter counts, indexed by filter_reason.
inline std::array<std::uint64_t, static_cast<std::size_t>(filter_reason::count_)> filtered_counts(
    const comm_slot& c) noexcept {
  std::array<std::uint64_t, static_cast<std::size_t>(filter_reason::count_)> f{};
  f[0] = c.filtered_min_size.load(std::memory_order_relaxed);
  for (std::size_t r = 1; r < f.size(); ++r) f[r] = c.filtered_done[r - 1].load(std::memory_order_relaxed);
  return f;
}

template <std::uint32_t MaxComms>
class comm_table {
 public:
  comm_table() : slots_(new comm_slot[MaxComms]) { free_.reserve(MaxComms); }

  /// Hot: the slot of a handle below MaxComms.
  comm_slot& operator[](comm_handle h) noexcept { return slots_[h]; }
  const comm_slot& operator[](comm_handle h) const noexcept { return slots_[h]; }

  /// Registers a communicator (cold). Returns no_index when the table is full (counted).
  comm_handle add(comm_desc desc, inflight_probe probe, bool proxy_accounting) noexcept {
    std::lock_guard lk(mu_);
    comm_handle h = no_index;
    if (!free_.empty()) {  // oldest freed first: stale cells of a slot get time to be reclaimed
      h = free_.front();
      free_.erase(free_.begin());
    } else if (n_ < MaxComms) {
      h = n_++;
    } else if ((h = oldest_retired()) != no_index) {
      // Table full: the longest-retired communicator stops being exported early.
    } else {
      count_full();
      return no_index;
    }
    comm_slot& c = slots_[h];
    try {
      c.desc = std::move(desc);
      c.probe = std::move(probe);
    } catch (...) {
      free_.push_back(h);  // capacity reserved in the constructor: never reallocates
      count_full();
      return no_index;
    }
    c.reset_counters();
    if (proxy_accounting) {
      if (c.proxy)
        c.proxy->reset();
      else
        c.proxy.reset(new (std::nothrow) proxy_table);  // without memory: no proxy accounting for it
    }
    const std::uint32_t gen = gen_of(c.state_gen.load(std::memory_order_relaxed)) + 1;
    c.state_gen.store(comm_live | (gen & comm_gen_mask) << state_bits, std::memory_order_release);
    return h;
  }

  /// Marks a communicator finalized (cold). `abandoned` = ops still in flight that will never
  /// complete.
  void retire(comm_handle h, std::uint64_t abandoned) noexcept {
    if (h >= MaxComms) return;
    std::lock_guard lk(mu_);
    comm_slot& c = slots_[h];
    c.abandoned.fetch_add(abandoned, std::memory_order_relaxed);
    c.probe = nullptr;
    if (state_of(c.state_gen.load(std::memory_order_relaxed)) == comm_live) {
      c.retired_steady = steady_ns();
      c.state_gen.store(with_state(c.state_gen.load(std::memory_order_relaxed), comm_retired),
                        std::memory_order_release);
    }
  }

  /// Hot: an op of `h` was handed to the GPU (in-flight accounting).
  void note_started(comm_handle h) noexcept {
    if (h >= MaxComms) NCCLINSP_UNLIKELY
      return;
    slots_[h].started.fetch_add(1, std::memory_order_relaxed);
  }
  /// Hot: an op was skipped on purpose. no_gpu_timing ops had started, so they complete here.
  void note_filtered(comm_handle h, filter_reason r) noexcept {
    if (h >= MaxComms) NCCLINSP_UNLIKELY
      return;
    comm_slot& c = slots_[h];
    if (r == filter_reason::min_size)
      c.filtered_min_size.fetch_add(1, std::memory_order_relaxed);
    else {
      c.filtered_done[static_cast<std::size_t>(r) - 1].fetch_add(1, std::memory_order_relaxed);
      c.completed.fetch_add(1, std::memory_order_relaxed);
    }
  }
  /// Hot (rare): an event was lost.
  void note_dropped(comm_handle h, drop_reason r) noexcept {
    if (h >= MaxComms) {
      count_full();
      return;
    }
    slots_[h].dropped[static_cast<std::size_t>(r)].fetch_add(1, std::memory_order_relaxed);
  }
  /// Hot (rare): an op or a registration found no communicator slot.
  void count_full() noexcept { full_.fetch_add(1, std::memory_order_relaxed); }
  std::uint64_t full() const noexcept { return full_.load(std::memory_order_relaxed); }

  /// Whether cells of slot `h` with generation `gen` belong to a communicator that is gone or
  /// to the slot's previous communicator (hot, in the shard's cell search).
  bool stale(std::uint32_t h, std::uint32_t gen) const noexcept {
    const std::uint32_t sg = slots_[h].state_gen.load(std::memory_order_relaxed);
    return state_of(sg) == comm_gone || state_of(sg) == comm_free || gen_of(sg) != gen;
  }
  /// Whether slot `h` holds a communicator that is exported (live or retired).
  bool listed(comm_handle h) const noexcept {
    const std::uint32_t st = state_of(slots_[h].state_gen.load(std::memory_order_acquire));
    return st == comm_live || st == comm_retired;
  }

  /// Exporter: the exported communicators into `snap.comms` (descriptions and the retired flag
  /// only), and `comm_index[h]` = their index there.
  void list(snapshot& snap, std::vector<std::uint32_t>& comm_index) {
    std::lock_guard lk(mu_);
    for (std::uint32_t i = 0; i < n_; ++i) {
      const std::uint32_t st = state_of(slots_[i].state_gen.load(std::memory_order_acquire));
      if (st != comm_live && st != comm_retired) continue;
      comm_index[i] = static_cast<std::uint32_t>(snap.comms.size());
      snap.comms.push_back({.desc = slots_[i].desc, .retired = st == comm_retired});
    }
  }

  /// Exporter: the exported communicators with their counts into `snap` (comms, proxy, departed);
  /// `comm_index[h]` = their index in snap.comms, `comm_gen[h]` their generation, `keep_window[h]`
  /// whether they are exported again next time. A retired one whose retention has passed is
  /// exported this last time, marked gone and appended to `gone_now` (release() frees it).
  void list_counts(snapshot& snap, std::uint64_t now_steady, std::uint64_t retention_ns,
                   std::vector<std::uint32_t>& comm_index, std::vector<std::uint8_t>& comm_gen,
                   std::vector<bool>& keep_window, std::vector<std::uint32_t>& gone_now) {
    std::lock_guard lk(mu_);
    snap.departed = departed_;  // before this snapshot's last appearances are folded in
    for (std::uint32_t i = 0; i < n_; ++i) {
      comm_slot& c = slots_[i];
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
      for (std::size_t r = 0; r < cs.dropped.size(); ++r) cs.dropped[r] = c.dropped[r].load(std::memory_order_relaxed);
      cs.filtered = filtered_counts(c);
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

  /// Exporter: frees the slots list_counts() exported for the last time, for reuse.
  void release(const std::vector<std::uint32_t>& gone_now) {
    if (gone_now.empty()) return;
    std::lock_guard lk(mu_);
    for (auto g : gone_now) free_.push_back(g);
  }

 private:
  /// The communicator retired longest ago, marked gone so its slot can be taken over; no_index
  /// when none is retired. Caller holds mu_.
  comm_handle oldest_retired() noexcept {
    comm_handle best = no_index;
    for (std::uint32_t i = 0; i < n_; ++i)
      if (state_of(slots_[i].state_gen.load(std::memory_order_relaxed)) == comm_retired &&
          (best == no_index || slots_[i].retired_steady < slots_[best].retired_steady))
        best = i;
    if (best == no_index) return best;
    comm_slot& c = slots_[best];
    c.state_gen.store(with_state(c.state_gen.load(std::memory_order_relaxed), comm_gone), std::memory_order_release);
    decltype(comm_snapshot::dropped) dropped{};
    for (std::size_t r = 0; r < dropped.size(); ++r) dropped[r] = c.dropped[r].load(std::memory_order_relaxed);
    fold_departed(c.desc, dropped, filtered_counts(c));
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

  std::unique_ptr<comm_slot[]> slots_;
  std::uint32_t n_ = 0;                    // guarded by mu_: slots ever used
  std::vector<comm_handle> free_;          // guarded by mu_: slots exported for the last time
  std::vector<departed_counts> departed_;  // guarded by mu_: one entry per GPU seen
  std::mutex mu_;
  alignas(cache_line) std::atomic<std::uint64_t> full_{0};
};

}  // namespace ncclinsp::detail
