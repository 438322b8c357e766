/// libncclinsp-simcuda.so — a simulated CUDA *driver* for machines without a GPU.
///
/// The plugin dlopens this library instead of libcuda.so.1 when NCCLINSP_CUDA_DRIVER=<path> is set, and
/// calls the four driver entry points below. The simulator (or a test) picks the calling thread's
/// current device with `ncclinsp_simcuda_set_device`, just as a real rank thread calls cudaSetDevice.
/// All functions return CUresult codes: 0 = CUDA_SUCCESS.
/// Thread-safety: the current device is thread-local; everything else is stateless.

#include <cstring>

namespace {
constexpr int cuda_success = 0;
constexpr int cuda_error_invalid_value = 1;
constexpr int cuda_error_invalid_device = 101;
constexpr int cuda_error_invalid_context = 201;

struct current_device {
  int ordinal = -1;
  unsigned char uuid[16] = {};
};
thread_local current_device tls_device;
}  // namespace

extern "C" {

__attribute__((visibility("default"))) int cuInit(unsigned flags) {
  return flags == 0 ? cuda_success : cuda_error_invalid_value;
}

__attribute__((visibility("default"))) int cuCtxGetDevice(int* dev) {
  if (!dev) return cuda_error_invalid_value;
  if (tls_device.ordinal < 0) return cuda_error_invalid_context;
  *dev = tls_device.ordinal;
  return cuda_success;
}

__attribute__((visibility("default"))) int cuDeviceGetUuid_v2(unsigned char uuid[16], int dev) {
  if (!uuid) return cuda_error_invalid_value;
  if (tls_device.ordinal < 0 || dev != tls_device.ordinal) return cuda_error_invalid_device;
  std::memcpy(uuid, tls_device.uuid, 16);
  return cuda_success;
}

__attribute__((visibility("default"))) int cuDeviceGetUuid(unsigned char uuid[16], int dev) {
  return cuDeviceGetUuid_v2(uuid, dev);
}

/// Set (ordinal >= 0) or clear (ordinal < 0) the calling thread's current device and its UUID.
__attribute__((visibility("default"))) void ncclinsp_simcuda_set_device(int ordinal, const unsigned char uuid[16]) {
  tls_device.ordinal = ordinal;
  if (uuid)
    std::memcpy(tls_device.uuid, uuid, 16);
  else
    std::memset(tls_device.uuid, 0, 16);
}

}  // extern "C"
