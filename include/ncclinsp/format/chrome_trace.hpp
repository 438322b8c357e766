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
#include "ncclinsp/format/text.hpp"
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
/// Nanoseconds as microseconds with 3 decimals, exactly (no double rounding for large epochs).
inline void append_us(std::string& out, std::uint64_t ns) {
  append_int(out, ns / 1000);
  const auto frac = static_cast<unsigned>(ns % 1000);
  out += '.';
  out += static_cast<char>('0' + frac / 100);
  out += static_cast<char>('0' + frac / 10 % 10);
  out += static_cast<char>('0' + frac % 10);
}

inline void append_meta(std::string& out, bool& first, std::string_view what, std::uint32_t pid, const std::uint32_t* tid,
                        std::string_view arg_key, std::string_view str_value, std::int64_t int_value, bool is_string) {
  out += first ? "\n" : ",\n";
  first = false;
  out += "{\"ph\":\"M\",\"name\":\"";
  out += what;
  out += "\",\"pid\":";
  append_int(out, pid);
  if (tid) {
    out += ",\"tid\":";
    append_int(out, *tid);
  }
  out += ",\"args\":{\"";
  out += arg_key;
  out += "\":";
  if (is_string)
    append_json_string(out, str_value);
  else
    append_int(out, int_value);
  out += "}}";
}
}  // namespace detail

/// Appends one complete ("X") event object, without a separator.
inline void write_trace_event(std::string& out, const trace_event& e) {
  const op_record& op = e.op;
  const std::uint64_t dur = op.duration_ns();
  const bool valid = op.bytes_valid && dur > 0;
  out += "{\"ph\":\"X\",\"name\":";
  append_json_string(out, to_string(op.fn));
  out += ",\"cat\":\"";
  out += e.channel >= 0 ? "channel" : is_p2p(op.fn) ? "p2p" : "coll";
  out += "\",\"pid\":";
  append_int(out, e.pid);
  out += ",\"tid\":";
  append_int(out, e.tid);
  out += ",\"ts\":";
  detail::append_us(out, op.start_ns);
  out += ",\"dur\":";
  detail::append_us(out, dur);
  out += ",\"args\":{\"comm\":\"0x";
  append_hex64(out, e.comm_hash);
  out += "\",\"rank\":";
  append_int(out, e.rank);
  out += ",\"n_ranks\":";
  append_int(out, e.nranks);
  out += ",\"seq\":";
  append_int(out, op.seq);
  if (e.channel >= 0) {  // a channel's share of bytes is unknown: no bandwidth for its span
    out += ",\"channel\":";
    append_int(out, e.channel);
    out += ",\"timing\":";
    append_json_string(out, to_string(op.timing));
    out += "}}";
    return;
  }
  out += ",\"bytes\":";
  append_int(out, op.bytes);
  out += ",\"busbw_gbs\":";
  append_fixed(out, valid ? busbw_gbs(op.fn, op.bytes, e.nranks, dur) : 0.0, 3);
  out += ",\"algbw_gbs\":";
  append_fixed(out, valid ? algbw_gbs(op.fn, op.bytes, e.nranks, dur) : 0.0, 3);
  out += ",\"dtype\":";
  append_json_string(out, to_string(op.dt));
  if (is_p2p(op.fn)) {
    out += ",\"peer\":";
    append_int(out, op.peer);
  } else {
    out += ",\"algo\":";
    append_json_string(out, to_string(op.alg));
    out += ",\"proto\":";
    append_json_string(out, to_string(op.pro));
  }
  out += ",\"channels\":";
  append_int(out, op.channels);
  out += ",\"timing\":";
  append_json_string(out, to_string(op.timing));
  if (op.user_tag) {
    out += ",\"user_tag\":";
    append_int(out, op.user_tag);
  }
  out += "}}";
}

/// A whole trace file: {"traceEvents":[metadata..., events...], "displayTimeUnit":"ms",
/// "otherData":{...}}. `other` is a list of string key/value pairs (host, node, pid, ...).
inline void write_chrome_trace(std::string& out, std::span<const trace_process> procs, std::span<const trace_thread> threads,
                               std::span<const trace_event> events,
                               std::span<const std::pair<std::string, std::string>> other = {}) {
  out += "{\"traceEvents\":[";
  bool first = true;
  for (const auto& p : procs) {
    detail::append_meta(out, first, "process_name", p.pid, nullptr, "name", p.name, 0, true);
    detail::append_meta(out, first, "process_sort_index", p.pid, nullptr, "sort_index", {}, p.pid, false);
  }
  for (const auto& t : threads) {
    detail::append_meta(out, first, "thread_name", t.pid, &t.tid, "name", t.name, 0, true);
    detail::append_meta(out, first, "thread_sort_index", t.pid, &t.tid, "sort_index", {}, t.sort_index, false);
  }
  for (const auto& e : events) {
    out += first ? "\n" : ",\n";
    first = false;
    write_trace_event(out, e);
  }
  out += "\n],\"displayTimeUnit\":\"ms\",\"otherData\":{\"generator\":\"ncclinsp\"";
  for (const auto& [k, v] : other) {
    out += ',';
    append_json_string(out, k);
    out += ':';
    append_json_string(out, v);
  }
  out += "}}\n";
}

}  // namespace ncclinsp::format
