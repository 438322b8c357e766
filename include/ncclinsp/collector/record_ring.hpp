#pragma once
/// record_ring: one recording thread's ring of per-op records (collector_options::record_ring_*),
/// stored in chunks, with the writable window the exporter provisions ahead of what it drained.
///
/// Thread-safety: one producer (the thread that owns the collector shard) and one consumer (the
/// exporter). Hot: push() only: noexcept, no lock, no allocation; it writes inside the window the
/// exporter published or reports the ring full. Cold (exporter): provision(), drain(), pending(),
/// bytes(), and the destructor. head (written by the producer) and tail/limit (written by the
/// exporter) sit on separate cache lines.
/// When the ring fills to its high-water mark (a quarter of its floor, rounded down to a power of
/// two) push() rings the doorbell, and again at each further multiple of the mark, so the exporter
/// drains it long before it is full. With record_ring_max above
/// record_ring_capacity the ring grows: its storage is chunks of up to 1,024 records (256 with
/// traces) that only the exporter allocates and frees. The exporter keeps the writable window at
/// about one second of the rate it measures (at least the floor, at most the whole ring) ahead of
/// what it has drained, so a writer that is late (descheduled, a slow disk) costs memory, not
/// records; chunks outside the window are freed. push() rings the doorbell once more when the
/// window has one chunk left.
///
/// Design:
/// - The doorbell rings at every multiple of the mark, not only at the mark: the exporter may drain
///   part of a backlog while the producer keeps pushing, so the fill can step down from above the
///   mark to a level still above it. A ring only at the mark would leave that backlog, and what
///   follows, to the next export: the window fills and records are dropped (test_exporter "records
///   past a ring's high-water mark" shows it under the sanitizers).
/// - The window widens chunk by chunk as each is ready: a large first allocation (~16 MiB for a
///   measured rate of 200,000 records/s) takes tens of milliseconds of page faults, and a producer
///   waiting at the old limit for all of it drops records (~14,000 in that case).

#include <algorithm>
#include <atomic>
#include <bit>
#include <cstdint>
#include <memory>
#include <new>
#include <vector>

#include "ncclinsp/detail/clock.hpp"
#include "ncclinsp/detail/doorbell.hpp"
#include "ncclinsp/detail/platform.hpp"
#include "ncclinsp/model.hpp"
#include "ncclinsp/op_trace.hpp"

namespace ncclinsp::detail {

/// One per-op record as a ring stores it.
struct record_slot {
  std::uint32_t comm;  // the collector's comm_handle
  op_record op;
  bool traced;  // the chunk's traces[] holds this entry's op_trace
};

/// One chunk of ring storage: `chunk` records, and their op_traces when the ring is traced.
struct ring_chunk {
  std::unique_ptr<record_slot[]> rec;
  std::unique_ptr<op_trace[]> traces;
};

/// The shape of a ring, from collector_options' record_ring_capacity, record_ring_max and
/// record_traces.
struct ring_geometry {
  std::uint32_t chunk = 0, slots = 0, floor = 0;  // records per chunk, chunk slots, always-writable records
  bool grows = false;

  static ring_geometry of(std::uint32_t capacity, std::uint32_t max_records, bool traced) noexcept {
    ring_geometry g;
    if (!capacity) return g;
    const std::uint32_t want = capacity;
    std::uint32_t c = 1;
    while (c * 2 <= std::min<std::uint32_t>(want, traced ? 256 : 1024)) c *= 2;
    g.chunk = c;
    g.floor = static_cast<std::uint32_t>((std::uint64_t{want} + c - 1) / c * c);
    const std::uint64_t max = std::max<std::uint64_t>(g.floor, max_records);
    g.slots = static_cast<std::uint32_t>((max + c - 1) / c);
    g.grows = g.slots * std::uint64_t{c} > g.floor;
    return g;
  }
};

struct record_ring {
  ~record_ring() {
    if (ring)
      for (std::uint32_t i = 0; i < slots; ++i) delete ring[i].load(std::memory_order_relaxed);
    for (ring_chunk* k : spare) delete k;
  }

  /// Bytes one chunk of `chunk` records takes.
  static std::uint64_t chunk_bytes(std::uint32_t chunk, bool traced) noexcept {
    return std::uint64_t{chunk} * (sizeof(record_slot) + (traced ? sizeof(op_trace) : 0)) + sizeof(ring_chunk);
  }

  /// Whether this ring keeps records (init() ran).
  explicit operator bool() const noexcept { return ring != nullptr; }

  /// Sets the ring up and provisions its floor (before the shard is published). Throws
  /// std::bad_alloc when not even the floor could be allocated.
  void init(const ring_geometry& g, bool trace) {
    chunk = g.chunk;
    slots = g.slots;
    floor = g.floor;
    traced = trace;
    ring_high = std::bit_floor(std::max<std::uint32_t>(1, g.floor / 4));  // a power of two: a mask in push()
    ring_low = g.grows ? g.chunk : 0;
    ring.reset(new std::atomic<ring_chunk*>[g.slots]);
    spare.reserve(g.slots);
    for (std::uint32_t i = 0; i < g.slots; ++i) ring[i].store(nullptr, std::memory_order_relaxed);
    rate_t0 = steady_ns();
    if (!provision()) throw std::bad_alloc();
  }

  /// Hot (the owning thread): appends one record; false when the window is full (the caller
  /// counts the drop). Rings `bell` when the ring crosses its high-water mark.
  bool push(std::uint32_t comm, const op_record& op, const op_trace* trace, doorbell& bell) noexcept {
    const std::uint64_t h = head.load(std::memory_order_relaxed);
    const std::uint64_t used = h - tail.load(std::memory_order_acquire);
    // The window the exporter provisioned: every position below `limit` has its chunk allocated
    // (the acquire pairs with the exporter's release after it stored the chunk pointers).
    const std::uint64_t lim = limit.load(std::memory_order_acquire);
    if (h >= lim) NCCLINSP_UNLIKELY
      return false;
    ring_chunk& k = *ring[(h / chunk) % slots].load(std::memory_order_relaxed);
    const std::uint64_t at = h % chunk;
    const bool with_trace = trace && traced;
    if (with_trace) copy_trace(k.traces[at], *trace);
    k.rec[at] = record_slot{comm, op, with_trace};
    head.store(h + 1, std::memory_order_release);
    // One ring per `ring_high` records at most: at the mark and at each multiple of it above
    // (Design, above). The window left only shrinks one at a time (the exporter only widens it),
    // so it meets ring_low exactly.
    const std::uint64_t fill = used + 1;
    if ((fill & (ring_high - 1)) == 0 || (ring_low && lim - h - 1 == ring_low)) NCCLINSP_UNLIKELY
      bell.ring();
    return true;
  }

  /// Whether records wait to be drained (exporter).
  bool pending() const noexcept { return head.load(std::memory_order_acquire) != tail.load(std::memory_order_relaxed); }
  /// Whether the records waiting reach the high-water mark (exporter).
  bool above_mark() const noexcept {
    return head.load(std::memory_order_acquire) - tail.load(std::memory_order_relaxed) >= ring_high;
  }

  /// Bytes of chunk storage allocated now, spares included (exporter thread or tests).
  std::uint64_t bytes() const noexcept { return std::uint64_t{allocated} * chunk_bytes(chunk, traced); }

  /// Exporter: hands the queued records, oldest first and at most `max_records`, to
  /// `take(const record_slot&, const op_trace* or nullptr)`; a record for which it returns false
  /// stays queued, with all that follow, for the next drain. Does not provision.
  template <class Take>
  void drain(std::uint64_t max_records, Take&& take) {
    std::uint64_t h = head.load(std::memory_order_acquire);
    std::uint64_t t = tail.load(std::memory_order_relaxed);
    if (h - t > max_records) h = t + max_records;
    for (; t != h; ++t) {
      const ring_chunk& k = *ring[(t / chunk) % slots].load(std::memory_order_relaxed);
      const record_slot& r = k.rec[t % chunk];
      if (!take(r, r.traced ? &k.traces[t % chunk] : nullptr)) break;
    }
    tail.store(t, std::memory_order_release);
  }

  /// Exporter (and init): widens the writable window to about one second of the measured record
  /// rate past the tail (at least `floor`, at most the whole ring), allocating the chunks it
  /// covers, and frees the chunks outside it. The recording thread writes only at positions in
  /// [tail, limit), which this never narrows, so a freed chunk is never in use. Returns false
  /// when not even the floor could be allocated.
  bool provision() noexcept {
    const std::uint64_t t = tail.load(std::memory_order_relaxed);
    const std::uint64_t h = head.load(std::memory_order_acquire);
    const std::uint64_t whole = std::uint64_t{chunk} * slots;
    std::uint64_t span = floor;
    if (whole > floor) {
      const std::uint64_t now = steady_ns();
      if (now - rate_t0 >= 10'000'000) {  // the rate over at least 10 ms: fast rise, slow decay
        const double r = static_cast<double>(h - rate_pos0) * 1e9 / static_cast<double>(now - rate_t0);
        rate = r > rate ? r : 0.9 * rate + 0.1 * r;
        rate_t0 = now;
        rate_pos0 = h;
      }
      // One second of records, and twice the backlog found, past the tail.
      span = std::max<std::uint64_t>(span, std::max<std::uint64_t>(static_cast<std::uint64_t>(rate), 2 * (h - t)));
      span = std::min(whole, (span + chunk - 1) / chunk * chunk);
    }
    const std::uint64_t old_limit = limit.load(std::memory_order_relaxed);
    std::uint64_t want = std::max(old_limit, t + span);
    // Chunks no position of [tail, want) maps to (drained, and not in the window) become spares.
    if (allocated > spare.size() + (want - t + 2 * chunk - 1) / chunk) {
      const std::uint64_t first = t / chunk, last = (want - 1) / chunk;  // chunks of the window
      for (std::uint32_t i = 0; i < slots; ++i) {
        // Slot i holds window chunks first..last whose number is i modulo slots.
        const std::uint64_t lo = first + (i + slots - first % slots) % slots;
        if (lo <= last) continue;
        if (ring_chunk* k = ring[i].load(std::memory_order_relaxed)) {
          ring[i].store(nullptr, std::memory_order_relaxed);
          spare.push_back(k);  // never reallocates: capacity is slots
        }
      }
    }
    // The chunks of [old_limit, want) (those of [tail, old_limit) exist already): spares first.
    // The window widens chunk by chunk as each is ready (Design, above).
    for (std::uint64_t p = old_limit - old_limit % chunk; p < want; p += chunk) {
      std::atomic<ring_chunk*>& slot = ring[(p / chunk) % slots];
      if (!slot.load(std::memory_order_relaxed)) {
        if (!spare.empty()) {
          slot.store(spare.back(), std::memory_order_relaxed);
          spare.pop_back();
        } else {
          try {
            auto* k = new ring_chunk;
            k->rec.reset(new record_slot[chunk]);
            if (traced) k->traces.reset(new op_trace[chunk]);
            slot.store(k, std::memory_order_relaxed);
            ++allocated;
          } catch (...) {
            want = std::max(p, old_limit);
            break;
          }
        }
      }
      if (p + chunk > old_limit) limit.store(std::min(want, p + chunk), std::memory_order_release);
    }
    limit.store(want, std::memory_order_release);
    if (want < t + floor) return false;
    // Spares beyond a quarter of the window are freed (the rate fell): memory follows the rate.
    while (spare.size() > (want - t) / chunk / 4 + 1) {
      delete spare.back();
      spare.pop_back();
      --allocated;
    }
    return true;
  }

  // Ring position p lives in chunk ring[(p / chunk) % slots] at p % chunk. Chunks are allocated
  // and freed by the exporter only (and by the thread that makes the shard, before publishing it).
  std::unique_ptr<std::atomic<ring_chunk*>[]> ring;
  std::uint32_t chunk = 0, slots = 0, floor = 0;
  std::uint32_t ring_high = 1;  // high-water mark (a power of two): rings the doorbell at each multiple
  std::uint32_t ring_low = 0;   // growing rings: rings the doorbell when this much window is left
  bool traced = false;
  std::uint32_t allocated = 0;               // chunks allocated, spares included (exporter)
  std::vector<ring_chunk*> spare;            // exporter: chunks out of the window kept for reuse (capacity: slots)
  std::uint64_t rate_t0 = 0, rate_pos0 = 0;  // exporter: rate measurement
  double rate = 0;                           // exporter: records per second, recent
  alignas(cache_line) std::atomic<std::uint64_t> head{0};  // written by the recording thread
  alignas(cache_line) std::atomic<std::uint64_t> tail{0};  // written by the exporter
  std::atomic<std::uint64_t> limit{0};                     // written by the exporter: positions below it are writable
};

}  // namespace ncclinsp::detail
