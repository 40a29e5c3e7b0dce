#!/usr/bin/env bash
# Everything that needs a GPU, in one command: build with CUDA, run the device tests, the GPU
# GEMM benchmark, and the same training run on the device and on the host (and PyTorch's).
#
#   bash tools/gpu_check.sh              # all steps
#   STEPS="build test" bash tools/gpu_check.sh
#
# Environment: OUT (where logs go; default out/gpu_check), COMMIT (the commit to print in the
# log, for trees copied without an up-to-date .git), ARCH (CUDA architectures; default 90),
# DATA (Fashion-MNIST directory; default .devdata when present, else the Debian package's),
# TRAIN_N (training images of the training runs; default 12800), EPOCHS (default 1),
# RESNET_N and RESNET_LIMIT (ResNet-20 images, default 2560, and seconds, default 150),
# BENCH_SIZES (default "256 512 1024 2048 4096"), PYTHON (with PyTorch, for the torch step,
# which trains the train step's CNN and the resnet step's ResNet-20; default python3),
# RACECHECK_LIMIT (seconds per racecheck test, default 150), HOSTGEMM_LIMIT (seconds of the
# hostcpu step's GEMM benchmark, default 150). Steps: build test memcheck
# racecheck bench train trainhost presets resnet torch hostcpu (default: all but memcheck,
# racecheck, presets, resnet, torch and hostcpu). presets: flex16_5 on the device under
# the "published" and "robust" presets with launched writes (no wait for a write's own
# statistics) and the same with FLEXPOINT_GPU_DEFER=0 (one wait per write), dfp16 with
# FLEXPOINT_GPU_DEFER=0 (its launched run is the train step's), and flex16_5 on the host under
# "published" (the device runs' traces must match the host's), for the seconds per epoch that
# launching saves. Each step has its own time limit so that one hang cannot eat the rest.
# Every step's output goes to $OUT/log.txt; the training CSVs are packed into $OUT/train.tar.gz.
set -uo pipefail
ROOT="$(cd "$(dirname "$0")/.." && pwd)"
cd "$ROOT"
OUT="${OUT:-$ROOT/out/gpu_check}"
ARCH="${ARCH:-90}"
STEPS="${STEPS:-build test bench train trainhost}"
EPOCHS="${EPOCHS:-1}"
TRAIN_N="${TRAIN_N:-12800}"
BENCH_SIZES="${BENCH_SIZES:-256 512 1024 2048 4096}"
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
  # the commit under test: COMMIT when given (a copied tree's .git may be stale), else git's
  echo "commit: ${COMMIT:-$(git -C "$ROOT" rev-parse --short HEAD 2>/dev/null || echo unknown)}"
} | tee -a "$LOG"

if has build; then
  step build 400 bash -c "cmake -S . -B '$BUILD' -DCMAKE_BUILD_TYPE=Release -DFLEXPOINT_CUDA=ON \
      -DCMAKE_CUDA_ARCHITECTURES='$ARCH' >/dev/null && cmake --build '$BUILD' -j $(nproc)" || {
    tail -40 "$LOG"; exit 1; }
fi
if has test; then
  step "device tests" 420 ctest --test-dir "$BUILD" -R 'gpu|device' --output-on-failure --timeout 300
fi
if has memcheck; then # compute-sanitizer over the op tests (API errors are not reported:
  # test_gpu_gemm asks for an impossible allocation on purpose)
  for t in test_gpu_gemm test_gpu_ops test_gpu_nn test_gpu_conv; do
    step "memcheck $t" 300 compute-sanitizer --tool memcheck --report-api-errors no --error-exitcode 9 "$BUILD/tests/$t"
  done
fi
if has racecheck; then # shared-memory races (the GEMM tiles, the reductions, batch norm's warps);
  # FX_GPU_TEST_REDUCED=1 trims the GEMM and convolution tests' case lists (every kernel still
  # runs) so that they finish under the tool
  for t in test_gpu_gemm test_gpu_ops test_gpu_nn test_gpu_conv; do
    step "racecheck $t" "${RACECHECK_LIMIT:-150}" env FX_GPU_TEST_REDUCED=1 compute-sanitizer \
      --tool racecheck --report-api-errors no --error-exitcode 9 "$BUILD/tests/$t"
  done
fi
if has hostcpu; then # the GPU machine's own CPU: what flexpoint-info measures and chooses, and
  # the one-thread GEMMs against the peers found there (another CPU for docs/performance.md)
  step "flexpoint-info" 60 "$BUILD/tools/flexpoint-info"
  step "host GEMM, 1 thread" "${HOSTGEMM_LIMIT:-150}" env -u OPENBLAS_CORETYPE -u OPENBLAS_L2_SIZE \
    BENCH_DATA=normal "$BUILD/bench/bench_gemm" 1
fi
if has bench; then
  step "GPU GEMM benchmark" 240 "$BUILD/bench/bench_gpu_gemm" $BENCH_SIZES
fi
# train: flexpoint-train on the device; trainhost: the same run on the host (the integer
# formats' steps.csv and traces must match it byte for byte); torch: PyTorch's CNN on the same
# device, fp32 and bf16 autocast, for the seconds per epoch.
common=(--model cnn --epochs "$EPOCHS" --train-subset "$TRAIN_N" --test-subset 2000 --data-dir "$DATA" --quiet)
if has train; then
  step "train on cuda" 300 "$BUILD/tools/flexpoint-train" "${common[@]}" --device cuda --out "$OUT/train_cuda"
fi
if has trainhost; then
  step "train on host" 300 "$BUILD/tools/flexpoint-train" "${common[@]}" --device cpu --out "$OUT/train_host"
fi
if has presets; then
  for preset in published robust; do
    step "flex16_5 $preset on cuda" 300 "$BUILD/tools/flexpoint-train" "${common[@]}" --formats flex16_5 \
      --autoflex "$preset" --device cuda --out "$OUT/train_cuda_$preset"
    step "flex16_5 $preset on cuda, FLEXPOINT_GPU_DEFER=0" 300 env FLEXPOINT_GPU_DEFER=0 \
      "$BUILD/tools/flexpoint-train" "${common[@]}" --formats flex16_5 --autoflex "$preset" \
      --device cuda --out "$OUT/train_cuda_${preset}_nodefer"
  done
  step "dfp16 on cuda, FLEXPOINT_GPU_DEFER=0" 300 env FLEXPOINT_GPU_DEFER=0 \
    "$BUILD/tools/flexpoint-train" "${common[@]}" --formats dfp16 --device cuda \
    --out "$OUT/train_cuda_dfp16_nodefer"
  step "flex16_5 published on host" 300 "$BUILD/tools/flexpoint-train" "${common[@]}" --formats flex16_5 \
    --autoflex published --device cpu --out "$OUT/train_host_published"
fi
if has resnet; then # ResNet-20 (32x32 after padding) on the device, no host counterpart (slow there)
  step "ResNet-20 on cuda" "${RESNET_LIMIT:-150}" "$BUILD/tools/flexpoint-train" --model resnet20 --pad 2 --epochs 1 \
    --train-subset "${RESNET_N:-2560}" --test-subset 1000 --data-dir "$DATA" --quiet \
    --formats fp32,bf16,flex16_5,dfp16 --device cuda --out "$OUT/train_resnet"
fi
if has torch; then
  step "PyTorch on cuda" 300 "${PYTHON:-python3}" tools/pytorch_baseline.py --model cnn --epochs "$EPOCHS" \
    --train-subset "$TRAIN_N" --test-subset 2000 --data-dir "$DATA" --device cuda --out "$OUT/train_torch"
  # the resnet step's run in PyTorch: the same model, padding and images
  step "PyTorch ResNet-20 on cuda" "${RESNET_LIMIT:-150}" "${PYTHON:-python3}" tools/pytorch_baseline.py \
    --model resnet20 --pad 2 --epochs 1 --train-subset "${RESNET_N:-2560}" --test-subset 1000 \
    --data-dir "$DATA" --device cuda --out "$OUT/train_torch_resnet"
fi
for d in train_cuda train_host train_cuda_published train_cuda_published_nodefer \
    train_cuda_robust train_cuda_robust_nodefer train_cuda_dfp16_nodefer train_host_published \
    train_resnet train_torch train_torch_resnet; do
  for f in "$OUT/$d/epochs.csv" "$OUT/$d/pytorch_epochs.csv"; do
    [ -f "$f" ] && { echo "-- $d/$(basename "$f")"; cat "$f"; } | tee -a "$LOG"
  done
done
for pair in "train_cuda train_host" "train_cuda_published train_host_published" \
    "train_cuda_published_nodefer train_host_published" "train_cuda_robust train_cuda_robust_nodefer" \
    "train_cuda_dfp16_nodefer train_host"; do
  set -- $pair
  if [ -f "$OUT/$1/steps.csv" ] && [ -f "$OUT/$2/steps.csv" ]; then
    for f in "$OUT/$1"/trace_*.csv; do
      cmp -s "$f" "$OUT/$2/$(basename "$f")" && r=same || { r=DIFFERENT; status=1; }
      echo "trace $1/$(basename "$f"): $r on device and host" | tee -a "$LOG"
    done
  fi
done
ls "$OUT" | grep -q '^train_' && tar -C "$OUT" -czf "$OUT/train.tar.gz" $(cd "$OUT" && ls -d train_*) && rm -rf "$OUT"/train_*/
say "done: status $status"
grep -E 'tests passed|tests failed|\*\*\*|Not Run|FAIL|Test +#|DIFFERENT' "$LOG" | tail -40
exit $status
