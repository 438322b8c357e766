#!/usr/bin/env bash
# ctest plugin_symbol_versions_aarch64: the glibc floor on aarch64, cross-built here. The probe
# library (glibc_compat_probe.cpp with plugin/glibc_compat.cpp) is linked for aarch64 with the
# plugin's options (ncclinsp_portable_runtime in plugin/CMakeLists.txt) against Debian's arm64
# glibc, with every symbol resolved (-z defs: each old-version name exists there), then its version
# needs go through check_symbol_versions.cmake. It cannot run here.
# usage: check_aarch64_link.sh <aarch64-g++> <source-dir> <cmake>
set -euo pipefail
cxx=$1 src=$2 cmake=$3
prefix=${cxx%g++}
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
flags=(-std=gnu++20 -O1 -fPIC -fvisibility=hidden -fvisibility-inlines-hidden -Wall -Wextra -Werror)
"$cxx" "${flags[@]}" -c "$src/tests/plugin/glibc_compat_probe.cpp" -o "$work/probe.o"
"$cxx" "${flags[@]}" -c "$src/plugin/glibc_compat.cpp" -o "$work/compat.o"
"$cxx" -shared -o "$work/libprobe-aarch64.so" "$work/probe.o" "$work/compat.o" \
  -Wl,--version-script="$src/tests/plugin/glibc_compat_probe.map" -Wl,--no-undefined -Wl,-z,defs \
  -static-libstdc++ -static-libgcc -Wl,--exclude-libs,ALL \
  -Wl,--push-state,--no-as-needed -l:libdl.so.2 -l:libpthread.so.0 -Wl,--pop-state -pthread
"${prefix}objdump" -T "$work/libprobe-aarch64.so" | grep -E ' (pthread_create|__xstat|exp|dlopen)$' || true
"$cmake" -DREADELF="${prefix}readelf" -DOBJDUMP="${prefix}objdump" -DSO="$work/libprobe-aarch64.so" -DMAX_GLIBC=2.28 \
  -P "$src/tests/plugin/check_symbol_versions.cmake"
