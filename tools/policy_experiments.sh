#!/usr/bin/env bash
# The format-policy experiments of docs/results.md ("Format policies" and "Evaluation in
# another format"), on Fashion-MNIST:
#  1. the CNN trained under O1, O2, O3 and edges-fp32 for each 16-bit format, against fp32;
#  2. an fp32-trained CNN and ResNet-20 evaluated in every format, and a flex16_5-trained CNN
#     evaluated in fp32.
# Results go to results/policies/ (merged tables: merged.md, eval_*.csv). EPOCHS (default 1),
# EXTRA (options for every run, e.g. "--train-subset 20000") and BIN (default
# build/release/tools/flexpoint-train) may be set.
set -euo pipefail
# shellcheck disable=SC2086 # EXTRA is a list of options
ROOT="$(cd "$(dirname "$0")/.." && pwd)"
cd "$ROOT"
BIN="${BIN:-./build/release/tools/flexpoint-train}"
EPOCHS="${EPOCHS:-1}"
EXTRA="${EXTRA:-}"
OUT=results/policies
rm -rf "$OUT"
mkdir -p "$OUT"
"$BIN" $EXTRA --model cnn --epochs "$EPOCHS" --formats fp32 --out "$OUT/fp32" --quiet
for preset in O1 O2 O3 edges-fp32; do
  extra=""
  [ "$preset" = O3 ] && extra="--no-master"
  # shellcheck disable=SC2086 # extra is empty or one option
  "$BIN" $EXTRA --model cnn --epochs "$EPOCHS" --formats fp16,bf16,flex16_5,dfp16 --policy "$preset" \
    $extra --out "$OUT/$preset" --quiet
done
python3 tools/merge_results.py "$OUT"/fp32 "$OUT"/O1 "$OUT"/O2 "$OUT"/O3 "$OUT"/edges-fp32 \
  --csv "$OUT/merged.csv" > "$OUT/merged.md"
# evaluation in another format
"$BIN" $EXTRA --model cnn --epochs "$EPOCHS" --formats fp32,flex16_5 --checkpoint-dir "$OUT/ck_cnn" \
  --out "$OUT/cnn" --quiet
"$BIN" $EXTRA --eval "$OUT/ck_cnn/fp32.ckpt" --out "$OUT/eval_cnn_fp32" --quiet
"$BIN" $EXTRA --eval "$OUT/ck_cnn/flex16_5.ckpt" --out "$OUT/eval_cnn_flex16_5" --quiet
"$BIN" $EXTRA --model resnet20 --pad 2 --epochs "$EPOCHS" --formats fp32 --checkpoint-dir "$OUT/ck_resnet" \
  --out "$OUT/resnet" --quiet
"$BIN" $EXTRA --eval "$OUT/ck_resnet/fp32.ckpt" --pad 2 --out "$OUT/eval_resnet_fp32" --quiet
cat "$OUT/merged.md"
for e in cnn_fp32 cnn_flex16_5 resnet_fp32; do echo "== eval $e"; cat "$OUT/eval_$e/eval.csv"; done
