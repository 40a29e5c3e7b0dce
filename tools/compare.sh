#!/usr/bin/env bash
# The main job: train the small CNN on Fashion-MNIST in fp32, fp16, bf16, flex16+5 and DFP-16
# side by side from identical starting points, print the comparison table, write CSVs and a
# plot to results/cnn_fashion/. Installs what it needs first (tools/setup.sh).
# Environment knobs: EPOCHS (default 5, the length of the accuracy goals: 10 to 25 minutes on
# 2 cores, build included; EPOCHS=1: 3 to 5), FORMATS, EXTRA (more flexpoint-train options),
# FLEXPOINT_BASELINE=1 to also run the PyTorch baseline (installs Debian's python3-torch).
set -euo pipefail
ROOT="$(cd "$(dirname "$0")/.." && pwd)"
cd "$ROOT"
bash tools/setup.sh
if [ -x /usr/local/cuda/bin/nvcc ] && ! command -v nvcc >/dev/null; then
  export PATH="/usr/local/cuda/bin:$PATH"
fi
cmake -S . -B build/release -DCMAKE_BUILD_TYPE=Release >/dev/null
cmake --build build/release -j "$(nproc)" --target flexpoint-train
OUT=results/cnn_fashion
mkdir -p "$OUT"
./build/release/tools/flexpoint-train --model cnn --data fashion-mnist \
  --formats "${FORMATS:-fp32,fp16,bf16,flex16_5,dfp16}" --epochs "${EPOCHS:-5}" \
  --out "$OUT" ${EXTRA:-} | tee "$OUT/summary.txt"
if [ "${FLEXPOINT_BASELINE:-0}" = "1" ]; then
  # Debian's CPU PyTorch, run by the system interpreter (the baseline only; nothing links it)
  if ! /usr/bin/python3 -c "import torch" 2>/dev/null; then
    SUDO=""; [ "$(id -u)" = "0" ] || SUDO="sudo"
    $SUDO env DEBIAN_FRONTEND=noninteractive apt-get update -qq
    $SUDO env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq python3-torch
  fi
  /usr/bin/python3 tools/pytorch_baseline.py --model cnn --epochs "${EPOCHS:-5}" --threads "$(nproc)" \
    --out "$OUT" | tee -a "$OUT/summary.txt"
fi
python3 tools/plot_results.py "$OUT" || echo "compare: plotting skipped"
