#!/usr/bin/env bash
# Capacity measurement (docs/scale.md): 64 nodes x 8 GPUs of plugin-format .prom files at a 15 s
# scrape into one Prometheus and into vmagent -> VictoriaMetrics + vmalert, for 10 minutes.
# Not part of the test command (it runs ~12 min and loads the machine). Arguments go to
# scripts/capacity.py (--nodes, --gpus, --minutes, --scrape, --root, --template, --keep); needs
# the plugin and simulator built in build/ (cmake --build build --target nccl-profiler-ncclinsp ncclinsp-sim ncclinsp-simcuda).
set -euo pipefail
exec python3 "$(dirname "$0")/capacity.py" "$@"
