#pragma once
/// env_options: the environment schema (the plugin's, and inspector_options::from_env's), one struct
/// with documented defaults, filled from the environment by from_env(). Durations are std::chrono types.
/// Layers: this maps onto collector_options (collector.hpp), exporter_options (exporter.hpp) and
/// inspector_options (inspector.hpp), each the runtime settings of its own layer.
/// Reads NVIDIA Inspector's NCCL_INSPECTOR_* variables with the same meaning (except that the
/// dump interval is honoured as given, with a 100 ms floor, and that -1 still writes everything at
/// teardown) and the native NCCLINSP_* variables. An invalid value is reported once through the
/// logger and replaced by the default; nothing aborts. Thread-safety: from_env() is cold and
/// reentrant; the struct is a value.

#include <cctype>
#include <chrono>
#include <cstdint>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "ncclinsp/detail/env.hpp"
#include "ncclinsp/detail/host.hpp"
#include "ncclinsp/detail/job_identity.hpp"
#include "ncclinsp/log.hpp"

#include <unistd.h>

namespace ncclinsp {

struct env_options {
  // ---- NVIDIA Inspector compatible ----
  bool enable = false;      ///< NCCL_INSPECTOR_ENABLE (NCCLINSP_ENABLE overrides)
  bool enable_p2p = true;   ///< NCCL_INSPECTOR_ENABLE_P2P
  bool dump_thread = true;  ///< NCCL_INSPECTOR_DUMP_THREAD_ENABLE (0: write only at teardown)
  std::chrono::microseconds interval{
      -1};               ///< NCCL_INSPECTOR_DUMP_THREAD_INTERVAL_MICROSECONDS (NCCLINSP_INTERVAL); <0: teardown only
  std::string dump_dir;  ///< NCCL_INSPECTOR_DUMP_DIR (default nccl-inspector-<SLURM_JOBID>)
  bool verbose = false;  ///< NCCL_INSPECTOR_DUMP_VERBOSE
  bool prom = false;     ///< NCCL_INSPECTOR_PROM_DUMP: Prometheus instead of JSON
  bool prom_dump_stats = false;         ///< NCCL_INSPECTOR_PROM_DUMP_STATS (drop counters are always written)
  std::uint64_t min_size_bytes = 8192;  ///< NCCL_INSPECTOR_DUMP_MIN_SIZE_BYTES
  std::uint32_t coll_ring_size =
      8192;  ///< NCCL_INSPECTOR_DUMP_COLL_RING_SIZE (per-op records per thread; Inspector: 1024)
  std::uint32_t p2p_ring_size = 8192;  ///< NCCL_INSPECTOR_DUMP_P2P_RING_SIZE
  std::uint32_t coll_pool_size = 256;  ///< NCCL_INSPECTOR_COLL_POOL_SIZE (in-flight collectives per comm)
  std::uint32_t p2p_pool_size = 256;   ///< NCCL_INSPECTOR_P2P_POOL_SIZE
  std::uint32_t comm_pool_size = 256;  ///< NCCL_INSPECTOR_COMM_POOL_SIZE (accepted, unused)
  bool pool_grow = true;               ///< NCCL_INSPECTOR_POOL_GROW (accepted; pools are fixed, overflow is counted)
  bool require_kernel_timing = true;   ///< NCCL_INSPECTOR_REQUIRE_KERNEL_TIMING
  bool otel = false;                   ///< NCCL_INSPECTOR_OTEL_EXPORT
  bool otel_verbose = false;           ///< NCCL_INSPECTOR_OTEL_VERBOSE
  // ---- native ----
  std::vector<std::string> sinks;  ///< NCCLINSP_SINKS=prom,json,trace (default: from NCCL_INSPECTOR_PROM_DUMP)
  std::string node_name;           ///< NCCLINSP_NODE_NAME, else NODE_NAME (Kubernetes spec.nodeName), else host name
  std::vector<std::pair<std::string, std::string>>
      labels;                        ///< NCCLINSP_LABELS=cluster=a,team=b (+ k8s_namespace/k8s_pod)
  bool user_tag_label = false;       ///< NCCLINSP_USER_TAG_LABEL: v7 user tags become a bounded label
  std::string cuda_driver;           ///< NCCLINSP_CUDA_DRIVER: driver library to dlopen (default libcuda.so.1)
  bool keep_prom_files = false;      ///< NCCLINSP_PROM_KEEP_FILES=1 leaves the final .prom and state files
  std::uint64_t json_max_bytes = 0;  ///< NCCLINSP_JSON_MAX_BYTES: rotate the JSON file past this size
  std::uint64_t record_buffer_mb =
      64;  ///< NCCLINSP_RECORD_BUFFER_MB: per-op record ring of a recording thread grows up to this (MiB)
  std::chrono::milliseconds exit_flush{
      2000};  ///< NCCLINSP_EXIT_FLUSH_MS: at process exit, wait this long for a final export still running
  std::chrono::seconds retain_finalized{
      120};            ///< NCCLINSP_RETAIN_FINALIZED_S: a destroyed communicator's final values stay exported this long
  std::string job_id;  ///< the job key (label job_id): detail/job_identity.hpp's order
  std::string slurm_job_id = "unknown";  ///< SLURM_JOB_ID, else the job key (label)
  // ---- diagnosis signals (docs/diagnosis.md) ----
  bool detect = true;  ///< NCCLINSP_DETECT: in-process bus-bandwidth change detection at each export
  std::uint32_t detect_threshold_pct = 92;  ///< NCCLINSP_DETECT_THRESHOLD_PCT: degraded below this % of baseline
  std::uint32_t detect_recent = 3;          ///< NCCLINSP_DETECT_RECENT: windows in the recent median
  std::uint32_t detect_baseline = 30;       ///< NCCLINSP_DETECT_BASELINE: windows in the baseline median
  std::uint32_t detect_min_ops = 5;         ///< NCCLINSP_DETECT_MIN_OPS: ops per judged window
  std::uint32_t detect_persist_s = 9;       ///< NCCLINSP_DETECT_PERSIST_S: a degradation is sustained after this long
  std::uint32_t detect_deep_pct = 60;       ///< NCCLINSP_DETECT_DEEP_PCT: ... or at once below this % of baseline
  // ---- callback capture (docs/traces.md) ----
  std::string capture_dir;  ///< NCCLINSP_CAPTURE: record every callback into DIR/ncclinsp-<host>-<pid>.trace
  std::uint64_t capture_max_mb =
      256;               ///< NCCLINSP_CAPTURE_MAX_MB: the trace file's bound (later lines dropped, counted)
  int capture_mask = 0;  ///< NCCLINSP_CAPTURE_MASK: event types added to NCCL's mask while capturing (4095: all of v5)
  bool proxy = false;    ///< NCCLINSP_PROXY: subscribe to ProxyOp/ProxyStep (network wait by state)
  std::uint32_t proxy_sample = 16;  ///< NCCLINSP_PROXY_SAMPLE: proxy events for 1 op in N (by sequence number)
  // ---- cardinality of the .prom files (docs/scale.md) ----
  std::vector<std::string> drop_labels;  ///< NCCLINSP_DROP_LABELS=rank,comm_hash,uuid,algo_proto
  std::uint32_t size_bucket_bits =
      1;                             ///< NCCLINSP_SIZE_BUCKET_BITS: message_size buckets span 2^bits (1: powers of two)
  std::string histogram = "full";    ///< NCCLINSP_HISTOGRAM=full|coarse|off (20, 7 or no duration buckets)
  bool compat_gauges = true;         ///< NCCLINSP_COMPAT_GAUGES=0 leaves Inspector's four gauge families out
  std::uint64_t max_series = 20000;  ///< NCCLINSP_MAX_SERIES: hard cap on the lines of one file (0 = none)

  /// Effective export interval; 0 means "only at flush/teardown" (100 ms floor).
  std::chrono::milliseconds export_interval() const noexcept {
    using namespace std::chrono;
    if (!dump_thread || interval.count() < 0) return milliseconds(0);
    return interval < milliseconds(100) ? milliseconds(100) : duration_cast<milliseconds>(interval);
  }
  bool has_sink(std::string_view s) const {
    for (const auto& x : sinks)
      if (x == s) return true;
    return false;
  }

  using getenv_fn = ncclinsp::getenv_fn;
  static env_options from_env(const log_fn& log = {}, const getenv_fn& get = process_env);

  /// One line per setting, for the startup banner.
  std::string describe() const;
};

namespace detail {

inline bool is_label_name(std::string_view s) {
  if (s.empty() || !(std::isalpha(static_cast<unsigned char>(s[0])) || s[0] == '_')) return false;
  for (char c : s)
    if (!(std::isalnum(static_cast<unsigned char>(c)) || c == '_')) return false;
  return s.substr(0, 2) != "__";
}

}  // namespace detail

inline env_options env_options::from_env(const log_fn& log, const getenv_fn& get) {
  env_options o;
  detail::env_reader e(log, get);
  e.boolean("NCCL_INSPECTOR_ENABLE", o.enable);
  e.boolean("NCCLINSP_ENABLE", o.enable);
  e.boolean("NCCL_INSPECTOR_ENABLE_P2P", o.enable_p2p);
  e.boolean("NCCL_INSPECTOR_DUMP_THREAD_ENABLE", o.dump_thread);
  std::int64_t interval_us = o.interval.count();
  e.integer("NCCL_INSPECTOR_DUMP_THREAD_INTERVAL_MICROSECONDS", interval_us, INT64_MIN, INT64_MAX);
  if (const char* v = e.raw("NCCLINSP_INTERVAL")) {
    std::int64_t us = 0;
    if (detail::parse_duration_us(v, us))
      interval_us = us;
    else
      e.warn("NCCLINSP_INTERVAL", v, "a duration such as 5s, 500ms or 1000000");
  }
  o.interval = std::chrono::microseconds(interval_us);
  if (const char* j = e.raw("SLURM_JOBID")) {
    long long n = 0;
    o.dump_dir = detail::parse_int(j, n) ? "nccl-inspector-" + std::to_string(n) : "nccl-inspector-unknown-jobid";
  } else {
    o.dump_dir = "nccl-inspector-unknown-jobid";
  }
  e.string("NCCL_INSPECTOR_DUMP_DIR", o.dump_dir);
  e.boolean("NCCL_INSPECTOR_DUMP_VERBOSE", o.verbose);
  e.boolean("NCCL_INSPECTOR_PROM_DUMP", o.prom);
  e.boolean("NCCL_INSPECTOR_PROM_DUMP_STATS", o.prom_dump_stats);
  e.integer("NCCL_INSPECTOR_DUMP_MIN_SIZE_BYTES", o.min_size_bytes, 0, INT64_MAX);
  e.integer("NCCL_INSPECTOR_DUMP_COLL_RING_SIZE", o.coll_ring_size, 0, 1 << 24);
  e.integer("NCCL_INSPECTOR_DUMP_P2P_RING_SIZE", o.p2p_ring_size, 0, 1 << 24);
  e.integer("NCCL_INSPECTOR_COLL_POOL_SIZE", o.coll_pool_size, 10, 1 << 20);
  e.integer("NCCL_INSPECTOR_P2P_POOL_SIZE", o.p2p_pool_size, 10, 1 << 20);
  e.integer("NCCL_INSPECTOR_COMM_POOL_SIZE", o.comm_pool_size, 10, 1 << 20);
  e.boolean("NCCL_INSPECTOR_POOL_GROW", o.pool_grow);
  e.boolean("NCCL_INSPECTOR_REQUIRE_KERNEL_TIMING", o.require_kernel_timing);
  e.boolean("NCCL_INSPECTOR_OTEL_EXPORT", o.otel);
  e.boolean("NCCL_INSPECTOR_OTEL_VERBOSE", o.otel_verbose);
  if (o.coll_ring_size == 0) o.coll_ring_size = 1;
  if (o.p2p_ring_size == 0) o.p2p_ring_size = 1;

  o.sinks = {o.prom ? "prom" : "json"};
  if (const char* v = e.raw("NCCLINSP_SINKS")) {
    std::vector<std::string> s;
    bool ok = true;
    detail::for_each_item(v, ',', [&](std::string_view item) {
      if (item == "prom" || item == "json" || item == "trace")
        s.emplace_back(item);
      else if (!item.empty())
        ok = false;
    });
    if (ok && !s.empty())
      o.sinks = std::move(s);
    else
      e.warn("NCCLINSP_SINKS", v, "a list of prom, json, trace");
  }
  const detail::job_identity id = detail::resolve_job_identity(e, static_cast<long>(::getpid()));
  o.node_name = id.node;
  o.job_id = id.job_id;
  o.slurm_job_id = id.slurm_job_id;
  if (o.enable && id.job_from_fallback && !(id.k8s_namespace.empty() && id.k8s_pod.empty()))
    emitf(log, log_level::warn,
          "no job key on Kubernetes (NCCLINSP_JOB_ID and NCCLINSP_JOB_ID_FROM unset): job_id=\"{}\" names this "
          "process alone; pass the job's name through the downward API and NCCLINSP_JOB_ID_FROM",
          o.job_id);
  if (const char* v = e.raw("NCCLINSP_LABELS")) {
    std::vector<std::pair<std::string, std::string>> kv;
    bool ok = true;
    static constexpr std::string_view reserved[] = {
        "version",       "slurm_job_id", "job_id",     "node",     "gpu",           "uuid",
        "comm_name",     "comm_hash",    "rank",       "nranks",   "n_nodes",       "collective",
        "p2p_operation", "message_size", "algo_proto", "le",       "reason",        "user_tag",
        "abi",           "final",        "job",        "instance", "k8s_namespace", "k8s_pod"};
    detail::for_each_item(v, ',', [&](std::string_view item) {
      const auto eq = item.find('=');
      if (eq == std::string_view::npos || !detail::is_label_name(item.substr(0, eq))) {
        ok = false;
      } else {
        for (auto r : reserved)
          if (item.substr(0, eq) == r) ok = false;
        kv.emplace_back(std::string(item.substr(0, eq)), std::string(item.substr(eq + 1)));
      }
    });
    if (ok)
      o.labels = std::move(kv);
    else
      e.warn("NCCLINSP_LABELS", v,
             "name=value pairs separated by commas, names [a-zA-Z_][a-zA-Z0-9_]* and not one of ours");
  }
  if (!id.k8s_namespace.empty()) o.labels.emplace_back("k8s_namespace", id.k8s_namespace);
  if (!id.k8s_pod.empty()) o.labels.emplace_back("k8s_pod", id.k8s_pod);
  e.boolean("NCCLINSP_USER_TAG_LABEL", o.user_tag_label);
  e.string("NCCLINSP_CUDA_DRIVER", o.cuda_driver);
  e.boolean("NCCLINSP_PROM_KEEP_FILES", o.keep_prom_files);
  e.integer("NCCLINSP_JSON_MAX_BYTES", o.json_max_bytes, 0, INT64_MAX);
  e.integer("NCCLINSP_RECORD_BUFFER_MB", o.record_buffer_mb, 0, 1 << 20);
  std::int64_t exit_flush_ms = o.exit_flush.count(), retain_s = o.retain_finalized.count();
  e.integer("NCCLINSP_EXIT_FLUSH_MS", exit_flush_ms, 0, 600000);
  e.integer("NCCLINSP_RETAIN_FINALIZED_S", retain_s, 0, 86400);
  o.exit_flush = std::chrono::milliseconds(exit_flush_ms);
  o.retain_finalized = std::chrono::seconds(retain_s);
  e.boolean("NCCLINSP_DETECT", o.detect);
  e.integer("NCCLINSP_DETECT_THRESHOLD_PCT", o.detect_threshold_pct, 1, 99);
  e.integer("NCCLINSP_DETECT_RECENT", o.detect_recent, 1, 64);
  e.integer("NCCLINSP_DETECT_BASELINE", o.detect_baseline, 1, 64);
  e.integer("NCCLINSP_DETECT_MIN_OPS", o.detect_min_ops, 1, 1 << 20);
  e.integer("NCCLINSP_DETECT_PERSIST_S", o.detect_persist_s, 0, 3600);
  e.integer("NCCLINSP_DETECT_DEEP_PCT", o.detect_deep_pct, 1, 99);
  e.string("NCCLINSP_CAPTURE", o.capture_dir);
  e.integer("NCCLINSP_CAPTURE_MAX_MB", o.capture_max_mb, 1, 1 << 20);
  e.integer("NCCLINSP_CAPTURE_MASK", o.capture_mask, 0, 0xFFFF);
  e.boolean("NCCLINSP_PROXY", o.proxy);
  e.integer("NCCLINSP_PROXY_SAMPLE", o.proxy_sample, 1, 1 << 20);
  if (const char* v = e.raw("NCCLINSP_DROP_LABELS")) {
    std::vector<std::string> d;
    bool ok = true;
    detail::for_each_item(v, ',', [&](std::string_view item) {
      if (item == "rank" || item == "comm_hash" || item == "uuid" || item == "algo_proto")
        d.emplace_back(item);
      else if (!item.empty())
        ok = false;
    });
    if (ok)
      o.drop_labels = std::move(d);
    else
      e.warn("NCCLINSP_DROP_LABELS", v, "a list of rank, comm_hash, uuid, algo_proto");
  }
  e.integer("NCCLINSP_SIZE_BUCKET_BITS", o.size_bucket_bits, 1, 16);
  if (const char* v = e.raw("NCCLINSP_HISTOGRAM")) {
    const std::string_view h(v);
    if (h == "full" || h == "coarse" || h == "off")
      o.histogram = v;
    else
      e.warn("NCCLINSP_HISTOGRAM", v, "full, coarse or off");
  }
  e.boolean("NCCLINSP_COMPAT_GAUGES", o.compat_gauges);
  e.integer("NCCLINSP_MAX_SERIES", o.max_series, 0, INT64_MAX);
  return o;
}

inline std::string env_options::describe() const {
  std::string s;
  auto kv = [&](const char* k, const std::string& v) { s += std::string(k) + "=" + v + "\n"; };
  kv("enable", enable ? "1" : "0");
  std::string sk;
  for (const auto& x : sinks) sk += (sk.empty() ? "" : ",") + x;
  kv("sinks", sk);
  kv("dump_dir", dump_dir);
  kv("interval",
     export_interval().count() ? std::to_string(export_interval().count()) + "ms" : std::string("teardown only"));
  kv("p2p", enable_p2p ? "1" : "0");
  kv("min_size_bytes", std::to_string(min_size_bytes));
  kv("require_kernel_timing", require_kernel_timing ? "1" : "0");
  kv("node", node_name);
  kv("job_id", job_id);
  kv("slurm_job_id", slurm_job_id);
  std::string lb;
  for (const auto& [k, v] : labels) lb += (lb.empty() ? "" : ",") + k + "=" + v;
  kv("labels", lb.empty() ? "-" : lb);
  kv("retain_finalized", std::to_string(retain_finalized.count()) + "s");
  kv("pools", "coll=" + std::to_string(coll_pool_size) + ",p2p=" + std::to_string(p2p_pool_size));
  std::string dl;
  for (const auto& x : drop_labels) dl += (dl.empty() ? "" : ",") + x;
  kv("cardinality", "drop_labels=" + (dl.empty() ? std::string("-") : dl) +
                        " size_bucket_bits=" + std::to_string(size_bucket_bits) + " histogram=" + histogram +
                        " compat_gauges=" + (compat_gauges ? "1" : "0") + " max_series=" + std::to_string(max_series));
  kv("detect", detect ? "below " + std::to_string(detect_threshold_pct) + "% of baseline, windows recent=" +
                            std::to_string(detect_recent) + " baseline=" + std::to_string(detect_baseline) +
                            " min_ops=" + std::to_string(detect_min_ops) + " sustained after " +
                            std::to_string(detect_persist_s) + "s or below " + std::to_string(detect_deep_pct) + "%"
                      : std::string("off"));
  kv("proxy", proxy ? "1 op in " + std::to_string(proxy_sample) : std::string("off"));
  if (!capture_dir.empty())
    kv("capture",
       capture_dir + " (max " + std::to_string(capture_max_mb) + " MiB, mask +" + std::to_string(capture_mask) + ")");
  return s;
}

}  // namespace ncclinsp
