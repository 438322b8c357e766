#pragma once
/// The state dump of one GPU of one process (plugin/state_dumper.hpp writes it, `ncclinsp-report
/// hang` merges those of every rank): plain data and its JSON form, bounded in size. Layout
/// (docs/report.md, "State dumps"):
///
///   {"format":"ncclinsp-state","version":1,"ncclinsp":"0.2.0","reason":"hang","time_ns":...,
///    "node":"node1","hostname":"h","pid":42,"job_id":"1234","slurm_job_id":"1234",
///    "gpu":1,"uuid":"GPU-...","warn_after_s":60,"every_s":30,"comms_left_out":0,
///    "comms":[{"name":"fsdp","hash":"0x...","rank":3,"nranks":8,"nnodes":2,
///              "last_seq":{"AllReduce":41},"inflight_total":1,"oldest_age_s":75.2,
///              "completed":[{"seq":41,"op":"AllReduce","bytes":1048576,"state":"completed",
///                            "start_ns":...,"end_ns":...,"gpu_ns":812345}, ...],
///              "inflight":[{"seq":42,"op":"AllReduce","bytes":1048576,"state":"started",
///                           "start_ns":...,"age_s":75.2,"channels":16,
///                           "channels_started":[0,1,...],"channels_ended":[0,...]}],
///              "proxy":{"steps":1234,"idle_s":74.9}}]}
///
/// Times are CLOCK_REALTIME ns; `seq` is NCCL's sequence number of the collective, counted per
/// function (comm->seqNumber[func]: equal on every rank of the communicator), or, for Send/Recv
/// (with `peer`), this rank's count of them on it; `last_seq` has the last completed one per
/// function (functions with none are left out); `state` is "enqueued" (no KernelCh
/// yet), "started" (a channel started) or "completed"; channel ids are mod 64.
/// Thread-safety: pure functions on plain data (cold path).

#include <array>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "ncclinsp/format/json_writer.hpp"
#include "ncclinsp/model.hpp"
#include "ncclinsp/snapshot.hpp"
#include "ncclinsp/version.hpp"

namespace ncclinsp::format {

inline constexpr std::string_view state_dump_format = "ncclinsp-state";
inline constexpr int state_dump_version = 1;

/// One op of a communicator: completed (end_ns > 0) or in flight.
struct dumped_op {
  std::uint64_t seq = 0;
  func fn = func::unknown;
  std::uint64_t bytes = 0;
  bool bytes_valid = true;
  std::int32_t peer = -1;
  std::uint64_t start_ns = 0;  ///< CLOCK_REALTIME ns at its start (enqueue)
  std::uint64_t end_ns = 0;    ///< completed: when its completion was seen
  std::uint64_t gpu_ns = 0;    ///< completed: its GPU span, 0 when not GPU-timed
  // In flight only:
  std::uint64_t age_ns = 0;
  std::uint32_t channels = 0;    ///< announced by NCCL (0: unknown)
  std::uint64_t ch_started = 0;  ///< channel ids (mod 64) whose KernelCh started
  std::uint64_t ch_ended = 0;    ///< channel ids (mod 64) whose KernelCh ended
};

/// dumped_comm::last_seq before any op completed.
inline constexpr std::array<std::int64_t, func_count> none_completed = [] {
  std::array<std::int64_t, func_count> a{};
  a.fill(-1);
  return a;
}();

/// One communicator on this GPU.
struct dumped_comm {
  comm_desc desc;
  std::array<std::int64_t, func_count> last_seq = none_completed;  ///< per function, the last completed (-1: none)
  std::vector<dumped_op> completed;                                ///< oldest first
  std::vector<dumped_op> inflight;                                 ///< oldest first (at most the writer's cap)
  std::uint64_t inflight_total = 0;                                ///< in flight, listed or not
  std::uint64_t oldest_age_ns = 0;                                 ///< of the oldest op in flight (0: none)
  bool proxy = false;                                              ///< network steps are followed (NCCLINSP_PROXY)
  std::uint64_t proxy_steps = 0;                                   ///< network steps finished so far
  std::uint64_t proxy_idle_ns = 0;  ///< since that count last changed, as the dumper saw it
};

/// One file: a process's communicators on one GPU.
struct state_dump {
  std::string reason;  ///< "signal", "trigger", "hang" or "heartbeat"
  std::uint64_t time_ns = 0;
  std::string node, hostname, job_id, slurm_job_id;
  long pid = 0;
  int gpu = -1;
  std::string uuid;
  std::uint32_t warn_after_s = 0, every_s = 0;
  std::vector<dumped_comm> comms;  ///< in the order to keep when the size bound cuts: most urgent first
};

namespace detail {

inline void channel_list(json_writer& j, std::uint64_t mask) {
  j.begin_array();
  for (; mask; mask &= mask - 1) j.value(__builtin_ctzll(mask));
  j.end_array();
}

inline void dumped_op_json(json_writer& j, const dumped_op& o, bool inflight) {
  j.begin_object();
  j.key("seq").value(o.seq);
  j.key("op").value(to_string(o.fn));
  j.key("bytes").value(o.bytes);
  if (!o.bytes_valid) j.key("bytes_valid").value(false);
  if (is_p2p(o.fn)) j.key("peer").value(o.peer);
  j.key("state").value(!inflight ? "completed" : o.ch_started ? "started" : "enqueued");
  j.key("start_ns").value(o.start_ns);
  if (inflight) {
    j.key("age_s").fixed(static_cast<double>(o.age_ns) / 1e9, 3);
    j.key("channels").value(o.channels);
    j.key("channels_started");
    channel_list(j, o.ch_started);
    j.key("channels_ended");
    channel_list(j, o.ch_ended);
  } else {
    j.key("end_ns").value(o.end_ns);
    j.key("gpu_ns").value(o.gpu_ns);
  }
  j.end_object();
}

inline void dumped_comm_json(std::string& out, const dumped_comm& c) {
  json_writer j(out);
  j.begin_object();
  j.key("name").value(c.desc.name);
  j.key("hash").hex64(c.desc.hash);
  j.key("rank").value(c.desc.rank);
  j.key("nranks").value(c.desc.nranks);
  j.key("nnodes").value(c.desc.nnodes);
  j.key("last_seq").begin_object();
  for (std::size_t f = 1; f < func_count; ++f)
    if (c.last_seq[f] >= 0) j.key(func_names[f]).value(c.last_seq[f]);
  j.end_object();
  j.key("inflight_total").value(c.inflight_total);
  j.key("oldest_age_s").fixed(static_cast<double>(c.oldest_age_ns) / 1e9, 3);
  j.key("completed").begin_array(json_lines{"\n   ", ""});
  for (const auto& o : c.completed) dumped_op_json(j, o, false);
  j.end_array();
  j.key("inflight").begin_array(json_lines{"\n   ", ""});
  for (const auto& o : c.inflight) dumped_op_json(j, o, true);
  j.end_array();
  if (c.proxy) {
    j.key("proxy").begin_object();
    j.key("steps").value(c.proxy_steps);
    j.key("idle_s").fixed(static_cast<double>(c.proxy_idle_ns) / 1e9, 3);
    j.end_object();
  }
  j.end_object();
}

}  // namespace detail

/// The dump as JSON in `out` (replaced), at most `max_bytes` (at least the header): communicators
/// that would pass the bound are left out, counted in `comms_left_out`.
inline void write_state_dump(std::string& out, const state_dump& d, std::size_t max_bytes) {
  out.clear();
  json_writer j(out);
  j.begin_object(json_lines{"\n ", "\n"});
  j.key("format").value(state_dump_format);
  j.key("version").value(state_dump_version);
  j.key("ncclinsp").value(NCCLINSP_VERSION_STRING);
  j.key("reason").value(d.reason);
  j.key("time_ns").value(d.time_ns);
  j.key("node").value(d.node);
  j.key("hostname").value(d.hostname);
  j.key("pid").value(d.pid);
  j.key("job_id").value(d.job_id);
  j.key("slurm_job_id").value(d.slurm_job_id);
  j.key("gpu").value(d.gpu);
  j.key("uuid").value(d.uuid);
  j.key("warn_after_s").value(d.warn_after_s);
  j.key("every_s").value(d.every_s);
  // The communicators first, each whole or not at all, then their count left out.
  std::string comms = "[", one;
  std::size_t left_out = 0;
  constexpr std::size_t tail = 64;  // "comms_left_out", the closing brackets
  for (const auto& c : d.comms) {
    one.clear();
    detail::dumped_comm_json(one, c);
    if (out.size() + comms.size() + one.size() + 3 + tail > max_bytes) {
      ++left_out;
      continue;
    }
    if (comms.size() > 1) comms += ",";
    comms += "\n  ";
    comms += one;
  }
  comms += "]";
  j.key("comms_left_out").value(left_out);
  j.key("comms").raw(comms);
  j.end_object();
}

}  // namespace ncclinsp::format
