// The hot path's promise, measured: after warm-up, NCCL's event callbacks for Coll, P2p and
// KernelCh (startEvent/stopEvent/recordEventState) allocate nothing and take no lock, on the
// enqueuing thread and on the completing (proxy) thread. This executable replaces the global
// operator new (bench/alloc_counter.cpp, exported so the dlopen'ed plugin's allocations are
// counted) and interposes pthread_mutex_lock / pthread_rwlock_*lock the same way.
#include <catch2/catch.hpp>

#include <dlfcn.h>
#include <pthread.h>

#include <cstdint>
#include <thread>

#include "alloc_counter.hpp"
#include "nccl_driver.hpp"
#include "plugin_harness.hpp"

namespace sim = ncclinsp::sim;
using namespace ncclinsp_test;

namespace {
thread_local std::uint64_t t_locks = 0;
template <class Fn>
Fn next_symbol(const char* name) {
  return reinterpret_cast<Fn>(::dlsym(RTLD_NEXT, name));
}
}  // namespace

// Every lock the plugin takes goes through these (std::mutex, std::shared_mutex, condition waits).
extern "C" int pthread_mutex_lock(pthread_mutex_t* m) {
  static const auto real = next_symbol<int (*)(pthread_mutex_t*)>("pthread_mutex_lock");
  ++t_locks;
  return real(m);
}
extern "C" int pthread_rwlock_rdlock(pthread_rwlock_t* l) {
  static const auto real = next_symbol<int (*)(pthread_rwlock_t*)>("pthread_rwlock_rdlock");
  ++t_locks;
  return real(l);
}
extern "C" int pthread_rwlock_wrlock(pthread_rwlock_t* l) {
  static const auto real = next_symbol<int (*)(pthread_rwlock_t*)>("pthread_rwlock_wrlock");
  ++t_locks;
  return real(l);
}

TEST_CASE("hot path: no allocation and no lock per op after warm-up, on the enqueuing and the completing thread",
          "[plugin][hotpath]") {
  const std::string dir = fresh_dir("hot");
  const std::map<std::string, std::string> env = {{"NCCL_INSPECTOR_ENABLE", "1"},
                                                  {"NCCL_INSPECTOR_PROM_DUMP", "1"},
                                                  {"NCCL_INSPECTOR_DUMP_DIR", dir},
                                                  {"NCCL_INSPECTOR_DUMP_THREAD_INTERVAL_MICROSECONDS", "100000"},
                                                  {"NCCLINSP_CUDA_DRIVER", NCCLINSP_SIMCUDA_LIB},
                                                  {"NCCLINSP_PROM_KEEP_FILES", "1"}};  // read after teardown
  REQUIRE(
      in_child(env, [] {
        sim::plugin_library lib(NCCLINSP_PLUGIN_SO, ncclinsp::abi::newest);
        set_device(0);
        sim::comm_driver c(lib, {.comm_hash = 5, .name = "hot", .n_ranks = 4});
        if (c.init_result() != ncclinsp::abi::success) return 1;
        // The sanity check of the counters themselves: a lock and an allocation are seen.
        {
          const std::uint64_t a0 = ncclinsp::bench::thread_allocs(), l0 = t_locks;
          pthread_mutex_t m = PTHREAD_MUTEX_INITIALIZER;
          pthread_mutex_lock(&m);
          pthread_mutex_unlock(&m);
          delete new int(1);
          if (ncclinsp::bench::thread_allocs() - a0 != 1 || t_locks - l0 != 1) return 2;
        }
        // Counted only inside the plugin calls (the driver's own bookkeeping and the test's
        // thread handling are outside the measured spans).
        const auto ops = [&](int n, std::uint64_t& enq_allocs, std::uint64_t& enq_locks, std::uint64_t& done_allocs,
                             std::uint64_t& done_locks) {
          std::vector<sim::pending_op> pending;
          pending.reserve(400);
          for (int i = 0; i < n; ++i) {
            const std::uint64_t a0 = ncclinsp::bench::thread_allocs(), l0 = t_locks;
            const auto ar = c.enqueue(sim::op_desc{.func = sim::nccl_func::all_reduce,
                                                   .dtype = sim::nccl_dtype::float32,
                                                   .count = 1 << 20,
                                                   .n_channels = 4});
            const auto send = c.enqueue(sim::op_desc{.kind = sim::op_kind::p2p,
                                                     .func = sim::nccl_func::send,
                                                     .dtype = sim::nccl_dtype::int8,
                                                     .count = 1 << 20,
                                                     .peer = 1,
                                                     .n_channels = 2});
            enq_allocs += ncclinsp::bench::thread_allocs() - a0;
            enq_locks += t_locks - l0;
            pending.push_back(ar);
            pending.push_back(send);
            if (pending.size() >= 200 || i == n - 1) {  // pools hold 256 + 256: complete in batches
              std::thread proxy([&] {                   // NCCL's proxy thread completes the kernels
                for (const auto& p : pending) {
                  const std::uint64_t b0 = ncclinsp::bench::thread_allocs(), m0 = t_locks;
                  c.complete(p, t0, t0 + 100'000);
                  done_allocs += ncclinsp::bench::thread_allocs() - b0;
                  done_locks += t_locks - m0;
                }
              });
              proxy.join();
              pending.clear();
            }
          }
        };
        std::uint64_t ea = 0, el = 0, da = 0, dl = 0;
        ops(300, ea, el, da, dl);  // warm-up: per-thread shards and metric cells are made here
        ea = el = da = dl = 0;
        ops(2000, ea, el, da, dl);
        std::fprintf(
            stderr,
            "after warm-up, 4000 ops: enqueuing thread %llu allocations %llu locks, completing threads %llu allocations %llu locks\n",
            static_cast<unsigned long long>(ea), static_cast<unsigned long long>(el),
            static_cast<unsigned long long>(da), static_cast<unsigned long long>(dl));
        return ea == 0 && el == 0 && da == 0 && dl == 0 ? 0 : 3;
      }) == 0);
  const std::string text = slurp(files_in(dir, ".prom").at(0));
  CHECK(sample(text, "ncclinsp_ops_total", {"comm_name=\"hot\"", "collective=\"AllReduce\""}) == 2300);
}
