#pragma once
/// What NCCL does that a profiler plugin sees, release by release: the one table. Each row is one
/// behaviour: what NCCL does, from which release to which, the NCCL file and function it rests on,
/// the real trace that shows it (tests/traces/), the plugin's rule for it, the filter reason it
/// counts under, the conformance case that checks it and how the simulator reproduces it.
/// Read by the simulator (sim/nccl_release.hpp: every version decision of its driver is a row),
/// by the plugin where a release matters (plugin_state: what the loaded ABI's releases do), and by
/// tests/docs/nccl_table_docs.cpp, which writes the release tables of docs/nccl-versions.md and
/// sim/README.md from it and fails ctest `nccl_table_docs` when they drift. Adding a behaviour:
/// docs/layout.md, "Adding an NCCL behaviour".
/// Thread-safety: constants and constexpr functions only.

#include <cstddef>
#include <cstdint>
#include <iterator>

namespace ncclinsp::abi {

/// A release the rows were read against (NCCL_VERSION_CODE of the version read; `abi`: the
/// profiler table it loads natively; `read`: its core source was read, else every row is unknown).
struct nccl_release_info {
  const char* name;
  int version_code;
  int abi;
  bool read;
  const char* source;
};

inline constexpr nccl_release_info nccl_releases[] = {
    {"2.27", 22707, 4, true, "tags v2.27.3-1, v2.27.7-1"},
    {"2.28", 22809, 5, true, "tag v2.28.9-1"},
    {"2.29", 22907, 6, true, "tags v2.29.2-1, v2.29.7-1"},
    {"2.30", 23007, 6, true, "tags v2.30.3-1, v2.30.7-1"},
    {"2.31.0a0", 23100, 6, true, "dev branch 86fa684d (version.mk 2.31.0a7)"},
    {"2.31.2", 23102, 7, true, "commit 889806836 (version.mk 2.31.2)"},
    {"2.32.3", 23203, 7, false,
     "commit 12df1a11: only makefiles/version.mk is stored, no core file; no profiler_v8.h exists in any "
     "commit read, so v7 is assumed"},
};

/// Still true in the newest release read.
inline constexpr int nccl_open = 99999;

enum class nccl_behaviour : std::uint8_t {
  one_rank_silent,
  zero_count_silent,
  self_p2p_in_place_dropped,
  self_p2p_kernel_ch,
  self_p2p_shifts_counter,
  host_callback_for_profiler_ops,
  replay_new_seq,
  replay_counter_desync,
  batch_shared_timestamps,
  work_ring_64,
  broadcast_no_coll,
  broadcast_counter_drift,
  symmetric_invisible,
  sym_head_only,
  captured_sym_no_kernel_ch,
  sym_own_counters,
  collnet_zero_channels,
  ce_coll_enqueue_only,
  channel_ids_wrap,
  kernel_ch_stop_guarded,
  profiler_thread,
  kernel_ch_dropped_on_alloc_failure,
  coll_from_three_threads,
  purge_at_destroy,
  events_after_finalize,
  ras_mask_override,
  init_error_disables_process,
  init_error_unloads,
  task_needs_group,
  proxy_step_needs_op,
  recv_step_restarted,
  proxy_op_never_stopped,
  shim_garbage_bytes,
  shim_p2p_no_channels,
  shim_garbage_args,
  count_
};

/// One behaviour. `from`/`to`: the first and last NCCL_VERSION_CODE it holds in (`to` = nccl_open:
/// still in the newest release read). `abi_lo`/`abi_hi`: the profiler tables it concerns.
/// `shim`: only where NCCL drives an older table through its shim (plugin/profiler/profiler_v<N>.cc).
/// `sim_reads`: the simulator's driver takes a decision from it (nccl_profile::has); else `sim` says
/// how the simulator reproduces it (or that it does not). `model`: the simulator without --nccl
/// keeps it, as the release that natively loads the table driven does (sim/nccl_release.hpp).
/// `conformance`: a phrase of the nccl_conformance case name; `trace`: a file under tests/traces/.
struct nccl_behaviour_row {
  nccl_behaviour id;
  const char* what;
  int from = 22703;
  int to = nccl_open;
  int abi_lo = 4;
  int abi_hi = 7;
  bool shim = false;
  bool sim_reads = false;
  bool model = false;
  const char* nccl = "";
  const char* trace = "";
  const char* plugin = "";
  const char* reason = "";
  const char* conformance = "";
  const char* sim = "";
};

inline constexpr nccl_behaviour_row nccl_behaviours[] = {
    {.id = nccl_behaviour::one_rank_silent,
     .what = "A collective on a one-rank communicator emits no event at all, not even GroupApi",
     .nccl = "enqueue.cc taskAppend -> device/onerank.cu ncclLaunchOneRank (2.31.2: also rawTaskAppend)",
     .trace = "nccl-2.28.9-h200-onerank-cases.trace",
     .plugin = "nothing to count",
     .sim = "always (pending_op::no_task)"},
    {.id = nccl_behaviour::zero_count_silent,
     .what = "A collective of count 0 emits no event at all and takes no seqNumber",
     .nccl = "enqueue.cc taskAppend (\"Empty collectives can be discarded\": count == 0 returns before any "
             "profiler call; read in 2.27.3, 2.28.9, 2.29.7, 2.30.7, 2.31.0a0; 2.31.2: enqueue/enqueue.cc "
             "taskAppend and rawTaskAppend)",
     .plugin = "nothing to count",
     .conformance = "zero-count collective",
     .sim = "always (pending_op::no_task)"},
    {.id = nccl_behaviour::self_p2p_in_place_dropped,
     .what = "A Send/Recv pair to the rank itself in place (send buffer = recv buffer) is dropped before any "
             "P2p event (P2pApi only)",
     .nccl = "enqueue.cc scheduleP2pTasksToPlan",
     .plugin = "nothing to count",
     .sim = "always (enqueue_sequence::schedule)"},
    {.id = nccl_behaviour::self_p2p_kernel_ch,
     .what = "A Send/Recv to the rank itself gets KernelCh, one per channel of each direction, counted by the "
             "host (before: its P2p announces channels, no KernelCh, ProxyOp or ProxyStep ever comes)",
     .from = 23102,
     .sim_reads = true,
     .nccl = "plugin/profiler.cc ncclProfilerPostPlanWork (every pair of plan->p2pTaskQueue, self included); "
             "before: enqueue.cc addP2pToPlan (nProxyOps = selfSend ? 0 : 2, no profiler proxy op)",
     .trace = "nccl-2.28.9-h200-onerank-cases.trace",
     .plugin = "a self P2p is settled at its stop; 2.31.2's KernelCh then find it settled and are ignored",
     .reason = "no_kernel_events",
     .conformance = "all-to-all with the rank itself",
     .sim = "pending_op::kernel_events of a self P2P"},
    {.id = nccl_behaviour::self_p2p_shifts_counter,
     .what = "A self Send/Recv's work counts on the device and not on the host, for good: every later KernelCh "
             "on its channels reads the slot of the work k places earlier (k self works so far)",
     .to = 23100,
     .sim_reads = true,
     .nccl = "device/common.h profiler() (workCounter += nWorks); proxy.cc incWorkCounter (profiler proxy ops "
             "only, none for a self pair)",
     .plugin = "on ABI <= 6 every later op with a channel there is rejected (comm_state::shifted_channels, "
               "adapter_config::self_p2p_shifts_channels)",
     .reason = "foreign_timestamps",
     .conformance = "all-to-all with the rank itself",
     .sim = "comm_driver::number_works / device_ring, pending_op::shifted"},
    {.id = nccl_behaviour::host_callback_for_profiler_ops,
     .what = "A captured plan with profiler ops only (a self pair with KernelCh in the mask) gets the host "
             "callback: nothing at capture, Group + P2p + KernelCh at every replay (before: Group + P2p once at "
             "capture, replays emit nothing)",
     .from = 23102,
     .sim_reads = true,
     .nccl = "enqueue/enqueue.cc ncclLaunchPrepare (plan->hasProxyOps || plan->hasProfilerOps), finishPlan; "
             "before: if (plan->hasProxyOps)",
     .trace = "nccl-2.28.9-h200-onerank-cases.trace",
     .plugin = "each replay that emits is its own op",
     .conformance = "graph replay - each replay is an op",
     .sim = "captured_graph::host_callback"},
    {.id = nccl_behaviour::replay_new_seq,
     .what = "A graph replay of a plan with proxy ops emits Group and Coll/P2p with a new seqNumber and the "
             "capture's long-stopped CollApi/P2pApi as parentObj, no API events",
     .nccl = "enqueue.cc hostStreamPlanCallback -> hostStreamPlanTask",
     .plugin = "each replay is its own op; the stale parent is not used",
     .conformance = "graph replay - each replay is an op",
     .sim = "comm_driver::capture / replay"},
    {.id = nccl_behaviour::replay_counter_desync,
     .what = "A graph replay after an eager launch on the communicator reads its channel's previous device-ring "
             "slot (its timestamps, 0 if none)",
     .to = 23100,
     .sim_reads = true,
     .nccl = "proxy.cc SaveProxyProfiler (the host counter advances at a replay only while planner.persistent)",
     .plugin = "a KernelCh that starts before its channel's previous op ended is rejected; a plausible one cannot "
               "be told apart",
     .reason = "foreign_timestamps",
     .conformance = "graph replays mixed with eager launches",
     .sim = "pending_op::stale_timestamps"},
    {.id = nccl_behaviour::batch_shared_timestamps,
     .what = "Grouped same-function ops on one channel run as one work batch and get its start and end",
     .nccl = "device/common.h profiler() (stamps per batch)",
     .plugin = "each op is published with the batch's span, an upper bound of its own",
     .conformance = "batch-shared timestamps",
     .sim = "comm_driver::device_run_batch"},
    {.id = nccl_behaviour::work_ring_64,
     .what = "A channel's work stamps sit in a 64-slot ring: a reader 64 or more works behind reads a later "
             "work's slot",
     .nccl = "include/device.h struct ncclDevProfiler (MAX_PROFILER_EVENTS_PER_CHANNEL 64); transport/profiler.cc "
             "profilerProxyProgress / plugin/profiler.cc profilerProgressOps (sub->base <= slot.counter)",
     .plugin = "a KernelCh that ends before it starts is rejected; a later work's plausible stamps cannot be told "
               "apart",
     .reason = "rejected_timestamps",
     .conformance = "device work ring overrun",
     .sim = "comm_driver::device_run / read_back"},
    {.id = nccl_behaviour::broadcast_no_coll,
     .what = "Broadcast goes through AllGatherV (the default): no Coll and no KernelCh (CollApi only), and its "
             "work shifts the counters of its channels",
     .from = 22902,
     .sim_reads = true,
     .model = true,
     .nccl = "enqueue.cc ncclPrepareTasks (mask 0), scheduler/allgatherv_sched.cc; NVIDIA/nccl #2278",
     .plugin = "not an op (its CollApi gets a NULL handle)",
     .conformance = "Broadcast counter drift",
     .sim = "enqueue_sequence::coll_channels (comm_config::broadcast_coll overrides)"},
    {.id = nccl_behaviour::broadcast_counter_drift,
     .what = "After a Broadcast, later ops' KernelCh on its channels carry their own start and the previous "
             "work's end (2.29 .. 2.31.0a shift the same counters; the simulator reproduces the drift at 2.31.2)",
     .from = 23102,
     .sim_reads = true,
     .nccl = "device/common.h profiler() counters; NVIDIA/nccl #2368, #2369",
     .plugin = "a channel that ends before its op began is rejected, never a negative or infinite bandwidth",
     .reason = "rejected_timestamps",
     .conformance = "Broadcast counter drift",
     .sim = "pending_op::drifted"},
    {.id = nccl_behaviour::symmetric_invisible,
     .what = "Symmetric kernels reach no Coll or KernelCh (2.27: no event at all; 2.28+: CollApi only)",
     .to = 23100,
     .sim_reads = true,
     .nccl = "2.27: enqueue.cc ncclLaunchPrepare; 2.28+: scheduler/symmetric_sched.cc ncclSymmetricTaskScheduler "
             "(task freed)",
     .plugin = "not an op",
     .conformance = "symmetric collectives are invisible",
     .sim = "op_desc::symmetric"},
    {.id = nccl_behaviour::sym_head_only,
     .what = "Only the head task of a symmetric plan gets KernelCh (on channels 0..n-1); the others announce "
             "nChannels 0",
     .from = 23102,
     .sim_reads = true,
     .nccl = "scheduler/symmetric_sched.cc, plugin/profiler.cc ncclProfilerStartTaskEvents, "
             "profilerPostPlanWorkSym",
     .plugin = "the head is GPU-timed (its span covers the plan); a task announcing 0 channels completes at its "
               "stop",
     .reason = "enqueue_only",
     .conformance = "symmetric multi-task plan",
     .sim = "op_desc::sym_tail"},
    {.id = nccl_behaviour::captured_sym_no_kernel_ch,
     .what = "A captured symmetric collective announces its channels and never gets KernelCh (the uninstrumented "
             "kernel runs)",
     .from = 23102,
     .sim_reads = true,
     .nccl = "scheduler/symmetric_sched.cc; plugin/profiler.cc ncclProfilerReserveSymCounters (no-op for the "
             "clean kernel)",
     .plugin = "settled at its stop",
     .reason = "no_kernel_events",
     .conformance = "captured symmetric collective",
     .sim = "op_desc::symmetric under capture"},
    {.id = nccl_behaviour::sym_own_counters,
     .what = "Symmetric collectives have their own per-channel work counters and stamp slots: their works never "
             "shift or share the sequence of the other ops' KernelCh",
     .from = 23102,
     .nccl = "plugin/profiler.cc ncclProfilerReserveSymCounters (symWorkCounter, \"never share the regular/p2p "
             "sequence\"), profilerEnqueueOp (symWorkStarted, symWorkCompleted)",
     .plugin = "no rule of its own (channels are matched by handle, not by counter)",
     .sim = "not reproduced: the driver numbers a symmetric work on the shared counters, host and device alike, so "
            "nothing shifts either way"},
    {.id = nccl_behaviour::collnet_zero_channels,
     .what = "A CollNet (SHARP) Coll announces nChannels 0 while KernelCh arrive on its channels",
     .to = 23100,
     .sim_reads = true,
     .nccl = "enqueue.cc scheduleCollTasksToPlan, CollNet branch (task->nChannels never set)",
     .plugin = "GPU-timed from the KernelCh that arrive",
     .conformance = "CollNet collective",
     .sim = "op_desc::collnet (--collnet)"},
    {.id = nccl_behaviour::ce_coll_enqueue_only,
     .what = "Copy-engine collectives emit CeColl (CeSync, CeBatch) around the host enqueue only (2.28: CollApi "
             "only)",
     .from = 22902,
     .nccl = "enqueue.cc ceCollTaskAppend, ce_coll.cc ncclLaunchCeColl",
     .plugin = "never GPU-timed, never in the bandwidth families",
     .reason = "enqueue_only",
     .conformance = "copy-engine collective",
     .sim = "by the table (v6+ descriptors; --ce-collectives)"},
    {.id = nccl_behaviour::channel_ids_wrap,
     .what = "P2P channel ids wrap: (base + part) & (p2pnChannels - 1)",
     .nccl = "include/device.h ncclP2pChannelForPart",
     .plugin = "channels are tracked by id, not by range",
     .conformance = "P2P channel ids that wrap around",
     .sim = "op_desc::channel_lo"},
    {.id = nccl_behaviour::kernel_ch_stop_guarded,
     .what = "A KernelCh stop comes only after its start, on a fresh handle (before: the stop branch does not "
             "check the start, and sub->kernelEventHandle is never reset)",
     .from = 23102,
     .sim_reads = true,
     .nccl = "plugin/profiler.cc profilerProgressOps; before: transport/profiler.cc profilerProxyProgress, "
             "ncclProfilerStopKernelChEvent (PR #2221)",
     .plugin = "handles are generation-checked; on ABI <= 6 each channel of an op ends once "
               "(adapter_config::stale_channel_stops)",
     .conformance = "KernelCh stop on a stale kernelEventHandle",
     .sim = "comm_driver::stale_kernel_ch_stop"},
    {.id = nccl_behaviour::profiler_thread,
     .what = "KernelCh come from one ncclProfilerThread per communicator (shared by shareResources children), "
             "not from the proxy thread",
     .from = 23102,
     .nccl = "plugin/profiler.cc ncclProfilerThreadCreate, profilerProgressOps",
     .plugin = "no callback takes a lock",
     .conformance = "Coll events from three threads",
     .sim = "the proxy thread stands for it"},
    {.id = nccl_behaviour::kernel_ch_dropped_on_alloc_failure,
     .what = "A KernelCh op (one channel of a Coll/P2p) the profiler thread cannot allocate is dropped: the "
             "channel's work counter still advances, that channel's KernelCh start and stop never come, the "
             "op's other channels and its Coll/P2p stop still do (INFO \"dropping KernelCh op after allocation "
             "failure\"). Later ops' KernelCh start in post order: the thread's list is FIFO and each pass starts "
             "an op once its slot counter reaches its own, so an earlier op's start can follow a later one's only "
             "within one pass (the device ran both works between its two reads)",
     .from = 23102,
     .sim_reads = true,
     .nccl = "plugin/profiler.cc profilerEnqueueOp (profilerAllocOp returns nullptr: droppedOps++, nothing "
             "enqueued), ncclProfilerPostPlanWork / profilerPostWorkInternal (++workCounter[c] before, even then), "
             "profilerProgressOps (walks pt->active in post order, starts an op at wc <= slot counter); "
             "enqueue/enqueue.cc hostStreamPlanTask (Group start, Coll/P2p starts, PostPlanWork, Coll/P2p stops, "
             "Group stop: the stops come whatever the thread drops)",
     .plugin = "ABI 7: each plan's Group gets its own handle; an op of an earlier plan still short of KernelCh "
               "starts when a later plan's first KernelCh starts on its communicator is settled, never GPU-timed "
               "(comm_state::plan_order_enqueue, event_adapter::next_plan). Left in flight: an op of the "
               "communicator's last plan (until the next plan or finalize), every op on a communicator whose "
               "plans come from two threads, and through a shim (counted abandoned at finalize). An earlier op whose "
               "start one pass reads after a later plan's first is settled too: its timing is lost, no number "
               "is wrong",
     .reason = "no_kernel_events",
     .conformance = "KernelCh dropped on an allocation failure",
     .sim = "--drop-kernel-ch N (comm_config::drop_kernel_ch, emitter::kernel_ch)"},
    {.id = nccl_behaviour::coll_from_three_threads,
     .what = "Coll/P2p come from the user thread, a CUDA host-callback thread (replays) and the async group "
             "thread (non-blocking communicators)",
     .nccl = "enqueue.cc hostStreamPlanCallback, group.cc groupLaunchNonBlocking",
     .plugin = "no callback takes a lock",
     .conformance = "Coll events from three threads",
     .sim = "--nonblocking, --cuda-graphs"},
    {.id = nccl_behaviour::purge_at_destroy,
     .what = "Destroy purges the communicator's open KernelCh without callbacks before finalize (before: destroy "
             "keeps progressing, abort leaves events open)",
     .from = 23102,
     .nccl = "init.cc commFree -> ncclProfilerThreadDestroy (profilerPurgeByContext)",
     .plugin = "open ops are counted in ncclinsp_abandoned_ops_total at finalize",
     .conformance = "abort leaves events open",
     .sim = "--purge-inflight, --abort-at"},
    {.id = nccl_behaviour::events_after_finalize,
     .what = "Communicators sharing a proxy: its events carry the creator's context after the creator's finalize",
     .nccl = "proxy.cc ncclProxyProgressDestroy",
     .plugin = "the context is generation-checked: ignored",
     .conformance = "events after finalize on communicators sharing a proxy",
     .sim = "comm_driver::complete_after_finalize"},
    {.id = nccl_behaviour::ras_mask_override,
     .what = "RAS writes the global mask at any time and re-applies it after every init; with Coll and without "
             "KernelCh, Coll/P2p announce channels that never come",
     .from = 23102,
     .nccl = "plugin/profiler.cc ncclProfilerSetRasOverride, ncclProfilerPluginInit",
     .plugin = "an op whose mask snapshot has no KernelCh is settled at its stop",
     .reason = "no_kernel_events",
     .conformance = "RAS mask override",
     .sim = "--mask-override (at every release)"},
    {.id = nccl_behaviour::init_error_disables_process,
     .what = "An init error drops the profiler for every communicator of the process",
     .to = 22707,
     .nccl = "plugin/profiler.cc ncclProfilerPluginInit (ncclProfiler = NULL)",
     .plugin = "init never fails: a communicator it cannot serve gets success and a NULL context",
     .sim = "not reproduced (ncclinsp never fails init)"},
    {.id = nccl_behaviour::init_error_unloads,
     .what = "An init error unloads the library, and commFree unloads it again (one decrement too many)",
     .from = 23003,
     .sim_reads = true,
     .nccl = "plugin/profiler.cc ncclProfilerPluginInit -> ncclProfilerPluginUnload (commit 34929fe8), init.cc "
             "commFree",
     .plugin = "init never fails: a communicator it cannot serve gets success and a NULL context",
     .conformance = "an init error never unloads the plugin",
     .sim = "plugin_library::mark_unloaded"},
    {.id = nccl_behaviour::task_needs_group,
     .what = "Coll/P2p start only under a non-NULL Group handle",
     .to = 22707,
     .abi_hi = 4,
     .sim_reads = true,
     .model = true,
     .nccl = "plugin/profiler.cc ncclProfilerStartTaskEvents (if (plan->groupEventHandle))",
     .plugin = "the plugin gives Group an inert non-NULL handle (handle_kind::auxiliary)",
     .conformance = "graph replay - each replay is an op",
     .sim = "enqueue_sequence::plan_tasks"},
    {.id = nccl_behaviour::proxy_step_needs_op,
     .what = "ProxySteps start only under a non-NULL ProxyOp handle (later: also under a NULL one, with start "
             "and stop but no state)",
     .to = 22707,
     .abi_hi = 4,
     .sim_reads = true,
     .model = true,
     .nccl = "plugin/profiler.cc ncclProfilerStartSendProxyStepEvent (sub->opEventHandle &&)",
     .plugin = "steps under a NULL ProxyOp are attributed to their communicator",
     .sim = "detail::proxy_ops_for_channel, timed_emitter"},
    {.id = nccl_behaviour::recv_step_restarted,
     .what = "A recv ProxyStep is re-started on every pass while irecv gives no request (the earlier handle is "
             "never stopped)",
     .nccl = "transport/net.cc recvProxyProgress",
     .plugin = "a re-started step reuses its slot",
     .conformance = "recv ProxyStep re-started",
     .sim = "--recv-step-restarts"},
    {.id = nccl_behaviour::proxy_op_never_stopped,
     .what = "ProxyOps of CollNet, SHM and P2P proxy connections start and never stop",
     .nccl = "proxy.cc ncclProxyOpToArgs (start), transport/net.cc (the only stop)",
     .plugin = "bounded and aged out",
     .conformance = "CollNet ProxyOps are started and never stopped",
     .sim = "pending_op::proxy_unstopped"},
    {.id = nccl_behaviour::shim_garbage_bytes,
     .what = "The shim fills an uninitialised old descriptor field by field: bytes it does not set are garbage",
     .from = 22809,
     .abi_hi = 5,
     .shim = true,
     .sim_reads = true,
     .nccl = "plugin/profiler/profiler_v4.cc, profiler_v5.cc ncclProfiler_startEvent (descriptor on the stack, "
             "not zeroed)",
     .plugin = "reads only the fields its ABI version defines (the fuzzer feeds garbage unset bytes)",
     .sim = "detail::emitter::clear (0xA5)"},
    {.id = nccl_behaviour::shim_p2p_no_channels,
     .what = "The v4 shim does not copy p2p.nChannels",
     .from = 22809,
     .abi_hi = 4,
     .shim = true,
     .sim_reads = true,
     .nccl = "plugin/profiler/profiler_v4.cc ncclProfiler_startEvent (P2p: func, buff, count, datatype, peer)",
     .plugin = "no rule of its own (the fuzzer feeds garbage unset bytes)",
     .sim = "enqueue_sequence::p2p_task"},
    {.id = nccl_behaviour::shim_garbage_args,
     .what = "The v5 shim passes an uninitialised args struct for the states NCCL sends without args (19, 23, 24)",
     .from = 22902,
     .abi_lo = 5,
     .abi_hi = 5,
     .shim = true,
     .sim_reads = true,
     .nccl = "plugin/profiler/profiler_v5.cc ncclProfiler_recordEventState (&eStateArgs_v5)",
     .plugin = "args of those states are never read",
     .sim = "detail::emitter::no_args"},
};

static_assert(std::size(nccl_behaviours) == std::size_t(nccl_behaviour::count_), "one row per behaviour");
static_assert(std::size_t(nccl_behaviour::count_) <= 64, "nccl_profile holds the rows in 64 bits");

constexpr bool nccl_rows_in_order() {
  for (std::size_t i = 0; i < std::size(nccl_behaviours); ++i)
    if (nccl_behaviours[i].id != nccl_behaviour(i)) return false;
  return true;
}
static_assert(nccl_rows_in_order(), "rows in the order of nccl_behaviour");

constexpr const nccl_behaviour_row& nccl_row(nccl_behaviour b) { return nccl_behaviours[std::size_t(b)]; }

/// Whether `b` holds where release `version_code`, whose native table is `driving_abi`, drives a
/// plugin through its table `table_abi` (a shim row only where driving_abi > table_abi).
constexpr bool nccl_holds(nccl_behaviour b, int version_code, int driving_abi, int table_abi) {
  const nccl_behaviour_row& r = nccl_row(b);
  return r.from <= version_code && version_code <= r.to && r.abi_lo <= table_abi && table_abi <= r.abi_hi &&
         (!r.shim || driving_abi > table_abi);
}

/// What a plugin can know from the ABI version NCCL loaded it through: whether `b` holds in any
/// (`all` false) or in every (`all` true) release read that loads table `abi` natively.
constexpr bool nccl_holds_at_abi(nccl_behaviour b, int abi, bool all) {
  bool any = false, every = true, seen = false;
  for (const nccl_release_info& r : nccl_releases) {
    if (!r.read || r.abi != abi) continue;
    const bool h = nccl_holds(b, r.version_code, r.abi, abi);
    any |= h;
    every &= h;
    seen = true;
  }
  return all ? seen && every : any;
}

}  // namespace ncclinsp::abi
