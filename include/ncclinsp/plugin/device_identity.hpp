#pragma once
/// Which GPU a communicator runs on, asked of the CUDA driver loaded at run time (dlopen), so the
/// plugin has no link dependency on CUDA. Called on NCCL's init thread, where NCCL made the
/// device's context current. Order: cuCtxGetDevice; else the application's cudaGetDevice (if the
/// CUDA runtime is loaded). UUID as nvidia-smi/dcgm-exporter print it ("GPU-8-4-4-4-12" hex).
/// Fallback without a driver or a current device: ordinal -1 and uuid "host-<node>-pid<pid>"
/// (one file for the whole process). `driver_path` overrides "libcuda.so.1" (NCCLINSP_CUDA_DRIVER,
/// used by the simulator's simulated driver). Thread-safety: reentrant (cold path).

#include <dlfcn.h>
#include <unistd.h>

#include <cstdio>
#include <mutex>
#include <string>

namespace ncclinsp::plugin {

struct device_identity {
  int ordinal = -1;
  std::string uuid;
};

inline device_identity identify_device(const std::string& driver_path, const std::string& node) {
  using cu_init_t = int (*)(unsigned);
  using cu_ctx_get_device_t = int (*)(int*);
  using cu_device_get_t = int (*)(int*, int);
  using cu_uuid_t = int (*)(unsigned char*, int);
  using cuda_get_device_t = int (*)(int*);
  struct driver {
    cu_ctx_get_device_t ctx_get_device = nullptr;
    cu_device_get_t device_get = nullptr;
    cu_uuid_t get_uuid = nullptr;
  };
  static std::once_flag once;
  static driver drv;
  std::call_once(once, [&] {
    void* lib = ::dlopen(driver_path.empty() ? "libcuda.so.1" : driver_path.c_str(), RTLD_NOW | RTLD_LOCAL);
    if (!lib) return;
    auto init = reinterpret_cast<cu_init_t>(::dlsym(lib, "cuInit"));
    if (!init || init(0) != 0) return;
    drv.ctx_get_device = reinterpret_cast<cu_ctx_get_device_t>(::dlsym(lib, "cuCtxGetDevice"));
    drv.device_get = reinterpret_cast<cu_device_get_t>(::dlsym(lib, "cuDeviceGet"));
    drv.get_uuid = reinterpret_cast<cu_uuid_t>(::dlsym(lib, "cuDeviceGetUuid_v2"));
    if (!drv.get_uuid) drv.get_uuid = reinterpret_cast<cu_uuid_t>(::dlsym(lib, "cuDeviceGetUuid"));
  });
  device_identity id;
  int dev = -1;
  if (drv.ctx_get_device && drv.ctx_get_device(&dev) != 0) dev = -1;
  if (dev < 0) {
    if (auto rt = reinterpret_cast<cuda_get_device_t>(::dlsym(RTLD_DEFAULT, "cudaGetDevice")); rt && drv.device_get) {
      int ordinal = -1;
      if (rt(&ordinal) == 0 && drv.device_get(&dev, ordinal) != 0) dev = -1;
    }
  }
  unsigned char u[16];
  if (dev >= 0 && drv.get_uuid && drv.get_uuid(u, dev) == 0) {
    char buf[48];
    std::snprintf(buf, sizeof buf, "GPU-%02x%02x%02x%02x-%02x%02x-%02x%02x-%02x%02x-%02x%02x%02x%02x%02x%02x", u[0],
                  u[1], u[2], u[3], u[4], u[5], u[6], u[7], u[8], u[9], u[10], u[11], u[12], u[13], u[14], u[15]);
    id.ordinal = dev;
    id.uuid = buf;
    return id;
  }
  id.uuid = "host-" + node + "-pid" + std::to_string(::getpid());
  return id;
}

}  // namespace ncclinsp::plugin
