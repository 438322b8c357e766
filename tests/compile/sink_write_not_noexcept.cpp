// Must NOT compile: a sink whose write() is not noexcept. ctest `sink_noexcept_diagnostic` checks
// that the compiler says why, in any_sink's static_assert message.
#include <ncclinsp/inspector.hpp>

struct throwing_sink {
  ncclinsp::export_result write(const ncclinsp::snapshot&) { return ncclinsp::export_result::success; }
};

int main() {
  auto sinks = ncclinsp::make_sinks(throwing_sink{});
  return static_cast<int>(sinks.size());
}
