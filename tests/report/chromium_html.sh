#!/usr/bin/env bash
# Opens the report's HTML in headless Chromium: the SVG charts must be in the DOM, and a screenshot
# must not be blank. Exit 77 (skip) when no chromium is installed.
#   chromium_html.sh REPORT.html WORKDIR
set -u
HTML=$1 WORK=$2
fail() { echo "FAIL: $*"; exit 1; }
CHROME=$(command -v chromium || command -v chromium-browser || command -v google-chrome || true)
[ -n "$CHROME" ] || { echo "SKIP: chromium not installed (apt-get install -y chromium)"; exit 77; }
[ -f "$HTML" ] || fail "$HTML missing (report_sim_slow_host did not run?)"
rm -rf "$WORK"; mkdir -p "$WORK"
flags=(--headless --no-sandbox --disable-gpu --disable-quic --no-first-run --disable-background-networking
       --disable-component-update --disable-sync --disable-dev-shm-usage --user-data-dir="$WORK/profile")
timeout 90 "$CHROME" "${flags[@]}" --dump-dom "file://$HTML" >"$WORK/dom.html" 2>"$WORK/chromium.err" ||
  { tail -20 "$WORK/chromium.err"; fail "chromium --dump-dom failed"; }
for c in 'chart hosts' 'chart sizes' 'chart ranks'; do
  grep -q "<svg class=\"$c\"" "$WORK/dom.html" || fail "no <svg class=\"$c\"> in the DOM"
done
# The fixture is a slow-host run: on kernel time every host slows alike (sim/README.md "Timing model"), so the
# chart has one plain bar per host and no straggler bar.
n=$(grep -o '<rect class="bar"' "$WORK/dom.html" | wc -l)
[ "$n" -ge 3 ] || fail "host chart has $n plain bars, expected one per host (3)"
grep -q '<rect class="bar straggler"' "$WORK/dom.html" && fail "a straggler bar in a job where no host is below its peers"
grep -q 'id="verdict">no straggler host' "$WORK/dom.html" || fail "verdict not in the DOM"
timeout 90 "$CHROME" "${flags[@]}" --window-size=1200,1600 --screenshot="$WORK/shot.png" "file://$HTML" >/dev/null 2>>"$WORK/chromium.err" ||
  { tail -20 "$WORK/chromium.err"; fail "chromium --screenshot failed"; }
[ -s "$WORK/shot.png" ] || fail "no screenshot"
if command -v python3 >/dev/null; then
  python3 - "$WORK/shot.png" <<'PY' || fail "screenshot is blank"
import struct, sys, zlib
data = open(sys.argv[1], 'rb').read()
assert data[:8] == b'\x89PNG\r\n\x1a\n', 'not a PNG'
pos, idat, w, h, bpp = 8, b'', 0, 0, 4
while pos < len(data):
    n, t = struct.unpack('>I4s', data[pos:pos + 8])
    body = data[pos + 8:pos + 8 + n]
    if t == b'IHDR':
        w, h, depth, ctype = struct.unpack('>IIBB', body[:10])
        bpp = {2: 3, 6: 4, 0: 1, 4: 2}.get(ctype, 4)
    elif t == b'IDAT':
        idat += body
    pos += 12 + n
raw = zlib.decompress(idat)
stride = w * bpp + 1
colors = set()
for y in range(0, h, 7):  # sample rows; filter bytes make raw values differ, so only count them loosely
    colors.update(raw[y * stride + 1:(y + 1) * stride:bpp * 5])
print(f'screenshot {w}x{h}, {len(colors)} distinct sampled byte values')
sys.exit(0 if len(colors) > 8 else 1)
PY
fi
echo PASS
