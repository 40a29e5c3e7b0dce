#!/bin/sh
# CLI checks for flexpoint-train: --help documents every option, bad options and values that
# cannot be honoured (paths too long, presets on float formats, unknown --trace tensors) fail
# with a clear message and a non-zero exit, output files that cannot be written fail the run
# with every allocation freed, numeric trouble (saturation, NaN weights) is warned about and
# counted in epochs.csv, and a tiny synthetic run writes its CSV files and summary.
# usage: test_cli.sh path/to/flexpoint-train
BIN="$1"
T=$(mktemp -d)
trap 'rm -rf "$T"' EXIT
fail=0
check() { # description, expected exit code, expected stderr/stdout fragment, command...
  desc="$1"; want="$2"; frag="$3"; shift 3
  "$@" >"$T/out" 2>"$T/err"; rc=$?
  # in a sanitizer build a leak or UB report exits 1, like an expected failure: look for it
  if [ "$rc" != "$want" ] || ! grep -q -- "$frag" "$T/out" "$T/err" ||
     grep -qE "Sanitizer|runtime error:" "$T/err"; then
    echo "FAIL: $desc (exit $rc, wanted $want, fragment '$frag')"; cat "$T/err"; fail=1
  else
    echo "ok: $desc"
  fi
}
check "--help" 0 "--formats" "$BIN" --help
for opt in --model --data --data-dir --formats --autoflex --epochs --batch --lr --momentum \
           --weight-decay --schedule --no-master --loss-scaling --stochastic-rounding --augment \
           --pad --train-subset --test-subset --synthetic-n --seed --threads --device --out --trace \
           --checkpoint-dir --resume --export-weights --eval --optimizer --adam-betas --adam-eps \
           --clip-norm --loss-scale-init --loss-scale-growth --loss-scale-backoff \
           --loss-scale-interval --loss-scale-min --profile --policy --policy-file --quiet \
           --distributed; do
  grep -q -- "$opt" "$T/out" || { echo "FAIL: --help does not document $opt"; fail=1; }
done
check "unknown option" 2 "unknown option '--bogus'" "$BIN" --bogus
check "unknown format" 2 "unknown format 'fp8'" "$BIN" --formats fp32,fp8
check "unknown preset" 2 "unknown Autoflex preset 'nope'" "$BIN" --formats flex16_5:nope
check "bad epochs" 2 "--epochs: 'zero'" "$BIN" --epochs zero
check "missing value" 2 "--lr needs a value" "$BIN" --lr
check "bad momentum" 2 "--momentum must be in" "$BIN" --momentum 1.5
check "unknown model" 2 "model='vgg': unknown model" "$BIN" --model vgg
check "unknown optimizer" 2 "--optimizer: unknown 'lamb'" "$BIN" --optimizer lamb
check "one Adam beta" 2 "--adam-betas: '0.9' is not B1,B2" "$BIN" --adam-betas 0.9
check "Adam beta 1" 2 "each of '0.9,1' must be in" "$BIN" --adam-betas 0.9,1
check "scale floor above the scale" 2 "--loss-scale-min 1e+06 is above" "$BIN" \
  --loss-scale-min 1e6
check "static loss scale 0" 2 "--loss-scale-init must be > 0" "$BIN" --loss-scale-init 0
check "AdamW, clipping, static scale" 0 "fp16" "$BIN" --data synthetic --synthetic-n 200 \
  --model mlp --epochs 1 --batch 50 --formats fp16,flex16_5 --optimizer adamw --lr 0.001 \
  --adam-betas 0.8,0.99 --clip-norm 1 --loss-scaling static --loss-scale-init 1024 \
  --out "$T/adamw"
grep -q '"optimizer": "adamw", "adam_betas": \[0.80000000000000004, 0.98999999999999999\]' \
  "$T/adamw/run.json" || { echo "FAIL: run.json lacks the recipe:"; cat "$T/adamw/run.json"; fail=1; }
awk -F, '$1 == "fp16" && $10 != 1024 { bad = 1 } END { exit bad }' "$T/adamw/epochs.csv" ||
  { echo "FAIL: the static scale moved:"; cat "$T/adamw/epochs.csv"; fail=1; }
# four steps: the first one (every buffer's first touch) is left out of the profile
check "--profile" 0 "profile of dfp16: 3 steps after a first one left out" "$BIN" --data synthetic \
  --synthetic-n 200 --model cnn --epochs 1 --batch 50 --formats dfp16 --profile --out "$T/prof"
# a run of one step keeps it
check "--profile of one step" 0 "profile of dfp16: 1 steps, " "$BIN" --data synthetic \
  --synthetic-n 50 --model cnn --epochs 1 --batch 50 --formats dfp16 --profile --out "$T/prof1"
# one row per layer of the CNN (9), then the four phases
[ "$(wc -l < "$T/prof/profile_dfp16.csv")" = "15" ] && grep -q "^conv2,conv," "$T/prof/profile_dfp16.csv" &&
  head -1 "$T/prof/profile_dfp16.csv" | grep -q ",conversion_share,rounding_share,autoflex_share$" ||
  { echo "FAIL: profile_dfp16.csv:"; cat "$T/prof/profile_dfp16.csv"; fail=1; }
# an integer run's int16 GEMM units per step (the CNN's convolutions and linear layers run some
# on each level with SIMD kernels; the portable level counts none and writes no file), shares in
# [0, 1] and the fast units' pairs per chain at least one pair
if [ -f "$T/prof/gemm_i16_dfp16.csv" ]; then
  awk -F, 'NR == 2 && $1 == "dfp16" && $3 + $4 > 0 && $5 >= 0 && $5 <= 1 && $6 >= 0 && $6 <= 1 &&
           ($3 == 0 || $7 >= 1) { ok = 1 } END { exit !ok }' "$T/prof/gemm_i16_dfp16.csv" ||
    { echo "FAIL: gemm_i16_dfp16.csv:"; cat "$T/prof/gemm_i16_dfp16.csv"; fail=1; }
fi
# format policies: applied to each run, recorded in run.json; a rule that matches no layer and
# O3 with master weights are usage errors found before anything is written
check "--policy" 0 "format policy 'edges-fp32'" "$BIN" --data synthetic --synthetic-n 200 \
  --model mlp --epochs 1 --batch 50 --formats fp16,dfp16 --policy edges-fp32 --out "$T/pol"
grep -q '"policy": "edges-fp32"' "$T/pol/run.json" || { echo "FAIL: run.json policy"; fail=1; }
# edges-fp32 on the MLP: one cast (before fc3) in each run, in the casts column of epochs.csv,
# and its time (cast_seconds, the last column) is measured: a number >= 0
awk -F, 'NR > 1 && ($(NF-1) != 1 || $NF !~ /^[0-9]+\.[0-9]+$/) { bad = 1 } END { exit bad }' \
  "$T/pol/epochs.csv" ||
  { echo "FAIL: casts column:"; cat "$T/pol/epochs.csv"; fail=1; }
check "--policy matching no layer" 2 "=fp16' matches no layer of mlp" "$BIN" \
  --data synthetic --synthetic-n 200 --model mlp --formats fp16 --policy "conv*=fp16" \
  --out "$T/pol2"
[ ! -e "$T/pol2" ] || { echo "FAIL: a refused policy created its output folder"; fail=1; }
check "--policy O3 with master weights" 2 "without master weights" "$BIN" --data synthetic \
  --synthetic-n 200 --model mlp --formats flex16_5 --policy O3 --out "$T/pol3"
check "--policy empty" 2 "--policy: the policy is empty" "$BIN" --policy ""
printf '# the classifier in fp32\nO2\nfc2=fp32   # trailing comment\n' > "$T/policy.txt"
check "--policy-file" 0 "format policy 'O2; fc2=fp32'" "$BIN" --data synthetic \
  --synthetic-n 200 --model cnn --epochs 1 --batch 50 --formats bf16 \
  --policy-file "$T/policy.txt" --out "$T/pol4"
printf '# nothing\n\n' > "$T/empty-policy.txt"
check "--policy-file without rules" 2 "no rule in the file" "$BIN" --policy-file \
  "$T/empty-policy.txt"
check "--policy-file a folder" 2 "not a regular file" "$BIN" --policy-file "$T"
# a FIFO or a symlink loop as an input is refused at once, never waited on (timeout: a hang
# fails the check)
mkfifo "$T/in.fifo" && ln -s "$T/in.loop" "$T/in.loop"
check "--policy-file a FIFO" 2 "not a regular file" timeout 60 "$BIN" --policy-file "$T/in.fifo"
check "--policy-file a symlink loop" 2 "levels of symbolic links" timeout 60 "$BIN" \
  --policy-file "$T/in.loop"
check "--eval a FIFO" 1 "not a regular file (a FIFO)" timeout 60 "$BIN" --data synthetic \
  --synthetic-n 200 --eval "$T/in.fifo" --out "$T/evf" --quiet
check "--eval a folder" 1 "not a regular file (a folder)" timeout 60 "$BIN" --data synthetic \
  --synthetic-n 200 --eval "$T" --out "$T/evf" --quiet
check "--eval a symlink loop" 1 "too many levels of symbolic links" timeout 60 "$BIN" \
  --data synthetic --synthetic-n 200 --eval "$T/in.loop" --out "$T/evf" --quiet
# error_table (built beside flexpoint-train) refuses such outputs before measuring anything
ET="$(dirname "$BIN")/error_table"
if [ -x "$ET" ]; then
  check "error_table --csv a FIFO" 1 "cannot write $T/in.fifo: not a regular file" timeout 60 \
    "$ET" --reduced --only exp --csv "$T/in.fifo"
  check "error_table --md a folder" 1 "cannot write $T: not a regular file" timeout 60 \
    "$ET" --reduced --only exp --md "$T"
  check "error_table --csv a symlink loop" 1 "Too many levels of symbolic links" timeout 60 \
    "$ET" --reduced --only exp --csv "$T/in.loop"
else
  echo "FAIL: $ET was not built beside $BIN"; fail=1
fi
check "resnet depth not 6n+2" 2 "the ResNet depth must be 6n+2" "$BIN" --model resnet21
check "model name too long" 2 "is longer than 15 bytes" "$BIN" --model mlp1024x2xxxxxxxx
# a family member with its default traces (resnet8: the last block is s3b1)
check "resnet8 with default traces" 0 "resnet8" "$BIN" --data synthetic --synthetic-n 100 \
  --model resnet8 --epochs 1 --batch 50 --formats flex16_5 --out "$T/fam"
[ -f "$T/fam/trace_flex16_5_s3b1.conv2.w.grad.csv" ] ||
  { echo "FAIL: resnet8's default trace is missing:"; ls "$T/fam"; fail=1; }
check "cifar needs a dir" 2 "needs --data-dir" "$BIN" --data cifar10
check "resume needs a dir" 2 "--resume needs --checkpoint-dir" "$BIN" --resume
for bad in gpu cuda: cuda:x cuda:-1 cuda:1x cuda:99999 ""; do
  check "malformed --device '$bad'" 2 "--device: '$bad' is not cpu, cuda or cuda:N" \
    "$BIN" --device "$bad"
done
check "--device needs a value" 2 "--device needs a value" "$BIN" --device
# values that cannot be honoured exactly are usage errors (exit 2), never adjusted
long=$(printf "%04000d" 0)
check "--out longer than supported" 2 "--out: the path is 4000 bytes long" "$BIN" --out "$long"
check "--data-dir longer than supported" 2 "--data-dir: the path is 4000 bytes" "$BIN" --data-dir "$long"
check "--checkpoint-dir longer than supported" 2 "--checkpoint-dir: the path is 4000 bytes" \
  "$BIN" --checkpoint-dir "$long"
check "empty --out" 2 "--out: the path is empty" "$BIN" --out ""
check "preset on fp32" 2 "'fp32:robust': an Autoflex preset applies to flex16_5 only" \
  "$BIN" --formats fp32:robust
check "unknown --autoflex without flex16_5" 2 "--autoflex: unknown Autoflex preset 'nope'" \
  "$BIN" --formats fp32 --autoflex nope
check "format listed twice" 2 "'fp32' is listed twice" "$BIN" --formats fp32,float32
check "empty format item" 2 "--formats: empty item" "$BIN" --formats fp32,,fp16
check "--data-dir with synthetic data" 2 "--data-dir: the synthetic data set is generated" \
  "$BIN" --data synthetic --data-dir /tmp
check "empty --seed" 2 "--seed: '' is not an integer" "$BIN" --seed ""
check "--pad with a blank" 2 "--pad: ' 3' is not an integer" "$BIN" --pad " 3"
check "empty --weight-decay" 2 "--weight-decay: '' is not a number" "$BIN" --weight-decay ""
check "--lr nan" 2 "--lr: 'nan' is not a number" "$BIN" --lr nan
check "--trace of a float-only run" 2 "--trace: traces are recorded in flex16_5 and dfp16" \
  "$BIN" --formats fp32,bf16 --trace fc1.out
check "--trace empty item" 2 "--trace: empty item" "$BIN" --trace fc1.out,
check "--trace name too long" 2 "longer than any tensor name" "$BIN" --trace "$long"
check "--trace listed twice" 2 "'fc1.out' is listed twice" "$BIN" --trace fc1.out,fc1.out
check "--trace of too many tensors" 2 "--trace: at most 16 tensors" "$BIN" \
  --trace a,b,c,d,e,f,g,h,i,j,k,l,m,n,o,p,q
# an unknown tensor is found before anything is written: exit 2, no output directory
check "--trace of an unknown tensor" 2 "no tensor named 'conv9.out'" "$BIN" --data synthetic \
  --synthetic-n 100 --model mlp --epochs 1 --batch 50 --formats fp32,flex16_5 \
  --trace fc1.out,conv9.out --out "$T/rt" --quiet
[ ! -e "$T/rt" ] || { echo "FAIL: an unknown --trace created its output directory"; fail=1; }
# a float tensor (layer norm's fp32 parameters) has no trace: the same usage error, naming it
for i in 1 2 3 4 5 6 7 8 9 10 11 12; do echo "the cat sat on the mat. a dog ran." ; done > "$T/text.txt"
check "--trace of a float tensor" 2 "'b1.ln1.gamma.grad' is fp32 in a flex16_5 run" "$BIN" \
  --data "text:$T/text.txt" --model gpt1x16h2c8 --epochs 1 --batch 4 --formats flex16_5 \
  --trace b1.attn.pre,b1.ln1.gamma.grad --out "$T/rf" --quiet
[ ! -e "$T/rf" ] || { echo "FAIL: a float --trace created its output directory"; fail=1; }
# output files that cannot be written: exit 1 naming the file (and, under LeakSanitizer, with
# every data set and trainer freed: a leak changes the exit status)
: > "$T/afile"
check "--out is a file" 1 "cannot create $T/afile: exists and is not a directory" "$BIN" \
  --data synthetic --synthetic-n 100 --model mlp --epochs 1 --batch 50 --formats fp32 \
  --out "$T/afile" --quiet
check "--out below a file" 1 "cannot create $T/afile: exists and is not a directory" "$BIN" \
  --data synthetic --synthetic-n 100 --model mlp --epochs 1 --batch 50 --formats fp32 \
  --out "$T/afile/sub" --quiet
mkdir -p "$T/csvdir/epochs.csv"
check "epochs.csv cannot be written" 1 "cannot write $T/csvdir/epochs.csv" "$BIN" \
  --data synthetic --synthetic-n 100 --model mlp --epochs 1 --batch 50 --formats fp32 \
  --out "$T/csvdir" --quiet
# a FIFO under an output name is refused at once, never waited on (timeout: a hang fails)
mkdir -p "$T/fifo" && mkfifo "$T/fifo/epochs.csv"
check "epochs.csv is a FIFO" 1 "cannot write $T/fifo/epochs.csv: not a regular file" timeout 60 \
  "$BIN" --data synthetic --synthetic-n 100 --model mlp --epochs 1 --batch 50 --formats fp32 \
  --out "$T/fifo" --quiet
# --out and --checkpoint-dir are created with their parents (mkdir -p)
if "$BIN" --data synthetic --synthetic-n 100 --model mlp --epochs 1 --batch 50 --formats fp32 \
     --out "$T/deep/er/out" --checkpoint-dir "$T/deep/ck/pt" --quiet 2>"$T/err" &&
   [ -f "$T/deep/er/out/epochs.csv" ] && [ -n "$(ls "$T/deep/ck/pt")" ]; then
  echo "ok: nested --out and --checkpoint-dir are created"
else
  echo "FAIL: nested --out and --checkpoint-dir"; cat "$T/err"; fail=1
fi
mkdir -p "$T/rtr/trace_dfp16_fc1.out.csv"
check "trace file cannot be written" 1 "trace_dfp16_fc1.out.csv" "$BIN" --data synthetic \
  --synthetic-n 100 --model mlp --epochs 1 --batch 50 --formats dfp16 --trace fc1.out \
  --out "$T/rtr" --quiet
# a write that fails mid-run (file size limit, with SIGXFSZ ignored so that write() fails):
# run.json (with its kernel report) fits in 8 blocks, the CSV rows of 200 epochs do not
( trap '' XFSZ; ulimit -f 8; exec "$BIN" --data synthetic --synthetic-n 100 --model mlp \
  --epochs 200 --batch 50 --formats fp32 --out "$T/rfull" --quiet ) >/dev/null 2>"$T/err"; rc=$?
if [ "$rc" = 1 ] && grep -q "cannot write $T/rfull/.*\.csv" "$T/err" &&
   ! grep -qE "Sanitizer|runtime error:" "$T/err"; then
  echo "ok: a failed CSV write ends the run with exit 1"
else
  echo "FAIL: failed CSV write (exit $rc)"; cat "$T/err"; fail=1
fi
# numeric health: weights that become NaN/Inf (fp16 without loss scaling, lr far too large)
# are reported on stderr and in epochs.csv's nonfinite_weights column; a healthy run is quiet
check "non-finite weights warned" 0 "warning: fp16 epoch 1: .* weights are NaN or Inf" \
  "$BIN" --data synthetic --synthetic-n 200 --model mlp --epochs 1 --batch 50 --formats fp16 \
  --loss-scaling off --lr 1000 --out "$T/rnan" --quiet
nf=$(awk -F, 'NR == 1 { for (i = 1; i <= NF; i++) if ($i == "nonfinite_weights") c = i }
              NR == 2 { print $c }' "$T/rnan/epochs.csv")
case "$nf" in
  ''|*[!0-9]*|0) echo "FAIL: nonfinite_weights is '$nf'"; fail=1 ;;
esac
check "saturating weights warned" 0 "warning: flex16_5 epoch 1: weights saturated: [1-9]" \
  "$BIN" --data synthetic --synthetic-n 200 --model mlp --epochs 1 --batch 50 \
  --formats flex16_5 --lr 1e9 --momentum 0 --out "$T/rsat" --quiet
# a device that cannot be used fails at once (before the output directory is created or data
# is loaded): exit 1 with the reason. No machine has a usable cuda:1023.
check "unusable CUDA device" 1 "--device cuda:1023: .*CUDA" \
  "$BIN" --device cuda:1023 --data synthetic --out "$T/rd"
[ ! -e "$T/rd" ] || { echo "FAIL: --device cuda:1023 created its output directory"; fail=1; }
# --device cuda: a tiny run where a GPU is usable; elsewhere (no CUDA in the build, no GPU)
# exit 1 naming the reason, with no summary
"$BIN" --device cuda --data synthetic --synthetic-n 100 --model mlp --epochs 1 --batch 50 \
  --formats fp32,dfp16 --out "$T/rc" --quiet >"$T/out" 2>"$T/err"; rc=$?
if [ "$rc" = 0 ] && grep -q "gap to fp32" "$T/out"; then
  echo "ok: --device cuda (trained on the GPU)"
elif [ "$rc" = 1 ] && grep -q -- "--device cuda:0: .*\(no CUDA backend\|no CUDA device\)" "$T/err" \
     && ! grep -q "gap to fp32" "$T/out"; then
  echo "ok: --device cuda without a usable GPU: $(cat "$T/err")"
else
  echo "FAIL: --device cuda (exit $rc)"; cat "$T/err"; fail=1
fi
check "missing data dir" 1 "/nonexistent" "$BIN" --data-dir /nonexistent --quiet --out "$T/r0"
check "tiny synthetic run" 0 "gap to fp32" "$BIN" --data synthetic --synthetic-n 200 --model mlp \
  --epochs 2 --batch 50 --formats fp32,flex16_5:robust,dfp16 --out "$T/r1" --quiet \
  --checkpoint-dir "$T/ck"
lines=$(wc -l < "$T/r1/epochs.csv")
[ "$lines" = "7" ] || { echo "FAIL: epochs.csv has $lines lines, wanted 7"; fail=1; }
grep -q "warning" "$T/err" && { echo "FAIL: a healthy run printed a warning"; cat "$T/err"; fail=1; }
# the columns of earlier versions first, in their order, then the health counts
hdr="run,model,epoch,train_loss,train_accuracy,test_loss,test_accuracy,seconds,images_per_second"
hdr="$hdr,loss_scale,skipped_steps,nonfinite_losses"
for c in weights activations gradients; do
  hdr="$hdr,${c}_written,${c}_saturated,${c}_underflow,${c}_zeroed_writes"
done
[ "$(head -n 1 "$T/r1/epochs.csv")" = "$hdr,nonfinite_weights,casts,cast_seconds" ] ||
  { echo "FAIL: epochs.csv header: $(head -n 1 "$T/r1/epochs.csv")"; fail=1; }
# flex16_5 and dfp16 rows count the elements they wrote; fp32 rows leave the counts empty
awk -F, 'NR > 1 && ($1 == "fp32") != ($13 == "") { bad = 1 }
         NR > 1 && $1 != "fp32" && !($13 > 0 && $17 > 0 && $21 > 0) { bad = 1 }
         END { exit bad }' "$T/r1/epochs.csv" ||
  { echo "FAIL: health columns of epochs.csv:"; cat "$T/r1/epochs.csv"; fail=1; }
ls "$T/r1"/trace_flex16_5_robust_*.csv >/dev/null 2>&1 || { echo "FAIL: no flex trace CSV"; fail=1; }
[ -f "$T/ck/dfp16.ckpt" ] || { echo "FAIL: no checkpoint"; fail=1; }
check "resume a finished run" 0 "dfp16" "$BIN" --data synthetic --synthetic-n 200 --model mlp \
  --epochs 3 --batch 50 --formats dfp16 --out "$T/r2" --checkpoint-dir "$T/ck" --resume
lines=$(wc -l < "$T/r2/epochs.csv")
[ "$lines" = "2" ] || { echo "FAIL: resumed run trained $((lines-1)) epochs, wanted 1"; fail=1; }
# run.json describes a result folder; merge_results.py builds one table from several folders
MERGE="$(dirname "$0")/merge_results.py"
for s in 1 2; do
  "$BIN" --data synthetic --synthetic-n 200 --model mlp --epochs 1 --batch 50 --seed $s \
    --formats fp32,dfp16 --out "$T/sw$s" --quiet >/dev/null 2>&1 || { echo "FAIL: sweep run $s"; fail=1; }
done
python3 -c 'import json, sys; r = json.load(open(sys.argv[1]))
assert r["model"] == "mlp" and r["recipe"]["seed"] == 1 and r["data"]["train_images"] == 200
assert [x["format"] for x in r["runs"]] == ["fp32", "dfp16"] and r["argv"][-1] == "--quiet"' \
  "$T/sw1/run.json" || { echo "FAIL: run.json"; cat "$T/sw1/run.json"; fail=1; }
check "merge two seeds" 0 "| mlp | — | dfp16 | 2 | 1 |" python3 "$MERGE" "$T/sw1" "$T/sw2" \
  --csv "$T/merged.csv"
[ "$(wc -l < "$T/merged.csv")" = "3" ] || { echo "FAIL: merged.csv:"; cat "$T/merged.csv"; fail=1; }
check "merge a folder without run.json" 2 "no run.json" python3 "$MERGE" "$T/sw1" "$T"
# --eval: the dfp16 checkpoint in every format; its own format gives the accuracy the training
# run reported for its last epoch (column 7 of epochs.csv), to the printed digits
check "--eval a checkpoint in five formats" 0 "mlp, trained in dfp16" "$BIN" --data synthetic \
  --synthetic-n 200 --eval "$T/ck/dfp16.ckpt" --out "$T/ev" --quiet
[ "$(wc -l < "$T/ev/eval.csv")" = "6" ] || { echo "FAIL: eval.csv:"; cat "$T/ev/eval.csv"; fail=1; }
trained=$(awk -F, 'END { printf "%.6f", $7 }' "$T/r2/epochs.csv")
evald=$(awk -F, '$4 == "dfp16" { printf "%.6f", $5 }' "$T/ev/eval.csv")
[ -n "$trained" ] && [ "$trained" = "$evald" ] ||
  { echo "FAIL: --eval in dfp16 gives $evald, training reported $trained"; fail=1; }
# a checkpoint trained under a policy: its own format's row takes that policy without
# --policy, so it gives the accuracy the training run reported
check "--policy with a checkpoint" 0 "flex16_5" "$BIN" --data synthetic --synthetic-n 200 \
  --model mlp --epochs 1 --batch 50 --formats flex16_5 --policy "fc2=fp32" --out "$T/pr" \
  --checkpoint-dir "$T/pck" --quiet
check "--eval a policy-trained checkpoint" 0 "trained under the policy 'fc2=fp32'" "$BIN" \
  --data synthetic --synthetic-n 200 --eval "$T/pck/flex16_5.ckpt" --formats fp32,flex16_5 \
  --out "$T/pev"
trained=$(awk -F, 'END { printf "%.6f", $7 }' "$T/pr/epochs.csv")
evald=$(awk -F, '$4 == "flex16_5" { printf "%.6f", $5 }' "$T/pev/eval.csv")
[ -n "$trained" ] && [ "$trained" = "$evald" ] ||
  { echo "FAIL: --eval of the policy run gives $evald, training reported $trained"; fail=1; }
check "--eval of a checkpoint with --model" 1 "a checkpoint names its model" "$BIN" \
  --data synthetic --synthetic-n 200 --eval "$T/ck/dfp16.ckpt" --model mlp --out "$T/ev4" --quiet
# a weights file: written after training, evaluated with --model; fp32 gives the fp32 run's
# last test accuracy exactly
check "--export-weights" 0 "fp32" "$BIN" --data synthetic --synthetic-n 200 --model mlp \
  --epochs 1 --batch 50 --formats fp32,bf16 --out "$T/wt" --export-weights --quiet
[ -f "$T/wt/weights_fp32.fxw" ] && [ -f "$T/wt/weights_bf16.fxw" ] ||
  { echo "FAIL: no weights files:"; ls "$T/wt"; fail=1; }
check "--eval a weights file" 0 "trained in unknown (a weights file)" "$BIN" --data synthetic \
  --synthetic-n 200 --eval "$T/wt/weights_fp32.fxw" --model mlp --out "$T/wev"
trained=$(awk -F, '$1 == "fp32" { printf "%.6f", $7 }' "$T/wt/epochs.csv")
evald=$(awk -F, '$4 == "fp32" { printf "%.6f", $5 }' "$T/wev/eval.csv")
[ -n "$trained" ] && [ "$trained" = "$evald" ] ||
  { echo "FAIL: weights evaluated in fp32 give $evald, training reported $trained"; fail=1; }
check "--eval a weights file without --model" 1 "give --model" "$BIN" --data synthetic \
  --synthetic-n 200 --eval "$T/wt/weights_fp32.fxw" --out "$T/wev2" --quiet
check "--eval a weights file of another model" 1 "tensors, the model has" "$BIN" \
  --data synthetic --synthetic-n 200 --eval "$T/wt/weights_fp32.fxw" --model cnn \
  --out "$T/wev3" --quiet
check "--eval under a policy" 0 "mlp, trained in dfp16" "$BIN" --data synthetic \
  --synthetic-n 200 --eval "$T/ck/dfp16.ckpt" --formats fp32,flex16_5 --policy edges-fp32 \
  --out "$T/evp" --quiet
[ "$(wc -l < "$T/evp/eval.csv")" = "3" ] || { echo "FAIL: eval.csv under a policy"; fail=1; }
check "--eval with a training option" 2 "--eval: --epochs is a training option" "$BIN" \
  --data synthetic --eval "$T/ck/dfp16.ckpt" --epochs 2
check "--eval with other data" 1 "data options must be those of the training run" "$BIN" \
  --data synthetic --synthetic-n 400 --eval "$T/ck/dfp16.ckpt" --out "$T/ev2" --quiet
check "--eval of a missing checkpoint" 1 "fx_checkpoint_config" "$BIN" --data synthetic \
  --synthetic-n 200 --eval "$T/ck/none.ckpt" --out "$T/ev3" --quiet
printf 'garbage' > "$T/ck/dfp16.ckpt"
check "corrupt checkpoint refused" 1 "cannot resume" "$BIN" --data synthetic --synthetic-n 200 \
  --model mlp --epochs 3 --batch 50 --formats dfp16 --out "$T/r3" --checkpoint-dir "$T/ck" --resume
# text data: one epoch of a small transformer on a tiny corpus in two formats; the held-out
# loss in bits per character in the summary and epochs.csv, the loss scaler on for fp16 only,
# a sample of text per run in samples.txt; a missing corpus, an image model on text, a sequence
# model on images and a model file of another vocabulary refused with their reasons
i=0
while [ $i -lt 150 ]; do printf 'the cat sat on the mat. a dog ran far away. '; i=$((i + 1)); done \
  > "$T/tiny.txt"
check "text data, two formats" 0 "bits/char" "$BIN" --data "text:$T/tiny.txt" \
  --model gpt1x16h2c16 --epochs 1 --batch 16 --formats fp32,fp16 --optimizer adamw --lr 0.003 \
  --out "$T/txt"
head -1 "$T/txt/epochs.csv" | grep -q ',test_bits_per_char$' &&
  awk -F, 'NR > 1 { d = $NF - $6 / log(2); if (d < -1e-5 || d > 1e-5) bad = 1; n++ }
           $1 == "fp16" && $10 <= 1 { bad = 1 } $1 == "fp32" && $10 != 1 { bad = 1 }
           END { exit bad || n != 2 }' "$T/txt/epochs.csv" ||
  { echo "FAIL: epochs.csv of a text run:"; cat "$T/txt/epochs.csv"; fail=1; }
[ "$(grep -c '^== fp' "$T/txt/samples.txt")" = "2" ] && grep -q '^he ' "$T/txt/samples.txt" &&
  grep -q -- '--- fp16: he ' "$T/out" ||
  { echo "FAIL: samples.txt:"; cat "$T/txt/samples.txt"; fail=1; }
grep -q "\"text\": \"$T/tiny.txt\"" "$T/txt/run.json" ||
  { echo "FAIL: run.json does not name the corpus:"; cat "$T/txt/run.json"; fail=1; }
# --eval-every: curve.csv has a held-out point after every N-th step, and training is unchanged
# (the fp32 steps of the run above)
check "--eval-every" 0 "bits/char" "$BIN" --data "text:$T/tiny.txt" --model gpt1x16h2c16 \
  --epochs 1 --batch 16 --formats fp32 --optimizer adamw --lr 0.003 --eval-every 5 \
  --out "$T/txt4"
last=$(tail -1 "$T/txt4/steps.csv" | cut -d, -f2)
head -1 "$T/txt4/curve.csv" | grep -q '^run,step,epoch,test_loss,test_accuracy,test_bits_per_char$' &&
  [ "$(grep -c '^fp32,' "$T/txt4/curve.csv")" = "$((last / 5))" ] &&
  awk -F, 'NR > 1 && ($2 % 5 != 0 || $4 <= 0) { bad = 1 } END { exit bad }' "$T/txt4/curve.csv" &&
  grep '^fp32,' "$T/txt/steps.csv" >"$T/steps_a" && grep '^fp32,' "$T/txt4/steps.csv" >"$T/steps_b" &&
  cmp -s "$T/steps_a" "$T/steps_b" ||
  { echo "FAIL: --eval-every:"; cat "$T/txt4/curve.csv" "$T/txt4/epochs.csv"; fail=1; }
check "missing text corpus" 1 "$T/none.txt" "$BIN" --data "text:$T/none.txt" \
  --model gpt1x16h2c16 --epochs 1 --out "$T/txt2"
check "image model on text" 2 "--model mlp is an image model; text data" "$BIN" \
  --data "text:$T/tiny.txt" --model mlp
check "sequence model on images" 2 "--model transformer is a sequence model" "$BIN" \
  --data synthetic --model transformer
check "model file of another vocabulary" 1 "must give (128, 17)" "$BIN" \
  --data "text:$T/tiny.txt" --model "$(dirname "$0")/../examples/models/transformer.txt" \
  --epochs 1 --batch 8 --formats fp32 --out "$T/txt3"
exit $fail
