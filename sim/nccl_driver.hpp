#pragma once
/// ncclinsp::sim — drive an NCCL profiler plugin `.so` exactly as NCCL core does, without NCCL or a GPU.
///
/// `plugin_library` dlopens a plugin and finds its newest exported table
/// (`ncclProfiler_v<abi::newest>` down to `v<abi::oldest>`, NCCL's probing order). `comm_driver` is
/// one communicator on one rank: it calls `init` with the version's argument order and the
/// process-global activation mask, then emits the exact callback sequences NCCL emits for an API
/// call / group (user thread side, `enqueue`) and for kernel completion (proxy or profiler thread
/// side, `complete`), honouring the mask snapshot semantics and NCCL's ancestor rule.
///
/// Version semantics reproduced (NCCL's ext-profiler/README.md and profiler_v*.h, NCCL 2.27 to 2.31):
///  * v4 (native NCCL 2.27): uint8 `type`, Coll/P2p parent = Group handle, Coll/P2p started only when the
///    Group handle is non-NULL, no API events, no state 23/24.
///  * v5 (2.28): API events, Coll parent = CollApi handle with `parentGroup` = Group handle; CE bits (12-14)
///    and KernelPhase (15) are cleared from the mask after init (what the 2.31 v5 shim does).
///  * v6 (2.29/2.30): CE collectives (CollApi → CeColl → CeSync/CeBatch, no Coll/KernelCh); bit 15 cleared.
///    Broadcast emits no Coll event (NCCL_ALLGATHERV_ENABLE=1 default, NVIDIA/nccl #2278), also in v7.
///  * v7 (2.31): userTag, symmetric kernels (`isSymColl`, `kernelVariant`, algo = text after the first '_',
///    proto = ""), KernelPhase children of KernelCh (bit 15 implies KernelCh).
///  * every version: a Send/Recv whose peer is the communicator's own rank gets its P2p events (with its
///    channels 0..n-1, round 0's base) and never a ProxyOp; no KernelCh either (enqueue.cc addP2pToPlan:
///    no proxy op for a self send) except at 2.31.2 (ncclProfilerPostPlanWork posts them). Up to 2.31.0a
///    its work counts on the device and not on the host, so later KernelCh on its channels read an
///    earlier work's device-ring slot (pending_op::shifted, comm_driver::number_works / device_ring);
///    a collective on a one-rank communicator gets no event at all (taskAppend -> ncclLaunchOneRank);
///    a group's ops form kernel plans (one KernelLaunch and Group each) split at the 4 KiB kernel-argument
///    budget; under capture a plan without proxy ops (2.31.2: and without profiler ops) emits its Group
///    and tasks at capture and nothing at its replays (ncclLaunchPrepare, ncclLaunchKernelAfter_NoCuda).
///  * a newer NCCL driving an old plugin through its shim (a release with an older `--abi`, or
///    `comm_config::shim_quirks`): union bytes not set by the shim are garbage (0xA5 here), the v4 shim
///    forgets `p2p.nChannels` and does not gate Coll on the Group handle, and the v5 shim passes a
///    non-NULL, uninitialised args pointer for 19/23/24.
/// Which of these a communicator reproduces is one profile (nccl_release.hpp `nccl_profile`), the rows of
/// the behaviour table ncclinsp/abi/nccl_behaviours.hpp that hold for its release and table.
///
/// This header is the driver's one include; the parts: nccl_vocab.hpp (NCCL enums, strings, mask gates),
/// nccl_process.hpp (global mask, logger), plugin_library.hpp (loader), nccl_release.hpp (releases and
/// profiles), driver_types.hpp (op_desc, pending_op, comm_config), event_emitter.hpp (calls into a
/// version's table, shared descriptors), driver_enqueue.hpp / kernel_plans.hpp / driver_ce.hpp (the API
/// side), driver_complete.hpp / driver_timed.hpp (the completion side), work_rings.hpp (device counters
/// and stamps), comm_driver.hpp.
///
/// Threading: `enqueue` runs on the rank's user thread, `complete`/`start_only`/`proxy_ctrl`/
/// `foreign_proxy_op` on its proxy thread; both may run concurrently (they share only immutable state).
/// `enqueue` and `complete` allocate nothing.

#include "comm_driver.hpp"
#include "driver_types.hpp"
#include "nccl_process.hpp"
#include "nccl_vocab.hpp"
#include "plugin_library.hpp"
