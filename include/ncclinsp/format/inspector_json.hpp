#pragma once
/// Snapshot -> JSON lines in NVIDIA Inspector's record layout (`header`, `metadata`,
/// `coll_perf` / `p2p_perf`), format v4.3 (with `coll_algo`/`coll_proto` and user tags as decimal
/// strings), plus a `dump_stats` record per communicator and export with totals and drops.
/// Differences from Inspector, on purpose: the full 16-digit communicator hash, exec time with
/// sub-microsecond decimals, the op's own start and completion times (`*_start_ts_ns`,
/// `*_end_ts_ns`, on the op's timing clock), the real channel count, and `metadata.node` (the node
/// label, which differs from `hostname` under NCCLINSP_NODE_NAME).
/// Thread-safety: pure functions (cold path).

#include <algorithm>
#include <cstdint>
#include <string>
#include <string_view>
#include <utility>

#include "ncclinsp/bandwidth.hpp"
#include "ncclinsp/format/json_writer.hpp"
#include "ncclinsp/proxy_stats.hpp"
#include "ncclinsp/snapshot.hpp"
#include "ncclinsp/version.hpp"

namespace ncclinsp::format {

inline constexpr const char* inspector_format_version = "v4.3";

namespace detail {
/// Opens a record's object and writes `header` and `metadata`; the caller writes the rest.
inline void json_header_metadata(json_writer& w, const snapshot& snap, const comm_desc& d) {
  w.begin_object().key("header").begin_object();
  w.key("id").hex64(d.hash);
  w.key("comm_name").value(d.name.empty() ? std::string_view("unknown") : std::string_view(d.name));
  w.key("rank").value(d.rank).key("n_ranks").value(d.nranks).key("nnodes").value(d.nnodes);
  w.end_object().key("metadata").begin_object();
  w.key("inspector_output_format_version").value(inspector_format_version);
  w.key("git_rev").value("ncclinsp-" NCCLINSP_VERSION_STRING);
  w.key("rec_mechanism").value("nccl_profiler_interface");
  w.key("dump_timestamp_us").value(snap.time_unix_ns / 1000);
  w.key("hostname").value(snap.identity.hostname);
  w.key("pid").value(snap.identity.pid);
  if (!snap.identity.node.empty())
    w.key("node").value(snap.identity.node);  // ncclinsp extension: the node label (NCCLINSP_NODE_NAME or host name)
  w.end_object();
}

/// "<p>_<name>" (a record key: coll_sn, p2p_peer, ...) in a caller's buffer.
class prefixed_key {
 public:
  explicit prefixed_key(std::string_view p) : n_(p.size() + 1) {
    p.copy(buf_, p.size());
    buf_[p.size()] = '_';
  }
  std::string_view operator()(std::string_view name) {
    const std::size_t len = std::min(name.size(), sizeof buf_ - n_);
    name.copy(buf_ + n_, len);
    return {buf_, n_ + len};
  }

 private:
  char buf_[64];
  std::size_t n_;
};

/// Inspector's verbose block: `event_trace_sn` (callback order) and `event_trace_ts` (callback
/// wall time in us, as Inspector's gettimeofday), same shape; channel ids are NCCL's real ones.
/// Our additions: `kernel_gpu_start_ns`/`kernel_gpu_stop_ns` per channel in `event_trace_ts`.
inline void append_event_trace(json_writer& w, std::string_view p, const op_trace& t) {
  for (const bool ts : {false, true}) {
    w.key(ts ? "event_trace_ts" : "event_trace_sn").begin_object();
    const std::string_view suffix = ts ? "_ts" : "_sn";
    char name[64];
    auto field = [&](std::string_view first, std::string_view second, std::uint64_t sn, std::uint64_t cpu_ns) {
      std::size_t n = 0;
      for (std::string_view part : {first, second, suffix})
        n += part.copy(name + n, std::min(part.size(), sizeof name - n));
      w.key(std::string_view(name, n)).value(ts ? cpu_ns / 1000 : sn);
    };
    field(p, "_start", t.start_sn, t.start_cpu_ns);
    field(p, "_stop", t.stop_sn, t.stop_cpu_ns);
    w.key("kernel_events").begin_array();
    for (std::size_t i = 0; i < t.n_channels && i < max_traced_channels; ++i) {
      const channel_trace& c = t.channels[i];
      w.begin_object().key("channel_id").value(c.channel);
      field("kernel_start", {}, c.start_sn, c.start_cpu_ns);
      field("kernel_stop", {}, c.stop_sn, c.stop_cpu_ns);
      field("kernel_record", {}, c.record_sn, c.record_cpu_ns);
      if (ts) w.key("kernel_gpu_start_ns").value(c.gpu_start_ns).key("kernel_gpu_stop_ns").value(c.gpu_stop_ns);
      w.end_object();
    }
    w.end_array().end_object();
  }
}
}  // namespace detail

/// The part of a record line that depends only on the communicator and the snapshot (`header`
/// and `metadata`, the record's object left open): writers of many records compute it once per
/// communicator and pass it to write_inspector_record().
inline std::string inspector_record_prefix(const snapshot& snap, const comm_desc& d) {
  std::string out;
  json_writer w(out);
  detail::json_header_metadata(w, snap, d);
  return out;
}

/// One completed op as one JSON line (newline included). `verbose` adds Inspector's event traces when the record carries an
/// op_trace (NCCL_INSPECTOR_DUMP_VERBOSE=1 in the plugin). `prefix`: inspector_record_prefix() of
/// the record's communicator, or empty to compute it here.
inline void write_inspector_record(std::string& out, const snapshot& snap, const record_entry& r, bool verbose = false,
                                   std::string_view prefix = {}) {
  const comm_desc& d = snap.comms[r.comm].desc;
  const op_record& op = r.op;
  const bool p2p = is_p2p(op.fn);
  const std::string_view p = p2p ? "p2p" : "coll";
  const std::uint64_t dur = op.duration_ns();
  const bool valid = op.bytes_valid && dur > 0;
  json_writer w(out);
  if (prefix.empty())
    detail::json_header_metadata(w, snap, d);
  else
    w.resume_object(prefix);
  detail::prefixed_key key(p);
  w.key(p2p ? "p2p_perf" : "coll_perf").begin_object();
  w.key(p).value(to_string(op.fn));
  w.key(key("sn")).value(op.seq);
  if (p2p) w.key(key("peer")).value(op.peer);
  w.key(key("msg_size_bytes")).value(op.bytes);
  w.key(key("exec_time_us")).fixed(static_cast<double>(dur) / 1e3, 3);
  w.key(key("timing_source")).value(to_string(op.timing));
  w.key(key("algobw_gbs")).fixed(valid ? algbw_gbs(op.fn, op.bytes, d.nranks, dur) : 0.0, 6);
  w.key(key("busbw_gbs")).fixed(valid ? busbw_gbs(op.fn, op.bytes, d.nranks, dur) : 0.0, 6);
  if (!p2p) {
    w.key(key("algo")).value(to_string(op.alg));
    w.key(key("proto")).value(op.pro == proto::none ? std::string_view() : to_string(op.pro));
  }
  w.key(key("user_tag")).quoted(op.user_tag);
  w.key(key("n_channels")).value(op.channels);
  w.key(key("start_ts_ns")).value(op.start_ns);
  w.key(key("end_ts_ns")).value(op.end_ns);
  w.key(key("valid")).value(valid);
  if (verbose && r.trace >= 0 && static_cast<std::size_t>(r.trace) < snap.traces.size())
    detail::append_event_trace(w, p, snap.traces[static_cast<std::size_t>(r.trace)]);
  w.end_object().end_object();
  out += '\n';
}

/// Per-communicator totals and drops for this export (Inspector's `dump_stats` marker, extended).
/// `dropped_total` = this comm's collector drops (cumulative) + the sink's drops since its last
/// export. With `sink_dropped_cumulative` (the json sink passes it) two unambiguous fields follow:
/// `ring_dropped_total` (this comm's collector drops, cumulative) and `sink_dropped_total` (the
/// process's sink drops, cumulative: the same value in every comm's record).
inline void write_dump_stats(std::string& out, const snapshot& snap, const comm_snapshot& c,
                             std::uint64_t records_written, std::uint64_t records_dropped_by_sink,
                             std::uint64_t sink_dropped_cumulative = UINT64_MAX) {
  json_writer w(out);
  detail::json_header_metadata(w, snap, c.desc);
  std::uint64_t dropped = records_dropped_by_sink;
  for (auto v : c.dropped) dropped += v;
  w.key("dump_stats").begin_object();
  w.key("records").value(records_written);
  w.key("completed_total").value(c.completed);
  w.key("dropped_total").value(dropped);
  w.key("filtered_min_size_total").value(c.filtered[0]);
  w.key("filtered_no_gpu_timing_total").value(c.filtered[1]);
  w.key("abandoned_total").value(c.abandoned);
  w.key("inflight").value(c.inflight);
  w.key("final").value(snap.final);
  if (sink_dropped_cumulative != UINT64_MAX) {
    w.key("ring_dropped_total").value(dropped - records_dropped_by_sink);
    w.key("sink_dropped_total").value(sink_dropped_cumulative);
  }
  w.end_object().end_object();
  out += '\n';
}

/// Network proxy accounting of one communicator on this rank (NCCLINSP_PROXY=1; ncclinsp
/// extension, no Inspector equivalent): cumulative per peer rank and direction, the nanoseconds its
/// sampled network steps spent per ProxyStep state, their bytes and count, as the
/// ncclinsp_proxy_* counters. One line per communicator and export; ncclinsp-report names a slow
/// host from them (docs/diagnosis.md).
inline void write_proxy_stats(std::string& out, const snapshot& snap, std::uint32_t comm) {
  json_writer w(out);
  bool any = false;
  for (const auto& p : snap.proxy) {
    if (p.comm != comm) continue;
    if (!std::exchange(any, true)) {
      detail::json_header_metadata(w, snap, snap.comms[comm].desc);
      w.key("proxy_stats").begin_object().key("peers").begin_array();
    }
    w.begin_object().key("peer").value(p.peer).key("direction").value(p.send ? "send" : "recv");
    const std::size_t first = p.send ? 0 : proxy_send_states;
    for (std::size_t k = 0; k < (p.send ? proxy_send_states : proxy_recv_states); ++k) {
      char name[48];
      const std::string_view wait = proxy_wait_names[first + k];
      const std::size_t n = wait.copy(name, sizeof name - 3);
      std::string_view("_ns").copy(name + n, 3);
      w.key(std::string_view(name, n + 3)).value(p.wait_ns[k]);
    }
    w.key("bytes").value(p.bytes).key("steps").value(p.steps).end_object();
  }
  if (any) {
    w.end_array().end_object().end_object();
    out += '\n';
  }
}

}  // namespace ncclinsp::format
