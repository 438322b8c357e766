/* The do-nothing NCCL profiler plugin of scripts/gpu_check.sh: the middle arm of its overhead
 * A/B/C (NCCL without a plugin, this plugin, ncclinsp). NCCL loads it as it loads ncclinsp
 * (dlopen, a table lookup, init per communicator); init sets the activation mask to 0, so NCCL
 * sends no event, and every callback does nothing.
 *
 * The tables follow NCCL's profiler ABI v4 to v7 (include/ncclinsp/abi/nccl_profiler.hpp): a name,
 * then five function pointers. Only init's signature differs between versions (v4 has no commId
 * and takes the hash after the name); the descriptor and state arguments are never read here.
 *
 *   cc -shared -fPIC -O2 -o libnccl-profiler-noop.so noop_profiler.c
 */
#include <stddef.h>
#include <stdint.h>

typedef int result_t; /* ncclResult_t: 0 = ncclSuccess */
typedef void (*logger_t)(int level, unsigned long flags, const char* file, int line, const char* fmt, ...);

typedef struct {
  const char* name;
  result_t (*init)(void** context, uint64_t comm_id, int* mask, const char* comm_name, int n_nodes, int nranks,
                   int rank, logger_t logfn);
  result_t (*startEvent)(void* context, void** handle, void* descr);
  result_t (*stopEvent)(void* handle);
  result_t (*recordEventState)(void* handle, int state, void* args);
  result_t (*finalize)(void* context);
} profiler_v5plus;

typedef struct {
  const char* name;
  result_t (*init)(void** context, int* mask, const char* comm_name, uint64_t comm_hash, int n_nodes, int nranks,
                   int rank, logger_t logfn);
  result_t (*startEvent)(void* context, void** handle, void* descr);
  result_t (*stopEvent)(void* handle);
  result_t (*recordEventState)(void* handle, int state, void* args);
  result_t (*finalize)(void* context);
} profiler_v4;

static result_t init_common(void** context, int* mask) {
  if (context) *context = NULL;
  if (mask) *mask = 0;
  return 0;
}
static result_t init_v5plus(void** context, uint64_t comm_id, int* mask, const char* comm_name, int n_nodes, int nranks,
                            int rank, logger_t logfn) {
  (void)comm_id, (void)comm_name, (void)n_nodes, (void)nranks, (void)rank, (void)logfn;
  return init_common(context, mask);
}
static result_t init_v4(void** context, int* mask, const char* comm_name, uint64_t comm_hash, int n_nodes, int nranks,
                        int rank, logger_t logfn) {
  (void)comm_name, (void)comm_hash, (void)n_nodes, (void)nranks, (void)rank, (void)logfn;
  return init_common(context, mask);
}
static result_t start_event(void* context, void** handle, void* descr) {
  (void)context, (void)descr;
  if (handle) *handle = NULL;
  return 0;
}
static result_t stop_event(void* handle) {
  (void)handle;
  return 0;
}
static result_t record_event_state(void* handle, int state, void* args) {
  (void)handle, (void)state, (void)args;
  return 0;
}
static result_t finalize(void* context) {
  (void)context;
  return 0;
}

#define EXPORT __attribute__((visibility("default")))
EXPORT const profiler_v5plus ncclProfiler_v7 = {"noop",     init_v5plus,        start_event,
                                                stop_event, record_event_state, finalize};
EXPORT const profiler_v5plus ncclProfiler_v6 = {"noop",     init_v5plus,        start_event,
                                                stop_event, record_event_state, finalize};
EXPORT const profiler_v5plus ncclProfiler_v5 = {"noop",     init_v5plus,        start_event,
                                                stop_event, record_event_state, finalize};
EXPORT const profiler_v4 ncclProfiler_v4 = {"noop", init_v4, start_event, stop_event, record_event_state, finalize};
