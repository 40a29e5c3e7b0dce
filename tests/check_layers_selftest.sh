#!/bin/sh
# tests/check_layers.sh must fail on what it is there to refuse: on a scratch tree of empty
# layer folders, a clean set of includes passes, and each kind of forbidden include (one per
# run) makes it exit 1 and name the file.
# Usage: tests/check_layers_selftest.sh [SOURCE_ROOT]
set -u
root=${1:-$(dirname "$0")/..}
check="$root/tests/check_layers.sh"
T=$(mktemp -d)
trap 'rm -rf "$T"' EXIT
fail=0

fresh() {
    rm -rf "$T/src"
    for d in autoflex core flex nn gpu fp32 fp16 bf16 cpu train data dist; do
        mkdir -p "$T/src/$d"
    done
    printf '#include "internal.h"\n#include "flexpoint_nn.h"\n#include <stdio.h>\n' >"$T/src/core/ok.c"
    printf '#include "flexpoint_train.h"\n#include "../core/internal.h"\n' >"$T/src/train/ok.c"
    printf '#include "flexpoint.h"\n#include "../flex/flex_math.h"\n' >"$T/src/autoflex/ok.c"
}

fresh
if sh "$check" "$T" >"$T/out" 2>&1; then
    echo "ok: a clean tree passes"
else
    echo "FAIL: a clean tree fails:"; cat "$T/out"; fail=1
fi

# file | include line: each must be refused
while IFS='|' read -r file line; do
    fresh
    printf '%s\n' "$line" >"$T/src/$file"
    sh "$check" "$T" >"$T/out" 2>&1
    rc=$?
    if [ "$rc" = 1 ] && grep -q "src/$file" "$T/out"; then
        echo "ok: refused $file: $line"
    else
        echo "FAIL: $file: $line gave exit $rc:"; cat "$T/out"; fail=1
    fi
done <<'LIST'
core/a.c|#include "flexpoint_train.h"
core/b.h|#include <flexpoint_data.h>
nn/c.c|#include "flexpoint_model.h"
nn/d.c|#include "../train/trainer.h"
gpu/e.cu|#include "../dist/distributed.h"
gpu/f.cuh|#include "../data/data_internal.h"
fp32/g.c|# include "../train/model.h"
cpu/h.c|#include "flexpoint_train.h"
flex/i.c|#include "../data/data_internal.h"
autoflex/j.c|#include "../core/internal.h"
LIST
exit $fail
