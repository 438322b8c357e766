#pragma once
/// Thin timed wrappers around NCCL calls for frameworks that call NCCL themselves: each call is
/// measured on its stream with CUDA events (ncclinsp/cuda/event_timer.hpp) and recorded in an
/// inspector, with the same metric names and labels as the NCCL profiler plugin.
///
///   nccl_timed::comm c{nccl_comm, insp.add_comm({...}), &timer};   // one timer per device
///   nccl_timed::AllReduce(c, send, recv, n, ncclBfloat16, ncclSum, stream);
///
/// Groups: inside ncclGroupStart/End NCCL launches nothing until the outermost ncclGroupEnd, so
/// use nccl_timed::GroupStart/GroupEnd: the ops of a group are timed together (start events
/// recorded just before ncclGroupEnd, stop events just after), and each op of the group reports
/// the group's span. Send/Recv are always grouped in practice.
/// A failed call (neither ncclSuccess nor ncclInProgress) is not recorded.
/// Thread-safety: as NCCL (one thread per communicator at a time); group state is thread-local.

#include <cuda_runtime_api.h>
#include <nccl.h>

#include <ncclinsp/cuda/event_timer.hpp>
#include <ncclinsp/inspector.hpp>

#include <array>
#include <cstdint>
#include <vector>

namespace nccl_timed {

using timer = ncclinsp::cuda::event_timer<ncclinsp::inspector>;

/// An NCCL communicator with its inspector handle and its device's timer.
struct comm {
  ncclComm_t nccl = nullptr;
  ncclinsp::comm_handle handle = ncclinsp::no_index;
  timer* t = nullptr;
  std::array<std::uint64_t, ncclinsp::func_count> seq{};  ///< per-function sequence numbers (as NCCL's seqNumber)
};

inline ncclinsp::dtype to_dtype(ncclDataType_t t) noexcept {
  switch (t) {
    case ncclInt8:
      return ncclinsp::dtype::int8;
    case ncclUint8:
      return ncclinsp::dtype::uint8;
    case ncclInt32:
      return ncclinsp::dtype::int32;
    case ncclUint32:
      return ncclinsp::dtype::uint32;
    case ncclInt64:
      return ncclinsp::dtype::int64;
    case ncclUint64:
      return ncclinsp::dtype::uint64;
    case ncclFloat16:
      return ncclinsp::dtype::float16;
    case ncclFloat32:
      return ncclinsp::dtype::float32;
    case ncclFloat64:
      return ncclinsp::dtype::float64;
    case ncclBfloat16:
      return ncclinsp::dtype::bfloat16;
#if NCCL_VERSION_CODE >= 22400
    case ncclFloat8e4m3:
      return ncclinsp::dtype::float8e4m3;
    case ncclFloat8e5m2:
      return ncclinsp::dtype::float8e5m2;
#endif
    default:
      return ncclinsp::dtype::unknown;
  }
}

namespace detail {

struct queued {
  comm* c;
  cudaStream_t stream;
  ncclinsp::op_record op;
  timer::token tok;
};
struct group_state {
  int depth = 0;
  std::vector<queued> ops;
};
inline group_state& group() {
  thread_local group_state g;
  return g;
}

inline bool enqueued(ncclResult_t r) noexcept { return r == ncclSuccess || r == ncclInProgress; }

/// Times `call` (the NCCL call) for op `f` on `stream`.
template <class Call>
ncclResult_t timed(comm& c, ncclinsp::func f, std::size_t count, ncclDataType_t dt, int peer, cudaStream_t stream,
                   Call&& call) {
  ncclinsp::op_record op = ncclinsp::make_op(f, count, to_dtype(dt), 0, 0);
  op.seq = c.seq[static_cast<std::size_t>(f)]++;
  op.peer = peer;
  if (!ncclinsp::is_p2p(f)) {
    op.alg = ncclinsp::algo::unknown;  // NCCL chooses it internally; the profiler plugin sees it, a wrapper does not
    op.pro = ncclinsp::proto::unknown;
  }
  group_state& g = group();
  if (g.depth > 0) {  // launched at the outermost GroupEnd: time it there
    const ncclResult_t r = call();
    if (enqueued(r)) g.ops.push_back({&c, stream, op, {}});
    return r;
  }
  auto tok = c.t->start(c.handle, stream, f, op.bytes);
  const ncclResult_t r = call();
  if (enqueued(r))
    c.t->stop(tok, stream, op);
  else
    c.t->abort(tok);
  return r;
}

}  // namespace detail

inline ncclResult_t GroupStart() {
  ++detail::group().depth;
  return ncclGroupStart();
}

inline ncclResult_t GroupEnd() {
  detail::group_state& g = detail::group();
  if (g.depth == 0 || --g.depth > 0) return ncclGroupEnd();
  for (auto& q : g.ops) q.tok = q.c->t->start(q.c->handle, q.stream, q.op.fn, q.op.bytes);
  const ncclResult_t r = ncclGroupEnd();
  for (auto& q : g.ops) {
    if (detail::enqueued(r))
      q.c->t->stop(q.tok, q.stream, q.op);
    else
      q.c->t->abort(q.tok);
  }
  g.ops.clear();
  return r;
}

inline ncclResult_t AllReduce(comm& c, const void* send, void* recv, std::size_t count, ncclDataType_t dt,
                              ncclRedOp_t op, cudaStream_t s) {
  return detail::timed(c, ncclinsp::func::all_reduce, count, dt, -1, s,
                       [&] { return ncclAllReduce(send, recv, count, dt, op, c.nccl, s); });
}
/// `sendcount` elements per rank (the plugin reports AllGather bytes as the send bytes too).
inline ncclResult_t AllGather(comm& c, const void* send, void* recv, std::size_t sendcount, ncclDataType_t dt,
                              cudaStream_t s) {
  return detail::timed(c, ncclinsp::func::all_gather, sendcount, dt, -1, s,
                       [&] { return ncclAllGather(send, recv, sendcount, dt, c.nccl, s); });
}
/// `recvcount` elements per rank (the plugin reports ReduceScatter bytes as the receive bytes).
inline ncclResult_t ReduceScatter(comm& c, const void* send, void* recv, std::size_t recvcount, ncclDataType_t dt,
                                  ncclRedOp_t op, cudaStream_t s) {
  return detail::timed(c, ncclinsp::func::reduce_scatter, recvcount, dt, -1, s,
                       [&] { return ncclReduceScatter(send, recv, recvcount, dt, op, c.nccl, s); });
}
inline ncclResult_t Send(comm& c, const void* buf, std::size_t count, ncclDataType_t dt, int peer, cudaStream_t s) {
  return detail::timed(c, ncclinsp::func::send, count, dt, peer, s,
                       [&] { return ncclSend(buf, count, dt, peer, c.nccl, s); });
}
inline ncclResult_t Recv(comm& c, void* buf, std::size_t count, ncclDataType_t dt, int peer, cudaStream_t s) {
  return detail::timed(c, ncclinsp::func::recv, count, dt, peer, s,
                       [&] { return ncclRecv(buf, count, dt, peer, c.nccl, s); });
}

}  // namespace nccl_timed
