#!/usr/bin/env bash
# fuzz_smoke.sh SRC INCLUDE OUT SECONDS [CLANGXX]: builds the libFuzzer target with clang++
# (-fsanitize=fuzzer,address,undefined) and runs it for SECONDS. Exit 77 (ctest: skipped) when
# clang++ or its libFuzzer runtime is missing; non-zero on a build failure or a crash.
set -uo pipefail
SRC=$1 INCLUDE=$2 OUT=$3 SECONDS_=$4 CXX=${5:-}
[[ -n "$CXX" && -x "$CXX" ]] || CXX=$(command -v clang++ || command -v clang++-14 || true)
if [[ -z "$CXX" ]]; then echo "clang++ not found: fuzz smoke skipped"; exit 77; fi
mkdir -p "$OUT/corpus"
# {fmt} header-only, as in the plugin .so.
if ! err=$("$CXX" -std=c++20 -O1 -g -fsanitize=fuzzer,address,undefined -fno-sanitize-recover=all -fno-omit-frame-pointer -DFMT_HEADER_ONLY \
      -I"$INCLUDE" "$SRC" -o "$OUT/fuzz_plugin" -ldl -lpthread 2>&1); then
  if grep -qE "libclang_rt\.fuzzer|unsupported option.*fuzzer|FuzzedDataProvider\.h.*not found" <<<"$err"; then
    echo "libFuzzer runtime not installed: fuzz smoke skipped"; echo "$err" | tail -3; exit 77
  fi
  echo "fuzzer build failed:"; echo "$err"; exit 1
fi
for i in 1 2 3 4 5 6 7 8; do [[ -f "$OUT/corpus/seed$i" ]] || head -c $((128 * i)) /dev/urandom > "$OUT/corpus/seed$i"; done
"$OUT/fuzz_plugin" -max_total_time="$SECONDS_" -max_len=4096 -close_fd_mask=2 -print_final_stats=1 \
  -artifact_prefix="$OUT/" "$OUT/corpus" > "$OUT/fuzz.log" 2>&1
rc=$?
grep -E "^stat::number_of_executed_units|^stat::average_exec_per_sec|^stat::peak_rss_mb" "$OUT/fuzz.log"
if ((rc != 0)); then
  echo "fuzz_plugin failed (rc=$rc); reproducer in $OUT:"; grep -v '^#' "$OUT/fuzz.log" | tail -60; exit 1
fi
echo "fuzz_plugin: no crash in ${SECONDS_} s"
