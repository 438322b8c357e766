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

// NCCLINSP_CAPTURE: each call is also written by the callback recorder (plugin_state::recorder()): a
// start's line is claimed before the plugin runs and carries the handle it returned; stop and record
// lines are written before the plugin runs. Off: one load and an untaken branch.
plugin::callback_recorder* recorder() noexcept { return plugin_state::recorder(); }

template <int V>
abi::result_t init_v5plus(void** ctx, std::uint64_t comm_id, int* mask, const char* name, int nnodes, int nranks,
                          int rank, abi::logger_t log) noexcept {
  try {
    const abi::result_t r = plugin_state::get().init(ctx, mask, name, comm_id, nnodes, nranks, rank, log, V);
    if (auto* rec = recorder()) rec->init(ctx ? *ctx : nullptr, comm_id, name, nnodes, nranks, rank, mask ? *mask : 0);
    return r;
  } catch (...) {
    return abi::success;  // never an error: NCCL 2.30.3+ would unload the library (plugin_state::init)
  }
}

abi::result_t init_v4(void** ctx, int* mask, const char* name, std::uint64_t hash, int nnodes, int nranks, int rank,
                      abi::logger_t log) noexcept {
  try {
    const abi::result_t r = plugin_state::get().init(ctx, mask, name, hash, nnodes, nranks, rank, log, 4);
    if (auto* rec = recorder()) rec->init(ctx ? *ctx : nullptr, hash, name, nnodes, nranks, rank, mask ? *mask : 0);
    return r;
  } catch (...) {
    return abi::success;  // never an error: NCCL 2.30.3+ would unload the library (plugin_state::init)
  }
}

// Events before the first init (NCCL sends none) find no adapter and are ignored.
template <class Descr>
abi::result_t start_plain(void* ctx, void** handle, Descr* d) noexcept {
  plugin::event_adapter* a = plugin_state::events();
  if (!a) {
    if (handle) *handle = nullptr;
    return abi::success;
  }
  return a->start_event(ctx, handle, d);
}
abi::result_t stop_plain(void* handle) noexcept {
  plugin::event_adapter* a = plugin_state::events();
  return a ? a->stop_event(handle) : abi::success;
}
abi::result_t record_plain(void* handle, abi::event_state state, abi::state_args* args) noexcept {
  plugin::event_adapter* a = plugin_state::events();
  return a ? a->record_state(handle, state, args) : abi::success;
}

// The captured forms (cold: out of line, so the plain path stays a tail call).
template <class Descr>
NCCLINSP_OUTLINE abi::result_t start_captured(plugin::callback_recorder& rec, void* ctx, void** handle,
                                              Descr* d) noexcept {
  const plugin::callback_recorder::claim c = rec.reserve();
  const abi::result_t r = start_plain(ctx, handle, d);
  rec.start(c, ctx, handle ? *handle : nullptr, d);
  return r;
}
NCCLINSP_OUTLINE abi::result_t stop_captured(plugin::callback_recorder& rec, void* handle) noexcept {
  rec.stop(handle);  // before the plugin: its stop may free what the handle names
  return stop_plain(handle);
}
NCCLINSP_OUTLINE abi::result_t record_captured(plugin::callback_recorder& rec, void* handle, abi::event_state state,
                                               abi::state_args* args) noexcept {
  rec.record(handle, state, args);
  return record_plain(handle, state, args);
}

template <class Descr>
abi::result_t start_event(void* ctx, void** handle, Descr* d) noexcept {
  if (auto* rec = recorder()) NCCLINSP_UNLIKELY
    return start_captured(*rec, ctx, handle, d);
  return start_plain(ctx, handle, d);
}
abi::result_t stop_event(void* handle) noexcept {
  if (auto* rec = recorder()) NCCLINSP_UNLIKELY
    return stop_captured(*rec, handle);
  return stop_plain(handle);
}
abi::result_t record_event_state(void* handle, abi::event_state state, abi::state_args* args) noexcept {
  if (auto* rec = recorder()) NCCLINSP_UNLIKELY
    return record_captured(*rec, handle, state, args);
  return record_plain(handle, state, args);
}
abi::result_t finalize(void* ctx) noexcept {
  if (auto* rec = recorder()) rec->finalize(ctx);
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
