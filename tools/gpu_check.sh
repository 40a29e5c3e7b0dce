#!/usr/bin/env bash
# Everything that needs a GPU, in one command: build with CUDA, run the device tests, the GPU
# GEMM benchmark, and the same short training run on the device and on the host.
#
#   bash tools/gpu_check.sh              # all steps
#   STEPS="build test" bash tools/gpu_check.sh
#
# Environment: OUT (where logs go; default out/gpu_check), ARCH (CUDA architectures; default 90),
# DATA (Fashion-MNIST directory; default .devdata when present, else the Debian package's),
# TRAIN_N (training images of the training comparison; default 12800), BENCH_SIZES (default
# "1024 2048 4096"). Each step has its own time limit so that one hang cannot eat the rest.
# Every step's output goes to $OUT/log.txt; the training CSVs are packed into $OUT/train.tar.gz.
set -uo pipefail
ROOT="$(cd "$(dirname "$0")/.." && pwd)"
cd "$ROOT"
OUT="${OUT:-$ROOT/out/gpu_check}"
ARCH="${ARCH:-90}"
STEPS="${STEPS:-build test bench train}"
TRAIN_N="${TRAIN_N:-12800}"
BENCH_SIZES="${BENCH_SIZES:-1024 2048 4096}"
if [ -z "${DATA:-}" ]; then
  if [ -d "$ROOT/.devdata" ]; then DATA="$ROOT/.devdata"; else DATA=/usr/share/datasets/fashion-mnist; fi
fi
BUILD="$ROOT/build/gpu"
mkdir -p "$OUT"
LOG="$OUT/log.txt"
: >"$LOG"
status=0
say() { echo "== $*" | tee -a "$LOG"; }
step() { # step NAME SECONDS command...: run with a time limit, log it, remember a failure
  local name="$1" limit="$2"; shift 2
  say "$name ($(date +%T))"
  local t0=$SECONDS
  timeout "$limit" "$@" >>"$LOG" 2>&1
  local rc=$?
  say "$name: rc=$rc in $((SECONDS - t0)) s"
  [ $rc -eq 0 ] || status=1
  return $rc
}
has() { case " $STEPS " in *" $1 "*) return 0 ;; esac; return 1; }

if [ -x /usr/local/cuda/bin/nvcc ] && ! command -v nvcc >/dev/null; then
  export PATH="/usr/local/cuda/bin:$PATH"
fi
{
  nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.max.sm --format=csv 2>&1
  nvcc --version 2>&1 | tail -2
  git -C "$ROOT" rev-parse --short HEAD 2>/dev/null
} | tee -a "$LOG"

if has build; then
  step build 400 bash -c "cmake -S . -B '$BUILD' -DCMAKE_BUILD_TYPE=Release -DFLEXPOINT_CUDA=ON \
      -DCMAKE_CUDA_ARCHITECTURES='$ARCH' >/dev/null && cmake --build '$BUILD' -j $(nproc)" || {
    tail -40 "$LOG"; exit 1; }
fi
if has test; then
  step "device tests" 420 ctest --test-dir "$BUILD" -R 'gpu|device' --output-on-failure --timeout 300
fi
if has memcheck; then # compute-sanitizer over the op tests (slow: tens of times the plain run)
  for t in test_gpu_ops test_gpu_nn; do
    step "memcheck $t" 300 compute-sanitizer --tool memcheck --error-exitcode 9 "$BUILD/tests/$t"
  done
fi
if has bench; then
  step "GPU GEMM benchmark" 240 "$BUILD/bench/bench_gpu_gemm" $BENCH_SIZES
fi
if has train; then
  common=(--model cnn --epochs 1 --train-subset "$TRAIN_N" --test-subset 2000 --data-dir "$DATA" --quiet)
  step "train on cuda" 240 "$BUILD/tools/flexpoint-train" "${common[@]}" --device cuda --out "$OUT/train_cuda"
  step "train on host" 240 "$BUILD/tools/flexpoint-train" "${common[@]}" --device cpu --out "$OUT/train_host"
  for d in train_cuda train_host; do
    [ -f "$OUT/$d/epochs.csv" ] && { echo "-- $d epochs.csv"; cat "$OUT/$d/epochs.csv"; } | tee -a "$LOG"
  done
  tar -C "$OUT" -czf "$OUT/train.tar.gz" train_cuda train_host 2>/dev/null && rm -rf "$OUT/train_cuda" "$OUT/train_host"
fi
say "done: status $status"
grep -E 'tests passed|tests failed|\*\*\*|Not Run|FAIL|Test +#' "$LOG" | tail -40
exit $status
