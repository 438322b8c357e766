/// A recording NCCL profiler plugin for tests: exports ncclProfiler_v<N> for each of abi::versions;
/// every call is appended to a process-wide log readable through rec_count/rec_get. Handles are
/// distinct non-NULL objects whose first 8 bytes hold the event type; rec_set_null_types makes
/// startEvent return NULL for the given type bits. At init it writes rec_set_init_mask's value
/// (default: env REC_PLUGIN_MASK, else 0x46) to the mask. If env REC_PLUGIN_DUMP is set, the last
/// finalize writes per-(call,type) counts to that file; if REC_PLUGIN_TRACE is set, it writes every
/// ProxyOp/ProxyStep call with its time there (one line per call: `<call> <type> <handle> <parent>
/// <state> <arg> <wall_ns> <rank> <peer> <channel> <is_send> <comm_name>`).
#include "recording_plugin.hpp"

#include <ncclinsp/abi/versions.hpp>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <deque>
#include <map>
#include <mutex>
#include <vector>

namespace {
namespace abi = ncclinsp::abi;

std::mutex g_mu;
std::vector<rec_event> g_log;
struct slot {
  std::uint64_t type, id;
};
std::deque<slot> g_handles;
int g_contexts[1 << 12];
int g_live_contexts = 0;
std::uint64_t g_null_types = 0;
int g_init_mask = -1;
std::uint64_t g_counter = 0;

void copy(char* dst, std::size_t n, const char* src) {
  if (!src) {
    dst[0] = '\0';
    return;
  }
  std::snprintf(dst, n, "%s", src);
}

rec_event blank(int v, int call) {
  rec_event e;
  std::memset(&e, 0, sizeof e);
  e.abi = v;
  e.call = call;
  e.root = e.peer = e.n_channels = e.channel_id = e.pid = e.phase_id = e.group_depth = -1;
  timespec ts{};
  clock_gettime(CLOCK_MONOTONIC, &ts);
  e.wall_ns = std::uint64_t(ts.tv_sec) * 1000000000ull + std::uint64_t(ts.tv_nsec);
  return e;
}

void* new_handle(std::uint64_t type) {
  g_handles.push_back(slot{type, ++g_counter});
  return &g_handles.back();
}

int init_mask() {
  if (g_init_mask >= 0) return g_init_mask;
  if (const char* m = std::getenv("REC_PLUGIN_MASK")) return int(std::strtol(m, nullptr, 0));
  return 0x46;
}

template <int V>
abi::result_t init_common(void** ctx, std::uint64_t hash, int* mask, const char* name, int nn, int nr, int r) {
  std::lock_guard lk(g_mu);
  rec_event e = blank(V, rec_call_init);
  e.comm_hash = hash;
  e.n_nodes = nn;
  e.n_ranks = nr;
  e.rank = r;
  copy(e.comm_name, sizeof e.comm_name, name ? name : "(null)");
  e.mask_ptr = mask;
  const int idx = g_live_contexts++ % (1 << 12);
  *ctx = &g_contexts[idx];
  e.context = *ctx;
  *mask = init_mask();
  g_log.push_back(e);
  return abi::success;
}

template <int V, class D>
void fill(rec_event& e, const D& d) {
  using namespace abi;
  e.type = d.type;
  e.parent = d.parentObj;
  e.rank = d.rank;
  switch (std::uint64_t(d.type)) {
    case ev_coll:
      e.seq = d.coll.seqNumber;
      copy(e.func, sizeof e.func, d.coll.func);
      copy(e.datatype, sizeof e.datatype, d.coll.datatype);
      copy(e.algo, sizeof e.algo, d.coll.algo);
      copy(e.proto, sizeof e.proto, d.coll.proto);
      e.count = d.coll.count;
      e.root = d.coll.root;
      e.n_channels = d.coll.nChannels;
      if constexpr (V >= 5) e.parent_group = d.coll.parentGroup;
      if constexpr (V >= 7) {
        e.user_tag = d.coll.userTag;
        e.is_sym = d.coll.isSymColl;
        copy(e.kernel_variant, sizeof e.kernel_variant, d.coll.kernelVariant);
      }
      break;
    case ev_p2p:
      copy(e.func, sizeof e.func, d.p2p.func);
      copy(e.datatype, sizeof e.datatype, d.p2p.datatype);
      e.count = d.p2p.count;
      e.peer = d.p2p.peer;
      e.n_channels = d.p2p.nChannels;
      if constexpr (V >= 5) e.parent_group = d.p2p.parentGroup;
      if constexpr (V >= 7) e.user_tag = d.p2p.userTag;
      break;
    case ev_proxy_op:
      e.pid = d.proxyOp.pid;
      e.channel_id = d.proxyOp.channelId;
      e.peer = d.proxyOp.peer;
      e.count = std::size_t(d.proxyOp.isSend);
      break;
    case ev_kernel_ch:
      e.channel_id = d.kernelCh.channelId;
      e.ptimer = d.kernelCh.pTimer;
      break;
    default:
      break;
  }
  if constexpr (V >= 5) {
    switch (std::uint64_t(d.type)) {
      case ev_group_api:
        e.group_depth = d.groupApi.groupDepth;
        break;
      case ev_coll_api:
        copy(e.func, sizeof e.func, d.collApi.func);
        copy(e.datatype, sizeof e.datatype, d.collApi.datatype);
        e.count = d.collApi.count;
        e.root = d.collApi.root;
        if constexpr (V >= 7) e.user_tag = d.collApi.userTag;
        break;
      case ev_p2p_api:
        copy(e.func, sizeof e.func, d.p2pApi.func);
        copy(e.datatype, sizeof e.datatype, d.p2pApi.datatype);
        e.count = d.p2pApi.count;
        if constexpr (V >= 7) e.user_tag = d.p2pApi.userTag;
        break;
      default:
        break;
    }
  }
  if constexpr (V >= 6) {
    if (d.type == ev_ce_coll) {
      e.seq = d.ceColl.seqNumber;
      copy(e.func, sizeof e.func, d.ceColl.func);
      copy(e.datatype, sizeof e.datatype, d.ceColl.datatype);
      e.count = d.ceColl.count;
      if constexpr (V >= 7) e.user_tag = d.ceColl.userTag;
    }
  }
  if constexpr (V >= 7) {
    if (d.type == ev_kernel_phase) {
      e.channel_id = d.kernelPhase.channelId;
      e.phase_id = d.kernelPhase.phaseId;
      e.ptimer = d.kernelPhase.pTimer;
      copy(e.func, sizeof e.func, d.kernelPhase.phaseName);
    }
  }
}

template <int V, class D>
abi::result_t start_event(void* ctx, void** h, D* d) {
  std::lock_guard lk(g_mu);
  rec_event e = blank(V, rec_call_start);
  e.context = ctx;
  fill<V>(e, *d);
  *h = (g_null_types & std::uint64_t(d->type)) ? nullptr : new_handle(std::uint64_t(d->type));
  e.handle = *h;
  g_log.push_back(e);
  return abi::success;
}

template <int V>
abi::result_t stop_event(void* h) {
  std::lock_guard lk(g_mu);
  rec_event e = blank(V, rec_call_stop);
  e.handle = h;
  e.type = h ? *static_cast<std::uint64_t*>(h) : 0;
  g_log.push_back(e);
  return abi::success;
}

template <int V>
abi::result_t record_event(void* h, abi::event_state s, abi::state_args* a) {
  std::lock_guard lk(g_mu);
  rec_event e = blank(V, rec_call_record);
  e.handle = h;
  e.type = h ? *static_cast<std::uint64_t*>(h) : 0;
  e.state = s;
  e.args_null = a == nullptr;
  if (a) std::memcpy(&e.arg, a, sizeof e.arg);
  g_log.push_back(e);
  return abi::success;
}

void dump_counts() {
  const char* path = std::getenv("REC_PLUGIN_DUMP");
  if (!path) return;
  std::map<std::pair<int, std::uint64_t>, std::size_t> counts;
  for (const auto& e : g_log) ++counts[{e.call, e.type}];
  if (FILE* f = std::fopen(path, "w")) {
    for (const auto& [k, n] : counts) std::fprintf(f, "%d %llu %zu\n", k.first, (unsigned long long)k.second, n);
    std::fclose(f);
  }
}

void dump_trace() {
  const char* path = std::getenv("REC_PLUGIN_TRACE");
  if (!path) return;
  std::map<void*, const char*> names;  // context -> comm name
  for (const auto& e : g_log)
    if (e.call == rec_call_init) names[e.context] = e.comm_name;
  FILE* f = std::fopen(path, "w");
  if (!f) return;
  for (const auto& e : g_log) {
    if (e.type != abi::ev_proxy_op && e.type != abi::ev_proxy_step) continue;
    const auto it = names.find(e.context);
    std::fprintf(f, "%d %llu %p %p %d %llu %llu %d %d %d %d %s\n", e.call, (unsigned long long)e.type, e.handle,
                 e.parent, e.state, (unsigned long long)e.arg, (unsigned long long)e.wall_ns, e.rank, e.peer,
                 e.channel_id, e.call == rec_call_start && e.type == abi::ev_proxy_op ? int(e.count) : -1,
                 it != names.end() ? it->second : "-");
  }
  std::fclose(f);
}

template <int V>
abi::result_t finalize_ctx(void* ctx) {
  std::lock_guard lk(g_mu);
  rec_event e = blank(V, rec_call_finalize);
  e.context = ctx;
  g_log.push_back(e);
  if (--g_live_contexts == 0) {
    dump_counts();
    dump_trace();
  }
  return abi::success;
}

abi::result_t init_v4(void** c, int* m, const char* n, std::uint64_t h, int nn, int nr, int r, abi::logger_t) {
  return init_common<4>(c, h, m, n, nn, nr, r);
}
template <int V>
abi::result_t init_v5(void** c, std::uint64_t h, int* m, const char* n, int nn, int nr, int r, abi::logger_t) {
  return init_common<V>(c, h, m, n, nn, nr, r);
}
}  // namespace

// One table per entry of abi::versions (a new version: add its table below).
static_assert(abi::versions == std::array<int, 4>{4, 5, 6, 7},
              "export a ncclProfiler_v<N> table for each of abi::versions");

#define REC_EXPORT extern "C" __attribute__((visibility("default")))
#define REC_TABLE __attribute__((visibility("default")))
extern "C" {

REC_TABLE abi::profiler_v4 ncclProfiler_v4 = {"recording-v4", init_v4,         start_event<4, abi::descr_v4>,
                                              stop_event<4>,  record_event<4>, finalize_ctx<4>};
REC_TABLE abi::profiler_v5 ncclProfiler_v5 = {"recording-v5", init_v5<5>,      start_event<5, abi::descr_v5>,
                                              stop_event<5>,  record_event<5>, finalize_ctx<5>};
REC_TABLE abi::profiler_v6 ncclProfiler_v6 = {"recording-v6", init_v5<6>,      start_event<6, abi::descr_v6>,
                                              stop_event<6>,  record_event<6>, finalize_ctx<6>};
REC_TABLE abi::profiler_v7 ncclProfiler_v7 = {"recording-v7", init_v5<7>,      start_event<7, abi::descr_v7>,
                                              stop_event<7>,  record_event<7>, finalize_ctx<7>};
}  // extern "C"

REC_EXPORT void rec_reset() {
  std::lock_guard lk(g_mu);
  g_log.clear();
  g_handles.clear();
  g_null_types = 0;
  g_init_mask = -1;
  g_live_contexts = 0;
}
REC_EXPORT std::size_t rec_count() {
  std::lock_guard lk(g_mu);
  return g_log.size();
}
REC_EXPORT int rec_get(std::size_t i, rec_event* out) {
  std::lock_guard lk(g_mu);
  if (i >= g_log.size()) return 0;
  *out = g_log[i];
  return 1;
}
REC_EXPORT void rec_set_null_types(std::uint64_t types) {
  std::lock_guard lk(g_mu);
  g_null_types = types;
}
REC_EXPORT void rec_set_init_mask(int m) {
  std::lock_guard lk(g_mu);
  g_init_mask = m;
}
