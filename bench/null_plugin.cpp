// The do-nothing NCCL profiler plugin: the floor for every plugin measurement. Exports
// ncclProfiler_v<N> for each of abi::versions, as the plugin does; init subscribes to the same
// events as ncclinsp (Coll, P2p, KernelCh) so NCCL (or the simulator) makes the same startEvent
// calls, and returns success; every event gets a NULL handle, so NCCL makes no stop/record calls.
// With NCCLINSP_NULL_PLUGIN_HANDLES=1 it returns a constant non-NULL handle instead, so every
// callback ncclinsp receives is made (a second floor); the mode is read at each init and kept in
// that communicator's context (NULL = NULL handles).
#include <cstdint>
#include <cstdlib>

#include "ncclinsp/abi/versions.hpp"

namespace {
namespace abi = ncclinsp::abi;

char g_token;  // context and handle of the "handles" mode; never dereferenced by anyone

abi::result_t init_common(void** ctx, int* mask, int version) noexcept {
  const char* h = std::getenv("NCCLINSP_NULL_PLUGIN_HANDLES");
  if (ctx) *ctx = h && h[0] == '1' ? &g_token : nullptr;
  if (mask) {
    int m = static_cast<int>(abi::ev_coll | abi::ev_kernel_ch | abi::ev_p2p);
    if (version >= 6) m |= static_cast<int>(abi::ev_ce_coll);
    *mask = m;
  }
  return abi::success;
}
template <int V>
abi::result_t init_v5plus(void** ctx, std::uint64_t, int* mask, const char*, int, int, int, abi::logger_t) noexcept {
  return init_common(ctx, mask, V);
}
abi::result_t init_v4(void** ctx, int* mask, const char*, std::uint64_t, int, int, int, abi::logger_t) noexcept {
  return init_common(ctx, mask, 4);
}
template <class Descr>
abi::result_t start_event(void* ctx, void** handle, Descr*) noexcept {
  if (handle) *handle = ctx;
  return abi::success;
}
abi::result_t stop_event(void*) noexcept { return abi::success; }
abi::result_t record_event_state(void*, abi::event_state, abi::state_args*) noexcept { return abi::success; }
abi::result_t finalize(void*) noexcept { return abi::success; }
}  // namespace

// One table per entry of abi::versions (a new version: add its table below).
static_assert(abi::versions == std::array<int, 4>{4, 5, 6, 7},
              "export a ncclProfiler_v<N> table for each of abi::versions");

#define NCCLINSP_NULL_EXPORT __attribute__((visibility("default")))

extern "C" {
NCCLINSP_NULL_EXPORT extern const abi::profiler_v7 ncclProfiler_v7;
NCCLINSP_NULL_EXPORT extern const abi::profiler_v6 ncclProfiler_v6;
NCCLINSP_NULL_EXPORT extern const abi::profiler_v5 ncclProfiler_v5;
NCCLINSP_NULL_EXPORT extern const abi::profiler_v4 ncclProfiler_v4;
const abi::profiler_v7 ncclProfiler_v7 = {"null",     init_v5plus<7>,     start_event<abi::descr_v7>,
                                          stop_event, record_event_state, finalize};
const abi::profiler_v6 ncclProfiler_v6 = {"null",     init_v5plus<6>,     start_event<abi::descr_v6>,
                                          stop_event, record_event_state, finalize};
const abi::profiler_v5 ncclProfiler_v5 = {"null",     init_v5plus<5>,     start_event<abi::descr_v5>,
                                          stop_event, record_event_state, finalize};
const abi::profiler_v4 ncclProfiler_v4 = {"null",  init_v4, start_event<abi::descr_v4>, stop_event, record_event_state,
                                          finalize};
}
