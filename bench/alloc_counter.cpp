// Counts heap allocations (see alloc_counter.hpp). Normally at the C allocator: malloc and its
// siblings are defined here (exported, so every library's calls land here, the dlopen'ed plugin's
// included: it links its own libstdc++ statically, so its operator new is not ours, but that
// operator new calls malloc). Under a sanitizer, which owns malloc, the global operator new/delete
// are replaced instead (the plugin is then linked against the shared libstdc++ and uses them).
// What glibc allocates for itself is not counted (its direct caller is libc or the dynamic loader):
// a dlopen'ed library's thread_local block and a thread's destructor list, made at a thread's first
// touch, belong to the thread, not to an op (and operator new never saw them either).
#include "alloc_counter.hpp"

#include <elf.h>
#include <link.h>
#include <sys/auxv.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <cerrno>
#include <cstddef>
#include <cstdlib>
#include <new>

#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
#define NCCLINSP_COUNT_OPERATOR_NEW 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer) || __has_feature(thread_sanitizer) || __has_feature(memory_sanitizer)
#define NCCLINSP_COUNT_OPERATOR_NEW 1
#endif
#endif

#ifndef NCCLINSP_COUNT_OPERATOR_NEW
// glibc's own entry points (exported by every glibc): the allocator these forward to.
extern "C" {
void* __libc_malloc(std::size_t);
void* __libc_calloc(std::size_t, std::size_t);
void* __libc_realloc(void*, std::size_t);
void* __libc_memalign(std::size_t, std::size_t);
}
#endif

namespace {
thread_local std::uint64_t t_allocs = 0;
std::atomic<std::uint64_t> g_allocs{0};
void count() noexcept {
  ++t_allocs;
  g_allocs.fetch_add(1, std::memory_order_relaxed);
}

#ifndef NCCLINSP_COUNT_OPERATOR_NEW
// The address ranges of glibc's own objects (libc.so.6 and the dynamic loader), read once before
// main (dl_iterate_phdr does not allocate); an allocation they make for themselves is not counted.
struct range {
  std::uintptr_t lo = 0, hi = 0;
};
range g_glibc[2];
__attribute__((constructor(101))) void find_glibc() {
  const auto libc_fn = reinterpret_cast<std::uintptr_t>(&__libc_malloc);
  const std::uintptr_t loader = getauxval(AT_BASE);
  dl_iterate_phdr(
      [](dl_phdr_info* info, std::size_t, void* data) -> int {
        const auto* want = static_cast<const std::uintptr_t*>(data);
        range r{UINTPTR_MAX, 0};
        for (int i = 0; i < info->dlpi_phnum; ++i) {
          const ElfW(Phdr)& ph = info->dlpi_phdr[i];
          if (ph.p_type != PT_LOAD) continue;
          r.lo = std::min<std::uintptr_t>(r.lo, info->dlpi_addr + ph.p_vaddr);
          r.hi = std::max<std::uintptr_t>(r.hi, info->dlpi_addr + ph.p_vaddr + ph.p_memsz);
        }
        for (int k = 0; k < 2; ++k) {
          if (want[k] >= r.lo && want[k] < r.hi) g_glibc[k] = r;
        }
        return 0;
      },
      const_cast<std::uintptr_t*>(std::array<std::uintptr_t, 2>{libc_fn, loader}.data()));
}
bool from_glibc(const void* caller) noexcept {
  const auto a = reinterpret_cast<std::uintptr_t>(caller);
  return (a >= g_glibc[0].lo && a < g_glibc[0].hi) || (a >= g_glibc[1].lo && a < g_glibc[1].hi);
}
#define NCCLINSP_COUNT_CALLER() \
  if (!from_glibc(__builtin_return_address(0))) count()
#endif
}  // namespace

namespace ncclinsp::bench {
std::uint64_t thread_allocs() noexcept { return t_allocs; }
std::uint64_t total_allocs() noexcept { return g_allocs.load(std::memory_order_relaxed); }
}  // namespace ncclinsp::bench

#ifndef NCCLINSP_COUNT_OPERATOR_NEW
extern "C" {

void* malloc(std::size_t n) noexcept {
  NCCLINSP_COUNT_CALLER();
  return __libc_malloc(n);
}
void* calloc(std::size_t n, std::size_t size) noexcept {
  NCCLINSP_COUNT_CALLER();
  return __libc_calloc(n, size);
}
void* realloc(void* p, std::size_t n) noexcept {
  NCCLINSP_COUNT_CALLER();
  return __libc_realloc(p, n);
}
void* aligned_alloc(std::size_t align, std::size_t n) noexcept {
  NCCLINSP_COUNT_CALLER();
  return __libc_memalign(align, n);
}
void* memalign(std::size_t align, std::size_t n) noexcept {
  NCCLINSP_COUNT_CALLER();
  return __libc_memalign(align, n);
}
int posix_memalign(void** out, std::size_t align, std::size_t n) noexcept {
  if (align % sizeof(void*) != 0 || (align & (align - 1)) != 0) return EINVAL;
  NCCLINSP_COUNT_CALLER();
  void* p = __libc_memalign(align, n);
  if (!p) return ENOMEM;
  *out = p;
  return 0;
}
}  // extern "C"
#else
namespace {
void* counted(std::size_t n) {
  count();
  if (void* p = std::malloc(n ? n : 1)) return p;
  throw std::bad_alloc();
}
void* counted_aligned(std::size_t n, std::align_val_t al) {
  count();
  const std::size_t a = static_cast<std::size_t>(al);
  if (void* p = std::aligned_alloc(a, (n + a - 1) / a * a)) return p;
  throw std::bad_alloc();
}
}  // namespace

void* operator new(std::size_t n) { return counted(n); }
void* operator new[](std::size_t n) { return counted(n); }
void* operator new(std::size_t n, const std::nothrow_t&) noexcept {
  try {
    return counted(n);
  } catch (...) {
    return nullptr;
  }
}
void* operator new[](std::size_t n, const std::nothrow_t&) noexcept {
  try {
    return counted(n);
  } catch (...) {
    return nullptr;
  }
}
void* operator new(std::size_t n, std::align_val_t a) { return counted_aligned(n, a); }
void* operator new[](std::size_t n, std::align_val_t a) { return counted_aligned(n, a); }
void* operator new(std::size_t n, std::align_val_t a, const std::nothrow_t&) noexcept {
  try {
    return counted_aligned(n, a);
  } catch (...) {
    return nullptr;
  }
}
void* operator new[](std::size_t n, std::align_val_t a, const std::nothrow_t&) noexcept {
  try {
    return counted_aligned(n, a);
  } catch (...) {
    return nullptr;
  }
}
void operator delete(void* p) noexcept { std::free(p); }
void operator delete[](void* p) noexcept { std::free(p); }
void operator delete(void* p, std::size_t) noexcept { std::free(p); }
void operator delete[](void* p, std::size_t) noexcept { std::free(p); }
void operator delete(void* p, std::align_val_t) noexcept { std::free(p); }
void operator delete[](void* p, std::align_val_t) noexcept { std::free(p); }
void operator delete(void* p, std::size_t, std::align_val_t) noexcept { std::free(p); }
void operator delete[](void* p, std::size_t, std::align_val_t) noexcept { std::free(p); }
void operator delete(void* p, const std::nothrow_t&) noexcept { std::free(p); }
void operator delete[](void* p, const std::nothrow_t&) noexcept { std::free(p); }
void operator delete(void* p, std::align_val_t, const std::nothrow_t&) noexcept { std::free(p); }
void operator delete[](void* p, std::align_val_t, const std::nothrow_t&) noexcept { std::free(p); }
#endif  // NCCLINSP_COUNT_OPERATOR_NEW
