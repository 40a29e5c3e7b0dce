#!/usr/bin/env bash
# Training-step benchmark: seconds per epoch of an image model for each flexpoint format, next
# to PyTorch fp32 and bf16 (autocast) measured by the same command on the same subset.
#   [MODEL=cnn|resnet20|...] [PAD=N] bash bench/train_speed.sh [train_images] [threads]
# MODEL is any image model both flexpoint-train and tools/pytorch_baseline.py know (mlp,
# cnn<C1>-<C2>-<F>, resnet<6n+2>[x<K>]; default cnn), PAD zero pixels per side (default 0;
# 2 gives ResNet-20 CIFAR's 32 x 32). Needs a Release build (build/release) and, for the
# PyTorch rows, Debian's python3-torch.
set -euo pipefail
ROOT="$(cd "$(dirname "$0")/.." && pwd)"
N="${1:-12800}"
T="${2:-$(nproc)}"
MODEL="${MODEL:-cnn}"
PAD="${PAD:-0}"
OUT="${OUT:-$ROOT/results/train_speed}"
mkdir -p "$OUT"
# Both sides run under this process's OpenMP settings. A passive wait policy lengthens
# PyTorch's epochs more than flexpoint's (docs/performance.md, ResNet-20 on the Zen 4), so a
# comparison with it set is not like for like: say so rather than change the caller's setting.
if [ -n "${OMP_WAIT_POLICY:-}" ]; then
  echo "train_speed: OMP_WAIT_POLICY=$OMP_WAIT_POLICY is set for both flexpoint and PyTorch;" \
    "unset it for a like-for-like comparison (docs/performance.md)" >&2
fi
"$ROOT/build/release/tools/flexpoint-train" --model "$MODEL" --pad "$PAD" --epochs 1 \
  --train-subset "$N" --test-subset 1000 --threads "$T" --out "$OUT" --quiet
if /usr/bin/python3 -c "import torch" 2>/dev/null; then
  /usr/bin/python3 "$ROOT/tools/pytorch_baseline.py" --model "$MODEL" --pad "$PAD" --epochs 1 \
    --train-subset "$N" --test-subset 1000 --threads "$T" --out "$OUT" 2>/dev/null
else
  echo "train_speed: PyTorch not installed (apt-get install python3-torch); its rows are skipped"
fi
