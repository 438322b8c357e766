#pragma once
/// NCCL releases as the simulator reproduces them (`--nccl 2.27|2.28|2.30|2.31.2`): which profiler
/// table the release loads and which of its behaviours a plugin sees (sim/README.md "NCCL releases
/// (`--nccl`)" names the NCCL function of each; docs/nccl-versions.md what the plugin makes of it).
/// A behaviour shows only where the workload asks for what triggers it (a graph replay, a CollNet or
/// symmetric collective, a drifting counter, an abort), so a default run is the same at every release.
/// Thread-safety: constants and pure functions only.

#include <cstring>
#include <string_view>

namespace ncclinsp::sim {

struct nccl_release {
  const char* name = "2.31.2";
  int version_code = 23102;  ///< NCCL_VERSION_CODE of the release read (the `nccl=` of a --trace header)
  int abi = 7;               ///< native profiler table (profiler.cc ncclProfilerPluginLoad: newest first)
  /// scheduleCollTasksToPlan's CollNet branch leaves task->nChannels unset: Coll nChannels 0, KernelCh arrive.
  bool collnet_zero_channels = false;
  /// Symmetric kernels reach the profiler (2.31.2): before, ncclSymmetricTaskScheduler frees the tasks and
  /// no Coll or KernelCh event is emitted (CollApi still is).
  bool sym_visible = true;
  /// symmetric_sched.cc: only the head task of a multi-task plan gets KernelCh, the others nChannels 0;
  /// under capture the uninstrumented kernel runs: announced channels, no KernelCh ever.
  bool sym_head_only = true;
  bool captured_sym_no_kernel_ch = true;
  /// proxy.cc SaveProxyProfiler: the host work counter advances at a replay only while
  /// planner.persistent holds, which an eager launch resets: the first replay after an eager op on the
  /// communicator reads the device ring slot of the channel's previous work (its timestamps, or 0).
  bool replay_counter_desync = false;
  /// A KernelCh stop without its start, and a never-reset sub->kernelEventHandle (before PR #2221).
  bool stale_kernel_ch_stop = false;
  /// Broadcast counter drift (NVIDIA/nccl #2368, #2369): KernelCh of the wrong op, end before begin.
  bool broadcast_drift = false;
  /// ProxyStep starts gated on a non-NULL ProxyOp handle (2.27 only).
  bool proxy_step_needs_op = false;
  /// commFree -> ncclProfilerThreadDestroy (profilerPurgeByContext) before finalize; earlier releases
  /// keep progressing on destroy and leave events open on abort.
  bool purge_at_destroy = true;
  /// KernelCh come from one ncclProfilerThread per communicator (2.31.2) rather than the proxy thread.
  bool profiler_thread = true;
  /// ncclProfilerPluginInit unloads the library on an init error (2.30.3+, commit 34929fe8).
  bool unload_on_init_error = true;
  /// Up to 2.31.0a: a Send/Recv to the rank itself runs as a device work that the kernel counts
  /// (src/device/common.h profiler(): `workCounter += nWorks` for every work of a batch) and the host
  /// does not (src/proxy.cc incWorkCounter runs only for a profiler proxy op, which
  /// enqueue.cc addP2pToPlan never makes for a self pair): +1 per self pair on channels
  /// 0..max(nchSend, nchRecv)-1, also per replay of a captured self-only plan, never undone. Every later
  /// KernelCh on such a channel reads the slot of the work that many places earlier.
  bool self_p2p_shifts_counter = false;
  /// 2.31.2: plugin/profiler.cc ncclProfilerPostPlanWork posts KernelCh for every P2P pair, self pairs
  /// included (one per channel of each direction, from the communicator's profiler thread), and counts
  /// them on the host: no shift.
  bool self_p2p_kernel_ch = true;
  /// 2.31.2: ncclLaunchPrepare gives a captured plan a host callback when `plan->hasProxyOps ||
  /// plan->hasProfilerOps` (a task with KernelCh in its mask): a captured self-only plan then emits
  /// Group, P2p and KernelCh at every replay, nothing at capture. Before, only `hasProxyOps`.
  bool host_callback_for_profiler_ops = true;
};

inline constexpr nccl_release release_2_27{.name = "2.27",
                                           .version_code = 22707,
                                           .abi = 4,
                                           .collnet_zero_channels = true,
                                           .sym_visible = false,
                                           .sym_head_only = false,
                                           .captured_sym_no_kernel_ch = false,
                                           .replay_counter_desync = true,
                                           .stale_kernel_ch_stop = true,
                                           .broadcast_drift = false,
                                           .proxy_step_needs_op = true,
                                           .purge_at_destroy = false,
                                           .profiler_thread = false,
                                           .unload_on_init_error = false,
                                           .self_p2p_shifts_counter = true,
                                           .self_p2p_kernel_ch = false,
                                           .host_callback_for_profiler_ops = false};
inline constexpr nccl_release release_2_28{.name = "2.28",
                                           .version_code = 22809,
                                           .abi = 5,
                                           .collnet_zero_channels = true,
                                           .sym_visible = false,
                                           .sym_head_only = false,
                                           .captured_sym_no_kernel_ch = false,
                                           .replay_counter_desync = true,
                                           .stale_kernel_ch_stop = true,
                                           .broadcast_drift = false,
                                           .proxy_step_needs_op = false,
                                           .purge_at_destroy = false,
                                           .profiler_thread = false,
                                           .unload_on_init_error = false,
                                           .self_p2p_shifts_counter = true,
                                           .self_p2p_kernel_ch = false,
                                           .host_callback_for_profiler_ops = false};
inline constexpr nccl_release release_2_30{.name = "2.30",
                                           .version_code = 23007,
                                           .abi = 6,
                                           .collnet_zero_channels = true,
                                           .sym_visible = false,
                                           .sym_head_only = false,
                                           .captured_sym_no_kernel_ch = false,
                                           .replay_counter_desync = true,
                                           .stale_kernel_ch_stop = true,
                                           .broadcast_drift = false,
                                           .proxy_step_needs_op = false,
                                           .purge_at_destroy = false,
                                           .profiler_thread = false,
                                           .unload_on_init_error = true,
                                           .self_p2p_shifts_counter = true,
                                           .self_p2p_kernel_ch = false,
                                           .host_callback_for_profiler_ops = false};
inline constexpr nccl_release release_2_31_2{.name = "2.31.2",
                                             .version_code = 23102,
                                             .abi = 7,
                                             .collnet_zero_channels = false,
                                             .sym_visible = true,
                                             .sym_head_only = true,
                                             .captured_sym_no_kernel_ch = true,
                                             .replay_counter_desync = false,
                                             .stale_kernel_ch_stop = false,
                                             .broadcast_drift = true,
                                             .proxy_step_needs_op = false,
                                             .purge_at_destroy = true,
                                             .profiler_thread = true,
                                             .unload_on_init_error = true,
                                             .self_p2p_shifts_counter = false,
                                             .self_p2p_kernel_ch = true,
                                             .host_callback_for_profiler_ops = true};
inline constexpr nccl_release releases[] = {release_2_27, release_2_28, release_2_30, release_2_31_2};
inline constexpr const nccl_release& newest_release = release_2_31_2;

/// The release named `s` ("2.27", "2.28", "2.30", "2.31.2"; "2.29" and "2.31" are accepted for the
/// release whose behaviour they share), or nullptr.
inline const nccl_release* find_release(std::string_view s) noexcept {
  if (s == "2.29") s = "2.30";
  if (s == "2.31") s = "2.31.2";
  for (const auto& r : releases)
    if (s == r.name) return &r;
  return nullptr;
}

}  // namespace ncclinsp::sim
