#!/bin/sh
# Data-parallel training over MPI (docs/distributed.md), with 2 ranks on this machine:
#  - flex16_5 and dfp16: the CNN trained for 300 steps by one plain process and by 2 ranks
#    gives the same steps.csv, the same epochs.csv (timings aside) and the same weights, bit
#    for bit;
#  - fp32, fp16 and bf16: 2 ranks give the same bits on two runs, and stay within the bound
#    of docs/distributed.md of the one-process run after 10 steps;
#  - a rank that cannot load its data stops every rank with a message naming it, and a rank
#    killed in the middle of training ends the job, each within a time limit (no hang);
#  - a killed rank's job ends with mpiexec's message naming the rank and the signal;
#  - 2 epochs, then 2 more resumed from the checkpoint, equal 4 uninterrupted epochs in every
#    format (FX_TEST_RESUME_FORMATS, a comma-separated list, narrows it for a quicker local
#    run; tools/test.sh resumes all five in both builds), and run.json records the rank
#    count.
# FX_TEST_SHORT=1 (set by CMake in a sanitizer build) runs every check on fewer steps: 90
# instead of 300 in the first, 10 instead of 20 an epoch in the last. The sanitizers look for
# memory errors and undefined behaviour, which take the same code paths in a short run; the
# Release build runs the full counts.
# usage: test_distributed.sh path/to/flexpoint-train path/to/libflexpoint.so MPI(ON|OFF) MPIEXEC
# Exit 77 (ctest's skip) when the library has no MPI or there is no mpiexec.
BIN="$1"
LIB="$2"
HAVE_MPI="$3"
MPIEXEC="$4"
SRC=$(cd "$(dirname "$0")/.." && pwd)
if [ "$HAVE_MPI" != "ON" ] || [ -z "$MPIEXEC" ] || ! command -v "$MPIEXEC" >/dev/null 2>&1; then
  echo "skipped: flexpoint was built without MPI, or mpiexec is missing"
  exit 77
fi
T=$(mktemp -d)
trap 'rm -rf "$T"' EXIT
fail=0
# Open MPI refuses root without --allow-run-as-root; --oversubscribe lets 2 ranks start on a
# machine that reports fewer free slots
MPI="$MPIEXEC --oversubscribe"
[ "$(id -u)" = "0" ] && MPI="$MPI --allow-run-as-root"
# one thread per rank: 2 ranks share the 2 cores
COMMON="--data synthetic --model cnn --threads 1 --quiet"
ok() { echo "ok: $1"; }
bad() { echo "FAIL: $1"; fail=1; }

# largest |a - b| / max |a| over the weights of two weights files
wdiff() {
  FLEXPOINT_LIBRARY="$LIB" PYTHONPATH="$SRC/python" python3 - "$1" "$2" <<'EOF'
import sys
import numpy as np
from flexpoint import weights
a, b = weights.read(sys.argv[1]), weights.read(sys.argv[2])
assert a.keys() == b.keys()
print(max(float(np.max(np.abs(a[k].astype(np.float64) - b[k]))) / max(float(np.max(np.abs(a[k]))), 1e-30) for k in a))
EOF
}

# epochs.csv without the timing columns (seconds, images_per_second)
untimed() { cut -d, -f1-7,10- "$1"; }

# the steps of check 1 and the images of check 4 (FX_TEST_SHORT above)
STEPS=300
RESUME_IMAGES=320
if [ "${FX_TEST_SHORT:-0}" = 1 ]; then
  STEPS=90
  RESUME_IMAGES=160
fi

# 1. integer formats: STEPS steps (3 epochs of STEPS / 3 batches of 16), one process against
#    2 ranks
A="$COMMON --synthetic-n $((STEPS * 16 / 3)) --batch 16 --epochs 3 --formats flex16_5,dfp16 --export-weights"
timeout 600 "$BIN" $A --out "$T/one" >"$T/one.log" 2>&1 || { bad "one-process run"; cat "$T/one.log"; }
timeout 600 $MPI -np 2 "$BIN" --distributed $A --out "$T/two" >"$T/two.log" 2>&1 ||
  { bad "2-rank run"; cat "$T/two.log"; }
if [ "$(wc -l <"$T/one/steps.csv")" -lt $((STEPS / 5)) ]; then
  bad "steps.csv of the one-process run is short"
elif cmp -s "$T/one/steps.csv" "$T/two/steps.csv"; then
  ok "flex16_5 and dfp16: steps.csv of 1 process and 2 ranks are identical"
else
  bad "steps.csv differs between 1 process and 2 ranks"; diff "$T/one/steps.csv" "$T/two/steps.csv" | head
fi
if [ "$(untimed "$T/one/epochs.csv")" = "$(untimed "$T/two/epochs.csv")" ]; then
  ok "flex16_5 and dfp16: epochs.csv (losses, accuracies, health counts) identical"
else
  bad "epochs.csv differs"; untimed "$T/one/epochs.csv"; untimed "$T/two/epochs.csv"
fi
for f in flex16_5 dfp16; do
  if cmp -s "$T/one/weights_$f.fxw" "$T/two/weights_$f.fxw"; then
    ok "$f: weights after $STEPS steps identical, bit for bit"
  else
    bad "$f: weights differ between 1 process and 2 ranks"
  fi
done
if [ -f "$T/two/distributed.csv" ] && grep -q "^flex16_5,2,$STEPS," "$T/two/distributed.csv"; then
  ok "distributed.csv reports the bytes per step"
else
  bad "distributed.csv is missing or incomplete"; cat "$T/two/distributed.csv"
fi

# 2. float formats: 10 steps; same bits on a second 2-rank run, bounded against one process
F="$COMMON --synthetic-n 160 --batch 16 --epochs 1 --formats fp32,fp16,bf16 --export-weights"
timeout 300 "$BIN" $F --out "$T/f1" >"$T/f1.log" 2>&1 || { bad "float one-process run"; cat "$T/f1.log"; }
for r in a b; do
  timeout 300 $MPI -np 2 "$BIN" --distributed $F --out "$T/f2$r" >"$T/f2$r.log" 2>&1 ||
    { bad "float 2-rank run $r"; cat "$T/f2$r.log"; }
done
for f in fp32 fp16 bf16; do
  if cmp -s "$T/f2a/weights_$f.fxw" "$T/f2b/weights_$f.fxw" && cmp -s "$T/f2a/steps.csv" "$T/f2b/steps.csv"
  then ok "$f: two 2-rank runs give the same bits"
  else bad "$f: two 2-rank runs differ"
  fi
  # the bounds of docs/distributed.md: 1e-5 (fp32), 5e-2 (fp16, bf16) after 10 steps
  bound=0.05
  [ "$f" = fp32 ] && bound=0.00001
  d=$(wdiff "$T/f1/weights_$f.fxw" "$T/f2a/weights_$f.fxw")
  if [ -n "$d" ] && python3 -c "import sys; sys.exit(0 if float('$d') <= $bound else 1)"; then
    ok "$f: 2 ranks within $bound of one process after 10 steps ($d)"
  else
    bad "$f: 2 ranks differ from one process by '$d' (bound $bound)"
  fi
done

# 3. a failing rank: rank 1 cannot load its data; both ranks stop, rank 1 named, no hang
timeout 120 $MPI -np 1 "$BIN" --distributed $COMMON --synthetic-n 160 --batch 16 --out "$T/e0" \
  : -np 1 "$BIN" --distributed --data cifar10 --data-dir "$T/nonexistent" --model cnn --threads 1 \
  --batch 16 --out "$T/e1" >"$T/fail.log" 2>&1
rc=$?
if [ "$rc" = 124 ]; then
  bad "a rank without data: the job hung (killed by the time limit)"
elif [ "$rc" != 0 ] && grep -q "rank 0: stopping: rank 1 could not load the data" "$T/fail.log" &&
     grep -q "rank 1: could not load the data" "$T/fail.log"; then
  ok "a rank without data stops the job (exit $rc) with a message naming it"
else
  bad "a rank without data (exit $rc)"; cat "$T/fail.log"
fi
# a rank killed in the middle of training: mpiexec ends the job, the other rank does not wait
timeout 120 $MPI -np 1 "$BIN" --distributed $COMMON --synthetic-n 20000 --batch 16 --epochs 50 \
  --formats flex16_5 --out "$T/k0" : -np 1 timeout -s KILL 3 "$BIN" --distributed $COMMON \
  --synthetic-n 20000 --batch 16 --epochs 50 --formats flex16_5 --out "$T/k1" >"$T/kill.log" 2>&1
rc=$?
if [ "$rc" = 124 ]; then
  bad "a killed rank: the job hung (killed by the time limit)"
elif [ "$rc" != 0 ] && grep -q "rank 1 .*exited on signal 9" "$T/kill.log"; then
  ok "a killed rank ends the job (exit $rc) with a message naming the rank and the signal"
else
  bad "a killed rank (exit $rc): no failure, or no message naming rank 1"; cat "$T/kill.log"
fi

# 4. resume: 2 epochs, then 2 more from the checkpoint, against 4 epochs at once (2 ranks)
RF="${FX_TEST_RESUME_FORMATS:-fp32,fp16,bf16,flex16_5,dfp16}"
R="$COMMON --synthetic-n $RESUME_IMAGES --batch 16 --formats $RF --export-weights"
timeout 300 $MPI -np 2 "$BIN" --distributed $R --epochs 4 --out "$T/r4" >"$T/r4.log" 2>&1 ||
  { bad "uninterrupted run"; cat "$T/r4.log"; }
timeout 300 $MPI -np 2 "$BIN" --distributed $R --epochs 2 --checkpoint-dir "$T/ck" --out "$T/ra" \
  >"$T/ra.log" 2>&1 || { bad "first half"; cat "$T/ra.log"; }
timeout 300 $MPI -np 2 "$BIN" --distributed $R --epochs 4 --checkpoint-dir "$T/ck" --resume \
  --out "$T/rb" >"$T/rb.log" 2>&1 || { bad "resumed half"; cat "$T/rb.log"; }
grep -q '"ranks": 2}' "$T/r4/run.json" || { bad "run.json does not record 2 ranks"; cat "$T/r4/run.json"; }
for f in $(echo "$RF" | tr , ' '); do
  if cmp -s "$T/r4/weights_$f.fxw" "$T/rb/weights_$f.fxw" &&
     [ "$(awk -F, -v f="$f" '$1 == f && $3 >= 3' "$T/r4/steps.csv")" = \
       "$(awk -F, -v f="$f" '$1 == f' "$T/rb/steps.csv")" ] &&
     [ "$(untimed "$T/r4/epochs.csv" | grep "^$f,cnn,[34],")" = "$(untimed "$T/rb/epochs.csv" | grep "^$f,")" ]
  then ok "$f: resumed after 2 epochs = 4 uninterrupted epochs (weights, steps, epochs)"
  else bad "$f: the resumed run differs from the uninterrupted one"
  fi
done
exit $fail
