#pragma once
/// Binding of ncclinsp-sim's rank threads to the simulated CUDA driver (libncclinsp-simcuda.so): the
/// loaded `ncclinsp_simcuda_set_device` and the deterministic GPU UUID of (node, gpu, seed).
/// Thread-safety: set `set_device` and `uuid_salt` before starting rank threads; then read-only.

#include "job_hash.hpp"

#include <cstdint>
#include <cstring>

namespace ncclinsp::sim::app {

using u64 = std::uint64_t;
using namespace ncclinsp::sim::job;

// ---- simulated CUDA driver ------------------------------------------------------------------
using set_device_fn = void (*)(int, const unsigned char*);
inline set_device_fn g_set_device = nullptr;

/// Deterministic in (node, gpu) and, for --seed other than 1, the seed: two simulated jobs with different
/// seeds sharing one output folder get different GPUs (the plugin names its .prom file after the UUID).
inline u64 g_uuid_salt = 0;
inline void gpu_uuid(int node, int gpu, unsigned char out[16]) {
  const u64 a = mix(0x6e63636c696e7370ull, u64(node) * 4096 + u64(gpu)) ^ g_uuid_salt;
  const u64 b = splitmix(a);
  std::memcpy(out, &a, 8);
  std::memcpy(out + 8, &b, 8);
  out[6] = static_cast<unsigned char>((out[6] & 0x0F) | 0x40);  // looks like a v4 UUID
  out[8] = static_cast<unsigned char>((out[8] & 0x3F) | 0x80);
}
inline void bind_device(int node, int gpu) {
  if (!g_set_device) return;
  unsigned char uuid[16];
  gpu_uuid(node, gpu, uuid);
  g_set_device(gpu, uuid);
}

}  // namespace ncclinsp::sim::app
