#!/usr/bin/env bash
# Training-step benchmark: seconds per epoch of the Fashion-MNIST CNN for each flexpoint format,
# next to PyTorch fp32 and bf16 (autocast) measured by the same command on the same subset.
#   bash bench/train_speed.sh [train_images] [threads]
# Needs a Release build (build/release) and, for the PyTorch rows, Debian's python3-torch.
set -euo pipefail
ROOT="$(cd "$(dirname "$0")/.." && pwd)"
N="${1:-12800}"
T="${2:-$(nproc)}"
OUT="${OUT:-$ROOT/results/train_speed}"
mkdir -p "$OUT"
"$ROOT/build/release/tools/flexpoint-train" --model cnn --epochs 1 --train-subset "$N" \
  --test-subset 1000 --threads "$T" --out "$OUT" --quiet
if /usr/bin/python3 -c "import torch" 2>/dev/null; then
  /usr/bin/python3 "$ROOT/tools/pytorch_baseline.py" --model cnn --epochs 1 --train-subset "$N" \
    --test-subset 1000 --threads "$T" --out "$OUT" 2>/dev/null
else
  echo "train_speed: PyTorch not installed (apt-get install python3-torch); its rows are skipped"
fi
