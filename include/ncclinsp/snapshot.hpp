#pragma once
/// The snapshot: plain data handed from the collector to every sink, taken on the exporter thread.
/// Counters are cumulative since the collector started; `window` holds what changed since the
/// previous snapshot (for Inspector's per-window gauges). Thread-safety: a value type; sinks get it
/// by const reference and must not keep references past write().

#include <array>
#include <cmath>
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "ncclinsp/histogram.hpp"
#include "ncclinsp/model.hpp"
#include "ncclinsp/op_trace.hpp"

namespace ncclinsp {

/// Why an event was lost (counted, never silent).
/// Why an op was lost (counted): a full pool, table or ring, or per-op records still queued when
/// the final export ran out of its time before process exit (exit_deadline).
enum class drop_reason : std::uint8_t {
  op_pool_full = 0,
  table_full,
  record_ring_full,
  comm_table_full,
  exit_deadline,
  count_
};
inline constexpr std::array<const char*, static_cast<std::size_t>(drop_reason::count_)> drop_reason_names = {
    "op_pool_full", "table_full", "record_ring_full", "comm_table_full", "exit_deadline"};
/// Why an op was skipped on purpose, counted instead of published (configuration, or a timing that
/// cannot be trusted as GPU time; docs/metrics.md): smaller than NCCL_INSPECTOR_DUMP_MIN_SIZE_BYTES;
/// no GPU timestamp (REQUIRE_KERNEL_TIMING); timed by its host enqueue only (copy-engine collectives,
/// ops without channels); KernelCh timestamps that cannot be its own (a channel ends before the op
/// began); KernelCh timestamps of an earlier work on the same channel (a replay's stale device
/// counter); no KernelCh can come (a mask without KernelCh, a captured symmetric collective).
enum class filter_reason : std::uint8_t {
  min_size = 0,
  no_gpu_timing,
  enqueue_only,
  rejected_timestamps,
  foreign_timestamps,
  no_kernel_events,
  count_
};
inline constexpr std::array<const char*, static_cast<std::size_t>(filter_reason::count_)> filter_reason_names = {
    "min_size", "no_gpu_timing", "enqueue_only", "rejected_timestamps", "foreign_timestamps", "no_kernel_events"};

/// Static description of one communicator on one rank (resolved once, cold path).
struct comm_desc {
  std::string name{};      ///< may be empty: rendered "unknown"
  std::uint64_t hash = 0;  ///< NCCL commHash/commId, equal on all ranks
  int rank = 0;
  int nranks = 1;
  int nnodes = 1;
  int device = -1;     ///< CUDA ordinal, -1 when unknown
  std::string uuid{};  ///< "GPU-xxxxxxxx-..." or a fallback id; names the .prom file
};

/// Process-wide labels and identity (the same in every file the process writes).
struct process_identity {
  std::string node{};      ///< node label (host name or NCCLINSP_NODE_NAME)
  std::string hostname{};  ///< real host name (JSON metadata)
  std::string slurm_job_id = "unknown";
  std::string job_id{};          ///< the job key (label job_id); empty: the same as slurm_job_id
  std::string abi = "embedded";  ///< profiler ABI NCCL loaded ("v7"), or "embedded"
  std::vector<std::pair<std::string, std::string>> labels{};  ///< user labels, validated names
  long pid = 0;
};

struct cell_stats {
  std::uint64_t ops = 0;      ///< all completed ops, valid or not
  std::uint64_t invalid = 0;  ///< zero duration/size, overflow, unknown function or datatype
  std::uint64_t bytes = 0;
  std::uint64_t busy_ns = 0;
  std::uint64_t bw_count = 0;  ///< ops with busbw > 0 (geometric-mean denominator)
  double bus_bytes = 0;
  double log_busbw_sum = 0;                            ///< sum of ln(busbw GB/s); read it through geomean_busbw_gbs()
  std::array<std::uint64_t, duration_buckets> hist{};  ///< non-cumulative counts
  std::uint64_t valid_ops() const noexcept { return ops - invalid; }
  /// Geometric mean of the ops' bus bandwidths in GB/s (GB = 1e9 bytes, nccl-tests factors): what
  /// Inspector's nccl_bus_bandwidth_gbs reports for a window. 0 without a measured op.
  double geomean_busbw_gbs() const noexcept {
    return bw_count ? std::exp(log_busbw_sum / static_cast<double>(bw_count)) : 0.0;
  }
  /// Bus bytes over busy time in GB/s (GB = 1e9 bytes): what
  /// rate(ncclinsp_bus_bytes_total) / rate(ncclinsp_busy_seconds_total) / 1e9 gives. 0 without busy time.
  double busbw_gbs() const noexcept { return busy_ns ? bus_bytes / static_cast<double>(busy_ns) : 0.0; }
};

/// The fields of cell_stats, listed once: calls f(a.x, b.x) for every field x (the histogram
/// bucket by bucket). Works on any two types with these members, such as the collector's atomic
/// cells, so merging, diffing and resetting are each one loop.
template <class A, class B, class F>
constexpr void for_each_stat(A& a, B& b, F&& f) {
  f(a.ops, b.ops);
  f(a.invalid, b.invalid);
  f(a.bytes, b.bytes);
  f(a.busy_ns, b.busy_ns);
  f(a.bw_count, b.bw_count);
  f(a.bus_bytes, b.bus_bytes);
  f(a.log_busbw_sum, b.log_busbw_sum);
  for (std::size_t i = 0; i < duration_buckets; ++i) f(a.hist[i], b.hist[i]);
}

struct cell_snapshot {
  std::uint32_t comm = 0;  ///< index into snapshot::comms
  func fn = func::unknown;
  algo alg = algo::unknown;
  proto pro = proto::unknown;
  timing_source timing = timing_source::kernel_gpu;
  std::uint32_t size_index = 0;  ///< inspector_bucketer index (nests in the native buckets)
  std::uint32_t tag_index = 0;   ///< 0 = untagged, else index into snapshot::user_tags + 1
  cell_stats total;
  cell_stats window;
};

struct comm_snapshot {
  comm_desc desc;
  bool retired = false;        ///< finalized: final values, exported for the retention period
  bool newly_retired = false;  ///< retired, and this is its first export since
  std::uint64_t started = 0;
  std::uint64_t completed = 0;
  std::uint64_t abandoned = 0;
  std::uint64_t inflight = 0;
  double oldest_inflight_age_s = 0;
  double since_last_completion_s = -1;                     ///< -1: nothing completed yet
  std::array<std::uint64_t, func_count> last_seq_plus1{};  ///< 0 = none completed
  std::array<std::uint64_t, static_cast<std::size_t>(drop_reason::count_)> dropped{};
  std::array<std::uint64_t, static_cast<std::size_t>(filter_reason::count_)> filtered{};
};

/// Drop and filter counts of one GPU's communicators that are no longer exported, so per-GPU
/// counters summed over communicators never go backwards.
struct departed_counts {
  comm_desc gpu;  ///< the GPU: device and uuid set, the rest empty
  std::array<std::uint64_t, static_cast<std::size_t>(drop_reason::count_)> dropped{};
  std::array<std::uint64_t, static_cast<std::size_t>(filter_reason::count_)> filtered{};
};

/// In-process bus-bandwidth change detection (detector.hpp): one entry per communicator x
/// collective x native (pow2) size bucket whose baseline is established.
struct busbw_health {
  std::uint32_t comm = 0;  ///< index into snapshot::comms
  func fn = func::unknown;
  std::uint32_t size_bucket = 0;   ///< pow2_bucketer index
  double baseline_gbs = 0;         ///< reference bus bandwidth (frozen while degraded)
  double recent_gbs = 0;           ///< median of the recent windows
  double ratio = 1;                ///< recent / baseline
  bool degraded = false;           ///< a sustained degradation (detector.hpp: it outlasted persist_s)
  std::uint64_t degradations = 0;  ///< sustained degradations so far (a counter)
  std::uint64_t transients = 0;    ///< degradations that ended before they were sustained (a counter)
  double transient_depth = 0;      ///< sum over those of their depth, 1 - lowest ratio (a counter)
};

/// A change of degraded state, for callbacks (self-contained: the communicator is copied).
struct busbw_event {
  comm_desc comm;
  func fn = func::unknown;
  std::uint32_t size_bucket = 0;  ///< pow2_bucketer index
  bool degraded = false;          ///< true: entered (or confirmed) a degradation; false: recovered
  bool sustained = false;         ///< it outlasted persist_s (or was deep); false: transient (so far)
  double baseline_gbs = 0, recent_gbs = 0, ratio = 1;
  double lowest_ratio = 1;  ///< the episode's lowest ratio so far
  double duration_s = 0;    ///< the episode's run so far: windows covered after its first low one (detector.hpp)
  std::uint64_t time_unix_ns = 0;
};

/// Network proxy accounting of one (communicator, peer, direction) (proxy_stats.hpp): cumulative.
struct proxy_peer_snapshot {
  std::uint32_t comm = 0;  ///< index into snapshot::comms
  int peer = 0;            ///< peer rank in the communicator
  bool send = false;
  std::array<std::uint64_t, 4> wait_ns{};  ///< send: gpu, peer_credit, network, queue; recv: network, flush, gpu, 0
  std::uint64_t bytes = 0, steps = 0;
};

struct record_entry {
  std::uint32_t comm = 0;  ///< index into snapshot::comms
  op_record op;
  std::int32_t trace = -1;  ///< index into snapshot::traces, -1 = none
};

struct snapshot {
  std::uint64_t time_unix_ns = 0;
  bool final = false;  ///< taken at shutdown
  /// Only `records` (+ `traces`), with `comms` to refer to: drained between exports when a record
  /// ring reached its high-water mark (collector::take_records); given to sinks' write_records().
  bool records_only = false;
  process_identity identity;
  std::vector<comm_snapshot> comms;
  std::vector<cell_snapshot> cells;
  std::vector<record_entry> records;  ///< per-op records drained since the last snapshot
  std::vector<op_trace> traces;       ///< callback detail of some records (collector_options::record_traces)
  std::vector<std::uint64_t> user_tags;
  std::uint64_t comm_table_full = 0;
  std::vector<departed_counts> departed;   ///< per GPU; add to the sums over `comms`
  std::vector<proxy_peer_snapshot> proxy;  ///< sampled network steps (collector_options::proxy_accounting)
  std::vector<busbw_health> busbw;         ///< filled by a change_detector (empty without one)
  std::vector<busbw_event> busbw_events;   ///< state changes found in this snapshot
};

}  // namespace ncclinsp
