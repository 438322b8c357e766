#pragma once
/// Copy-engine collectives (ABI v6+: the CeColl, CeSync and CeBatch descriptors): the events NCCL emits
/// around their host enqueue (enqueue.cc ceCollTaskAppend, ce_coll.cc ncclLaunchCeColl), for
/// driver_enqueue.hpp.
/// Thread-safety: runs on the rank's user thread; touches only the caller's sequence counter.

#include "driver_types.hpp"
#include "event_emitter.hpp"
#include "nccl_vocab.hpp"

#include <cstddef>
#include <cstdint>
#include <span>

namespace ncclinsp::sim::detail {

/// CE collectives (v6+): CollApi → CeColl (→ CeSync, CeBatch); never Coll/KernelCh.
template <int V>
void ce_collectives(const emitter<V>& e, std::span<const op_desc> ops, std::span<pending_op> out, int mask,
                    std::uint64_t& ce_seq) {
  typename emitter<V>::descr d;
  const comm_config& cfg = e.cfg;
  for (std::size_t i = 0; i < ops.size(); ++i) {
    const op_desc& op = ops[i];
    pending_op& p = out[i];
    if (op.kind != op_kind::ce_coll || p.no_task) continue;  // taskAppend returned before ceCollTaskAppend
    p.seq = ce_seq++;
    if (!(mask & gate::ce_coll)) continue;
    e.clear(d);
    d.type = abi::ev_ce_coll;
    d.parentObj = p.api_handle;
    d.rank = cfg.rank;
    d.ceColl.seqNumber = p.seq;
    d.ceColl.func = func_name(op.func);
    d.ceColl.sendBuff = op.send_buff;
    d.ceColl.recvBuff = op.recv_buff;
    d.ceColl.count = op.count;
    d.ceColl.root = op.root;
    d.ceColl.datatype = dtype_name(op.dtype);
    d.ceColl.syncStrategy = "UC";
    d.ceColl.ceSeqNum = std::uint32_t(p.seq);
    d.ceColl.stream = op.stream;
    if constexpr (V >= 7) d.ceColl.userTag = op.user_tag;
    p.ce_handle = e.start(d);
    const int peers = cfg.n_ranks > 1 ? cfg.n_ranks - 1 : 1;
    if (p.ce_handle && (mask & abi::ev_ce_sync)) {
      e.clear(d);
      d.type = abi::ev_ce_sync;
      d.parentObj = p.ce_handle;
      d.rank = cfg.rank;
      d.ceCollSync.isComplete = false;
      d.ceCollSync.nRanks = cfg.n_ranks;
      e.stop(e.start(d));
    }
    if (p.ce_handle && (mask & abi::ev_ce_batch)) {
      e.clear(d);
      d.type = abi::ev_ce_batch;
      d.parentObj = p.ce_handle;
      d.rank = cfg.rank;
      d.ceCollBatch.numOps = peers;
      d.ceCollBatch.totalBytes = p.bytes * std::size_t(peers);
      d.ceCollBatch.useIntraSync = false;
      e.stop(e.start(d));
    }
    e.stop(p.ce_handle);
  }
}

}  // namespace ncclinsp::sim::detail
