#pragma once
/// How an embedded inspector is configured: inspector_options (its sinks, export interval, labels,
/// filters, pool sizes), its mapping from the plugin's environment variables (from_env / from),
/// make_sinks() to build its sink list, and comm_info (what a framework tells about a
/// communicator). Cold path only; plain values, no threads.

#include <unistd.h>

#include <chrono>
#include <cstdint>
#include <functional>
#include <string>
#include <utility>
#include <vector>

#include "ncclinsp/collector.hpp"
#include "ncclinsp/detail/env.hpp"
#include "ncclinsp/detail/host.hpp"
#include "ncclinsp/detail/job_identity.hpp"
#include "ncclinsp/detector.hpp"
#include "ncclinsp/env_options.hpp"
#include "ncclinsp/exporter.hpp"
#include "ncclinsp/log.hpp"
#include "ncclinsp/runtime_options.hpp"
#include "ncclinsp/sink.hpp"
#include "ncclinsp/sinks/from_options.hpp"
#include "ncclinsp/snapshot.hpp"

namespace ncclinsp {

/// Builds a sink list from sink objects (any_sink is move-only, so a braced list cannot hold it).
/// Cold path.
template <class... S>  // any_sink says what a type lacks (write() not noexcept, ...)
std::vector<any_sink> make_sinks(S&&... s) {
  std::vector<any_sink> v;
  v.reserve(sizeof...(S));
  (v.emplace_back(std::forward<S>(s)), ...);
  return v;
}

/// Settings of an inspector. Designated initialisers: `{.sinks = ..., .interval = ...}`. Each setting
/// lives in one struct: the collector's in `collector` (collector_options), the detector's in
/// `detector`; `interval` and `log` are handed to the inspector's exporter (exporter_options).
struct inspector_options {
  std::vector<any_sink> sinks{};
  /// Time between exports; zero exports only at flush() and destruction (exporter_options::interval).
  std::chrono::milliseconds interval{default_export_interval};
  /// false: record/begin/end return at once and nothing is exported (NCCL_INSPECTOR_ENABLE=0).
  bool enabled = true;
  /// Ops smaller than this are counted as filtered (reason min_size), not measured.
  std::uint64_t min_size_bytes = 0;
  /// Skip Send/Recv (NCCL_INSPECTOR_ENABLE_P2P=0).
  bool enable_p2p = true;
  /// In-flight ops tracked per communicator for the hang signal (begin/end); beyond it, counted.
  std::uint32_t inflight_pool = 256;
  /// The collector's settings: identity (node / slurm_job_id / user labels of every series; `abi`
  /// is always "embedded"; an empty node or hostname becomes the host name), per-op records
  /// (record_ring_capacity, for the JSON-lines sink), user_tag_label, retired_retention.
  collector_options collector{.identity = default_identity()};
  /// In-process bus-bandwidth change detection at every export (detector.hpp; enabled by default).
  detector_options detector{};
  /// Called on the exporter thread when a communicator/collective/size turns degraded or recovers
  /// (the same events reach sinks in snapshot::busbw_events). Should return quickly; an exception
  /// is caught and logged.
  std::function<void(const busbw_event&)> on_busbw_event{};
  log_fn log{};  ///< the exporter's and the inspector's (exporter_options::log)
  /// The destructor's bound on the final export and the sinks' shutdown (see basic_inspector::shutdown).
  std::chrono::milliseconds shutdown_timeout{std::chrono::seconds(10)};

  /// The node, job key and slurm_job_id of the environment (detail/job_identity.hpp, malformed
  /// values skipped silently: from_env reports them), the host name, abi "embedded", this pid.
  static process_identity default_identity() {
    process_identity id;
    id.pid = static_cast<long>(::getpid());
    const log_fn quiet = [](log_level, std::string_view) {};
    const getenv_fn get = process_env;
    const detail::job_identity job = detail::resolve_job_identity(detail::env_reader(quiet, get), id.pid);
    id.hostname = detail::host_name();
    id.node = job.node;
    id.job_id = job.job_id;
    id.slurm_job_id = job.slurm_job_id;
    return id;
  }

  /// The plugin's configuration (env_options::from_env(): NCCL_INSPECTOR_* and NCCLINSP_*) mapped onto
  /// an inspector: the same sinks in the same directory (prom_textfile_sink / json_sink), or the OTLP
  /// sink when NCCL_INSPECTOR_OTEL_EXPORT=1 (it takes precedence, as in Inspector), the same
  /// interval, and the labels, filters and pool sizes of the plugin's own mapping (runtime_options_from). Cold path; invalid values are logged and defaulted.
  /// OTLP is opt-in: pass `otlp` = ncclinsp::make_otlp_http_sink (<ncclinsp/sinks/otlp_http_sink.hpp>);
  /// without it NCCL_INSPECTOR_OTEL_EXPORT=1 is refused with a warning and nothing is exported.
  static inspector_options from_env(const log_fn& log = {}, const getenv_fn& get = process_env,
                                    otlp_sink_factory otlp = nullptr) {
    return from(env_options::from_env(log, get), log, get, otlp);
  }
  static inspector_options from(const env_options& o, const log_fn& log = {}, const getenv_fn& get = process_env,
                                otlp_sink_factory otlp = nullptr) {
    runtime_options rt = runtime_options_from(o, /*nccl_events=*/false, default_identity());
    inspector_options r;
    r.enabled = o.enable;
    r.interval = o.export_interval();
    r.collector = std::move(rt.collector);
    r.min_size_bytes = rt.filter.min_size_bytes;
    r.enable_p2p = rt.filter.p2p;
    r.inflight_pool = rt.inflight_pool;
    r.detector = std::move(rt.detector);
    r.log = log;
    if (!o.enable) return r;
    r.sinks = sinks_from_options(o, log, get, otlp);
    return r;
  }
};

/// What a framework knows about a communicator on this rank (cold, once per communicator).
struct comm_info {
  std::string name{};      ///< commName label ("unknown" when empty)
  std::uint64_t hash = 0;  ///< equal on all ranks: comm_hash_of_unique_id(id) (comm_hash.hpp); the comm_hash label
  int rank = 0;
  int nranks = 1;
  int nnodes = 1;
  int device = -1;     ///< CUDA ordinal; the `gpu` label is GPU<device>
  std::string uuid{};  ///< "GPU-xxxxxxxx-..." (dcgm-exporter's UUID); names the .prom file. Empty: host-<node>-pid<pid>
};

}  // namespace ncclinsp
