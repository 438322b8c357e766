// Runs on a machine with GPUs: one process, every visible GPU (ncclCommInitAll), an AllReduce
// loop plus a ring Send/Recv exchange through the timed wrappers, then the .prom files.
//
//   nccl_wrappers_example [dir] [iterations]      (default ./ncclinsp-example, 50)
// With NCCL_INSPECTOR_ENABLE=1 in the environment the plugin's variables configure it instead.
//   nccl_wrappers_example --sweep [min] [max] [ms]  plain NCCL busbw sweep for scripts/gpu_check.sh (sweep.hpp)
//   nccl_wrappers_example --cases [--multi-rank N]  eager, grouped and CUDA-graph cases for scripts/gpu_check.sh (cases.hpp);
//                                                   N ranks on GPU 0 (NCCL >= 2.30, NCCL_MULTI_RANK_GPU_ENABLE=1)
//   nccl_wrappers_example --version                 `nccl <headers' NCCL_VERSION_CODE>`, `runtime_nccl <ncclGetVersion>`
#include <cuda_runtime_api.h>
#include <nccl.h>

#include <cstdio>
#include <cstdlib>
#include <memory>
#include <string>
#include <vector>

#include "cases.hpp"
#include "nccl_timed.hpp"
#include "sweep.hpp"

#define CHECK_CUDA(x)                                                                         \
  do {                                                                                        \
    cudaError_t e_ = (x);                                                                     \
    if (e_ != cudaSuccess) {                                                                  \
      std::fprintf(stderr, "%s:%d %s: %s\n", __FILE__, __LINE__, #x, cudaGetErrorString(e_)); \
      std::exit(1);                                                                           \
    }                                                                                         \
  } while (0)
#define CHECK_NCCL(x)                                                                         \
  do {                                                                                        \
    ncclResult_t r_ = (x);                                                                    \
    if (r_ != ncclSuccess) {                                                                  \
      std::fprintf(stderr, "%s:%d %s: %s\n", __FILE__, __LINE__, #x, ncclGetErrorString(r_)); \
      std::exit(1);                                                                           \
    }                                                                                         \
  } while (0)

static std::string uuid_string(const cudaUUID_t& u) {
  const auto* b = reinterpret_cast<const unsigned char*>(u.bytes);
  char s[48];
  std::snprintf(s, sizeof s, "GPU-%02x%02x%02x%02x-%02x%02x-%02x%02x-%02x%02x-%02x%02x%02x%02x%02x%02x", b[0], b[1],
                b[2], b[3], b[4], b[5], b[6], b[7], b[8], b[9], b[10], b[11], b[12], b[13], b[14], b[15]);
  return s;
}

int main(int argc, char** argv) {
  if (argc > 1 && std::string(argv[1]) == "--sweep") return sweep::run(argc, argv);
  if (argc > 1 && std::string(argv[1]) == "--cases")
    return cases::run_all(argc > 3 && std::string(argv[2]) == "--multi-rank" ? std::atoi(argv[3]) : 0);
  if (argc > 1 && std::string(argv[1]) == "--version") {
    int runtime = 0;
    CHECK_NCCL(ncclGetVersion(&runtime));
    std::printf("nccl\t%d\nruntime_nccl\t%d\n", NCCL_VERSION_CODE, runtime);
    return 0;
  }
  const std::string dir = argc > 1 ? argv[1] : "ncclinsp-example";
  const int iters = argc > 2 ? std::atoi(argv[2]) : 50;
  int ndev = 0;
  CHECK_CUDA(cudaGetDeviceCount(&ndev));
  if (ndev < 1) {
    std::fprintf(stderr, "no GPU\n");
    return 1;
  }
  std::printf("%d GPU(s), NCCL %d\n", ndev, NCCL_VERSION_CODE);

  ncclinsp::inspector_options o =
      std::getenv("NCCL_INSPECTOR_ENABLE") ? ncclinsp::inspector_options::from_env() : ncclinsp::inspector_options{};
  if (!std::getenv("NCCL_INSPECTOR_ENABLE")) {
    o.sinks = ncclinsp::make_sinks(ncclinsp::prom_textfile_sink({.dir = dir}));
    o.interval = std::chrono::seconds(1);
  }
  auto insp = std::make_unique<ncclinsp::inspector>(std::move(o));

  std::vector<ncclComm_t> comms(static_cast<std::size_t>(ndev));
  CHECK_NCCL(ncclCommInitAll(comms.data(), ndev, nullptr));
  std::vector<std::unique_ptr<nccl_timed::timer>> timers;
  std::vector<nccl_timed::comm> tcomms(static_cast<std::size_t>(ndev));
  std::vector<cudaStream_t> streams(static_cast<std::size_t>(ndev));
  std::vector<float*> buf(static_cast<std::size_t>(ndev)), peer_buf(static_cast<std::size_t>(ndev));
  const std::size_t n = 16u << 20;  // 64 MiB of float
  for (int d = 0; d < ndev; ++d) {
    const auto i = static_cast<std::size_t>(d);
    CHECK_CUDA(cudaSetDevice(d));
    cudaDeviceProp prop{};
    CHECK_CUDA(cudaGetDeviceProperties(&prop, d));
    CHECK_CUDA(cudaStreamCreateWithFlags(&streams[i], cudaStreamNonBlocking));
    CHECK_CUDA(cudaMalloc(&buf[i], n * sizeof(float)));
    CHECK_CUDA(cudaMalloc(&peer_buf[i], n * sizeof(float)));
    timers.push_back(std::make_unique<nccl_timed::timer>(*insp));  // device d is current: its events live there
    tcomms[i] = {comms[i],
                 insp->add_comm({.name = "world",
                                 .hash = 0x6e63636c77726c64ull,
                                 .rank = d,
                                 .nranks = ndev,
                                 .nnodes = 1,
                                 .device = d,
                                 .uuid = uuid_string(prop.uuid)}),
                 timers.back().get(),
                 {}};
  }
  for (int it = 0; it < iters; ++it) {
    CHECK_NCCL(nccl_timed::GroupStart());
    for (int d = 0; d < ndev; ++d) {
      const auto i = static_cast<std::size_t>(d);
      CHECK_NCCL(nccl_timed::AllReduce(tcomms[i], buf[i], buf[i], n, ncclFloat32, ncclSum, streams[i]));
    }
    CHECK_NCCL(nccl_timed::GroupEnd());
    if (ndev > 1) {
      CHECK_NCCL(nccl_timed::GroupStart());
      for (int d = 0; d < ndev; ++d) {
        const auto i = static_cast<std::size_t>(d);
        CHECK_NCCL(nccl_timed::Send(tcomms[i], buf[i], n / 4, ncclFloat32, (d + 1) % ndev, streams[i]));
        CHECK_NCCL(nccl_timed::Recv(tcomms[i], peer_buf[i], n / 4, ncclFloat32, (d + ndev - 1) % ndev, streams[i]));
      }
      CHECK_NCCL(nccl_timed::GroupEnd());
    }
  }
  for (int d = 0; d < ndev; ++d) {
    CHECK_CUDA(cudaSetDevice(d));
    CHECK_CUDA(cudaStreamSynchronize(streams[static_cast<std::size_t>(d)]));
  }
  insp->flush();  // resolves every op (the GPU is done) and writes the files
  for (const auto& t : timers) {
    const auto s = t->stats();
    std::printf("timer: %llu timed, %llu captured, %llu pool exhausted, %llu CUDA errors, %llu pending\n",
                static_cast<unsigned long long>(s.timed), static_cast<unsigned long long>(s.captured),
                static_cast<unsigned long long>(s.pool_exhausted), static_cast<unsigned long long>(s.cuda_errors),
                static_cast<unsigned long long>(s.pending));
  }
  timers.clear();  // before the inspector: unregister the resolvers
  for (std::size_t i = 0; i < comms.size(); ++i) {
    insp->remove_comm(tcomms[i].handle);
    ncclCommDestroy(comms[i]);
    cudaFree(buf[i]);
    cudaFree(peer_buf[i]);
  }
  insp.reset();  // final export
  std::printf("metrics in %s/nccl_inspector_metrics_<uuid>.job-<job key>.prom\n", dir.c_str());
  return 0;
}
