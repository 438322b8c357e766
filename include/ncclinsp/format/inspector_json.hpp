#pragma once
/// Snapshot -> JSON lines in NVIDIA Inspector's record layout (`header`, `metadata`,
/// `coll_perf` / `p2p_perf`), format v4.3 (with `coll_algo`/`coll_proto` and user tags as decimal
/// strings), plus a `dump_stats` record per communicator and export with totals and drops.
/// Differences from Inspector, on purpose: the full 16-digit communicator hash, exec time with
/// sub-microsecond decimals, the op's own start and completion times (`*_start_ts_ns`,
/// `*_end_ts_ns`, on the op's timing clock), the real channel count, and `metadata.node` (the node
/// label, which differs from `hostname` under NCCLINSP_NODE_NAME).
/// Thread-safety: pure functions (cold path).

#include <cstdint>
#include <string>
#include <string_view>

#include "ncclinsp/bandwidth.hpp"
#include "ncclinsp/format/text.hpp"
#include "ncclinsp/proxy_stats.hpp"
#include "ncclinsp/snapshot.hpp"
#include "ncclinsp/version.hpp"

namespace ncclinsp::format {

inline constexpr const char* inspector_format_version = "v4.3";

namespace detail {
inline void json_header_metadata(std::string& out, const snapshot& snap, const comm_desc& d) {
  out += "{\"header\":{\"id\":\"0x";
  append_hex64(out, d.hash);
  out += "\",\"comm_name\":";
  append_json_string(out, d.name.empty() ? std::string_view("unknown") : std::string_view(d.name));
  out += ",\"rank\":";
  append_int(out, d.rank);
  out += ",\"n_ranks\":";
  append_int(out, d.nranks);
  out += ",\"nnodes\":";
  append_int(out, d.nnodes);
  out += "},\"metadata\":{\"inspector_output_format_version\":\"";
  out += inspector_format_version;
  out += "\",\"git_rev\":\"ncclinsp-" NCCLINSP_VERSION_STRING "\",\"rec_mechanism\":\"nccl_profiler_interface\",\"dump_timestamp_us\":";
  append_int(out, snap.time_unix_ns / 1000);
  out += ",\"hostname\":";
  append_json_string(out, snap.identity.hostname);
  out += ",\"pid\":";
  append_int(out, snap.identity.pid);
  if (!snap.identity.node.empty()) {  // ncclinsp extension: the node label (NCCLINSP_NODE_NAME or host name)
    out += ",\"node\":";
    append_json_string(out, snap.identity.node);
  }
  out += "}";
}
}  // namespace detail

namespace detail {
/// One of our own enum names (plain ASCII, nothing to escape) as a JSON string.
inline void append_json_name(std::string& out, std::string_view name) {
  out += '"';
  out += name;
  out += '"';
}

/// Inspector's verbose block: `event_trace_sn` (callback order) and `event_trace_ts` (callback
/// wall time in us, as Inspector's gettimeofday), same shape; channel ids are NCCL's real ones.
/// Our additions: `kernel_gpu_start_ns`/`kernel_gpu_stop_ns` per channel in `event_trace_ts`.
inline void append_event_trace(std::string& out, std::string_view p, const op_trace& t) {
  for (const bool ts : {false, true}) {
    out += ts ? ",\"event_trace_ts\":{\"" : ",\"event_trace_sn\":{\"";
    const std::string_view suffix = ts ? "_ts\":" : "_sn\":";
    auto field = [&](std::string_view name, std::uint64_t sn, std::uint64_t cpu_ns, bool first) {
      if (!first) out += ",\"";
      out += name;
      out += suffix;
      append_int(out, ts ? cpu_ns / 1000 : sn);
    };
    out += p;
    field("_start", t.start_sn, t.start_cpu_ns, true);
    out += ",\"";
    out += p;
    field("_stop", t.stop_sn, t.stop_cpu_ns, true);
    out += ",\"kernel_events\":[";
    for (std::size_t i = 0; i < t.n_channels && i < max_traced_channels; ++i) {
      const channel_trace& c = t.channels[i];
      out += i ? ",{\"channel_id\":" : "{\"channel_id\":";
      append_int(out, c.channel);
      out += ",\"";
      field("kernel_start", c.start_sn, c.start_cpu_ns, true);
      field("kernel_stop", c.stop_sn, c.stop_cpu_ns, false);
      field("kernel_record", c.record_sn, c.record_cpu_ns, false);
      if (ts) {
        out += ",\"kernel_gpu_start_ns\":";
        append_int(out, c.gpu_start_ns);
        out += ",\"kernel_gpu_stop_ns\":";
        append_int(out, c.gpu_stop_ns);
      }
      out += '}';
    }
    out += "]}";
  }
}
}  // namespace detail

/// The part of a record line that depends only on the communicator and the snapshot (`header`
/// and `metadata`): writers of many records compute it once per communicator and pass it to
/// write_inspector_record().
inline std::string inspector_record_prefix(const snapshot& snap, const comm_desc& d) {
  std::string out;
  detail::json_header_metadata(out, snap, d);
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
  if (prefix.empty())
    detail::json_header_metadata(out, snap, d);
  else
    out += prefix;
  auto key = [&](std::string_view k) {
    out += ",\"";
    out += p;
    out += '_';
    out += k;
    out += "\":";
  };
  out += ",\"";
  out += p;
  out += "_perf\":{\"";
  out += p;
  out += "\":";
  detail::append_json_name(out, to_string(op.fn));
  key("sn");
  append_int(out, op.seq);
  if (p2p) {
    key("peer");
    append_int(out, op.peer);
  }
  key("msg_size_bytes");
  append_int(out, op.bytes);
  key("exec_time_us");
  append_fixed(out, static_cast<double>(dur) / 1e3, 3);
  key("timing_source");
  detail::append_json_name(out, to_string(op.timing));
  key("algobw_gbs");
  append_fixed(out, valid ? algbw_gbs(op.fn, op.bytes, d.nranks, dur) : 0.0, 6);
  key("busbw_gbs");
  append_fixed(out, valid ? busbw_gbs(op.fn, op.bytes, d.nranks, dur) : 0.0, 6);
  if (!p2p) {
    key("algo");
    detail::append_json_name(out, to_string(op.alg));
    key("proto");
    detail::append_json_name(out, op.pro == proto::none ? std::string_view() : to_string(op.pro));
  }
  key("user_tag");
  out += '"';
  append_int(out, op.user_tag);
  out += '"';
  key("n_channels");
  append_int(out, op.channels);
  key("start_ts_ns");
  append_int(out, op.start_ns);
  key("end_ts_ns");
  append_int(out, op.end_ns);
  key("valid");
  out += valid ? "true" : "false";
  if (verbose && r.trace >= 0 && static_cast<std::size_t>(r.trace) < snap.traces.size()) detail::append_event_trace(out, p, snap.traces[r.trace]);
  out += "}}\n";
}

/// Per-communicator totals and drops for this export (Inspector's `dump_stats` marker, extended).
/// `dropped_total` = this comm's collector drops (cumulative) + the sink's drops since its last
/// export. With `sink_dropped_cumulative` (the json sink passes it) two unambiguous fields follow:
/// `ring_dropped_total` (this comm's collector drops, cumulative) and `sink_dropped_total` (the
/// process's sink drops, cumulative: the same value in every comm's record).
inline void write_dump_stats(std::string& out, const snapshot& snap, const comm_snapshot& c, std::uint64_t records_written,
                             std::uint64_t records_dropped_by_sink, std::uint64_t sink_dropped_cumulative = UINT64_MAX) {
  detail::json_header_metadata(out, snap, c.desc);
  std::uint64_t dropped = records_dropped_by_sink;
  for (auto v : c.dropped) dropped += v;
  out += ",\"dump_stats\":{\"records\":";
  append_int(out, records_written);
  out += ",\"completed_total\":";
  append_int(out, c.completed);
  out += ",\"dropped_total\":";
  append_int(out, dropped);
  out += ",\"filtered_min_size_total\":";
  append_int(out, c.filtered[0]);
  out += ",\"filtered_no_gpu_timing_total\":";
  append_int(out, c.filtered[1]);
  out += ",\"abandoned_total\":";
  append_int(out, c.abandoned);
  out += ",\"inflight\":";
  append_int(out, c.inflight);
  out += ",\"final\":";
  out += snap.final ? "true" : "false";
  if (sink_dropped_cumulative != UINT64_MAX) {
    out += ",\"ring_dropped_total\":";
    append_int(out, dropped - records_dropped_by_sink);
    out += ",\"sink_dropped_total\":";
    append_int(out, sink_dropped_cumulative);
  }
  out += "}}\n";
}

/// Network proxy accounting of one communicator on this rank (NCCLINSP_PROXY=1; ncclinsp
/// extension, no Inspector equivalent): cumulative per peer rank and direction, the nanoseconds its
/// sampled network steps spent per ProxyStep state, their bytes and count, as the
/// ncclinsp_proxy_* counters. One line per communicator and export; ncclinsp-report names a slow
/// host from them (docs/diagnosis.md).
inline void write_proxy_stats(std::string& out, const snapshot& snap, std::uint32_t comm) {
  bool any = false;
  for (const auto& p : snap.proxy) {
    if (p.comm != comm) continue;
    if (!any) {
      detail::json_header_metadata(out, snap, snap.comms[comm].desc);
      out += ",\"proxy_stats\":{\"peers\":[";
    } else {
      out += ',';
    }
    any = true;
    out += "{\"peer\":";
    append_int(out, p.peer);
    out += p.send ? ",\"direction\":\"send\"" : ",\"direction\":\"recv\"";
    const std::size_t first = p.send ? 0 : 3;
    for (std::size_t k = 0; k < 3; ++k) {
      out += ",\"";
      out += proxy_wait_names[first + k];
      out += "_ns\":";
      append_int(out, p.wait_ns[k]);
    }
    out += ",\"bytes\":";
    append_int(out, p.bytes);
    out += ",\"steps\":";
    append_int(out, p.steps);
    out += '}';
  }
  if (any) out += "]}}\n";
}

}  // namespace ncclinsp::format
