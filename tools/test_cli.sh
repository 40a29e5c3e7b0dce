#!/bin/sh
# CLI checks for flexpoint-train: --help documents every option, bad options fail with a clear
# message and a non-zero exit, and a tiny synthetic run writes its CSV files and summary.
# usage: test_cli.sh path/to/flexpoint-train
BIN="$1"
T=$(mktemp -d)
trap 'rm -rf "$T"' EXIT
fail=0
check() { # description, expected exit code, expected stderr/stdout fragment, command...
  desc="$1"; want="$2"; frag="$3"; shift 3
  "$@" >"$T/out" 2>"$T/err"; rc=$?
  if [ "$rc" != "$want" ] || ! grep -q -- "$frag" "$T/out" "$T/err"; then
    echo "FAIL: $desc (exit $rc, wanted $want, fragment '$frag')"; cat "$T/err"; fail=1
  else
    echo "ok: $desc"
  fi
}
check "--help" 0 "--formats" "$BIN" --help
for opt in --model --data --data-dir --formats --autoflex --epochs --batch --lr --momentum \
           --weight-decay --schedule --no-master --loss-scaling --stochastic-rounding --augment \
           --pad --train-subset --test-subset --synthetic-n --seed --threads --device --out --trace \
           --checkpoint-dir --resume --quiet; do
  grep -q -- "$opt" "$T/out" || { echo "FAIL: --help does not document $opt"; fail=1; }
done
check "unknown option" 2 "unknown option '--bogus'" "$BIN" --bogus
check "unknown format" 2 "unknown format 'fp8'" "$BIN" --formats fp32,fp8
check "unknown preset" 2 "unknown Autoflex preset 'nope'" "$BIN" --formats flex16_5:nope
check "bad epochs" 2 "--epochs: 'zero'" "$BIN" --epochs zero
check "missing value" 2 "--lr needs a value" "$BIN" --lr
check "bad momentum" 2 "--momentum must be in" "$BIN" --momentum 1.5
check "unknown model" 2 "unknown model 'vgg'" "$BIN" --model vgg
check "cifar needs a dir" 2 "needs --data-dir" "$BIN" --data cifar10
check "resume needs a dir" 2 "--resume needs --checkpoint-dir" "$BIN" --resume
for bad in gpu cuda: cuda:x cuda:-1 cuda:1x cuda:99999 ""; do
  check "malformed --device '$bad'" 2 "--device: '$bad' is not cpu, cuda or cuda:N" \
    "$BIN" --device "$bad"
done
check "--device needs a value" 2 "--device needs a value" "$BIN" --device
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
ls "$T/r1"/trace_flex16_5_robust_*.csv >/dev/null 2>&1 || { echo "FAIL: no flex trace CSV"; fail=1; }
[ -f "$T/ck/dfp16.ckpt" ] || { echo "FAIL: no checkpoint"; fail=1; }
check "resume a finished run" 0 "dfp16" "$BIN" --data synthetic --synthetic-n 200 --model mlp \
  --epochs 3 --batch 50 --formats dfp16 --out "$T/r2" --checkpoint-dir "$T/ck" --resume
lines=$(wc -l < "$T/r2/epochs.csv")
[ "$lines" = "2" ] || { echo "FAIL: resumed run trained $((lines-1)) epochs, wanted 1"; fail=1; }
printf 'garbage' > "$T/ck/dfp16.ckpt"
check "corrupt checkpoint refused" 1 "cannot resume" "$BIN" --data synthetic --synthetic-n 200 \
  --model mlp --epochs 3 --batch 50 --formats dfp16 --out "$T/r3" --checkpoint-dir "$T/ck" --resume
exit $fail
