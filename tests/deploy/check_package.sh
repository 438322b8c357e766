#!/usr/bin/env bash
# ctest package_deb: `cpack -G DEB` from the build tree into a scratch directory, then lintian on the
# .deb: any E: tag fails (warnings are printed). Also checks that the package holds the plugin, the
# headers, the CMake package, the rules, the dashboards and the deploy files, and that dpkg-shlibdeps
# found the plugin's libc6 floor. usage: check_package.sh <build-dir> <source-dir>
set -euo pipefail
build=$1 src=$2
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
cpack --config "$build/CPackConfig.cmake" -G DEB -B "$work" >"$work/cpack.log" 2>&1 || { cat "$work/cpack.log"; exit 1; }
deb=$(ls "$work"/*.deb)
echo "package: $(basename "$deb")"
dpkg-deb -f "$deb" Package Version Architecture Depends
dpkg-deb -c "$deb" | awk '{print $NF}' | sed 's|^\./|/|' >"$work/contents"
missing=0
want=(/usr/lib/libnccl-profiler-ncclinsp.so /usr/include/ncclinsp/ncclinsp.hpp /usr/lib/cmake/ncclinsp/ncclinspConfig.cmake
      /usr/share/ncclinsp/deploy/kubernetes/generated/ncclinsp-prometheusrule.yaml
      /usr/share/ncclinsp/deploy/kubernetes/generated/ncclinsp-dashboards.yaml
      /usr/share/ncclinsp/deploy/kubernetes/job.yaml /usr/share/doc/ncclinsp/copyright)
for f in "$src"/prometheus/rules/*.yml; do want+=("/usr/share/ncclinsp/prometheus/rules/$(basename "$f")"); done
for f in "$src"/grafana/*.json; do want+=("/usr/share/ncclinsp/grafana/$(basename "$f")"); done
[[ -d "$src/tools/cleaner" ]] && want+=(/usr/bin/ncclinsp-cleaner)
for f in "${want[@]}"; do
  grep -qxF "$f" "$work/contents" || { echo "FAIL: the package lacks $f"; missing=1; }
done
grep -q '/validate/' "$work/contents" && { echo "FAIL: the package ships the manifest validator"; missing=1; }
dpkg-deb -f "$deb" Depends | grep -q 'libc6' || { echo "FAIL: no libc6 dependency computed"; missing=1; }
lintian --tag-display-limit 0 "$deb" >"$work/lintian.log" 2>&1 || true
cat "$work/lintian.log"
if grep -q '^E:' "$work/lintian.log"; then
  echo "FAIL: lintian reports errors"
  exit 1
fi
grep -qE '^(W|I|N|P|X|O|E):|^$' "$work/lintian.log" || [[ ! -s "$work/lintian.log" ]] || { echo "FAIL: lintian output not understood"; exit 1; }
((missing == 0)) || exit 1
echo "ok: lintian accepts $(basename "$deb") without errors"
