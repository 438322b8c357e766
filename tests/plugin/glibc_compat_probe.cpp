// A shared library linked the way the plugin is (ncclinsp_portable_runtime: static, hidden
// libstdc++ and libgcc, plugin/glibc_compat.cpp), loaded by ctest test_glibc_compat: each probe
// exercises one group of the replaced or re-bound glibc calls through the C++ runtime that uses
// them, and says what went wrong. Exported: ncclinsp_probe_* only (glibc_compat_probe.map).
#include <dlfcn.h>
#include <fcntl.h>
#include <link.h>
#include <pthread.h>
#include <sys/stat.h>
#include <unistd.h>

#include <chrono>
#include <cmath>
#include <condition_variable>
#include <cstdio>
#include <cstring>
#include <mutex>
#include <random>
#include <stdexcept>
#include <string>
#include <thread>

namespace ncclinsp::glibc_compat {
int clockwait_by_timedwait(pthread_cond_t*, pthread_mutex_t*, clockid_t, const struct timespec*);
}
extern "C" char __libc_single_threaded;

#define PROBE extern "C" __attribute__((visibility("default"))) const char*

namespace {
std::string g_msg;
const char* fail(std::string m) {
  g_msg = std::move(m);
  return g_msg.c_str();
}
int g_thread_dtors = 0;
struct counts_dtor {
  ~counts_dtor() { ++g_thread_dtors; }
};
thread_local counts_dtor t_dtor;
}  // namespace

// libgcc's unwinder finds this library's frames through our _dl_find_object; where glibc has its
// own (2.35 and newer), both answer the same for a code address of ours.
PROBE ncclinsp_probe_exceptions() {
  try {
    throw std::runtime_error("probe");
  } catch (const std::exception& e) {
    if (std::strcmp(e.what(), "probe") != 0) return fail("caught the wrong exception");
  }
#if __GLIBC_PREREQ(2, 35)
  using find_fn = int (*)(void*, dl_find_object*);
  dl_find_object ours{};
  void* pc = reinterpret_cast<void*>(&ncclinsp_probe_exceptions);
  if (::_dl_find_object(pc, &ours) != 0 || !ours.dlfo_eh_frame) return fail("_dl_find_object: no object for our code");
  if (pc < ours.dlfo_map_start || pc >= ours.dlfo_map_end) return fail("_dl_find_object: the range misses our code");
  dl_find_object none{};
  if (::_dl_find_object(nullptr, &none) != -1) return fail("_dl_find_object: an object at address 0");
  if (auto real = reinterpret_cast<find_fn>(dlvsym(RTLD_DEFAULT, "_dl_find_object", "GLIBC_2.35"))) {
    dl_find_object theirs{};
    if (real(pc, &theirs) != 0) return fail("glibc's _dl_find_object does not know our code");
    if (theirs.dlfo_map_start != ours.dlfo_map_start || theirs.dlfo_map_end != ours.dlfo_map_end ||
        theirs.dlfo_eh_frame != ours.dlfo_eh_frame) {
      char b[256];
      std::snprintf(b, sizeof b, "_dl_find_object differs from glibc's: %p-%p eh %p vs %p-%p eh %p",
                    ours.dlfo_map_start, ours.dlfo_map_end, ours.dlfo_eh_frame, theirs.dlfo_map_start,
                    theirs.dlfo_map_end, theirs.dlfo_eh_frame);
      return fail(b);
    }
  }
#endif
  return nullptr;
}

// std::thread (pthread_create/join/detach), thread_local destructors, pthread keys, the
// single-threaded flag.
PROBE ncclinsp_probe_threads() {
  if (__libc_single_threaded != 0) return fail("__libc_single_threaded is not 0");
  int ran = 0;
  std::thread t([&] {
    (void)&t_dtor;
    ran = 1;
  });
  t.join();
  if (ran != 1 || g_thread_dtors != 1)
    return fail("std::thread: the thread or its thread_local destructor did not run");
  std::thread([] {}).detach();
  pthread_key_t k;
  int v = 7;
  if (pthread_key_create(&k, nullptr) != 0 || pthread_setspecific(k, &v) != 0 || pthread_getspecific(k) != &v ||
      pthread_key_delete(k) != 0) {
    return fail("pthread keys");
  }
  static std::once_flag once;
  int calls = 0;
  std::call_once(once, [&] { ++calls; });
  std::call_once(once, [&] { ++calls; });
  if (calls != 1) return fail("std::call_once");
  return nullptr;
}

// std::condition_variable's steady-clock waits, through pthread_cond_clockwait, and the fallback
// for glibc before 2.30 called directly: a timeout ends on time, a notification ends it early.
PROBE ncclinsp_probe_condition_variable() {
  using clk = std::chrono::steady_clock;
  std::mutex m;
  std::condition_variable cv;
  std::unique_lock lk(m);
  auto t0 = clk::now();
  if (cv.wait_for(lk, std::chrono::milliseconds(30), [] { return false; })) return fail("wait_for: predicate true");
  auto waited = clk::now() - t0;
  if (waited < std::chrono::milliseconds(30) || waited > std::chrono::seconds(5))
    return fail("wait_for: wrong duration");

  pthread_mutex_t pm = PTHREAD_MUTEX_INITIALIZER;
  pthread_cond_t pc = PTHREAD_COND_INITIALIZER;
  const auto deadline_in = [](std::chrono::milliseconds d) {
    timespec now{};
    clock_gettime(CLOCK_MONOTONIC, &now);
    const long long ns = now.tv_sec * 1'000'000'000LL + now.tv_nsec + d.count() * 1'000'000LL;
    return timespec{static_cast<time_t>(ns / 1'000'000'000LL), static_cast<long>(ns % 1'000'000'000LL)};
  };
  pthread_mutex_lock(&pm);
  t0 = clk::now();
  timespec dl = deadline_in(std::chrono::milliseconds(40));
  int rc;
  while ((rc = ncclinsp::glibc_compat::clockwait_by_timedwait(&pc, &pm, CLOCK_MONOTONIC, &dl)) == 0) {}
  waited = clk::now() - t0;
  if (rc != ETIMEDOUT || waited < std::chrono::milliseconds(40) || waited > std::chrono::seconds(5)) {
    pthread_mutex_unlock(&pm);
    return fail("clockwait fallback: the timeout did not end the wait on time");
  }
  bool flag = false;
  std::thread notifier([&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
    pthread_mutex_lock(&pm);
    flag = true;
    pthread_cond_signal(&pc);
    pthread_mutex_unlock(&pm);
  });
  t0 = clk::now();
  dl = deadline_in(std::chrono::seconds(10));
  while (!flag && (rc = ncclinsp::glibc_compat::clockwait_by_timedwait(&pc, &pm, CLOCK_MONOTONIC, &dl)) == 0) {}
  pthread_mutex_unlock(&pm);
  notifier.join();
  if (!flag || clk::now() - t0 > std::chrono::seconds(5))
    return fail("clockwait fallback: a notification did not end the wait");
  if (ncclinsp::glibc_compat::clockwait_by_timedwait(&pc, &pm, CLOCK_PROCESS_CPUTIME_ID, &dl) != EINVAL) {
    return fail("clockwait fallback: an unsupported clock is not EINVAL");
  }
  return nullptr;
}

// stat/fstat/lstat through the pre-2.33 entry points, dlopen/dlsym/dladdr, exp/log, the random device.
PROBE ncclinsp_probe_files_and_loader(const char* dir) {
  const std::string file = std::string(dir) + "/probe.txt", link = std::string(dir) + "/probe.link";
  const int fd = ::open(file.c_str(), O_CREAT | O_TRUNC | O_RDWR, 0600);
  if (fd < 0 || ::write(fd, "12345", 5) != 5) return fail("cannot write " + file);
  ::unlink(link.c_str());
  if (::symlink(file.c_str(), link.c_str()) != 0) return fail("cannot link " + link);
  struct stat s1 {
  }, s2{}, s3{};
  const bool ok = ::stat(link.c_str(), &s1) == 0 && ::fstat(fd, &s2) == 0 && ::lstat(link.c_str(), &s3) == 0;
  ::close(fd);
  if (!ok) return fail("stat/fstat/lstat failed");
  if (s1.st_size != 5 || s2.st_size != 5 || s1.st_ino != s2.st_ino || !S_ISREG(s1.st_mode) || !S_ISLNK(s3.st_mode) ||
      s3.st_ino == s1.st_ino) {
    return fail("stat/fstat/lstat: wrong results");
  }
  struct stat none {};
  if (::stat((file + ".absent").c_str(), &none) != -1 || errno != ENOENT)
    return fail("stat of a missing file is not ENOENT");
  void* libc = dlopen("libc.so.6", RTLD_NOW | RTLD_NOLOAD);
  if (!libc || !dlsym(libc, "getpid")) return fail("dlopen/dlsym of libc");
  Dl_info info{};
  if (!dladdr(reinterpret_cast<void*>(&ncclinsp_probe_files_and_loader), &info) || !info.dli_fname ||
      !std::strstr(info.dli_fname, "glibc_compat_probe")) {
    return fail("dladdr does not name this library");
  }
  volatile double one = 1.0;
  if (std::fabs(std::exp(one) - 2.718281828459045) > 1e-12 || std::fabs(std::log(std::exp(one)) - 1.0) > 1e-12) {
    return fail("exp/log");
  }
  std::random_device rd;
  unsigned x = 0;
  for (int i = 0; i < 4; ++i) x |= rd();
  if (x == 0) return fail("std::random_device gave four zeros");
  return nullptr;
}
