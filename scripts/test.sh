#!/usr/bin/env bash
# The test command (README, .ci/run): on a fresh Debian 12 machine, installs what the tests need,
# configures, builds and runs every test through ctest. Usage: bash scripts/test.sh [build-dir]
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD=${1:-build-ci}

PKGS=(cmake ninja-build g++ clang libclang-rt-14-dev catch2 libbenchmark-dev libcli11-dev libsimdjson-dev libfmt-dev util-linux
      clang-format prometheus prometheus-node-exporter prometheus-alertmanager victoria-metrics python3 python3-yaml chromium
      binutils lintian dpkg-dev fakeroot nodejs g++-aarch64-linux-gnu)
missing=()
for p in "${PKGS[@]}"; do dpkg -s "$p" >/dev/null 2>&1 || missing+=("$p"); done
command -v npm >/dev/null || missing+=(npm)  # Debian's nodejs ships npm apart (NodeSource's includes it)
if ((${#missing[@]})); then
  echo "== installing: ${missing[*]}"
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq
  apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi

JOBS=$(nproc)
ROOT=$PWD
stage_start=$SECONDS
stage() { echo "== $1 (+$((SECONDS - stage_start)) s)"; }

# Every configuration: warnings are errors, and a tool the tests check with (promtool) must exist.
STRICT=(-G Ninja -DNCCLINSP_WERROR=ON -DNCCLINSP_REQUIRE_TEST_TOOLS=ON)
# ctest in <dir> with the given filters. Nothing may be skipped: a test that exits 77 ("skipped",
# its tool or input missing) or does not run fails the command, as does a filter matching nothing.
run_ctest() {
  local dir=$1 log
  shift
  log=$(mktemp)
  (cd "$dir" && ctest --output-on-failure -j "$JOBS" --timeout 600 --no-tests=error "$@") | tee "$log"
  if grep -qE '\*\*\*(Skipped|Not Run)|tests did not run' "$log"; then
    echo "FAIL: tests were skipped in $dir (listed above); the test command installs every tool they need"
    rm -f "$log"
    return 1
  fi
  rm -f "$log"
}

# The Kubernetes manifest validator's packages (ctest k8s_manifests), from the committed lockfile.
stage "npm ci (deploy/kubernetes/validate)"
(cd deploy/kubernetes/validate && npm ci --no-audit --no-fund --loglevel=error)

# Main stage: the whole tree with g++ in Release (-O3: what users build first, and its
# diagnostics differ from -O2's), every test.
stage "configure ($BUILD): g++ Release (-O3)"
cmake -S . -B "$BUILD" "${STRICT[@]}" -DCMAKE_BUILD_TYPE=Release
stage "build"
cmake --build "$BUILD" -j "$JOBS"
stage "test"
run_ctest "$BUILD"

# clang++ (Debian clang 14): the whole tree builds warning-free (-O0, no debug info: the cheapest
# full build, ~3.5 min on 2 cores; clang's diagnostics are what this stage is for), and the fast
# unit suites run on it.
stage "clang++: configure and build the whole tree (build-clang)"
CXX=clang++ cmake -S . -B build-clang "${STRICT[@]}" -DCMAKE_BUILD_TYPE=Debug -DCMAKE_CXX_FLAGS_DEBUG=-O0 \
  -DNCCLINSP_FUZZ_SMOKE=OFF >/dev/null
cmake --build build-clang -j "$JOBS"
stage "clang++: unit suites"
run_ctest build-clang -R "^test_(model|bucketing|collector|formats|sinks|exporter|options|catalogue|cardinality):"

# Sanitizer stages (NCCLINSP_SANITIZERS=0 skips them): only the suites they check, -O1, no
# bench/examples/tools. ASan+UBSan: the unit, plugin, reliability, embedded and NCCL conformance suites (LeakSanitizer included;
# forked plugin children run it before exit; the test binaries turn off ASan's dynamic-TLS record, tests/asan_defaults.cpp
# says why). TSan: the concurrency tests (the plugin's primitives in
# test_comm_registry among them, NCCL's three event threads and replays on the host-callback thread).
SAN_COMMON=("${STRICT[@]}" -DCMAKE_BUILD_TYPE=Debug "-DCMAKE_CXX_FLAGS_DEBUG=-O1 -g" -DNCCLINSP_BUILD_BENCH=OFF
            -DNCCLINSP_BUILD_EXAMPLES=OFF -DNCCLINSP_BUILD_TOOLS=OFF -DNCCLINSP_FUZZ_SMOKE=OFF)
UNIT_SUITES=(test_model test_bucketing test_collector test_formats test_sinks test_exporter test_options test_comm_registry)
if [[ "${NCCLINSP_SANITIZERS:-1}" != 0 ]]; then
  export ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=1:abort_on_error=0:strict_string_checks=1}
  export UBSAN_OPTIONS=${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1}
  export TSAN_OPTIONS=${TSAN_OPTIONS:-halt_on_error=1:second_deadlock_stack=1:suppressions=$ROOT/tests/reliability/tsan.supp}

  stage "asan+ubsan: configure and build (build-rel-asan)"
  cmake -S . -B build-rel-asan "${SAN_COMMON[@]}" -DNCCLINSP_SANITIZE=address,undefined >/dev/null
  cmake --build build-rel-asan -j "$JOBS" --target "${UNIT_SUITES[@]}" test_plugin test_reliability test_embedded nccl_conformance \
    test_lsan_dtls
  stage "asan+ubsan: test"
  run_ctest build-rel-asan -R "^(test_(model|bucketing|collector|formats|sinks|exporter|options|comm_registry|plugin|reliability|embedded|lsan_dtls)|nccl_conformance):"

  stage "tsan: configure and build (build-rel-tsan)"
  cmake -S . -B build-rel-tsan "${SAN_COMMON[@]}" -DNCCLINSP_SANITIZE=thread >/dev/null
  cmake --build build-rel-tsan -j "$JOBS" --target test_collector test_exporter test_comm_registry test_reliability nccl_conformance
  stage "tsan: test"
  run_ctest build-rel-tsan -R "^test_collector:.*threads|^test_exporter:|^test_comm_registry:|^test_reliability:(plugin under concurrency|node_exporter|JSON mode|finalize racing|re-init)|^nccl_conformance:.*(three threads|mixed with eager)"
fi
stage "done"
cd "$ROOT"
