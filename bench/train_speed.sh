#!/usr/bin/env bash
# Training-step benchmark: seconds per epoch of an image model for each flexpoint format, next
# to PyTorch fp32 and bf16 (autocast) measured by the same command on the same subset.
#   [MODEL=cnn|resnet20|...] [PAD=N] [RUNS=N] bash bench/train_speed.sh [train_images] [threads]
# MODEL is any image model both flexpoint-train and tools/pytorch_baseline.py know (mlp,
# cnn<C1>-<C2>-<F>, resnet<6n+2>[x<K>]; default cnn), PAD zero pixels per side (default 0;
# 2 gives ResNet-20 CIFAR's 32 x 32). RUNS (default 1) repeats the pair of runs, flexpoint then
# PyTorch, into OUT/run1 .. OUT/runN and prints the medians of each run's seconds and of its
# ratios to PyTorch's bf16 and to fp32 (tools/train_speed_summary.py, also OUT/summary.csv):
# this VM's speed drifts by 10-40 % within minutes, which one run cannot tell from a
# difference between the formats. PAIRED=1 runs PyTorch's bf16 epoch after each format
# instead of once after all of them (OUT/runN/<format>/, PyTorch's fp32 epoch in
# OUT/runN/pytorch-fp32/), and takes each format's ratio against its own neighbour: a minute
# apart rather than up to five. Needs a Release build (build/release) and, for the PyTorch
# rows, Debian's python3-torch.
set -euo pipefail
ROOT="$(cd "$(dirname "$0")/.." && pwd)"
N="${1:-12800}"
T="${2:-$(nproc)}"
MODEL="${MODEL:-cnn}"
PAD="${PAD:-0}"
OUT="${OUT:-$ROOT/results/train_speed}"
# Both sides run under this process's OpenMP settings. A passive wait policy lengthens
# PyTorch's epochs more than flexpoint's (docs/performance.md, ResNet-20 on the Zen 4), so a
# comparison with it set is not like for like: say so rather than change the caller's setting.
if [ -n "${OMP_WAIT_POLICY:-}" ]; then
  echo "train_speed: OMP_WAIT_POLICY=$OMP_WAIT_POLICY is set for both flexpoint and PyTorch;" \
    "unset it for a like-for-like comparison (docs/performance.md)" >&2
fi
RUNS="${RUNS:-1}"
PAIRED="${PAIRED:-0}"
FORMATS="fp32 fp16 bf16 flex16_5 dfp16"
case "$PAIRED" in
  0 | 1) ;;
  *) echo "train_speed: PAIRED=$PAIRED: want 0 or 1" >&2; exit 2 ;;
esac
case "$RUNS" in
  '' | *[!0-9]* | 0) echo "train_speed: RUNS=$RUNS: want a positive whole number" >&2; exit 2 ;;
esac
HAVE_TORCH=0
if /usr/bin/python3 -c "import torch" 2>/dev/null; then
  HAVE_TORCH=1
else
  echo "train_speed: PyTorch not installed (apt-get install python3-torch); its rows are skipped"
fi

# PyTorch's modes $2 (comma-separated) into folder $1, where PyTorch is installed
run_torch() {
  mkdir -p "$1"
  if [ "$HAVE_TORCH" = 1 ]; then
    /usr/bin/python3 "$ROOT/tools/pytorch_baseline.py" --model "$MODEL" --pad "$PAD" \
      --epochs 1 --train-subset "$N" --test-subset 1000 --threads "$T" --out "$1" \
      --modes "$2" 2>/dev/null
  fi
}

# flexpoint's formats $2 (comma-separated; all five where empty), then PyTorch's modes $3,
# into folder $1
run_one() {
  mkdir -p "$1"
  "$ROOT/build/release/tools/flexpoint-train" --model "$MODEL" --pad "$PAD" --epochs 1 \
    --train-subset "$N" --test-subset 1000 --threads "$T" --out "$1" --quiet \
    ${2:+--formats "$2"}
  run_torch "$1" "$3"
}

# one run into folder $1: flexpoint's formats then PyTorch's fp32 and bf16; with PAIRED=1 each
# format followed by PyTorch's bf16 in a folder of its own, then PyTorch's fp32 alone
run_pair() {
  if [ "$PAIRED" = 0 ]; then
    run_one "$1" "" fp32,bf16
    return
  fi
  for f in $FORMATS; do
    run_one "$1/$f" "$f" bf16
  done
  run_torch "$1/pytorch-fp32" fp32
}

if [ "$RUNS" = 1 ] && [ "$PAIRED" = 0 ]; then
  run_pair "$OUT"
  exit 0
fi
DIRS=()
for r in $(seq 1 "$RUNS"); do
  echo "== train_speed: run $r of $RUNS"
  run_pair "$OUT/run$r"
  DIRS+=("$OUT/run$r")
done
python3 "$ROOT/tools/train_speed_summary.py" "${DIRS[@]}" --csv "$OUT/summary.csv"
