#pragma once
/// The sinks and the collector options an `env_options` (the NCCL_INSPECTOR_* / NCCLINSP_*
/// environment) asks for, shared by the plugin and the embedded inspector so both read the
/// environment the same way and write the same files. Sinks: the OTLP sink alone when
/// NCCL_INSPECTOR_OTEL_EXPORT=1 (it takes precedence, as in NVIDIA's Inspector), else
/// prom_textfile_sink and/or json_sink in the dump directory; trace_sink on request. Cold path.
/// The OTLP sink is opt-in (it brings sockets): the caller passes its factory,
/// make_otlp_http_sink from sinks/otlp_http_sink.hpp; without it OTLP export is refused with a warning.

#include <algorithm>
#include <cstdint>
#include <utility>
#include <vector>

#include "ncclinsp/collector.hpp"
#include "ncclinsp/detail/env.hpp"
#include "ncclinsp/env_options.hpp"
#include "ncclinsp/format/series.hpp"
#include "ncclinsp/sink.hpp"
#include "ncclinsp/sinks/json_sink.hpp"
#include "ncclinsp/sinks/prom_textfile_sink.hpp"
#include "ncclinsp/sinks/trace_sink.hpp"

namespace ncclinsp {

/// Whether per-op callback detail (op_trace) is needed: verbose JSON, or the trace sink's channel tracks.
inline bool traces_for(const env_options& o) {
  return !o.otel && ((o.verbose && o.has_sink("json")) || o.has_sink("trace"));
}

/// Ring entries per recording thread when records carry an op_trace (~3 KB each): 4096 = 12 MiB.
inline constexpr std::uint32_t max_traced_ring = 4096;

/// Per-op records per recording thread the chosen sinks need (collector_options::record_ring_capacity):
/// the coll + p2p ring sizes (16384 by default: 80 bytes each, 1.25 MiB), at most max_traced_ring
/// with traces.
inline std::uint32_t record_ring_for(const env_options& o) {
  if (o.otel || !(o.has_sink("json") || o.has_sink("trace"))) return 0;
  const std::uint64_t n = std::uint64_t{o.coll_ring_size} + (o.enable_p2p ? o.p2p_ring_size : 0);
  return static_cast<std::uint32_t>(std::min<std::uint64_t>(n, traces_for(o) ? max_traced_ring : UINT32_MAX));
}

/// Per-op records a recording thread's ring may grow to (collector_options::record_ring_max):
/// NCCLINSP_RECORD_BUFFER_MB of `bytes_per_record` each, never below record_ring_for().
inline std::uint32_t record_ring_max_for(const env_options& o, std::size_t bytes_per_record) {
  const std::uint64_t n = (o.record_buffer_mb << 20) / bytes_per_record;
  return static_cast<std::uint32_t>(
      std::min<std::uint64_t>(std::max<std::uint64_t>(n, record_ring_for(o)), UINT32_MAX / 2));
}

/// The collector's options an env_options asks for: the per-op record ring the sinks need, the
/// user-tag label, the retention of finalized communicators and the identity's node, SLURM job id
/// and labels (`id` gives the rest). `nccl_events`: the caller delivers NCCL's own events (the
/// plugin), so op traces (verbose JSON, trace sink) and proxy accounting (NCCLINSP_PROXY) have a
/// source; the embedded mode has neither, and gets neither.
inline collector_options collector_options_from(const env_options& o, bool nccl_events, process_identity id = {}) {
  collector_options co;
  co.identity = std::move(id);
  co.identity.node = o.node_name;
  co.identity.slurm_job_id = o.slurm_job_id;
  co.identity.job_id = o.job_id;
  co.identity.labels = o.labels;
  co.user_tag_label = o.user_tag_label;
  co.retired_retention = o.retain_finalized;
  co.proxy_accounting = nccl_events && o.proxy;
  if (!o.enable) return co;
  co.record_traces = nccl_events && traces_for(o);
  co.record_ring_capacity = record_ring_for(o);
  if (co.record_ring_capacity)
    co.record_ring_max = record_ring_max_for(o, collector<>::bytes_per_record(co.record_traces));
  return co;
}

/// The cardinality controls of NCCLINSP_DROP_LABELS, _SIZE_BUCKET_BITS, _HISTOGRAM, _MAX_SERIES.
inline format::cardinality cardinality_from_options(const env_options& o) {
  format::cardinality c;
  for (const auto& l : o.drop_labels) {
    if (l == "rank") c.rank = false;
    if (l == "comm_hash") c.comm_hash = false;
    if (l == "uuid") c.uuid = false;
    if (l == "algo_proto") c.algo_proto = false;
  }
  c.size_bucket_bits = o.size_bucket_bits;
  c.histogram = o.histogram == "off"      ? format::histogram_mode::off
                : o.histogram == "coarse" ? format::histogram_mode::coarse
                                          : format::histogram_mode::full;
  c.max_series = static_cast<std::size_t>(o.max_series);
  return c;
}

/// Builds the OTLP sink from the environment, with the .prom files' compat gauges and cardinality:
/// make_otlp_http_sink (sinks/otlp_http_sink.hpp).
using otlp_sink_factory = any_sink (*)(const log_fn&, const getenv_fn&, bool compat_gauges, const format::cardinality&);

inline std::vector<any_sink> sinks_from_options(const env_options& o, const log_fn& log = {},
                                                const getenv_fn& get = process_env, otlp_sink_factory otlp = nullptr) {
  std::vector<any_sink> sinks;
  if (o.otel) {
    if (o.prom)
      emit(log, log_level::warn,
           "NCCL_INSPECTOR_OTEL_EXPORT=1 takes precedence over NCCL_INSPECTOR_PROM_DUMP=1: no .prom files");
    if (otlp)
      sinks.emplace_back(otlp(log, get, o.compat_gauges, cardinality_from_options(o)));
    else
      emit(log, log_level::warn,
           "NCCL_INSPECTOR_OTEL_EXPORT=1 but this program was built without the OTLP sink "
           "(include <ncclinsp/sinks/otlp_http_sink.hpp> and pass ncclinsp::make_otlp_http_sink): nothing is exported");
    return sinks;
  }
  if (o.has_sink("prom"))
    sinks.emplace_back(prom_textfile_sink({.dir = o.dump_dir,
                                           .remove_on_shutdown = !o.keep_prom_files,
                                           .compat_gauges = o.compat_gauges,
                                           .log = log,
                                           .card = cardinality_from_options(o)}));
  if (o.has_sink("json"))
    sinks.emplace_back(
        json_sink({.dir = o.dump_dir, .max_file_bytes = o.json_max_bytes, .verbose = o.verbose, .log = log}));
  if (o.has_sink("trace")) sinks.emplace_back(trace_sink({.dir = o.dump_dir, .log = log}));
  return sinks;
}

}  // namespace ncclinsp
