#pragma once
/// The metric catalogue: every family ncclinsp exports, defined once (name, type, unit, help,
/// label set, and how its value is read from a snapshot). Every serializer renders this table
/// (Prometheus text, OTLP/JSON), docs/metrics.md is checked against it (test_catalogue), and it is
/// the way for a custom sink to read a snapshot series by series:
///
/// \code
/// ncclinsp::format::for_each_sample(snap, [&](const ncclinsp::format::metric_family& f,
///                                              const ncclinsp::format::label_list& labels,
///                                              double value, const ncclinsp::format::series_row& row) {
///   // f.name "ncclinsp_ops_total", f.type counter, labels {{"slurm_job_id","77"},...,{"collective","AllReduce"},...},
///   // value: ready to send (counts, seconds, busbw in GB/s, mean time in us); row.stats: the
///   // histogram buckets of an ncclinsp_op_duration_seconds row.
/// });
/// \endcode
///
/// Each label set is one series: do not loop over snapshot::cells yourself, since cells are also
/// keyed by timing source, user tag and Inspector's finer size buckets, so one label set can have
/// several cells (summing them is what collect_series() does). Counters are cumulative since the
/// process started (a sink that needs deltas keeps the previous value per family and labels);
/// Inspector's gauges (`compat`) cover the last export window only and exist only for label sets
/// that completed ops in it. Pure functions over a snapshot (cold path, exporter thread).
///
/// Over 350 lines on purpose: the family table and collect_series(), which fills the series_row
/// fields the table's value functions read, are one unit (a family whose value is not read yet
/// needs both), and whoever adds a family should see both in one file.

#include <algorithm>
#include <array>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "ncclinsp/bucketing.hpp"
#include "ncclinsp/format/series.hpp"
#include "ncclinsp/histogram.hpp"
#include "ncclinsp/proxy_stats.hpp"
#include "ncclinsp/snapshot.hpp"
#include "ncclinsp/version.hpp"

namespace ncclinsp::format {

enum class metric_type : std::uint8_t { counter, gauge, histogram };
inline constexpr std::string_view to_string(metric_type t) noexcept {
  return t == metric_type::counter ? "counter" : t == metric_type::gauge ? "gauge" : "histogram";
}

/// Which label set (and which rows) a family is read from.
enum class series_source : std::uint8_t {
  compat_coll,   ///< Inspector's collective gauge labels (version, ..., collective, message_size, algo_proto, uuid)
  compat_p2p,    ///< Inspector's P2P gauge labels (version, ..., p2p_operation, message_size, uuid)
  op,            ///< identity + communicator + collective, message_size (power-of-two), algo_proto [+ user_tag]
  comm,          ///< identity + communicator
  comm_func,     ///< identity + communicator + collective
  proxy_state,   ///< identity + communicator + peer, direction + state (sampled network steps, NCCLINSP_PROXY)
  proxy,         ///< identity + communicator + peer, direction
  busbw,         ///< identity + communicator + collective, message_size (the in-process change detector)
  gpu_dropped,   ///< identity + reason (drop_reason_names)
  gpu_filtered,  ///< identity + reason (filter_reason_names)
  gpu,           ///< identity
  gpu_info,      ///< identity + version, abi, final
  gpu_overflow,  ///< identity + kind: what the per-file cap left out (Prometheus files only, cardinality::max_series)
  count_
};
inline constexpr std::size_t series_source_count = static_cast<std::size_t>(series_source::count_);

/// Per-communicator numbers of a `comm` row (summed over communicators with the same labels).
struct comm_totals {
  double inflight = 0, oldest_inflight_age_s = 0, since_last_completion_s = 0, invalid = 0, abandoned = 0;
};

/// One series of a source: its labels (user labels last) and the numbers its families read.
struct series_row {
  label_list labels;
  window_acc window{};                         ///< compat_*: this export window's sums
  cell_stats stats{};                          ///< op: cumulative sums (hist: non-cumulative bucket counts)
  comm_totals comm{};                          ///< comm
  double value = 0;                            ///< comm_func, proxy_state, gpu_*: the value itself
  const proxy_peer_snapshot* proxy = nullptr;  ///< proxy: into the snapshot
  busbw_health busbw{};  ///< busbw: the detector's row (coinciding rows merged: lowest ratio, degraded if any)
};

/// One exported family. OTLP: the metric name is `name` without a `_total` suffix, counters are
/// cumulative monotonic Sums, `integer` ones are sent as asInt.
struct metric_family {
  std::string_view name;
  metric_type type;
  std::string_view unit;  ///< UCUM, as OTLP sends it: "s", "By", "{op}", "GB/s", "us", "1"
  std::string_view help;
  series_source source;
  bool compat;  ///< Inspector's window gauges (left out with compat_gauges = false)
  bool integer;
  bool optional;  ///< written only when it has series (a diagnosis signal that is off or has no data yet)
  double (*value)(const series_row&);  ///< histograms: the row's op count (buckets: row.stats.hist)

  std::string_view otlp_name() const noexcept {
    return name.size() > 6 && name.substr(name.size() - 6) == "_total" ? name.substr(0, name.size() - 6) : name;
  }
};

namespace detail {
inline double geomean_busbw(const series_row& r) {
  return r.window.bw_count ? std::exp(r.window.log_sum / static_cast<double>(r.window.bw_count)) : 0.0;
}
inline double mean_time_us(const series_row& r) {
  return r.window.valid ? static_cast<double>(r.window.busy_ns) / static_cast<double>(r.window.valid) / 1e3 : 0.0;
}
inline double hist_count(const series_row& r) {
  std::uint64_t n = 0;
  for (auto c : r.stats.hist) n += c;
  return static_cast<double>(n);
}
}  // namespace detail

/// Every family, in the order the serializers write them (docs/metrics.md lists the same).
inline constexpr auto catalogue = std::to_array<metric_family>({
    {"nccl_bus_bandwidth_gbs", metric_type::gauge, "GB/s",
     "Geometric mean bus bandwidth (GB/s, 1e9 bytes) of collectives completed in the last export window (Inspector-compatible).",
     series_source::compat_coll, true, false, false, detail::geomean_busbw},
    {"nccl_collective_exec_time_microseconds", metric_type::gauge, "us",
     "Mean execution time (microseconds) of collectives completed in the last export window (Inspector-compatible).",
     series_source::compat_coll, true, false, false, detail::mean_time_us},
    {"nccl_p2p_bus_bandwidth_gbs", metric_type::gauge, "GB/s",
     "Geometric mean bus bandwidth (GB/s, 1e9 bytes) of P2P operations completed in the last export window (Inspector-compatible).",
     series_source::compat_p2p, true, false, false, detail::geomean_busbw},
    {"nccl_p2p_exec_time_microseconds", metric_type::gauge, "us",
     "Mean execution time (microseconds) of P2P operations completed in the last export window (Inspector-compatible).",
     series_source::compat_p2p, true, false, false, detail::mean_time_us},
    {"ncclinsp_ops_total", metric_type::counter, "{op}", "Completed NCCL operations.", series_source::op, false, true,
     false, [](const series_row& r) { return static_cast<double>(r.stats.ops); }},
    {"ncclinsp_bytes_total", metric_type::counter, "By",
     "Message bytes per rank as NCCL reports them (AllGather: send bytes, ReduceScatter: receive bytes).",
     series_source::op, false, true, false, [](const series_row& r) { return static_cast<double>(r.stats.bytes); }},
    {"ncclinsp_bus_bytes_total", metric_type::counter, "By",
     "Bus bytes (traffic x nccl-tests bus factor: AllReduce 2(n-1)/n, AllGather/ReduceScatter (n-1)/n on n x bytes, "
     "Broadcast/Reduce/Send/Recv 1); rate(bus_bytes)/rate(busy_seconds)/1e9 is bus bandwidth in GB/s.",
     series_source::op, false, false, false, [](const series_row& r) { return r.stats.bus_bytes; }},
    {"ncclinsp_busy_seconds_total", metric_type::counter, "s",
     "Sum of operation durations (GPU kernel span when available).", series_source::op, false, false, false,
     [](const series_row& r) { return static_cast<double>(r.stats.busy_ns) * 1e-9; }},
    {"ncclinsp_op_duration_seconds", metric_type::histogram, "s", "Operation duration.", series_source::op, false,
     false, false, detail::hist_count},
    {"ncclinsp_inflight_ops", metric_type::gauge, "{op}", "Operations handed to the GPU and not yet completed.",
     series_source::comm, false, true, false, [](const series_row& r) { return r.comm.inflight; }},
    {"ncclinsp_oldest_inflight_age_seconds", metric_type::gauge, "s",
     "Age of the oldest in-flight operation (0 when none): the hang signal.", series_source::comm, false, false, false,
     [](const series_row& r) { return r.comm.oldest_inflight_age_s; }},
    {"ncclinsp_seconds_since_last_completion", metric_type::gauge, "s",
     "Seconds since the communicator last completed an operation (0 before the first).", series_source::comm, false,
     false, false, [](const series_row& r) { return r.comm.since_last_completion_s; }},
    {"ncclinsp_invalid_ops_total", metric_type::counter, "{op}",
     "Operations with zero duration, zero or overflowing size, or unknown function/datatype.", series_source::comm,
     false, true, false, [](const series_row& r) { return r.comm.invalid; }},
    {"ncclinsp_abandoned_ops_total", metric_type::counter, "{op}",
     "Operations still in flight when their communicator was destroyed.", series_source::comm, false, true, false,
     [](const series_row& r) { return r.comm.abandoned; }},
    {"ncclinsp_last_completed_seq", metric_type::gauge, "1",
     "Last completed NCCL sequence number per communicator and function.", series_source::comm_func, false, true, false,
     [](const series_row& r) { return r.value; }},
    {"ncclinsp_proxy_wait_seconds_total", metric_type::counter, "s",
     "Sampled network steps (NCCLINSP_PROXY): seconds spent per ProxyStep state, per peer rank and direction (send: gpu, peer_credit, "
     "network = on the wire, queue = behind earlier steps in flight; recv: network, flush, gpu).",
     series_source::proxy_state, false, false, true, [](const series_row& r) { return r.value; }},
    {"ncclinsp_proxy_bytes_total", metric_type::counter, "By",
     "Sampled network steps (NCCLINSP_PROXY): bytes, per peer rank and direction.", series_source::proxy, false, true,
     true, [](const series_row& r) { return static_cast<double>(r.proxy->bytes); }},
    {"ncclinsp_proxy_steps_total", metric_type::counter, "{step}",
     "Sampled network steps (NCCLINSP_PROXY): steps completed, per peer rank and direction.", series_source::proxy,
     false, true, true, [](const series_row& r) { return static_cast<double>(r.proxy->steps); }},
    {"ncclinsp_busbw_ratio_to_baseline", metric_type::gauge, "1",
     "In-process detector: median bus bandwidth of the recent export windows / the baseline windows' median (frozen while degraded).",
     series_source::busbw, false, false, true, [](const series_row& r) { return r.busbw.ratio; }},
    {"ncclinsp_busbw_degraded", metric_type::gauge, "1",
     "In-process detector: 1 while this communicator/collective/size is degraded, else 0.", series_source::busbw, false,
     true, true, [](const series_row& r) { return r.busbw.degraded ? 1.0 : 0.0; }},
    {"ncclinsp_busbw_degradations_total", metric_type::counter, "{event}",
     "In-process detector: sustained degradations of this communicator/collective/size (lasted NCCLINSP_DETECT_PERSIST_S or deep).",
     series_source::busbw, false, true, true,
     [](const series_row& r) { return static_cast<double>(r.busbw.degradations); }},
    {"ncclinsp_busbw_transients_total", metric_type::counter, "{event}",
     "In-process detector: short degradations (congestion bursts) that recovered before they were sustained.",
     series_source::busbw, false, true, true,
     [](const series_row& r) { return static_cast<double>(r.busbw.transients); }},
    {"ncclinsp_busbw_transient_depth_total", metric_type::counter, "1",
     "In-process detector: sum over the short degradations of their depth (1 - lowest ratio to baseline); / transients_total = mean depth.",
     series_source::busbw, false, false, true, [](const series_row& r) { return r.busbw.transient_depth; }},
    {"ncclinsp_dropped_events_total", metric_type::counter, "{event}", "Events lost, by reason (never silent).",
     series_source::gpu_dropped, false, true, false, [](const series_row& r) { return r.value; }},
    {"ncclinsp_filtered_ops_total", metric_type::counter, "{op}",
     "Operations skipped on purpose (minimum size, missing GPU timing), by reason.", series_source::gpu_filtered, false,
     true, false, [](const series_row& r) { return r.value; }},
    {"ncclinsp_series_overflow", metric_type::gauge, "1",
     "Series left out of this file by the per-file cap (NCCLINSP_MAX_SERIES): op series sets folded into comm_name=\"_overflow\", "
     "communicators and Inspector-compatible sets not written.",
     series_source::gpu_overflow, false, true, true, [](const series_row& r) { return r.value; }},
    {"ncclinsp_export_timestamp_seconds", metric_type::gauge, "s",
     "Unix time at which this file was written (stale-exporter signal).", series_source::gpu, false, false, false,
     [](const series_row& r) { return r.value; }},
    {"ncclinsp_info", metric_type::gauge, "1",
     "ncclinsp build and profiler ABI; 'final' is 1 in the file written at shutdown.", series_source::gpu_info, false,
     true, false, [](const series_row& r) { return r.value; }},
});

/// The rows of every source: sorted by labels, but those of the diagnosis sources in snapshot order
/// and the per-GPU reasons in their enum order.
struct series_table {
  std::array<std::vector<series_row>, series_source_count> rows;
  const std::vector<series_row>& of(series_source s) const noexcept { return rows[static_cast<std::size_t>(s)]; }
};

namespace detail {
/// Moves a map's entries (label list -> numbers) into rows, in key order, without copying the labels.
template <class Map, class Fill>
void move_rows(Map& m, std::vector<series_row>& out, Fill fill) {
  out.reserve(out.size() + m.size());
  while (!m.empty()) {
    auto node = m.extract(m.begin());
    series_row& r = out.emplace_back();
    r.labels = std::move(node.key());
    fill(r, node.mapped());
  }
}
}  // namespace detail

/// Groups a snapshot into the catalogue's series: those of GPU `*uuid` only, or of every GPU when
/// `uuid` is nullopt. `compat_gauges` false leaves the compat sources empty. `card` drops labels and
/// coarsens message_size (rows whose labels then coincide are merged: counters add up, the age
/// gauges and the detector take the worst); `max_comms` keeps only the first that many
/// communicators of each GPU (snapshot order) in the communicator and diagnosis sources.
template <class NativeBucketer = pow2_bucketer>
series_table collect_series(const snapshot& snap, std::optional<std::string_view> uuid = std::nullopt,
                            bool compat_gauges = true, const cardinality& card = {}, std::size_t max_comms = SIZE_MAX) {
  series_table t;
  const auto& ident = snap.identity;
  auto mine = [&](const std::string& u) { return !uuid || u == *uuid; };

  // ---- op cells: several cells (timing source, tag, Inspector bucket) can share a label set ----
  std::map<label_list, window_acc> compat_coll, compat_p2p;  // ops completed in this window only
  std::map<label_list, cell_stats> native;                   // cumulative
  std::vector<double> invalid(snap.comms.size(), 0.0);
  const std::string version = compat_version(snap);
  for (const auto& cell : snap.cells) {
    invalid[cell.comm] += static_cast<double>(cell.total.invalid);
    const comm_desc& d = snap.comms[cell.comm].desc;
    if (!mine(d.uuid)) continue;
    const bool p2p = is_p2p(cell.fn);
    const std::string ap = card.algo_proto ? algo_proto_label(cell.alg, cell.pro) : std::string();
    const std::string fn(to_string(cell.fn));
    if (compat_gauges && cell.window.valid_ops() > 0) {
      label_list l = {{"version", version},
                      {"slurm_job_id", ident.slurm_job_id},
                      {"node", ident.node},
                      {"gpu", gpu_label(d)},
                      {"comm_name", comm_name(d)},
                      {"n_nodes", std::to_string(d.nnodes)},
                      {"nranks", std::to_string(d.nranks)}};
      if (p2p)
        l.insert(l.end(), {{"p2p_operation", fn}, {"message_size", inspector_bucketer::label(cell.size_index)}});
      else
        l.insert(l.end(), {{"collective", fn}, {"message_size", inspector_bucketer::label(cell.size_index)}});
      if (!p2p && card.algo_proto) l.emplace_back("algo_proto", ap);
      l.emplace_back("job_id", job_key(ident));
      if (card.uuid) l.emplace_back("uuid", d.uuid);
      add_user_labels(l, snap);
      window_acc& w = (p2p ? compat_p2p : compat_coll)[l];
      w.valid += cell.window.valid_ops();
      w.busy_ns += cell.window.busy_ns;
      w.bw_count += cell.window.bw_count;
      w.log_sum += cell.window.log_busbw_sum;
    }
    label_list l = comm_labels(snap, d, card);
    const std::uint32_t nb = NativeBucketer::index(inspector_bucketer::lower_bound(cell.size_index));
    l.insert(l.end(), {{"collective", fn},
                       {"message_size", cell.total.valid_ops() ? size_label<NativeBucketer>(nb, card.size_bucket_bits)
                                                               : std::string("invalid")}});
    if (card.algo_proto) l.emplace_back("algo_proto", ap);
    if (cell.tag_index || !snap.user_tags.empty()) l.emplace_back("user_tag", user_tag_label(snap, cell.tag_index));
    add_user_labels(l, snap);
    for_each_stat(native[l], cell.total, [](auto& sum, const auto& v) { sum += v; });
  }
  auto rows = [&](series_source s) -> std::vector<series_row>& { return t.rows[static_cast<std::size_t>(s)]; };
  detail::move_rows(compat_coll, rows(series_source::compat_coll),
                    [](series_row& r, const window_acc& w) { r.window = w; });
  detail::move_rows(compat_p2p, rows(series_source::compat_p2p),
                    [](series_row& r, const window_acc& w) { r.window = w; });
  detail::move_rows(native, rows(series_source::op), [](series_row& r, const cell_stats& s) { r.stats = s; });

  // ---- communicators ---------------------------------------------------------------------------
  // The communicators written: the first max_comms of each GPU.
  std::vector<bool> kept(snap.comms.size(), false);
  {
    std::map<std::string_view, std::size_t> per_gpu;
    for (std::size_t i = 0; i < snap.comms.size(); ++i)
      if (mine(snap.comms[i].desc.uuid)) kept[i] = per_gpu[snap.comms[i].desc.uuid]++ < max_comms;
  }
  std::map<label_list, comm_totals> comms;
  std::map<label_list, double> last_seq;
  for (std::size_t i = 0; i < snap.comms.size(); ++i) {
    const comm_snapshot& c = snap.comms[i];
    if (!kept[i]) continue;
    label_list l = comm_labels(snap, c.desc, card);
    for (std::size_t f = 1; f < func_count; ++f)
      if (c.last_seq_plus1[f]) {
        label_list lf = l;
        lf.emplace_back("collective", std::string(func_names[f]));
        add_user_labels(lf, snap);
        last_seq[std::move(lf)] = static_cast<double>(c.last_seq_plus1[f] - 1);
      }
    add_user_labels(l, snap);
    comm_totals& ct = comms[std::move(l)];
    ct.inflight += static_cast<double>(c.inflight);
    ct.oldest_inflight_age_s = std::max(ct.oldest_inflight_age_s, c.oldest_inflight_age_s);
    ct.since_last_completion_s =
        std::max(ct.since_last_completion_s, c.since_last_completion_s < 0 ? 0.0 : c.since_last_completion_s);
    ct.invalid += invalid[i];
    ct.abandoned += static_cast<double>(c.abandoned);
  }
  detail::move_rows(comms, rows(series_source::comm), [](series_row& r, const comm_totals& c) { r.comm = c; });
  detail::move_rows(last_seq, rows(series_source::comm_func), [](series_row& r, double v) { r.value = v; });

  // ---- diagnosis signals, one row per entry (in snapshot order) --------------------------------
  for (const auto& p : snap.proxy) {  // full communicator labels: rows are per peer and never merged
    const comm_desc& d = snap.comms[p.comm].desc;
    if (!kept[p.comm]) continue;
    label_list l = comm_labels(snap, d);
    l.insert(l.end(), {{"peer", std::to_string(p.peer)}, {"direction", p.send ? "send" : "recv"}});
    add_user_labels(l, snap);
    for (std::size_t st = 0; st < (p.send ? proxy_send_states : proxy_recv_states); ++st) {
      series_row& r = rows(series_source::proxy_state).emplace_back();
      r.labels = l;
      r.labels.emplace_back("state", proxy_wait_names[(p.send ? 0 : proxy_send_states) + st]);
      r.value = static_cast<double>(p.wait_ns[st]) * 1e-9;
      r.proxy = &p;
    }
    series_row& r = rows(series_source::proxy).emplace_back();
    r.labels = std::move(l);
    r.proxy = &p;
  }
  std::vector<series_row>& busbw = rows(series_source::busbw);
  for (const auto& b : snap.busbw) {
    if (!kept[b.comm]) continue;
    label_list l = comm_labels(snap, snap.comms[b.comm].desc, card);
    l.insert(l.end(), {{"collective", std::string(to_string(b.fn))},
                       {"message_size", size_label<pow2_bucketer>(b.size_bucket, card.size_bucket_bits)}});
    add_user_labels(l, snap);
    auto same = std::find_if(busbw.begin(), busbw.end(), [&](const series_row& r) { return r.labels == l; });
    if (same == busbw.end()) {
      series_row& r = busbw.emplace_back();
      r.labels = std::move(l);
      r.busbw = b;
    } else {  // coinciding rows (labels dropped): lowest ratio, degraded if any, degradations added
      same->busbw.ratio = std::min(same->busbw.ratio, b.ratio);
      same->busbw.degraded = same->busbw.degraded || b.degraded;
      same->busbw.degradations += b.degradations;
      same->busbw.transients += b.transients;
      same->busbw.transient_depth += b.transient_depth;
    }
  }

  // ---- GPUs: those with communicators, and those whose communicators all departed --------------
  std::map<std::string, comm_desc> gpus;  // uuid -> device and uuid
  for (const auto& c : snap.comms)
    if (mine(c.desc.uuid)) gpus.try_emplace(c.desc.uuid, comm_desc{.device = c.desc.device, .uuid = c.desc.uuid});
  if (!uuid)
    for (const auto& d : snap.departed) gpus.try_emplace(d.gpu.uuid, d.gpu);
  std::map<label_list, double> gpu, info;
  for (const auto& gpu_entry : gpus) {
    const std::string& u = gpu_entry.first;
    const comm_desc& g = gpu_entry.second;
    auto labels = [&](label_list extra) {
      label_list l = identity_labels(snap, g);
      l.insert(l.end(), std::make_move_iterator(extra.begin()), std::make_move_iterator(extra.end()));
      add_user_labels(l, snap);
      return l;
    };
    for (std::size_t r = 0; r < drop_reason_names.size(); ++r) {
      double n = 0;
      for (const auto& c : snap.comms) n += c.desc.uuid == u ? static_cast<double>(c.dropped[r]) : 0.0;
      for (const auto& d : snap.departed) n += d.gpu.uuid == u ? static_cast<double>(d.dropped[r]) : 0.0;
      if (r == static_cast<std::size_t>(drop_reason::comm_table_full)) n += static_cast<double>(snap.comm_table_full);
      series_row& row = rows(series_source::gpu_dropped).emplace_back();  // reasons in their enum order
      row.labels = labels({{"reason", drop_reason_names[r]}});
      row.value = n;
    }
    for (std::size_t r = 0; r < filter_reason_names.size(); ++r) {
      double n = 0;
      for (const auto& c : snap.comms) n += c.desc.uuid == u ? static_cast<double>(c.filtered[r]) : 0.0;
      for (const auto& d : snap.departed) n += d.gpu.uuid == u ? static_cast<double>(d.filtered[r]) : 0.0;
      series_row& row = rows(series_source::gpu_filtered).emplace_back();
      row.labels = labels({{"reason", filter_reason_names[r]}});
      row.value = n;
    }
    gpu[labels({})] = static_cast<double>(snap.time_unix_ns / 1000000) / 1e3;
    info[labels({{"version", NCCLINSP_VERSION_STRING}, {"abi", ident.abi}, {"final", snap.final ? "1" : "0"}})] = 1;
  }
  auto value = [](series_row& r, double v) { r.value = v; };
  detail::move_rows(gpu, rows(series_source::gpu), value);
  detail::move_rows(info, rows(series_source::gpu_info), value);
  return t;
}

/// Calls f(family, labels, value, row) for every sample of `snap` (of GPU `*uuid`, or of all GPUs),
/// family by family in catalogue order; `compat_gauges` false skips Inspector's gauges.
template <class NativeBucketer = pow2_bucketer, class F>
void for_each_sample(const snapshot& snap, F&& f, std::optional<std::string_view> uuid = std::nullopt,
                     bool compat_gauges = true) {
  const series_table t = collect_series<NativeBucketer>(snap, uuid, compat_gauges);
  for (const metric_family& fam : catalogue) {
    if (fam.compat && !compat_gauges) continue;
    for (const series_row& r : t.of(fam.source)) f(fam, r.labels, fam.value(r), r);
  }
}

}  // namespace ncclinsp::format
