#pragma once
/// comm_registry: the plugin's communicators as NCCL's event callbacks find them, and the one place
/// that decides when a communicator's state may be reused.
///
/// ## Reclamation protocol
///
/// Objects. A `comm_state` (comm_state.hpp) is one communicator's op slots, traces and proxy
/// steps. The registry owns every comm_state it ever made and frees none while it lives: a retired
/// state is parked and later reused for another communicator (type-stable memory). Only a private
/// registry (tests, the fuzzer) is ever destroyed, and it frees its parked states then.
///
/// Names. `slots_[i]` publishes the state of communicator index i, or nullptr. NCCL holds only
/// tagged integers (handle.hpp): a context names (comm index, comm generation), an op handle names
/// (comm index, op slot, op generation). Generations only grow: a retired and reused state gets a
/// new comm generation, and recycling moves every op slot to its next generation, so a stale
/// context or handle never matches (up to the 22-bit wrap).
///
/// Threads and what each may do.
///  - init and finalize (cold; the caller serializes them with its mutex): `adopt` a parked or new
///    state, `publish` it (release store); `retire` unpublishes it (seq_cst store of nullptr),
///    waits for the readers below, counts its ops still in flight and parks it.
///  - Coll/P2p/CE start and stop, ProxyOp and ProxyStep events (any NCCL thread: the user thread,
///    CUDA's host-callback thread for graph replays, the async group thread, the proxy thread):
///    open a reader section (`enter()`, detail/reader_gate.hpp: a store to the thread's own line)
///    before looking a communicator up, and keep it open while they use the state.
///  - KernelCh events (the one thread that progresses the op's communicator) hold the op instead
///    (`channel_hold`): the mark is the op slot's own `ch_inside` counter, odd while inside, so a
///    channel callback reads no thread-local state. The hold marks, then re-reads the published
///    pointer and the op's generation; it holds only if both still match.
///
/// What retire waits for. After the unpublish, `reader_gate::quiesce` (membarrier) makes every
/// running thread either visible inside a section or bound to load nullptr; it then waits for the
/// sections it saw. Then the op slots' marks: an odd mark is waited for until it changes. A hold
/// that marked after the scan re-reads the table after the unpublish and lets go. Either way, when
/// retire returns "quiet", no callback uses the state, so its in-flight count is exact (those ops
/// never complete now and the collector counts them abandoned) and it may be reused.
///
/// What is freed when. Nothing while the registry lives. A quiet state goes to the spare list (the
/// next adopt recycles it); a state whose wait timed out (a reader preempted inside) goes to limbo
/// and moves to the spare list at a later retire that finds it quiet. Every spare and limbo entry
/// has room reserved at adopt, so retire allocates nothing.
///
/// Thread-safety: the hot functions (enter, live, find_op, from_context, channel_hold) are
/// lock-free and allocation-free; adopt, publish, give_back and retire need the caller's lock.

#include <array>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <memory>
#include <thread>
#include <utility>
#include <vector>

#include "ncclinsp/detail/platform.hpp"
#include "ncclinsp/detail/reader_gate.hpp"
#include "ncclinsp/plugin/comm_state.hpp"
#include "ncclinsp/plugin/handle.hpp"

namespace ncclinsp::plugin {

class comm_registry {
 public:
  comm_registry() = default;
  comm_registry(const comm_registry&) = delete;
  comm_registry& operator=(const comm_registry&) = delete;
  ~comm_registry() {
    for (comm_state* cs : spare_) delete cs;  // limbo_ stays: a reader may still be inside one
  }

  // ---- lookups (hot, any thread) ---------------------------------------------------------------

  /// A reader section: open it before live/find_op/from_context and keep it while using the result.
  [[nodiscard]] NCCLINSP_INLINE detail::reader_gate::section enter() noexcept { return gate_.enter(); }

  /// The published state of communicator index `idx`, or nullptr.
  comm_state* live(std::uint32_t idx) const noexcept {
    // seq_cst (a plain load on x86): ordered after this thread's reader mark (see retire).
    return idx < max_plugin_comms ? slots_[idx].load(std::memory_order_seq_cst) : nullptr;
  }

  /// The live op a decoded op handle names (unknown comm, out of range, stale generation: nullptr).
  NCCLINSP_INLINE op_slot* find_op(const decoded& k, comm_state*& cs) const noexcept {
    cs = live(k.comm);
    if (!cs || k.slot >= cs->ops.size()) return nullptr;
    op_slot& s = cs->ops[k.slot];
    return handle_gen(s.gen.load(std::memory_order_acquire)) == k.gen ? &s : nullptr;
  }

  /// The live communicator a context names, or nullptr (stale, foreign, garbage).
  comm_state* from_context(const void* context) const noexcept {
    const decoded k = decode(context);
    if (k.kind != handle_kind::op || k.slot != context_slot) return nullptr;
    comm_state* cs = live(k.comm);
    return cs && handle_gen(cs->gen) == k.gen ? cs : nullptr;
  }

  /// The context NCCL passes back for a published communicator.
  static void* context_of(const comm_state& cs) noexcept {
    return as_handle(encode(handle_kind::op, cs.gen, cs.handle, context_slot));
  }

  /// A KernelCh event's hold on the op its handle names (no reader section: see the protocol).
  /// Empty when the handle is stale or its communicator retired. While it holds, op() and comm()
  /// stay valid; the destructor lets go. The mark has one writer: stale handles are rejected by
  /// generation before marking, and every KernelCh event of a live op comes from one thread.
  class channel_hold {
   public:
    NCCLINSP_INLINE channel_hold(const comm_registry& r, const decoded& k) noexcept {
      comm_state* cs = k.comm < max_plugin_comms ? r.slots_[k.comm].load(std::memory_order_acquire) : nullptr;
      if (!cs || k.slot >= cs->ops.size()) return;
      op_slot& s = cs->ops[k.slot];
      if (handle_gen(s.gen.load(std::memory_order_relaxed)) != k.gen) return;
      const std::uint32_t m = s.ch_inside.load(std::memory_order_relaxed) + 1;  // odd: inside
      if (r.gate_.expedited()) NCCLINSP_LIKELY {
        s.ch_inside.store(m, std::memory_order_relaxed);  // ordered by retire's membarrier
        std::atomic_signal_fence(std::memory_order_seq_cst);
      } else {
        s.ch_inside.exchange(m, std::memory_order_seq_cst);
      }
      // The re-read is seq_cst and pairs with publish's release, so the generation load after it
      // sees recycle()'s bump when the state was reused at the same index.
      if (r.slots_[k.comm].load(std::memory_order_seq_cst) != cs ||
          handle_gen(s.gen.load(std::memory_order_acquire)) != k.gen) {
        s.ch_inside.store(m + 1, std::memory_order_release);
        return;
      }
      s_ = &s;
      cs_ = cs;
      mark_ = m;
    }
    ~channel_hold() {
      if (s_) s_->ch_inside.store(mark_ + 1, std::memory_order_release);  // even: left
    }
    channel_hold(const channel_hold&) = delete;
    channel_hold& operator=(const channel_hold&) = delete;
    explicit operator bool() const noexcept { return s_ != nullptr; }
    op_slot& op() const noexcept { return *s_; }
    comm_state& comm() const noexcept { return *cs_; }

   private:
    op_slot* s_ = nullptr;
    comm_state* cs_ = nullptr;
    std::uint32_t mark_ = 0;
  };

  // ---- lifecycle (cold, under the caller's lock) -----------------------------------------------

  /// A state for a new communicator: a parked one recycled, or a new one of this shape (the shape
  /// is fixed at the first init, so every parked state has it). Throws std::bad_alloc.
  comm_state* adopt(std::uint32_t pool, bool traced, std::uint32_t proxy_steps) {
    if (!spare_.empty()) {
      comm_state* cs = spare_.back();
      spare_.pop_back();
      cs->recycle();
      return cs;
    }
    auto fresh = std::make_unique<comm_state>(pool, traced, proxy_steps);
    if (spare_.capacity() <= made_) {  // room for every state ever made: retire parks without allocating
      spare_.reserve(2 * made_ + 8);
      limbo_.reserve(2 * made_ + 8);
    }
    ++made_;
    return fresh.release();
  }

  /// An adopted state that was never published (its communicator could not be registered).
  void give_back(comm_state* cs) noexcept { spare_.push_back(cs); }

  /// Makes `cs` the live state of communicator index `h` (h < max_plugin_comms), in a new
  /// generation: events may find it from now on.
  void publish(comm_state& cs, comm_handle h) noexcept {
    cs.handle = h;
    cs.gen = ++comm_gen_;
    slots_[h].store(&cs, std::memory_order_release);
  }

  /// Unpublishes `cs`, waits up to `budget` for the callbacks still inside it, and parks it.
  /// Returns false when `cs` was not live (retired twice); else `inflight` gets the ops it still
  /// had in flight (exact when the wait finished in time).
  bool retire(comm_state& cs, std::chrono::milliseconds budget, std::uint32_t& inflight) noexcept {
    if (cs.handle >= max_plugin_comms || slots_[cs.handle].load(std::memory_order_relaxed) != &cs) return false;
    slots_[cs.handle].store(nullptr, std::memory_order_seq_cst);
    const auto deadline = std::chrono::steady_clock::now() + budget;
    const bool quiet = gate_.quiesce(budget) && channels_quiet(cs, deadline);
    inflight = cs.ops.inflight();
    if (!quiet) {
      limbo_.push_back(&cs);
      return true;
    }
    spare_.push_back(&cs);
    const auto now = std::chrono::steady_clock::now();  // limbo_: unpublished before this quiesce began
    for (comm_state*& old : limbo_)
      if (channels_quiet(*old, now)) spare_.push_back(std::exchange(old, nullptr));
    std::erase(limbo_, nullptr);
    return true;
  }

  /// States waiting in limbo (a reader was preempted inside when they retired).
  std::size_t in_limbo() const noexcept { return limbo_.size(); }
  /// States parked for reuse.
  std::size_t spare() const noexcept { return spare_.size(); }

 private:
  /// After the unpublish and the gate's quiesce: waits (until `deadline`) until no KernelCh event
  /// is inside an op of `cs` (each mark seen odd has changed). True: none is.
  static bool channels_quiet(const comm_state& cs, std::chrono::steady_clock::time_point deadline) noexcept {
    for (std::uint32_t i = 0; i < cs.ops.size(); ++i) {
      const std::atomic<std::uint32_t>& m = cs.ops[i].ch_inside;
      const std::uint32_t seen = m.load(std::memory_order_seq_cst);
      if (!(seen & 1)) continue;
      while (m.load(std::memory_order_acquire) == seen) {
        if (std::chrono::steady_clock::now() >= deadline) return false;
        std::this_thread::yield();
      }
    }
    return true;
  }

  std::array<std::atomic<comm_state*>, max_plugin_comms> slots_{};
  detail::reader_gate gate_;
  std::uint32_t comm_gen_ = 0;      // under the caller's lock
  std::uint32_t made_ = 0;          // states ever made (spare_ and limbo_ have room for all)
  std::vector<comm_state*> spare_;  // retired and quiet: reused by the next adopt
  std::vector<comm_state*> limbo_;  // retired while a reader was inside: parked by a later retire
};

}  // namespace ncclinsp::plugin
