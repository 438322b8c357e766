// AddressSanitizer's defaults in every test binary (linked once per binary with catch_main.cpp; an
// ASAN_OPTIONS setting still wins; runtimes other than ASan's never read it).
//
// intercept_tls_get_addr=0: the runtime's record of dynamic TLS (g++ 12's and clang 14's) takes a
// block whose address is 16 mod 4096 for one of glibc < 2.25, which put a {size, start} header
// before it, and reads the 16 bytes there as that header: since glibc 2.25 the block is malloc'd
// and those bytes are ASan's chunk header. The plugin's thread_local block (TLS of a dlopen'd
// library) lands on such an address in some scenarios, depending on the heap's layout, and
// LeakSanitizer then scans a garbage range and dies ("Tracer caught signal 11") before checking
// anything. Without the record LeakSanitizer still reaches what dynamic TLS points to: glibc's
// blocks are heap chunks held by the thread's DTV, which the thread's static TLS holds.
//
// Strong, not weak: clang links its ASan runtime, and the runtime's weak default, ahead of our
// objects.
extern "C" const char* __asan_default_options();
extern "C" const char* __asan_default_options() { return "intercept_tls_get_addr=0"; }
