#!/usr/bin/env bash
# The test command (README, .ci/run): on a fresh Debian 12 machine, installs what the tests need,
# configures, builds and runs every test through ctest. Usage: bash scripts/test.sh [build-dir]
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD=${1:-build-ci}

PKGS=(cmake ninja-build g++ clang libclang-rt-14-dev catch2 libbenchmark-dev libcli11-dev libsimdjson-dev
      prometheus prometheus-node-exporter python3 chromium)
missing=()
for p in "${PKGS[@]}"; do dpkg -s "$p" >/dev/null 2>&1 || missing+=("$p"); done
if ((${#missing[@]})); then
  echo "== installing: ${missing[*]}"
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq
  apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi

JOBS=$(nproc)
echo "== configure ($BUILD)"
cmake -S . -B "$BUILD" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo
echo "== build"
cmake --build "$BUILD" -j "$JOBS"
echo "== test"
cd "$BUILD"
ctest --output-on-failure -j "$JOBS" --timeout 600
