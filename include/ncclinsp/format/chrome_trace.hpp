#pragma once
/// Op records -> Chrome trace-event JSON (the "JSON Object Format" that chrome://tracing and
/// Perfetto's UI open). One track per (process, thread): pid = a rank's GPU (or the node, see
/// `trace_grouping`), tid = a communicator, or one channel of it; every op is one complete ("X")
/// event with `ts`/`dur` in microseconds on the op's own clock and args {comm, hash, rank, seq,
/// bytes, busbw_gbs, ...}; a channel's span of an op (from its op_trace) is one more on the
/// channel's track, with `channel` in its args.
/// Track names come from "M" metadata events (process_name, thread_name, *_sort_index).
/// Thread-safety: pure functions appending to a caller-owned string (cold path).

#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "ncclinsp/bandwidth.hpp"
#include "ncclinsp/format/json_writer.hpp"
#include "ncclinsp/model.hpp"
#include "ncclinsp/snapshot.hpp"

namespace ncclinsp::format {

/// One track owner (a trace "process"): a GPU of this process, or the whole node.
struct trace_process {
  std::uint32_t pid = 0;
  std::string name{};  ///< "node0 GPU 3 (GPU-1234...)"
};

/// One track (a trace "thread"): a communicator as seen by one rank, or one of its channels.
struct trace_thread {
  std::uint32_t pid = 0;
  std::uint32_t tid = 0;
  std::string name{};            ///< "tp 0x0123... rank 1/4", "tp 0x0123... rank 1/4 ch 3"
  std::uint32_t sort_index = 0;  ///< display order within the process
};

/// One op on one track; everything needed to render it (no reference into a snapshot).
struct trace_event {
  std::uint32_t pid = 0;
  std::uint32_t tid = 0;
  std::uint64_t comm_hash = 0;
  std::int32_t rank = 0;
  std::int32_t nranks = 1;
  std::int16_t channel = -1;  ///< >= 0: this channel's span of the op (op.start_ns/end_ns are the channel's)
  op_record op{};
};

namespace detail {
inline void append_meta(json_writer& w, std::string_view what, std::uint32_t pid, const std::uint32_t* tid) {
  w.begin_object().key("ph").value("M").key("name").value(what).key("pid").value(pid);
  if (tid) w.key("tid").value(*tid);
  w.key("args").begin_object();
}
}  // namespace detail

/// Writes one complete ("X") event object as the next value of `w`.
inline void write_trace_event(json_writer& w, const trace_event& e) {
  const op_record& op = e.op;
  const std::uint64_t dur = op.duration_ns();
  const bool valid = op.bytes_valid && dur > 0;
  w.begin_object().key("ph").value("X").key("name").value(to_string(op.fn));
  w.key("cat").value(e.channel >= 0 ? "channel" : is_p2p(op.fn) ? "p2p" : "coll");
  w.key("pid").value(e.pid).key("tid").value(e.tid);
  w.key("ts")
      .scaled(op.start_ns, 3)
      .key("dur")
      .scaled(dur, 3);  // microseconds, exactly (no double rounding for large epochs)
  w.key("args").begin_object().key("comm").hex64(e.comm_hash);
  w.key("rank").value(e.rank).key("n_ranks").value(e.nranks).key("seq").value(op.seq);
  if (e.channel >= 0) {  // a channel's share of bytes is unknown: no bandwidth for its span
    w.key("channel").value(e.channel).key("timing").value(to_string(op.timing));
    w.end_object().end_object();
    return;
  }
  w.key("bytes").value(op.bytes);
  w.key("busbw_gbs").fixed(valid ? busbw_gbs(op.fn, op.bytes, e.nranks, dur) : 0.0, 3);
  w.key("algbw_gbs").fixed(valid ? algbw_gbs(op.fn, op.bytes, e.nranks, dur) : 0.0, 3);
  w.key("dtype").value(to_string(op.dt));
  if (is_p2p(op.fn))
    w.key("peer").value(op.peer);
  else
    w.key("algo").value(to_string(op.alg)).key("proto").value(to_string(op.pro));
  w.key("channels").value(op.channels).key("timing").value(to_string(op.timing));
  if (op.user_tag) w.key("user_tag").value(op.user_tag);
  w.end_object().end_object();
}

/// Appends one complete ("X") event object, without a separator.
inline void write_trace_event(std::string& out, const trace_event& e) {
  json_writer w(out);
  write_trace_event(w, e);
}

/// A whole trace file: {"traceEvents":[metadata..., events...], "displayTimeUnit":"ms",
/// "otherData":{...}}. `other` is a list of string key/value pairs (host, node, pid, ...).
inline void write_chrome_trace(std::string& out, std::span<const trace_process> procs,
                               std::span<const trace_thread> threads, std::span<const trace_event> events,
                               std::span<const std::pair<std::string, std::string>> other = {}) {
  json_writer w(out);
  w.begin_object().key("traceEvents").begin_array({"\n", "\n"});  // one event a line
  for (const auto& p : procs) {
    detail::append_meta(w, "process_name", p.pid, nullptr);
    w.key("name").value(p.name).end_object().end_object();
    detail::append_meta(w, "process_sort_index", p.pid, nullptr);
    w.key("sort_index").value(p.pid).end_object().end_object();
  }
  for (const auto& t : threads) {
    detail::append_meta(w, "thread_name", t.pid, &t.tid);
    w.key("name").value(t.name).end_object().end_object();
    detail::append_meta(w, "thread_sort_index", t.pid, &t.tid);
    w.key("sort_index").value(t.sort_index).end_object().end_object();
  }
  for (const auto& e : events) write_trace_event(w, e);
  w.end_array().key("displayTimeUnit").value("ms");
  w.key("otherData").begin_object().key("generator").value("ncclinsp");
  for (const auto& [k, v] : other) w.key(k).value(v);
  w.end_object().end_object();
  out += '\n';
}

}  // namespace ncclinsp::format
