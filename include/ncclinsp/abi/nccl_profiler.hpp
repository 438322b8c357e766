#pragma once
/// Our own declarations of the NCCL profiler plugin ABI, versions 4 to 7, written from the
/// documented layout (NCCL's own reference: `ext-profiler/README.md` and the `profiler_v*.h` headers of
/// NVIDIA/nccl).
/// Plain C-layout structs in a C++ namespace: no NCCL header is needed to build the plugin or the
/// simulator, and every size and offset NCCL relies on is checked at compile time (x86-64 LP64).
/// Thread-safety: types only.
/// Over 350 lines on purpose: the versions' structs share members and are read side by side, with
/// their size and offset checks, so what changed from one version to the next reads in one place.

#include <cstddef>
#include <cstdint>
#include <sys/types.h>

namespace ncclinsp::abi {

enum result_t : int {
  success = 0,
  unhandled_cuda_error = 1,
  system_error = 2,
  internal_error = 3,
  invalid_argument = 4,
  invalid_usage = 5,
  remote_error = 6,
};

enum log_level : int { log_none = 0, log_version = 1, log_warn = 2, log_info = 3, log_abort = 4, log_trace = 5 };
inline constexpr unsigned long subsys_init = 1;
inline constexpr unsigned long subsys_profile = 16384;

using logger_t = void (*)(log_level level, unsigned long flags, const char* file, int line, const char* fmt, ...);

/// Event type bits (also the descriptor's `type` value).
enum event_type : std::uint64_t {
  ev_group = 1u << 0,
  ev_coll = 1u << 1,
  ev_p2p = 1u << 2,
  ev_proxy_op = 1u << 3,
  ev_proxy_step = 1u << 4,
  ev_proxy_ctrl = 1u << 5,
  ev_kernel_ch = 1u << 6,
  ev_net_plugin = 1u << 7,
  ev_group_api = 1u << 8,
  ev_coll_api = 1u << 9,
  ev_p2p_api = 1u << 10,
  ev_kernel_launch = 1u << 11,
  ev_ce_coll = 1u << 12,
  ev_ce_sync = 1u << 13,
  ev_ce_batch = 1u << 14,
  ev_kernel_phase = 1u << 15,
};

/// recordEventState states (one C enum, 4 bytes, shared by all versions).
enum event_state : int {
  st_proxy_op_in_progress_v4 = 19,
  st_proxy_step_send_peer_wait_v4 = 20,
  st_net_plugin_update = 21,
  st_kernel_ch_stop = 22,
  st_group_start_api_stop = 23,
  st_group_end_api_start = 24,
  st_ce_coll_start = 25,
  st_ce_batch_complete = 30,
  st_kernel_phase_stop = 31,
};

/// State arguments (v4..v7 share this 8-byte union).
union state_args {
  struct {
    std::size_t transSize;
  } proxyStep;
  struct {
    int appendedProxyOps;
  } proxyCtrl;
  struct {
    void* data;
  } netPlugin;
  struct {
    std::uint64_t pTimer;
  } kernelCh;
};

// ---- members shared between versions -------------------------------------------------------
struct proxy_op_v4 {
  pid_t pid;
  std::uint8_t channelId;
  int peer;
  int nSteps;
  int chunkSize;
  int isSend;
};
struct proxy_step_v4 {
  int step;
};
struct kernel_ch_v4 {
  std::uint8_t channelId;
  std::uint64_t pTimer;
};
struct net_plugin_v4 {
  std::int64_t id;
  void* data;
};

struct coll_v4 {
  std::uint64_t seqNumber;
  const char* func;
  void const* sendBuff;
  void* recvBuff;
  std::size_t count;
  int root;
  const char* datatype;
  std::uint8_t nChannels;
  std::uint8_t nWarps;
  const char* algo;
  const char* proto;
};
struct p2p_v4 {
  const char* func;
  void* buff;
  const char* datatype;
  std::size_t count;
  int peer;
  std::uint8_t nChannels;
};

/// v4 descriptor: `type` is uint8_t; Coll/P2p parent is the Group handle.
struct descr_v4 {
  std::uint8_t type;
  void* parentObj;
  int rank;
  union {
    coll_v4 coll;
    p2p_v4 p2p;
    proxy_op_v4 proxyOp;
    proxy_step_v4 proxyStep;
    kernel_ch_v4 kernelCh;
    net_plugin_v4 netPlugin;
  };
};

struct group_api_v5 {
  bool graphCaptured;
  int groupDepth;
};
struct coll_api_v5 {
  const char* func;
  std::size_t count;
  const char* datatype;
  int root;
  void* stream;
  bool graphCaptured;
};
struct p2p_api_v5 {
  const char* func;
  std::size_t count;
  const char* datatype;
  void* stream;
  bool graphCaptured;
};
struct kernel_launch_v5 {
  void* stream;
};
struct coll_v5 {
  std::uint64_t seqNumber;
  const char* func;
  void const* sendBuff;
  void* recvBuff;
  std::size_t count;
  int root;
  const char* datatype;
  std::uint8_t nChannels;
  std::uint8_t nWarps;
  const char* algo;
  const char* proto;
  void* parentGroup;
};
struct p2p_v5 {
  const char* func;
  void* buff;
  const char* datatype;
  std::size_t count;
  int peer;
  std::uint8_t nChannels;
  void* parentGroup;
};
struct ce_coll_v6 {
  std::uint64_t seqNumber;
  const char* func;
  void const* sendBuff;
  void* recvBuff;
  std::size_t count;
  int root;
  const char* datatype;
  const char* syncStrategy;
  bool intraBatchSync;
  std::uint32_t batchSize;
  std::uint32_t numBatches;
  std::uint32_t ceSeqNum;
  void* stream;
};
struct ce_sync_v6 {
  bool isComplete;
  int nRanks;
};
struct ce_batch_v6 {
  int numOps;
  std::size_t totalBytes;
  bool useIntraSync;
};

/// v5 descriptor (112 bytes): 64-bit `type`, API events, `parentGroup`.
struct descr_v5 {
  std::uint64_t type;
  void* parentObj;
  int rank;
  union {
    group_api_v5 groupApi;
    coll_api_v5 collApi;
    p2p_api_v5 p2pApi;
    kernel_launch_v5 kernelLaunch;
    coll_v5 coll;
    p2p_v5 p2p;
    proxy_op_v4 proxyOp;
    proxy_step_v4 proxyStep;
    kernel_ch_v4 kernelCh;
    net_plugin_v4 netPlugin;
  };
};

/// v6 descriptor (112 bytes): v5 plus copy-engine collectives.
struct descr_v6 {
  std::uint64_t type;
  void* parentObj;
  int rank;
  union {
    group_api_v5 groupApi;
    coll_api_v5 collApi;
    p2p_api_v5 p2pApi;
    kernel_launch_v5 kernelLaunch;
    coll_v5 coll;
    p2p_v5 p2p;
    proxy_op_v4 proxyOp;
    proxy_step_v4 proxyStep;
    kernel_ch_v4 kernelCh;
    net_plugin_v4 netPlugin;
    ce_coll_v6 ceColl;
    ce_sync_v6 ceCollSync;
    ce_batch_v6 ceCollBatch;
  };
};

struct coll_api_v7 {
  const char* func;
  std::size_t count;
  const char* datatype;
  int root;
  void* stream;
  bool graphCaptured;
  std::uint64_t userTag;
};
struct p2p_api_v7 {
  const char* func;
  std::size_t count;
  const char* datatype;
  void* stream;
  bool graphCaptured;
  std::uint64_t userTag;
};
struct coll_v7 {
  std::uint64_t seqNumber;
  const char* func;
  void const* sendBuff;
  void* recvBuff;
  std::size_t count;
  int root;
  const char* datatype;
  std::uint8_t nChannels;
  std::uint8_t nWarps;
  const char* algo;
  const char* proto;
  void* parentGroup;
  const char* kernelVariant;
  bool isSymColl;
  std::uint64_t userTag;
};
struct p2p_v7 {
  const char* func;
  void* buff;
  const char* datatype;
  std::size_t count;
  int peer;
  std::uint8_t nChannels;
  void* parentGroup;
  std::uint64_t userTag;
};
struct ce_coll_v7 {
  std::uint64_t seqNumber;
  const char* func;
  void const* sendBuff;
  void* recvBuff;
  std::size_t count;
  int root;
  const char* datatype;
  const char* syncStrategy;
  bool intraBatchSync;
  std::uint32_t batchSize;
  std::uint32_t numBatches;
  std::uint32_t ceSeqNum;
  void* stream;
  std::uint64_t userTag;
};
struct kernel_phase_v7 {
  std::uint8_t channelId;
  std::uint8_t phaseId;
  const char* phaseName;
  std::uint64_t pTimer;
};

/// v7 descriptor (136 bytes): user tags, symmetric kernels, kernel phases.
struct descr_v7 {
  std::uint64_t type;
  void* parentObj;
  int rank;
  union {
    group_api_v5 groupApi;
    coll_api_v7 collApi;
    p2p_api_v7 p2pApi;
    kernel_launch_v5 kernelLaunch;
    coll_v7 coll;
    p2p_v7 p2p;
    proxy_op_v4 proxyOp;
    proxy_step_v4 proxyStep;
    kernel_ch_v4 kernelCh;
    net_plugin_v4 netPlugin;
    ce_coll_v7 ceColl;
    ce_sync_v6 ceCollSync;
    ce_batch_v6 ceCollBatch;
    kernel_phase_v7 kernelPhase;
  };
};

template <class Descr, class InitFn>
struct profiler_table {
  const char* name;
  InitFn init;
  result_t (*startEvent)(void* context, void** eHandle, Descr* eDescr);
  result_t (*stopEvent)(void* eHandle);
  result_t (*recordEventState)(void* eHandle, event_state eState, state_args* eStateArgs);
  result_t (*finalize)(void* context);
};

using init_v4_fn = result_t (*)(void** context, int* eActivationMask, const char* commName, std::uint64_t commHash,
                                int nNodes, int nranks, int rank, logger_t logfn);
using init_v5_fn = result_t (*)(void** context, std::uint64_t commId, int* eActivationMask, const char* commName,
                                int nNodes, int nranks, int rank, logger_t logfn);

using profiler_v4 = profiler_table<descr_v4, init_v4_fn>;
using profiler_v5 = profiler_table<descr_v5, init_v5_fn>;
using profiler_v6 = profiler_table<descr_v6, init_v5_fn>;
using profiler_v7 = profiler_table<descr_v7, init_v5_fn>;

// ---- layout checks (x86-64 LP64) -------------------------------------------------------------
static_assert(sizeof(state_args) == 8);
static_assert(sizeof(profiler_v4) == 48 && sizeof(profiler_v5) == 48 && sizeof(profiler_v7) == 48);
static_assert(offsetof(profiler_v5, init) == 8 && offsetof(profiler_v5, startEvent) == 16 &&
              offsetof(profiler_v5, stopEvent) == 24 && offsetof(profiler_v5, recordEventState) == 32 &&
              offsetof(profiler_v5, finalize) == 40);

static_assert(sizeof(descr_v4) == 104);
static_assert(offsetof(descr_v4, parentObj) == 8 && offsetof(descr_v4, rank) == 16);
static_assert(offsetof(descr_v4, coll.seqNumber) == 24 && offsetof(descr_v4, coll.func) == 32 &&
              offsetof(descr_v4, coll.count) == 56 && offsetof(descr_v4, coll.root) == 64 &&
              offsetof(descr_v4, coll.datatype) == 72 && offsetof(descr_v4, coll.nChannels) == 80 &&
              offsetof(descr_v4, coll.nWarps) == 81 && offsetof(descr_v4, coll.algo) == 88 &&
              offsetof(descr_v4, coll.proto) == 96);
static_assert(offsetof(descr_v4, p2p.func) == 24 && offsetof(descr_v4, p2p.datatype) == 40 &&
              offsetof(descr_v4, p2p.count) == 48 && offsetof(descr_v4, p2p.peer) == 56 &&
              offsetof(descr_v4, p2p.nChannels) == 60);
static_assert(offsetof(descr_v4, proxyOp.pid) == 24 && offsetof(descr_v4, proxyOp.channelId) == 28 &&
              offsetof(descr_v4, proxyOp.peer) == 32 && offsetof(descr_v4, proxyOp.isSend) == 44);
static_assert(offsetof(descr_v4, kernelCh.channelId) == 24 && offsetof(descr_v4, kernelCh.pTimer) == 32);
static_assert(offsetof(descr_v4, netPlugin.id) == 24 && offsetof(descr_v4, netPlugin.data) == 32);

static_assert(sizeof(descr_v5) == 112 && sizeof(descr_v6) == 112);
static_assert(offsetof(descr_v5, groupApi.graphCaptured) == 24 && offsetof(descr_v5, groupApi.groupDepth) == 28);
static_assert(offsetof(descr_v5, collApi.func) == 24 && offsetof(descr_v5, collApi.count) == 32 &&
              offsetof(descr_v5, collApi.datatype) == 40 && offsetof(descr_v5, collApi.root) == 48 &&
              offsetof(descr_v5, collApi.stream) == 56 && offsetof(descr_v5, collApi.graphCaptured) == 64);
static_assert(offsetof(descr_v5, p2pApi.stream) == 48 && offsetof(descr_v5, p2pApi.graphCaptured) == 56);
static_assert(offsetof(descr_v5, coll.parentGroup) == 104 && offsetof(descr_v5, p2p.parentGroup) == 64);
static_assert(offsetof(descr_v5, kernelCh.pTimer) == 32);
static_assert(offsetof(descr_v6, ceColl.syncStrategy) == 80 && offsetof(descr_v6, ceColl.intraBatchSync) == 88 &&
              offsetof(descr_v6, ceColl.batchSize) == 92 && offsetof(descr_v6, ceColl.numBatches) == 96 &&
              offsetof(descr_v6, ceColl.ceSeqNum) == 100 && offsetof(descr_v6, ceColl.stream) == 104);
static_assert(offsetof(descr_v6, ceCollSync.nRanks) == 28 && offsetof(descr_v6, ceCollBatch.totalBytes) == 32 &&
              offsetof(descr_v6, ceCollBatch.useIntraSync) == 40);

static_assert(sizeof(descr_v7) == 136 && alignof(descr_v7) == 8);
static_assert(offsetof(descr_v7, collApi.userTag) == 72 && offsetof(descr_v7, p2pApi.userTag) == 64);
static_assert(offsetof(descr_v7, coll.parentGroup) == 104 && offsetof(descr_v7, coll.kernelVariant) == 112 &&
              offsetof(descr_v7, coll.isSymColl) == 120 && offsetof(descr_v7, coll.userTag) == 128);
static_assert(offsetof(descr_v7, p2p.nChannels) == 60 && offsetof(descr_v7, p2p.parentGroup) == 64 &&
              offsetof(descr_v7, p2p.userTag) == 72);
static_assert(offsetof(descr_v7, ceColl.stream) == 104 && offsetof(descr_v7, ceColl.userTag) == 112);
static_assert(offsetof(descr_v7, kernelPhase.channelId) == 24 && offsetof(descr_v7, kernelPhase.phaseId) == 25 &&
              offsetof(descr_v7, kernelPhase.phaseName) == 32 && offsetof(descr_v7, kernelPhase.pTimer) == 40);

}  // namespace ncclinsp::abi
