#pragma once
/// The NCCL profiler plugin, whole: include this to build the exported tables (plugin/exports.cpp)
/// or a STATIC_PLUGIN. Its parts, one job each:
///  - handle.hpp         the tagged integers given to NCCL as handles and contexts
///  - comm_state.hpp     per-communicator in-flight op slots, traces, proxy step pool (data)
///  - comm_registry.hpp  the communicators the callbacks find, and when a state may be reused
///  - event_adapter.hpp  startEvent/stopEvent/recordEventState -> op records (the hot path)
///  - op_lifecycle.hpp   an op's slot: begun, completed into an op_record, released
///  - proxy_events.hpp   ProxyOp/ProxyStep -> per-peer network waits (NCCLINSP_PROXY)
///  - plugin_state.hpp   the process state: config, collector, registry, adapter, exporter, hooks
///  - device_identity.hpp  the CUDA device of the calling thread (dlopen'ed driver, no link)

#include "ncclinsp/plugin/plugin_state.hpp"
