#pragma once
/// ncclinsp::sim — drive an NCCL profiler plugin `.so` exactly as NCCL core does, without NCCL or a GPU.
///
/// `plugin_library` dlopens a plugin and finds its newest exported table (`ncclProfiler_v7` → v6 → v5 → v4,
/// NCCL's probing order). `comm_driver` is one communicator on one rank: it calls `init` with the version's
/// argument order and the process-global activation mask, then emits the exact callback sequences NCCL
/// emits for an API call / group (user thread side, `enqueue`) and for kernel completion (proxy or
/// profiler thread side, `complete`), honouring the mask snapshot semantics and NCCL's ancestor rule.
///
/// Version semantics reproduced (see shared/docs/nccl-profiler-abi.md §5-§9, nccl-newest-delta.md §2-§3):
///  * v4 (native NCCL 2.27): uint8 `type`, Coll/P2p parent = Group handle, Coll/P2p started only when the
///    Group handle is non-NULL, no API events, no state 23/24.
///  * v5 (2.28): API events, Coll parent = CollApi handle with `parentGroup` = Group handle; CE bits (12-14)
///    and KernelPhase (15) are cleared from the mask after init (what the 2.31 v5 shim does).
///  * v6 (2.29/2.30): CE collectives (CollApi → CeColl → CeSync/CeBatch, no Coll/KernelCh); bit 15 cleared.
///    Broadcast emits no Coll event (NCCL_ALLGATHERV_ENABLE=1 default, NVIDIA/nccl #2278), also in v7.
///  * v7 (2.31): userTag, symmetric kernels (`isSymColl`, `kernelVariant`, algo = text after the first '_',
///    proto = ""), KernelPhase children of KernelCh (bit 15 implies KernelCh).
///  * `shim_quirks`: emulate a newer NCCL driving an old plugin through its shim: union bytes not set by
///    the shim are garbage (0xA5 here), the v4 shim forgets `p2p.nChannels`, the v4 shim does not gate
///    Coll on the Group handle, and the v5 shim passes a non-NULL, uninitialised args pointer for 19/23/24.
///
/// Threading: `enqueue` runs on the rank's user thread, `complete`/`start_only`/`proxy_ctrl`/
/// `foreign_proxy_op` on its proxy thread; both may run concurrently (they share only immutable state).
/// `enqueue` and `complete` allocate nothing.

#include <ncclinsp/abi/nccl_profiler.hpp>
#include <ncclinsp/abi/versions.hpp>

#include <atomic>
#include <cstdarg>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <algorithm>
#include <span>
#include <string>
#include <utility>

#include <dlfcn.h>
#include <unistd.h>

namespace ncclinsp::sim {

// ---- NCCL vocabularies ---------------------------------------------------------------------------

/// NCCL core's `ncclFunc_t` numbering (nccl_common.h).
enum class nccl_func : std::uint8_t {
  broadcast = 0, reduce = 1, all_gather = 2, reduce_scatter = 3, all_reduce = 4, send_recv = 5,
  send = 6, recv = 7, all_to_all = 8, scatter = 9, gather = 10,
};
inline constexpr int num_funcs = 11;

/// `ncclFuncToString`.
constexpr const char* func_name(nccl_func f) noexcept {
  switch (f) {
    case nccl_func::broadcast: return "Broadcast";
    case nccl_func::reduce: return "Reduce";
    case nccl_func::all_gather: return "AllGather";
    case nccl_func::reduce_scatter: return "ReduceScatter";
    case nccl_func::all_reduce: return "AllReduce";
    case nccl_func::send_recv: return "SendRecv";
    case nccl_func::send: return "Send";
    case nccl_func::recv: return "Recv";
    case nccl_func::all_to_all: return "AlltoAll";
    case nccl_func::scatter: return "Scatter";
    case nccl_func::gather: return "Gather";
  }
  return "Invalid";
}

/// `ncclDataType_t` numbering.
enum class nccl_dtype : std::uint8_t {
  int8 = 0, uint8 = 1, int32 = 2, uint32 = 3, int64 = 4, uint64 = 5, float16 = 6, float32 = 7,
  float64 = 8, bfloat16 = 9, float8e4m3 = 10, float8e5m2 = 11,
};

constexpr std::size_t dtype_size(nccl_dtype t) noexcept {
  switch (t) {
    case nccl_dtype::int8: case nccl_dtype::uint8: case nccl_dtype::float8e4m3: case nccl_dtype::float8e5m2: return 1;
    case nccl_dtype::float16: case nccl_dtype::bfloat16: return 2;
    case nccl_dtype::int32: case nccl_dtype::uint32: case nccl_dtype::float32: return 4;
    case nccl_dtype::int64: case nccl_dtype::uint64: case nccl_dtype::float64: return 8;
  }
  return 1;
}

/// `ncclDatatypeToString` — note the NCCL quirk: ncclUint8 has no string and reports "Unknown".
constexpr const char* dtype_name(nccl_dtype t) noexcept {
  switch (t) {
    case nccl_dtype::int8: return "ncclInt8";
    case nccl_dtype::uint8: return "Unknown";
    case nccl_dtype::int32: return "ncclInt32";
    case nccl_dtype::uint32: return "ncclUint32";
    case nccl_dtype::int64: return "ncclInt64";
    case nccl_dtype::uint64: return "ncclUint64";
    case nccl_dtype::float16: return "ncclFloat16";
    case nccl_dtype::float32: return "ncclFloat32";
    case nccl_dtype::float64: return "ncclFloat64";
    case nccl_dtype::bfloat16: return "ncclBfloat16";
    case nccl_dtype::float8e4m3: return "ncclFloat8e4m3";
    case nccl_dtype::float8e5m2: return "ncclFloat8e5m2";
  }
  return "Unknown";
}

// ---- activation-mask gates (profiler.cc) ---------------------------------------------------------

namespace gate {
using namespace ncclinsp::abi;
inline constexpr int all_types = 0xFFFF;
inline constexpr int group_api = all_types & ~int(ev_proxy_ctrl);
inline constexpr int coll_api = ev_coll_api | ev_coll | ev_proxy_op | ev_proxy_step | ev_kernel_ch | ev_net_plugin |
                                ev_ce_coll | ev_ce_sync | ev_ce_batch | ev_kernel_phase;
inline constexpr int p2p_api = ev_p2p_api | ev_p2p | ev_proxy_op | ev_proxy_step | ev_kernel_ch | ev_net_plugin;
inline constexpr int group = ev_group | ev_coll | ev_p2p | ev_proxy_op | ev_proxy_step | ev_kernel_ch | ev_net_plugin |
                             ev_kernel_phase;
inline constexpr int coll = ev_coll | ev_proxy_op | ev_proxy_step | ev_kernel_ch | ev_net_plugin | ev_kernel_phase;
inline constexpr int p2p = ev_p2p | ev_proxy_op | ev_proxy_step | ev_kernel_ch | ev_net_plugin;
inline constexpr int proxy_op = ev_proxy_op | ev_proxy_step | ev_net_plugin;
inline constexpr int proxy_step = ev_proxy_step | ev_net_plugin;
inline constexpr int ce_coll = ev_ce_coll | ev_ce_sync | ev_ce_batch;
}  // namespace gate

// ---- process-global state shared by all communicators (as in NCCL) -------------------------------

/// NCCL's `ncclProfilerEventMask`: ONE int per process; every `init` gets a pointer to it.
inline int& global_mask() noexcept {
  static int mask = 0;
  return mask;
}
inline int load_mask() noexcept { return std::atomic_ref<int>(global_mask()).load(std::memory_order_relaxed); }
inline void store_mask(int v) noexcept { std::atomic_ref<int>(global_mask()).store(v, std::memory_order_relaxed); }

inline std::atomic<bool>& logger_verbose() noexcept {
  static std::atomic<bool> v{false};
  return v;
}
inline std::atomic<int>& logger_warn_count() noexcept {
  static std::atomic<int> n{0};
  return n;
}

/// The `ncclDebugLogger_t` given to `init`: WARN/ABORT always go to stderr (and are counted), the rest only
/// when `logger_verbose()` is set.
inline void logger(abi::log_level level, unsigned long flags, const char* file, int line, const char* fmt, ...) {
  if (level == abi::log_warn || level == abi::log_abort) logger_warn_count().fetch_add(1, std::memory_order_relaxed);
  if (!logger_verbose().load(std::memory_order_relaxed) && level != abi::log_warn && level != abi::log_abort) return;
  char buf[1024];
  va_list ap;
  va_start(ap, fmt);
  std::vsnprintf(buf, sizeof buf, fmt, ap);
  va_end(ap);
  static constexpr const char* names[] = {"NONE", "VERSION", "WARN", "INFO", "ABORT", "TRACE"};
  const char* lv = (level >= 0 && level <= 5) ? names[level] : "?";
  std::fprintf(stderr, "[ncclinsp-sim %d] NCCL %s [%#lx] %s:%d %s\n", int(::getpid()), lv, flags, file ? file : "?",
               line, buf);
}

// ---- version traits --------------------------------------------------------------------------------

using abi::version;  // per-version descriptor and table types (ncclinsp/abi/versions.hpp)

/// Whether NCCL can deliver an event of `type` to a plugin of version V at all.
constexpr bool version_supports(int v, std::uint64_t type) noexcept {
  using namespace abi;
  if (type <= ev_net_plugin) return true;          // bits 0-7: every version >= 4
  if (type <= ev_kernel_launch) return v >= 5;     // API events
  if (type <= ev_ce_batch) return v >= 6;          // CE events
  return v >= 7;                                   // KernelPhase
}

// ---- plugin_library ----------------------------------------------------------------------------------

/// A dlopen'ed profiler plugin. Move-only; dlcloses on destruction (as NCCL does when its refcount reaches 0).
class plugin_library {
 public:
  plugin_library() = default;
  /// force_abi: 0 = newest exported (abi::newest → abi::oldest), one of abi::versions = exactly that symbol.
  explicit plugin_library(const std::string& path, int force_abi = 0) { open(path, force_abi); }
  plugin_library(const plugin_library&) = delete;
  plugin_library& operator=(const plugin_library&) = delete;
  plugin_library(plugin_library&& o) noexcept { *this = std::move(o); }
  plugin_library& operator=(plugin_library&& o) noexcept {
    if (this != &o) {
      close();
      handle_ = std::exchange(o.handle_, nullptr);
      table_ = std::exchange(o.table_, nullptr);
      abi_ = std::exchange(o.abi_, 0);
      error_ = std::move(o.error_);
      path_ = std::move(o.path_);
    }
    return *this;
  }
  ~plugin_library() { close(); }

  bool open(const std::string& path, int force_abi = 0) {
    close();
    path_ = path;
    error_.clear();
    if (force_abi != 0 && !abi::is_version(force_abi)) {
      error_ = "unsupported profiler ABI version " + std::to_string(force_abi) + " (want 0 or " + std::to_string(abi::oldest) + ".." +
               std::to_string(abi::newest) + ")";
      return false;
    }
    handle_ = ::dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
    if (!handle_) {
      const char* e = ::dlerror();
      error_ = "dlopen(" + path + ") failed: " + (e ? e : "unknown error");
      return false;
    }
    for (auto it = abi::versions.rbegin(); it != abi::versions.rend(); ++it) {  // newest first, as NCCL
      const int v = *it;
      if (force_abi != 0 && v != force_abi) continue;
      const std::string sym = "ncclProfiler_v" + std::to_string(v);
      ::dlerror();
      if (void* p = ::dlsym(handle_, sym.c_str())) {
        table_ = p;
        abi_ = v;
        return true;
      }
    }
    if (force_abi) {
      error_ = path + " does not export ncclProfiler_v" + std::to_string(force_abi);
    } else {
      error_ = path + " exports none of ncclProfiler";  // "ncclProfiler_v7, _v6, _v5, _v4"
      for (auto it = abi::versions.rbegin(); it != abi::versions.rend(); ++it)
        error_ += (it == abi::versions.rbegin() ? "_v" : ", _v") + std::to_string(*it);
    }
    ::dlclose(handle_);
    handle_ = nullptr;
    return false;
  }

  void close() noexcept {
    if (handle_) ::dlclose(handle_);
    handle_ = nullptr;
    table_ = nullptr;
    abi_ = 0;
  }

  bool ok() const noexcept { return table_ != nullptr; }
  explicit operator bool() const noexcept { return ok(); }
  const std::string& error() const noexcept { return error_; }
  const std::string& path() const noexcept { return path_; }
  int abi() const noexcept { return abi_; }
  /// The table's `name` field ("" when not loaded or NULL).
  const char* name() const noexcept {
    if (!table_) return "";
    const char* n = *static_cast<const char* const*>(table_);  // `name` is the first member of every version
    return n ? n : "";
  }
  void* dl_handle() const noexcept { return handle_; }
  const void* raw_table() const noexcept { return table_; }
  template <int V> const typename version<V>::table* table() const noexcept {
    return abi_ == V ? static_cast<const typename version<V>::table*>(table_) : nullptr;
  }

 private:
  void* handle_ = nullptr;
  const void* table_ = nullptr;
  int abi_ = 0;
  std::string error_;
  std::string path_;
};

// ---- operations ------------------------------------------------------------------------------------

enum class op_kind : std::uint8_t { coll, p2p, ce_coll };

/// One NCCL API call (ncclAllReduce, ncclSend, ...). Counts are the user's (elements); the driver applies
/// NCCL's rewriting (AllGather/Broadcast Coll count in bytes, datatype "ncclInt8").
struct op_desc {
  op_kind kind = op_kind::coll;
  nccl_func func = nccl_func::all_reduce;
  nccl_dtype dtype = nccl_dtype::bfloat16;
  std::size_t count = 0;  ///< AllGather: per-rank send count; ReduceScatter: per-rank recv count.
  int root = 0;
  int peer = -1;          ///< P2P peer rank
  const void* send_buff = nullptr;
  void* recv_buff = nullptr;
  const char* algo = "RING";
  const char* proto = "SIMPLE";
  std::uint8_t n_channels = 1;
  int channel_lo = -1;    ///< -1: collectives use the group's channel cursor, P2P a peer-derived non-zero base
  std::uint8_t n_warps = 16;
  std::uint64_t user_tag = 0;             ///< v7 only
  const char* kernel_variant = nullptr;   ///< v7 symmetric kernel name, e.g. "AllReduce_AGxLL_R"; NULL = regular
  void* stream = reinterpret_cast<void*>(0x5000);
  bool graph_captured = false;
};

/// What `enqueue` hands to the proxy side: the handles and the mask snapshot of one task. Plain data.
struct pending_op {
  void* task_handle = nullptr;  ///< Coll / P2p handle (parent of KernelCh, ProxyOp); NULL if the plugin said so
  void* api_handle = nullptr;   ///< CollApi / P2pApi handle (v5+)
  void* ce_handle = nullptr;    ///< CeColl handle (v6+ CE collectives)
  int mask = 0;                 ///< activation-mask snapshot taken at the API call
  op_kind kind = op_kind::coll;
  nccl_func func = nccl_func::all_reduce;
  bool kernel_events = false;   ///< KernelCh/ProxyOp children exist (false for CE ops and mask-off / Broadcast)
  bool symmetric = false;
  bool network = false;         ///< the communicator spans nodes: ProxyOps exist
  std::uint8_t channel_lo = 0;
  std::uint8_t n_channels = 0;
  int peer = -1;
  std::size_t bytes = 0;        ///< per-rank payload bytes
  std::uint64_t seq = 0;        ///< coll.seqNumber / ceColl.seqNumber given to the plugin
};

struct kernel_time {
  std::uint64_t start_ns = 0;  ///< GPU %globaltimer at work start
  std::uint64_t stop_ns = 0;   ///< GPU %globaltimer at work end
};

/// When one ProxyStep changes state (src/transport/net.cc), on the caller's clock:
///  send: post = start + SendGPUWait, ready = SendPeerWait (the GPU produced the chunk), sent = SendWait
///        (isend accepted: the receiver had a buffer), done = stop (network completion);
///  recv: post = start + RecvWait (irecv posted), ready = RecvFlushWait (data received), sent = RecvGPUWait
///        (flushed, handed to the GPU), done = stop (the GPU consumed it).
struct proxy_step_times { std::uint64_t post = 0, ready = 0, sent = 0, done = 0; };
inline constexpr int max_proxy_steps = 4;
/// One ProxyOp of a network connection (channel, direction, peer) and its steps.
struct proxy_plan {
  std::uint8_t channel = 0;  ///< index into the op's channels (channel id = channel_lo + channel)
  bool is_send = true;
  int peer = 0;              ///< peer's rank in the communicator
  std::uint64_t start = 0;   ///< ProxyOp start (append at launch) and ProxyOpInProgress
  std::size_t step_bytes = 0;
  int n_steps = 0;           ///< <= max_proxy_steps
  proxy_step_times steps[max_proxy_steps];
};
/// One op of a group for `complete_timed`.
struct timed_op {
  const pending_op* op = nullptr;
  std::span<const kernel_time> kernel;  ///< per channel (as `complete`)
  std::span<const proxy_plan> proxies;  ///< this rank's network ProxyOps of the op (empty: none)
};

struct comm_config {
  std::uint64_t comm_hash = 0;    ///< identical on all ranks of the communicator
  std::string name;               ///< commName; empty → NULL
  bool null_name = false;         ///< pass NULL even if `name` is set (NCCL: commName unset)
  int n_nodes = 1;
  int n_ranks = 1;
  int rank = 0;
  int mask_override = -1;         ///< RAS override: after init, store this into the global mask (e.g. 0xFFFF)
  bool shim_quirks = false;       ///< see the header comment
  int broadcast_coll = -1;        ///< Broadcast emits Coll/KernelCh: -1 auto (only v4/v5 native), 0 no, 1 yes
  int proxy_steps = 2;            ///< ProxyStep events per ProxyOp when enabled
  pid_t pid = ::getpid();         ///< `proxyOp.pid` for local ops
};

/// One communicator on one rank.
class comm_driver {
 public:
  comm_driver(const plugin_library& lib, comm_config cfg) : lib_(&lib), cfg_(std::move(cfg)), abi_(lib.abi()) {
    if (!lib.ok()) {
      init_result_ = abi::internal_error;
      return;
    }
    const char* name = (cfg_.null_name || cfg_.name.empty()) ? nullptr : cfg_.name.c_str();
    int* mask = &global_mask();
    init_result_ = abi::internal_error;
    abi::with_abi(abi_, [&](auto v) {
      constexpr int V = decltype(v)::value;
      if constexpr (V == 4)  // v4 init: no commId before the mask, the hash after the name
        init_result_ = lib.table<V>()->init(&context_, mask, name, cfg_.comm_hash, cfg_.n_nodes, cfg_.n_ranks, cfg_.rank, &logger);
      else
        init_result_ = lib.table<V>()->init(&context_, cfg_.comm_hash, mask, name, cfg_.n_nodes, cfg_.n_ranks, cfg_.rank, &logger);
    });
    if (init_result_ != abi::success) {
      logger(abi::log_warn, abi::subsys_init, __FILE__, __LINE__, "Profiler init failed with error (%d). Continue without profiler.",
             int(init_result_));
      return;
    }
    active_ = true;
    int m = load_mask();
    if (abi_ == 5) m &= ~int(abi::ev_ce_coll | abi::ev_ce_sync | abi::ev_ce_batch | abi::ev_kernel_phase);  // v5 shim
    if (abi_ == 6) m &= ~int(abi::ev_kernel_phase);                                                       // v6 shim
    if (cfg_.mask_override >= 0) m = cfg_.mask_override;  // RAS re-applies its override after every init
    if (m & abi::ev_kernel_phase) m |= abi::ev_kernel_ch;   // 2.31: KernelPhase implies KernelCh
    store_mask(m);
  }

  comm_driver(const comm_driver&) = delete;
  comm_driver& operator=(const comm_driver&) = delete;
  ~comm_driver() { finalize(); }

  abi::result_t init_result() const noexcept { return init_result_; }
  bool active() const noexcept { return active_; }
  void* context() const noexcept { return context_; }
  int mask() const noexcept { return load_mask(); }
  int abi_version() const noexcept { return abi_; }
  const comm_config& config() const noexcept { return cfg_; }
  /// Next seqNumber NCCL would give `f` on this communicator.
  std::uint64_t next_seq(nccl_func f) const noexcept { return seq_[int(f)]; }

  /// Set the global mask now (the way a plugin or RAS may do later); applies to ops enqueued afterwards.
  static void set_mask(int m) noexcept { store_mask(m); }

  /// User-thread side: one outermost group of API calls (a single op = NCCL's implicit group, groupDepth 1;
  /// several = ncclGroupStart/End, groupDepth 2 unless `user_group` says otherwise). `out[i]` receives op i's
  /// pending token; `out.size() >= ops.size()`.
  void enqueue(std::span<const op_desc> ops, std::span<pending_op> out, int user_group = -1) {
    if (!active_ || ops.empty() || out.size() < ops.size()) return;
    const bool grouped = user_group < 0 ? ops.size() > 1 : user_group != 0;
    abi::with_abi(abi_, [&](auto v) {
      constexpr int V = decltype(v)::value;
      enqueue_impl<V>(ops, out, grouped);
    });
  }
  pending_op enqueue(const op_desc& op) {
    pending_op p;
    enqueue(std::span<const op_desc>(&op, 1), std::span<pending_op>(&p, 1), 0);
    return p;
  }

  /// Proxy/profiler-thread side: the kernel finished on every channel. `t[i]` is channel `channel_lo + i`
  /// (if `t` is shorter, its last entry is reused).
  void complete(const pending_op& p, std::span<const kernel_time> t) {
    if (!active_ || t.empty()) return;
    abi::with_abi(abi_, [&](auto v) {
      constexpr int V = decltype(v)::value;
      complete_impl<V>(p, t, true);
    });
  }
  void complete(const pending_op& p, std::uint64_t start_ns, std::uint64_t stop_ns) {
    const kernel_time t{start_ns, stop_ns};
    complete(p, std::span<const kernel_time>(&t, 1));
  }
  /// Proxy-thread side with timing: the ops of one group, every event at its own time, in time order across
  /// ops and channels: ProxyOp start + InProgress at `start`, KernelCh start at the channel's start, each
  /// ProxyStep's states at their times, ProxyOp stop after its last step, KernelCh stop (+ record 22) at the
  /// channel's stop. `wait(t, step)` is called with non-decreasing t before each event (the plugin timestamps
  /// proxy states with its own clock, so the caller sleeps until t); `step` is true when that event is a
  /// ProxyStep start, state transition or stop (the calls in which the plugin reads its clock to time
  /// proxy states; ncclinsp-sim's simulated proxy clock at --speed 0 covers those only). Events gated by each op's mask snapshot
  /// exactly as in `complete`; NCCL starts ProxySteps even under a NULL ProxyOp handle (parentObj NULL) but
  /// records their states only under a non-NULL one. Allocates nothing (fixed-size event table).
  template <class Wait>
  void complete_timed(std::span<const timed_op> ops, Wait&& wait) {
    if (!active_ || ops.empty()) return;
    abi::with_abi(abi_, [&](auto v) {
      constexpr int V = decltype(v)::value;
      timed_impl<V>(ops, wait);
    });
  }

  /// KernelCh start only, never stopped (NCCL 2.31 purges in-flight ops at comm destroy; a hung kernel).
  void start_only(const pending_op& p, std::uint64_t start_ns) {
    if (!active_) return;
    const kernel_time t{start_ns, 0};
    abi::with_abi(abi_, [&](auto v) {
      constexpr int V = decltype(v)::value;
      complete_impl<V>(p, std::span<const kernel_time>(&t, 1), false);
    });
  }

  /// A PXN ProxyOp progressed in this process on behalf of another: `proxyOp.pid` = `pid`, and both
  /// `parentObj` and the context pointer are addresses from the other process (never dereference them).
  void foreign_proxy_op(pid_t pid, std::uint8_t channel, int peer, int rank,
                        void* foreign_parent = reinterpret_cast<void*>(0x10),
                        void* foreign_context = reinterpret_cast<void*>(0x20)) {
    if (!active_) return;
    abi::with_abi(abi_, [&](auto v) {
      constexpr int V = decltype(v)::value;
      foreign_impl<V>(pid, channel, peer, rank, foreign_parent, foreign_context);
    });
  }

  /// One ProxyCtrl Append → AppendEnd cycle on the proxy thread (reads the global mask per event, as NCCL).
  void proxy_ctrl(int appended_ops) {
    if (!active_) return;
    abi::with_abi(abi_, [&](auto v) {
      constexpr int V = decltype(v)::value;
      proxy_ctrl_impl<V>(appended_ops);
    });
  }

  /// ncclCommDestroy: `finalize(context)` if init succeeded and the context is non-NULL. Idempotent.
  void finalize() {
    if (!active_) return;
    active_ = false;
    if (!context_) return;
    abi::with_abi(abi_, [&](auto v) {
      constexpr int V = decltype(v)::value;
      lib_->table<V>()->finalize(context_);
    });
  }

 private:
  template <int V> using descr_t = typename version<V>::descr;

  template <int V> void clear(descr_t<V>& d) const noexcept {
    std::memset(static_cast<void*>(&d), (cfg_.shim_quirks && V < 6) ? 0xA5 : 0, sizeof d);
  }
  template <int V> void* start(void* ctx, descr_t<V>& d) const {
    void* h = nullptr;
    lib_->table<V>()->startEvent(ctx, &h, &d);
    return h;
  }
  template <int V> void stop(void* h) const {
    if (h) lib_->table<V>()->stopEvent(h);
  }
  template <int V> void record(void* h, abi::event_state s, abi::state_args* a) const {
    if (h) lib_->table<V>()->recordEventState(h, s, a);
  }
  /// Args for states NCCL sends without args (19, 23, 24): NULL natively; a garbage struct via the v5 shim.
  /// One NetPlugin event (an IB transfer update) under a ProxyStep, as NCCL's net plugin emits it.
  template <int V> void net_plugin_event(void* ctx, descr_t<V>& d, void* step) const {
    static char net_data[64] = {};  // network-plugin-defined blob
    clear<V>(d);
    d.type = abi::ev_net_plugin;
    d.parentObj = step;
    d.rank = cfg_.rank;
    d.netPlugin.id = (std::int64_t(1) << 16) | 1;  // NCCL_PROFILER_NET_TYPE_IB | v1
    d.netPlugin.data = net_data;
    void* nh = start<V>(ctx, d);
    abi::state_args na{};
    na.netPlugin.data = net_data;
    record<V>(nh, abi::st_net_plugin_update, &na);
    stop<V>(nh);
  }
  template <int V> abi::state_args* no_args(abi::state_args& scratch) const noexcept {
    if (V == 5 && cfg_.shim_quirks) {
      std::memset(static_cast<void*>(&scratch), 0xA5, sizeof scratch);
      return &scratch;
    }
    return nullptr;
  }

  bool broadcast_emits_coll() const noexcept {
    if (cfg_.broadcast_coll >= 0) return cfg_.broadcast_coll != 0;
    return abi_ <= 5 && !cfg_.shim_quirks;
  }

  static const char* sym_algo(const char* variant) noexcept {
    const char* u = std::strchr(variant, '_');
    return u ? u + 1 : variant;
  }

  template <int V>
  void enqueue_impl(std::span<const op_desc> ops, std::span<pending_op> out, bool grouped) {
    using namespace abi;
    void* const ctx = context_;
    const int m = load_mask();  // ncclProfilerApiState.eActivationMask snapshot
    abi::state_args scratch;
    descr_t<V> d;

    // -- user thread: ncclGroupStart / taskAppend / ncclGroupEnd (v5+) ---------------------------------
    void* group_api = nullptr;
    if constexpr (V >= 5) {
      if (m & gate::group_api) {
        clear<V>(d);
        d.type = ev_group_api;
        d.groupApi.graphCaptured = ops.front().graph_captured;
        d.groupApi.groupDepth = grouped ? 2 : 1;
        group_api = start<V>(ctx, d);
        record<V>(group_api, st_group_start_api_stop, no_args<V>(scratch));
      }
    }
    bool any_plan_task = false;
    std::uint8_t cursor = 0;
    for (std::size_t i = 0; i < ops.size(); ++i) {
      const op_desc& op = ops[i];
      pending_op& p = out[i];
      p = pending_op{};
      p.mask = m;
      p.kind = op.kind;
      p.func = op.func;
      p.peer = op.peer;
      p.network = cfg_.n_nodes > 1;
      p.bytes = op.count * dtype_size(op.dtype);
      p.symmetric = V >= 7 && op.kernel_variant != nullptr && op.kind == op_kind::coll;
      p.n_channels = op.n_channels;
      if (op.kind == op_kind::coll) {
        if (p.symmetric) {
          p.channel_lo = 0;
        } else if (op.channel_lo >= 0) {
          p.channel_lo = std::uint8_t(op.channel_lo);
        } else {
          if (cursor + op.n_channels > 64) cursor = 0;
          p.channel_lo = cursor;
          cursor = std::uint8_t(cursor + op.n_channels);
        }
      } else if (op.kind == op_kind::p2p) {
        p.channel_lo = op.channel_lo >= 0 ? std::uint8_t(op.channel_lo)
                                          : std::uint8_t(1 + ((op.peer < 0 ? 0 : op.peer) % 8) * 2);
      }
      if (op.kind != op_kind::ce_coll) any_plan_task = true;
      if constexpr (V >= 5) {
        const bool is_p2p = op.kind == op_kind::p2p;
        if (m & (is_p2p ? gate::p2p_api : gate::coll_api)) {
          clear<V>(d);
          d.parentObj = group_api;
          if (is_p2p) {
            d.type = ev_p2p_api;
            d.p2pApi.func = func_name(op.func);
            d.p2pApi.count = op.count;
            d.p2pApi.datatype = dtype_name(op.dtype);
            d.p2pApi.stream = op.stream;
            d.p2pApi.graphCaptured = op.graph_captured;
            if constexpr (V >= 7) d.p2pApi.userTag = op.user_tag;
          } else {
            d.type = ev_coll_api;
            d.collApi.func = func_name(op.func);
            d.collApi.count = op.count;
            d.collApi.datatype = dtype_name(op.dtype);
            d.collApi.root = op.root;
            d.collApi.stream = op.stream;
            d.collApi.graphCaptured = op.graph_captured;
            if constexpr (V >= 7) d.collApi.userTag = op.user_tag;
          }
          p.api_handle = start<V>(ctx, d);
          stop<V>(p.api_handle);
        }
      }
    }
    if constexpr (V >= 5) record<V>(group_api, st_group_end_api_start, no_args<V>(scratch));

    // -- launch: KernelLaunch, then hostStreamPlanTask (Group, Coll/P2p start, Coll/P2p stop, Group stop) --
    if (any_plan_task) {
      if constexpr (V >= 5) {
        if (m & ev_kernel_launch) {
          clear<V>(d);
          d.type = ev_kernel_launch;
          d.parentObj = group_api;
          d.kernelLaunch.stream = ops.front().stream;
          stop<V>(start<V>(ctx, d));
        }
      }
      void* group = nullptr;
      if (m & gate::group) {
        clear<V>(d);
        d.type = ev_group;
        group = start<V>(ctx, d);
      }
      // v4 native (2.27) starts task events only under a non-NULL Group handle; the later shim does not check.
      const bool tasks_allowed = V >= 5 || group != nullptr || cfg_.shim_quirks;
      const bool bcast_coll = broadcast_emits_coll();
      for (int pass = 0; pass < 2; ++pass) {  // plan order: collectives, then P2P
        for (std::size_t i = 0; i < ops.size(); ++i) {
          const op_desc& op = ops[i];
          pending_op& p = out[i];
          if (op.kind == op_kind::ce_coll || (pass == 0) != (op.kind == op_kind::coll)) continue;
          if (op.kind == op_kind::coll) {
            const bool no_coll = op.func == nccl_func::broadcast && !bcast_coll;
            p.seq = seq_[int(op.func)]++;
            if (no_coll) continue;  // no Coll, no profiler proxy op, no KernelCh (NVIDIA/nccl #2278)
            p.kernel_events = true;
            if (!(m & gate::coll) || !tasks_allowed) continue;
            clear<V>(d);
            d.type = ev_coll;
            d.rank = cfg_.rank;
            d.coll.seqNumber = p.seq;
            d.coll.func = func_name(op.func);
            d.coll.sendBuff = op.send_buff;
            d.coll.recvBuff = op.recv_buff;
            const bool bytes = op.func == nccl_func::all_gather || op.func == nccl_func::broadcast;
            d.coll.count = bytes ? op.count * dtype_size(op.dtype) : op.count;
            d.coll.root = op.root;
            d.coll.datatype = bytes ? "ncclInt8" : dtype_name(op.dtype);
            d.coll.nChannels = op.n_channels;
            d.coll.nWarps = op.n_warps;
            d.coll.algo = op.algo;
            d.coll.proto = op.proto;
            if constexpr (V == 4) {
              d.parentObj = group;
            } else {
              d.parentObj = p.api_handle;
              d.coll.parentGroup = group;
            }
            if constexpr (V >= 7) {
              d.coll.userTag = op.user_tag;
              if (p.symmetric) {
                d.coll.isSymColl = true;
                d.coll.kernelVariant = op.kernel_variant;
                d.coll.algo = sym_algo(op.kernel_variant);
                d.coll.proto = "";
              }
            }
            p.task_handle = start<V>(ctx, d);
          } else {
            p.kernel_events = true;
            if (!(m & gate::p2p) || !tasks_allowed) continue;
            clear<V>(d);
            d.type = ev_p2p;
            d.rank = cfg_.rank;
            d.p2p.func = func_name(op.func);
            d.p2p.buff = op.kind == op_kind::p2p && op.func == nccl_func::recv ? op.recv_buff
                                                                                 : const_cast<void*>(op.send_buff);
            d.p2p.datatype = dtype_name(op.dtype);
            d.p2p.count = op.count;
            d.p2p.peer = op.peer;
            if constexpr (V == 4) {
              d.parentObj = group;
              if (!cfg_.shim_quirks) d.p2p.nChannels = op.n_channels;  // the v4 shim forgets to copy it
            } else {
              d.p2p.nChannels = op.n_channels;
              d.parentObj = p.api_handle;
              d.p2p.parentGroup = group;
            }
            if constexpr (V >= 7) d.p2p.userTag = op.user_tag;
            p.task_handle = start<V>(ctx, d);
          }
        }
      }
      for (int pass = 0; pass < 2; ++pass)
        for (std::size_t i = 0; i < ops.size(); ++i)
          if (ops[i].kind != op_kind::ce_coll && (pass == 0) == (ops[i].kind == op_kind::coll)) stop<V>(out[i].task_handle);
      stop<V>(group);
    }

    // -- CE collectives (v6+): CollApi → CeColl (→ CeSync, CeBatch); never Coll/KernelCh ------------------
    if constexpr (V >= 6) {
      for (std::size_t i = 0; i < ops.size(); ++i) {
        const op_desc& op = ops[i];
        pending_op& p = out[i];
        if (op.kind != op_kind::ce_coll) continue;
        p.seq = ce_seq_++;
        if (!(m & gate::ce_coll)) continue;
        clear<V>(d);
        d.type = ev_ce_coll;
        d.parentObj = p.api_handle;
        d.rank = cfg_.rank;
        d.ceColl.seqNumber = p.seq;
        d.ceColl.func = func_name(op.func);
        d.ceColl.sendBuff = op.send_buff;
        d.ceColl.recvBuff = op.recv_buff;
        d.ceColl.count = op.count;
        d.ceColl.root = op.root;
        d.ceColl.datatype = dtype_name(op.dtype);
        d.ceColl.syncStrategy = "UC";
        d.ceColl.ceSeqNum = std::uint32_t(p.seq);
        d.ceColl.stream = op.stream;
        if constexpr (V >= 7) d.ceColl.userTag = op.user_tag;
        p.ce_handle = start<V>(ctx, d);
        if (p.ce_handle && (m & ev_ce_sync)) {
          clear<V>(d);
          d.type = ev_ce_sync;
          d.parentObj = p.ce_handle;
          d.rank = cfg_.rank;
          d.ceCollSync.isComplete = false;
          d.ceCollSync.nRanks = cfg_.n_ranks;
          stop<V>(start<V>(ctx, d));
        }
        if (p.ce_handle && (m & ev_ce_batch)) {
          clear<V>(d);
          d.type = ev_ce_batch;
          d.parentObj = p.ce_handle;
          d.rank = cfg_.rank;
          d.ceCollBatch.numOps = cfg_.n_ranks > 1 ? cfg_.n_ranks - 1 : 1;
          d.ceCollBatch.totalBytes = p.bytes * std::size_t(cfg_.n_ranks > 1 ? cfg_.n_ranks - 1 : 1);
          d.ceCollBatch.useIntraSync = false;
          stop<V>(start<V>(ctx, d));
        }
        stop<V>(p.ce_handle);
      }
    }
    if constexpr (V >= 5) stop<V>(group_api);
  }

  template <int V>
  void proxy_ops_for_channel(const pending_op& p, std::uint8_t ch, descr_t<V>& d) const {
    using namespace abi;
    void* const ctx = context_;
    for (int is_send = 1; is_send >= 0; --is_send) {
      clear<V>(d);
      d.type = ev_proxy_op;
      d.parentObj = p.task_handle;
      d.rank = cfg_.rank;
      d.proxyOp.pid = cfg_.pid;
      d.proxyOp.channelId = ch;
      d.proxyOp.peer = p.peer >= 0 ? p.peer : (cfg_.rank + (is_send ? 1 : cfg_.n_ranks - 1)) % (cfg_.n_ranks > 0 ? cfg_.n_ranks : 1);
      d.proxyOp.nSteps = cfg_.proxy_steps;
      d.proxyOp.chunkSize = 1 << 19;
      d.proxyOp.isSend = is_send;
      void* op_h = start<V>(ctx, d);
      abi::state_args scratch{};
      abi::state_args* in_progress_args = no_args<V>(scratch);  // garbage via the v5 shim
      record<V>(op_h, st_proxy_op_in_progress_v4, in_progress_args ? in_progress_args : &scratch);
      const std::size_t per_step =
          p.n_channels && cfg_.proxy_steps > 0 ? p.bytes / (std::size_t(p.n_channels) * std::size_t(cfg_.proxy_steps)) : p.bytes;
      for (int s = 0; s < cfg_.proxy_steps; ++s) {
        if (!(p.mask & gate::proxy_step) || (V == 4 && !op_h)) continue;
        clear<V>(d);
        d.type = ev_proxy_step;
        d.parentObj = op_h;
        d.rank = cfg_.rank;
        d.proxyStep.step = s;
        void* st = start<V>(ctx, d);
        abi::state_args a{};
        a.proxyStep.transSize = per_step;
        static constexpr abi::event_state send_states[] = {abi::event_state(8), abi::st_proxy_step_send_peer_wait_v4,
                                                            abi::event_state(9)};
        static constexpr abi::event_state recv_states[] = {abi::event_state(10), abi::event_state(11),
                                                            abi::event_state(12)};
        for (abi::event_state es : is_send ? send_states : recv_states)
          if (op_h) record<V>(st, es, &a);
        if (p.mask & ev_net_plugin) net_plugin_event<V>(ctx, d, st);
        stop<V>(st);
      }
      stop<V>(op_h);
    }
  }

  template <int V>
  void complete_impl(const pending_op& p, std::span<const kernel_time> t, bool finish) const {
    using namespace abi;
    if (!p.kernel_events) return;
    void* const ctx = context_;
    descr_t<V> d;
    const bool want_kch = (p.mask & ev_kernel_ch) != 0;
    const bool want_proxy = finish && p.network && (p.mask & gate::proxy_op) != 0;
    const bool want_phase = V >= 7 && p.symmetric && (p.mask & ev_kernel_phase) != 0;
    if (finish && (load_mask() & ev_proxy_ctrl)) proxy_ctrl_impl<V>(p.n_channels);
    for (std::uint8_t i = 0; i < p.n_channels; ++i) {
      const kernel_time& kt = t[i < t.size() ? i : t.size() - 1];
      const std::uint8_t ch = std::uint8_t(p.channel_lo + i);
      void* kh = nullptr;
      if (want_kch) {
        clear<V>(d);
        d.type = ev_kernel_ch;
        d.parentObj = p.task_handle;
        d.kernelCh.channelId = ch;
        d.kernelCh.pTimer = kt.start_ns;
        kh = start<V>(ctx, d);
      }
      if (want_proxy) proxy_ops_for_channel<V>(p, ch, d);
      if (!finish || !want_kch) continue;
      if constexpr (V >= 7) {
        if (want_phase) {
          static constexpr const char* names[3] = {"initial_sync", "compute", "final_sync"};
          const std::uint64_t len = kt.stop_ns > kt.start_ns ? kt.stop_ns - kt.start_ns : 0;
          const std::uint64_t b[4] = {kt.start_ns, kt.start_ns + len / 20, kt.stop_ns - len / 20, kt.stop_ns};
          for (std::uint8_t ph = 0; ph < 3; ++ph) {
            if (b[ph + 1] <= b[ph]) continue;  // zero-length phases are skipped
            clear<V>(d);
            d.type = ev_kernel_phase;
            d.parentObj = kh;
            d.kernelPhase.channelId = ch;
            d.kernelPhase.phaseId = ph;
            d.kernelPhase.phaseName = names[ph];
            d.kernelPhase.pTimer = b[ph];
            void* h = start<V>(ctx, d);
            abi::state_args a{};
            a.kernelCh.pTimer = b[ph + 1];
            record<V>(h, st_kernel_phase_stop, &a);
            stop<V>(h);
          }
        }
      }
      abi::state_args a{};
      a.kernelCh.pTimer = kt.stop_ns;
      record<V>(kh, st_kernel_ch_stop, &a);
      stop<V>(kh);
    }
  }

  static constexpr std::size_t max_timed_ops = 4, max_timed_plans = 32;
  struct timed_event {
    std::uint64_t t;
    std::uint8_t prio, kind, op, step;
    std::uint16_t idx;  ///< channel (kernel events) or plan index
  };
  enum : std::uint8_t { ev_pop_start, ev_kch_start, ev_step_post, ev_step_ready, ev_step_sent, ev_step_done, ev_pop_stop, ev_kch_stop };

  template <int V, class Wait>
  void timed_impl(std::span<const timed_op> ops, Wait& wait) const {
    using namespace abi;
    static constexpr std::size_t cap = max_timed_ops * (2 * 64 + max_timed_plans * (2 + 4 * max_proxy_steps));
    timed_event ev[cap];
    std::size_t n = 0;
    auto add = [&](std::uint64_t t, std::uint8_t kind, std::size_t op, std::size_t idx, int step) {
      static constexpr std::uint8_t prio[] = {0, 1, 2, 2, 2, 2, 3, 4};
      if (n < cap) ev[n++] = timed_event{t, prio[kind], kind, std::uint8_t(op), std::uint8_t(step), std::uint16_t(idx)};
    };
    const std::size_t n_ops = std::min(ops.size(), max_timed_ops);
    for (std::size_t o = 0; o < n_ops; ++o) {
      const pending_op& p = *ops[o].op;
      if (!p.kernel_events || ops[o].kernel.empty()) continue;
      for (std::size_t ch = 0; ch < p.n_channels; ++ch) {
        const kernel_time& kt = ops[o].kernel[std::min(ch, ops[o].kernel.size() - 1)];
        add(kt.start_ns, ev_kch_start, o, ch, 0);
        add(kt.stop_ns, ev_kch_stop, o, ch, 0);
      }
      if (!p.network || !(p.mask & gate::proxy_op)) continue;
      for (std::size_t i = 0; i < std::min(ops[o].proxies.size(), max_timed_plans); ++i) {
        const proxy_plan& pl = ops[o].proxies[i];
        add(pl.start, ev_pop_start, o, i, 0);
        std::uint64_t last = pl.start;
        for (int k = 0; k < std::min(pl.n_steps, max_proxy_steps); ++k) {
          const proxy_step_times& st = pl.steps[k];
          add(st.post, ev_step_post, o, i, k);
          add(st.ready, ev_step_ready, o, i, k);
          add(st.sent, ev_step_sent, o, i, k);
          add(st.done, ev_step_done, o, i, k);
          last = std::max(last, st.done);
        }
        add(last, ev_pop_stop, o, i, 0);
      }
    }
    std::stable_sort(ev, ev + n, [](const timed_event& a, const timed_event& b) {
      return a.t != b.t ? a.t < b.t : a.prio < b.prio;
    });
    void* kch[max_timed_ops][64] = {};
    void* pop[max_timed_ops][max_timed_plans] = {};
    void* step[max_timed_ops][max_timed_plans][max_proxy_steps] = {};
    descr_t<V> d;
    void* const ctx = context_;
    if (load_mask() & ev_proxy_ctrl) {
      if (n) wait(ev[0].t, false);
      int appended = 0;
      for (std::size_t o = 0; o < n_ops; ++o) appended += int(ops[o].proxies.size());
      proxy_ctrl_impl<V>(appended);
    }
    for (std::size_t e = 0; e < n; ++e) {
      const timed_event& x = ev[e];
      wait(x.t, x.kind >= ev_step_post && x.kind <= ev_step_done);
      const pending_op& p = *ops[x.op].op;
      switch (x.kind) {
        case ev_kch_start: {
          if (!(p.mask & ev_kernel_ch)) break;
          clear<V>(d);
          d.type = ev_kernel_ch;
          d.parentObj = p.task_handle;
          d.kernelCh.channelId = std::uint8_t(p.channel_lo + x.idx);
          d.kernelCh.pTimer = x.t;
          kch[x.op][x.idx] = start<V>(ctx, d);
          break;
        }
        case ev_kch_stop: {
          abi::state_args a{};
          a.kernelCh.pTimer = x.t;
          record<V>(kch[x.op][x.idx], st_kernel_ch_stop, &a);
          stop<V>(kch[x.op][x.idx]);
          break;
        }
        case ev_pop_start: {
          const proxy_plan& pl = ops[x.op].proxies[x.idx];
          clear<V>(d);
          d.type = ev_proxy_op;
          d.parentObj = p.task_handle;
          d.rank = cfg_.rank;
          d.proxyOp.pid = cfg_.pid;
          d.proxyOp.channelId = std::uint8_t(p.channel_lo + pl.channel);
          d.proxyOp.peer = pl.peer;
          d.proxyOp.nSteps = pl.n_steps;
          d.proxyOp.chunkSize = int(pl.step_bytes);
          d.proxyOp.isSend = pl.is_send ? 1 : 0;
          void* h = start<V>(ctx, d);
          pop[x.op][x.idx] = h;
          abi::state_args scratch{};
          abi::state_args* args = no_args<V>(scratch);
          record<V>(h, st_proxy_op_in_progress_v4, args ? args : &scratch);
          break;
        }
        case ev_pop_stop: stop<V>(pop[x.op][x.idx]); break;
        default: {  // ProxyStep transitions
          const proxy_plan& pl = ops[x.op].proxies[x.idx];
          void* const op_h = pop[x.op][x.idx];
          void*& sh = step[x.op][x.idx][x.step];
          if (!(p.mask & gate::proxy_step) || (V == 4 && !op_h)) break;
          abi::state_args a{};
          // NCCL records sub->transSize, which is set when a step's isend is posted (send) or its data
          // arrives (recv): the earlier states of a step still carry the previous step's size.
          const std::size_t prev = x.step ? pl.step_bytes : 0;
          if (x.kind == ev_step_post) {
            clear<V>(d);
            d.type = ev_proxy_step;
            d.parentObj = op_h;
            d.rank = cfg_.rank;
            d.proxyStep.step = x.step;
            sh = start<V>(ctx, d);
            a.proxyStep.transSize = prev;
            if (op_h) record<V>(sh, abi::event_state(pl.is_send ? 8 : 10), &a);
          } else if (x.kind == ev_step_ready) {
            a.proxyStep.transSize = pl.is_send ? prev : pl.step_bytes;
            if (op_h) record<V>(sh, pl.is_send ? abi::st_proxy_step_send_peer_wait_v4 : abi::event_state(11), &a);
          } else if (x.kind == ev_step_sent) {
            a.proxyStep.transSize = pl.step_bytes;
            if (op_h) record<V>(sh, abi::event_state(pl.is_send ? 9 : 12), &a);
            if (p.mask & ev_net_plugin) net_plugin_event<V>(ctx, d, sh);
          } else {
            stop<V>(sh);
            sh = nullptr;
          }
          break;
        }
      }
    }
  }

  template <int V>
  void foreign_impl(pid_t pid, std::uint8_t channel, int peer, int rank, void* parent, void* ctx) const {
    using namespace abi;
    const int m = load_mask();
    if (!(m & gate::proxy_op)) return;
    descr_t<V> d;
    clear<V>(d);
    d.type = ev_proxy_op;
    d.parentObj = parent;
    d.rank = rank;
    d.proxyOp.pid = pid;
    d.proxyOp.channelId = channel;
    d.proxyOp.peer = peer;
    d.proxyOp.nSteps = 1;
    d.proxyOp.chunkSize = 1 << 19;
    d.proxyOp.isSend = 1;
    void* h = start<V>(ctx, d);
    if (m & gate::proxy_step) {
      clear<V>(d);
      d.type = ev_proxy_step;
      d.parentObj = h;
      d.rank = rank;
      d.proxyStep.step = 0;
      void* sh = start<V>(ctx, d);
      abi::state_args a{};
      a.proxyStep.transSize = 1 << 19;
      if (h) record<V>(sh, abi::event_state(9), &a);
      stop<V>(sh);
    }
    stop<V>(h);
  }

  template <int V> void proxy_ctrl_impl(int appended) const {
    using namespace abi;
    if (!(load_mask() & ev_proxy_ctrl)) return;
    descr_t<V> d;
    clear<V>(d);
    d.type = ev_proxy_ctrl;
    void* h = start<V>(context_, d);
    abi::state_args a{};
    record<V>(h, abi::event_state(17), &a);  // ProxyCtrlAppend
    a.proxyCtrl.appendedProxyOps = appended;
    record<V>(h, abi::event_state(18), &a);  // ProxyCtrlAppendEnd
    stop<V>(h);
  }

  const plugin_library* lib_;
  comm_config cfg_;
  int abi_ = 0;
  void* context_ = nullptr;
  abi::result_t init_result_ = abi::internal_error;
  bool active_ = false;
  std::uint64_t seq_[num_funcs] = {};
  std::uint64_t ce_seq_ = 0;
};

}  // namespace ncclinsp::sim
