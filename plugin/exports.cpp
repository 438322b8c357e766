// The exported NCCL profiler tables (ncclProfiler_v7, _v6, _v5, _v4): a thin C layer over
// plugin_state. Each function catches everything; only init can report an error.
#include "ncclinsp/abi/versions.hpp"
#include "ncclinsp/plugin/profiler_plugin.hpp"

// One table per entry of abi::versions (a new version: add its table here and to exports.map).
static_assert(ncclinsp::abi::versions == std::array<int, 4>{4, 5, 6, 7},
              "export a ncclProfiler_v<N> table for each of abi::versions");

namespace {

using namespace ncclinsp;
using plugin::plugin_state;

template <int V>
abi::result_t init_v5plus(void** ctx, std::uint64_t comm_id, int* mask, const char* name, int nnodes, int nranks,
                          int rank, abi::logger_t log) noexcept {
  try {
    return plugin_state::get().init(ctx, mask, name, comm_id, nnodes, nranks, rank, log, V);
  } catch (...) {
    return abi::success;  // never an error: NCCL 2.30.3+ would unload the library (plugin_state::init)
  }
}

abi::result_t init_v4(void** ctx, int* mask, const char* name, std::uint64_t hash, int nnodes, int nranks, int rank,
                      abi::logger_t log) noexcept {
  try {
    return plugin_state::get().init(ctx, mask, name, hash, nnodes, nranks, rank, log, 4);
  } catch (...) {
    return abi::success;  // never an error: NCCL 2.30.3+ would unload the library (plugin_state::init)
  }
}

// Events before the first init (NCCL sends none) find no adapter and are ignored.
template <class Descr>
abi::result_t start_event(void* ctx, void** handle, Descr* d) noexcept {
  plugin::event_adapter* a = plugin_state::events();
  if (!a) {
    if (handle) *handle = nullptr;
    return abi::success;
  }
  return a->start_event(ctx, handle, d);
}
abi::result_t stop_event(void* handle) noexcept {
  plugin::event_adapter* a = plugin_state::events();
  return a ? a->stop_event(handle) : abi::success;
}
abi::result_t record_event_state(void* handle, abi::event_state state, abi::state_args* args) noexcept {
  plugin::event_adapter* a = plugin_state::events();
  return a ? a->record_state(handle, state, args) : abi::success;
}
abi::result_t finalize(void* ctx) noexcept {
  plugin_state* s = plugin_state::existing();
  return s ? s->finalize(ctx) : abi::success;
}

}  // namespace

#define NCCLINSP_EXPORT __attribute__((visibility("default")))

extern "C" {
NCCLINSP_EXPORT extern const ncclinsp::abi::profiler_v7 ncclProfiler_v7;
NCCLINSP_EXPORT extern const ncclinsp::abi::profiler_v6 ncclProfiler_v6;
NCCLINSP_EXPORT extern const ncclinsp::abi::profiler_v5 ncclProfiler_v5;
NCCLINSP_EXPORT extern const ncclinsp::abi::profiler_v4 ncclProfiler_v4;

const ncclinsp::abi::profiler_v7 ncclProfiler_v7 = {
    "ncclinsp", init_v5plus<7>, start_event<ncclinsp::abi::descr_v7>, stop_event, record_event_state, finalize};
const ncclinsp::abi::profiler_v6 ncclProfiler_v6 = {
    "ncclinsp", init_v5plus<6>, start_event<ncclinsp::abi::descr_v6>, stop_event, record_event_state, finalize};
const ncclinsp::abi::profiler_v5 ncclProfiler_v5 = {
    "ncclinsp", init_v5plus<5>, start_event<ncclinsp::abi::descr_v5>, stop_event, record_event_state, finalize};
const ncclinsp::abi::profiler_v4 ncclProfiler_v4 = {
    "ncclinsp", init_v4, start_event<ncclinsp::abi::descr_v4>, stop_event, record_event_state, finalize};
}
