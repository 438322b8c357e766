// The glibc floor of the plugin .so: it loads on glibc 2.28 and newer (Ubuntu 20.04, RHEL 8) even
// when built on a newer glibc. plugin/CMakeLists.txt links libstdc++ and libgcc statically and
// hidden; what those archives and our code call in glibc is bound here to the oldest version that
// exists, or replaced where glibc 2.28 has no such symbol. ctest plugin_symbol_versions reads the
// .so's dynamic symbol versions and fails on anything newer than GLIBC_2.28.
//
// Every definition here is hidden (the version script plugin/exports.map exports only the
// ncclProfiler tables), so it binds the plugin's own calls and never the host process's.
// Cold path throughout: thread creation, thread-specific keys, dlopen, stat, exception unwinding.
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <link.h>
#include <pthread.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include <cstddef>
#include <cstdint>

#ifndef __attr_access_none  // glibc before 2.34 (the declaration matches pthread_setspecific's)
#define __attr_access_none(argno)
#endif

// The version each old binding names: the first version of the architecture's glibc.
#if defined(__x86_64__)
#define NCCLINSP_GLIBC_BASE "GLIBC_2.2.5"
#define NCCLINSP_STAT_VER 1  // _STAT_VER_LINUX of x86_64
#elif defined(__aarch64__)
#define NCCLINSP_GLIBC_BASE "GLIBC_2.17"
#define NCCLINSP_STAT_VER 0  // _STAT_VER_KERNEL of the generic (asm-generic) stat layout
#else
#error \
    "plugin/glibc_compat.cpp knows the glibc base version of x86_64 and aarch64 only; configure with -DNCCLINSP_PLUGIN_PORTABLE=OFF"
#endif

// old_<name> is a reference to <name>@<base version>: the symbol as glibc 2.28 and every later
// glibc define it (2.34 moved libpthread and libdl into libc and gave these a new default version,
// keeping the old one).
#define NCCLINSP_OLD(name) __asm__(".symver old_" #name "," #name "@" NCCLINSP_GLIBC_BASE)

extern "C" {
int old_pthread_create(pthread_t*, const pthread_attr_t*, void* (*)(void*), void*) noexcept;
int old_pthread_detach(pthread_t) noexcept;
int old_pthread_join(pthread_t, void**);
int old_pthread_once(pthread_once_t*, void (*)());
int old_pthread_key_create(pthread_key_t*, void (*)(void*)) noexcept;
int old___pthread_key_create(pthread_key_t*, void (*)(void*)) noexcept;
int old_pthread_key_delete(pthread_key_t) noexcept;
void* old_pthread_getspecific(pthread_key_t) noexcept;
int old_pthread_setspecific(pthread_key_t, const void*) noexcept __attr_access_none(2);
void* old_dlopen(const char*, int) noexcept;
void* old_dlsym(void*, const char*) noexcept;
void* old_dlvsym(void*, const char*, const char*) noexcept;
int old_dladdr(const void*, Dl_info*) noexcept;
double old_exp(double) noexcept;
double old_log(double) noexcept;
// Before 2.33, stat/fstat/lstat were header wrappers around these (still exported by glibc).
int old___xstat(int, const char*, struct stat*) noexcept;
int old___fxstat(int, int, struct stat*) noexcept;
int old___lxstat(int, const char*, struct stat*) noexcept;
}
NCCLINSP_OLD(pthread_create);
NCCLINSP_OLD(pthread_detach);
NCCLINSP_OLD(pthread_join);
NCCLINSP_OLD(pthread_once);
NCCLINSP_OLD(pthread_key_create);
NCCLINSP_OLD(__pthread_key_create);
NCCLINSP_OLD(pthread_key_delete);
NCCLINSP_OLD(pthread_getspecific);
NCCLINSP_OLD(pthread_setspecific);
NCCLINSP_OLD(dlopen);
NCCLINSP_OLD(dlsym);
NCCLINSP_OLD(dlvsym);
NCCLINSP_OLD(dladdr);
NCCLINSP_OLD(exp);
NCCLINSP_OLD(log);
NCCLINSP_OLD(__xstat);
NCCLINSP_OLD(__fxstat);
NCCLINSP_OLD(__lxstat);

// Hidden whatever the build's visibility flags; exp and log, which the compiler declares itself,
// stay visible here and are hidden by the library's version script (plugin/exports.map).
#pragma GCC visibility push(hidden)

namespace ncclinsp::glibc_compat {
// pthread_cond_clockwait before glibc 2.30: the wait becomes a realtime one whose deadline is
// recomputed from the monotonic clock after each return, so a wall clock stepped forward ends it
// early (a spurious wake-up the caller's predicate loop absorbs) and one stepped back delays it by
// the step at most. The kernel's clocks are read directly: the realtime deadline must be the one
// the futex compares. ctest test_glibc_compat calls it on every glibc.
int clockwait_by_timedwait(pthread_cond_t* cv, pthread_mutex_t* m, clockid_t clock, const struct timespec* abstime) {
  if (clock == CLOCK_REALTIME) return pthread_cond_timedwait(cv, m, abstime);
  if (clock != CLOCK_MONOTONIC) return EINVAL;
  struct timespec mono {
  }, real_now{};
  syscall(SYS_clock_gettime, CLOCK_MONOTONIC, &mono);
  syscall(SYS_clock_gettime, CLOCK_REALTIME, &real_now);
  const std::int64_t left_ns = (abstime->tv_sec - mono.tv_sec) * 1'000'000'000LL + (abstime->tv_nsec - mono.tv_nsec);
  if (left_ns <= 0) return ETIMEDOUT;
  const std::int64_t deadline_ns = real_now.tv_sec * 1'000'000'000LL + real_now.tv_nsec + left_ns;
  const struct timespec deadline {
    static_cast<time_t>(deadline_ns / 1'000'000'000LL), static_cast<long>(deadline_ns % 1'000'000'000LL)
  };
  const int rc = pthread_cond_timedwait(cv, m, &deadline);
  if (rc != ETIMEDOUT) return rc;
  syscall(SYS_clock_gettime, CLOCK_MONOTONIC, &mono);
  const bool passed =
      mono.tv_sec > abstime->tv_sec || (mono.tv_sec == abstime->tv_sec && mono.tv_nsec >= abstime->tv_nsec);
  return passed ? ETIMEDOUT : 0;  // early: the caller re-reads its clock and waits again
}
}  // namespace ncclinsp::glibc_compat

extern "C" {
// Not declared by glibc's headers; the 2.34 versions are what libstdc++.a and libgcc_eh.a call.
int __pthread_key_create(pthread_key_t*, void (*)(void*)) noexcept;
double exp(double) noexcept;
double log(double) noexcept;

int pthread_create(pthread_t* t, const pthread_attr_t* a, void* (*fn)(void*), void* arg) noexcept {
  return old_pthread_create(t, a, fn, arg);
}
int pthread_detach(pthread_t t) noexcept { return old_pthread_detach(t); }
int pthread_join(pthread_t t, void** ret) { return old_pthread_join(t, ret); }
int pthread_once(pthread_once_t* once, void (*fn)()) { return old_pthread_once(once, fn); }
int pthread_key_create(pthread_key_t* k, void (*dtor)(void*)) noexcept { return old_pthread_key_create(k, dtor); }
int __pthread_key_create(pthread_key_t* k, void (*dtor)(void*)) noexcept { return old___pthread_key_create(k, dtor); }
int pthread_key_delete(pthread_key_t k) noexcept { return old_pthread_key_delete(k); }
void* pthread_getspecific(pthread_key_t k) noexcept { return old_pthread_getspecific(k); }
int pthread_setspecific(pthread_key_t k, const void* v) noexcept { return old_pthread_setspecific(k, v); }
void* dlopen(const char* file, int mode) noexcept { return old_dlopen(file, mode); }
void* dlsym(void* handle, const char* name) noexcept { return old_dlsym(handle, name); }
void* dlvsym(void* handle, const char* name, const char* version) noexcept { return old_dlvsym(handle, name, version); }
int dladdr(const void* addr, Dl_info* info) noexcept { return old_dladdr(addr, info); }
double exp(double x) noexcept { return old_exp(x); }
double log(double x) noexcept { return old_log(x); }
#if __GLIBC_PREREQ(2, 33)  // before, <sys/stat.h> itself turns these calls into the __xstat ones
int stat(const char* path, struct stat* st) noexcept { return old___xstat(NCCLINSP_STAT_VER, path, st); }
int fstat(int fd, struct stat* st) noexcept { return old___fxstat(NCCLINSP_STAT_VER, fd, st); }
int lstat(const char* path, struct stat* st) noexcept { return old___lxstat(NCCLINSP_STAT_VER, path, st); }
#endif

// glibc 2.32's flag is read by libstdc++ to skip atomic reference counts in a process that has one
// thread. The plugin always runs beside NCCL's threads: "not single-threaded" is always true, and
// always safe.
char __libc_single_threaded = 0;

// std::condition_variable's steady-clock waits (the exporter's bounded stop): glibc's own
// pthread_cond_clockwait where it has one (2.30 and newer), else ncclinsp::glibc_compat's.
int pthread_cond_clockwait(pthread_cond_t* cv, pthread_mutex_t* m, clockid_t clock, const struct timespec* abstime) {
  using clockwait_fn = int (*)(pthread_cond_t*, pthread_mutex_t*, clockid_t, const struct timespec*);
  static const auto real =
      reinterpret_cast<clockwait_fn>(old_dlvsym(RTLD_DEFAULT, "pthread_cond_clockwait", "GLIBC_2.30"));
  return real ? real(cv, m, clock, abstime) : ncclinsp::glibc_compat::clockwait_by_timedwait(cv, m, clock, abstime);
}

// std::random_device's "arc4random" source (glibc 2.36), linked in with libstdc++.a but not used
// by the plugin: the kernel's random bytes.
std::uint32_t arc4random() noexcept {
  std::uint32_t v = 0;
  for (;;) {
    const ssize_t n = getrandom(&v, sizeof v, 0);
    if (n == static_cast<ssize_t>(sizeof v)) return v;
    if (n < 0 && errno != EINTR) break;
  }
  if (const int fd = ::open("/dev/urandom", O_RDONLY | O_CLOEXEC); fd >= 0) {
    const ssize_t n = ::read(fd, &v, sizeof v);
    ::close(fd);
    if (n == static_cast<ssize_t>(sizeof v)) return v;
  }
  struct timespec t {};
  syscall(SYS_clock_gettime, CLOCK_MONOTONIC, &t);
  return static_cast<std::uint32_t>(t.tv_nsec) ^ static_cast<std::uint32_t>(reinterpret_cast<std::uintptr_t>(&v));
}

#if __GLIBC_PREREQ(2, 35)  // a libgcc built against an older glibc walks dl_iterate_phdr itself
// libgcc's unwinder (glibc 2.35) asks which loaded object holds a code address and where its
// PT_GNU_EH_FRAME is; before 2.35 it walked dl_iterate_phdr, as this does. Exceptions only.
int _dl_find_object(void* pc, struct dl_find_object* out) noexcept {
  struct search {
    std::uintptr_t pc;
    struct dl_find_object* out;
    bool found;
  } s{reinterpret_cast<std::uintptr_t>(pc), out, false};
  dl_iterate_phdr(
      [](struct dl_phdr_info* info, std::size_t, void* data) -> int {
        auto& s = *static_cast<search*>(data);
        std::uintptr_t lo = UINTPTR_MAX, hi = 0, eh = 0;
        bool holds = false;
        for (ElfW(Half) i = 0; i < info->dlpi_phnum; ++i) {
          const ElfW(Phdr)& ph = info->dlpi_phdr[i];
          const std::uintptr_t start = info->dlpi_addr + ph.p_vaddr;
          if (ph.p_type == PT_GNU_EH_FRAME) eh = start;
          if (ph.p_type != PT_LOAD) continue;
          if (start < lo) lo = start;
          if (start + ph.p_memsz > hi) hi = start + ph.p_memsz;
          if (s.pc >= start && s.pc < start + ph.p_memsz) holds = true;
        }
        if (!holds) return 0;
        *s.out = {};
        s.out->dlfo_map_start = reinterpret_cast<void*>(lo);
        s.out->dlfo_map_end = reinterpret_cast<void*>(hi);
        s.out->dlfo_eh_frame = reinterpret_cast<void*>(eh);
        s.found = true;
        return 1;
      },
      &s);
  return s.found ? 0 : -1;
}
#endif
}  // extern "C"
#pragma GCC visibility pop
