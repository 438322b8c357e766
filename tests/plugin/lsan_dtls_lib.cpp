// A library with dynamic TLS, dlopen'ed by test_lsan_dtls: its thread_local block (40 bytes, as the
// plugin's) is malloc'd by glibc at each thread's first access.
namespace {
thread_local void* slots[5];
}
extern "C" __attribute__((visibility("default"))) void** ncclinsp_dtls_slot() { return &slots[0]; }
