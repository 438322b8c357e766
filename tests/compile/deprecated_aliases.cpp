// The names of earlier versions still compile, and each use warns with the name to use instead
// (ctest `deprecated_aliases`: compiled with -fsyntax-only, its output must name every replacement).
#include <ncclinsp/ncclinsp.hpp>
#include <ncclinsp/options.hpp>

#include <type_traits>

static_assert(std::is_same_v<ncclinsp::options, ncclinsp::env_options>);
static_assert(ncclinsp::invalid_comm == ncclinsp::no_index);
static_assert(ncclinsp::inspector::no_slot == ncclinsp::no_index);

int main() { return ncclinsp::options{}.enable ? 1 : 0; }
