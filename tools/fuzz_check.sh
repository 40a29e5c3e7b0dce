#!/usr/bin/env bash
# Bounded fuzzing for CI: builds every tests/fuzz/fuzz_*.c harness with clang's libFuzzer,
# AddressSanitizer and UndefinedBehaviorSanitizer, runs each for a bounded time over its seed
# corpus, and fails if any harness finds a crash, a sanitizer report, a leak, a hang or a
# broken property (the harnesses abort on those).
#
# Environment:
#   FUZZ_SECONDS   seconds per harness (default 30)
#   FUZZ_JOBS      harnesses fuzzed at the same time, and compile jobs (default 2)
#   FUZZ_ONLY      space-separated harness names to run (e.g. "fuzz_idx fuzz_checkpoint")
#   FUZZ_BUILD_DIR where objects, binaries, new inputs and logs go (default build/fuzz)
#   FUZZ_CC        the compiler (default clang; it must have the libFuzzer runtime)
#   FUZZ_REQUIRE   1: fail (rather than skip with status 0) when that compiler cannot fuzz
#
# Harnesses link against the whole library, compiled here with -fsanitize=fuzzer-no-link so
# that its code is coverage-instrumented, with the per-file ISA flags of CMakeLists.txt and the
# CUDA-less src/gpu/*_none.c stand-ins and the MPI-less src/dist/distributed_none.c; OpenMP is
# left out (its pragmas are ignored). A harness that needs more sources names them, relative
# to the repository root, in a comment line:
#   /* fuzz-sources: tools/cli_options.c */
# and libFuzzer options it needs in another:
#   /* fuzz-options: -max_len=10000 */
# Seeds are read from tests/fuzz/corpus/<name without "fuzz_">/ when that folder exists; new
# inputs go to $FUZZ_BUILD_DIR/corpus/<name>/ and crash inputs to $FUZZ_BUILD_DIR/artifacts/
# (add them to the checked-in corpus as crash-* after fixing: tests/fuzz/README.md).
set -euo pipefail
ROOT="$(cd "$(dirname "$0")/.." && pwd)"
cd "$ROOT"

SECONDS_EACH="${FUZZ_SECONDS:-30}"
JOBS="${FUZZ_JOBS:-2}"
OUT="${FUZZ_BUILD_DIR:-$ROOT/build/fuzz}"
CC="${FUZZ_CC:-clang}"

skip() {
  if [ "${FUZZ_REQUIRE:-0}" = 1 ]; then
    echo "fuzz_check: $1" >&2
    exit 1
  fi
  echo "fuzz_check: SKIP: $1"
  exit 0
}

command -v "$CC" >/dev/null 2>&1 || skip "no $CC"
mkdir -p "$OUT/obj" "$OUT/bin" "$OUT/corpus" "$OUT/artifacts" "$OUT/logs"
probe="$OUT/probe.c"
printf '#include <stddef.h>\n#include <stdint.h>\nint LLVMFuzzerTestOneInput(const uint8_t *d, size_t n);\nint LLVMFuzzerTestOneInput(const uint8_t *d, size_t n) { (void)d; (void)n; return 0; }\n' >"$probe"
"$CC" -fsanitize=fuzzer,address,undefined "$probe" -o "$OUT/probe" >/dev/null 2>&1 ||
  skip "$CC cannot build libFuzzer targets (-fsanitize=fuzzer,address,undefined)"

SAN="-fsanitize=address,undefined -fno-sanitize-recover=all -fno-omit-frame-pointer"
CFLAGS_COMMON="-g -O1 -std=c11 -Wall -Wextra -Wno-unused-parameter -Wno-unknown-pragmas \
-Iinclude -Isrc $SAN"
AVX2="-mavx2 -mfma -mf16c"
AVX512="$AVX2 -mavx512f -mavx512bw -mavx512vl -mavx512dq -mavx512vnni"

# ---- The library, once (objects rebuilt when their source, any header or this script is
# newer) -------------------------------------------------------------------------------------
LIB="$OUT/libflexpoint_fuzz.a"
SOURCES=()
for d in core cpu fp32 fp16 bf16 flex autoflex nn data train; do
  for f in "src/$d"/*.c; do SOURCES+=("$f"); done
done
SOURCES+=(src/dist/distributed_none.c) # the MPI-less communicator (docs/distributed.md)

newest_header="$(find include src -name '*.h' -newer "$LIB" -print -quit 2>/dev/null || true)"
[ -f "$LIB" ] || newest_header=all
[ "$0" -nt "$LIB" ] 2>/dev/null && newest_header=script

isa_flags() {
  case "$1" in
    *_amx.c) echo "$AVX512 -mavx512bf16 -mavx512vbmi -mamx-tile -mamx-bf16 -mamx-int8" ;;
    *_avx512bf16.c) echo "$AVX512 -mavx512bf16" ;;
    *batchnorm_avx512.c) echo "$AVX512 -ffp-contract=off" ;; # the portable loops' bits
    *_avx512.c) echo "$AVX512" ;;
    *batchnorm_avx2.c) echo "$AVX2 -ffp-contract=off" ;; # the portable loops' bits (CMakeLists.txt)
    *_avx2.c) echo "$AVX2" ;;
    *) echo "" ;;
  esac
}

TO_BUILD=()
OBJECTS=()
for src in "${SOURCES[@]}"; do
  obj="$OUT/obj/$(echo "${src%.c}" | tr / _).o"
  OBJECTS+=("$obj")
  if [ -n "$newest_header" ] || [ ! -f "$obj" ] || [ "$src" -nt "$obj" ]; then
    TO_BUILD+=("$src")
  fi
done

compile_one() {
  local src="$1" obj
  obj="$OUT/obj/$(echo "${src%.c}" | tr / _).o"
  # shellcheck disable=SC2046,SC2086
  "$CC" $CFLAGS_COMMON -fsanitize=fuzzer-no-link $(isa_flags "$src") -c "$src" -o "$obj"
}
export -f compile_one isa_flags
export CC CFLAGS_COMMON AVX2 AVX512 OUT

start=$(date +%s)
if [ "${#TO_BUILD[@]}" -gt 0 ]; then
  echo "fuzz_check: compiling ${#TO_BUILD[@]} library sources with $CC"
  # shellcheck disable=SC2016 # $1 is expanded by the inner bash
  printf '%s\n' "${TO_BUILD[@]}" | xargs -P "$JOBS" -I{} bash -c 'compile_one "$1"' _ {}
  rm -f "$LIB"
  ar rcs "$LIB" "${OBJECTS[@]}"
fi

# ---- Harnesses ------------------------------------------------------------------------------
HARNESSES=()
for h in tests/fuzz/fuzz_*.c; do
  name="$(basename "$h" .c)"
  if [ -n "${FUZZ_ONLY:-}" ] && ! [[ " $FUZZ_ONLY " == *" $name "* ]]; then continue; fi
  HARNESSES+=("$h")
done
[ "${#HARNESSES[@]}" -gt 0 ] || skip "no harness matches FUZZ_ONLY='${FUZZ_ONLY:-}'"

# The text after "<key>:" in a harness's comment lines, e.g. directive fuzz-sources.
directive() {
  sed -n "s|.*$1:[[:space:]]*\\(.*\\)|\\1|p" "$2" | sed 's|[[:space:]]*\*/.*||' | tr '\n' ' '
}

for h in "${HARNESSES[@]}"; do
  name="$(basename "$h" .c)"
  extra="$(directive fuzz-sources "$h")"
  for s in $extra; do
    [ -f "$s" ] || { echo "fuzz_check: $h names a missing source: $s" >&2; exit 1; }
  done
  echo "fuzz_check: building $name${extra:+ (with $extra)}"
  # shellcheck disable=SC2086
  "$CC" $CFLAGS_COMMON -fsanitize=fuzzer -Itests/fuzz -Itools "$h" $extra "$LIB" \
    -lz -lm -lpthread -o "$OUT/bin/$name"
done
echo "fuzz_check: built in $(($(date +%s) - start)) s"

# ---- Runs, FUZZ_JOBS at a time ---------------------------------------------------------------
run_one() {
  local h="$1" name seeds work log opts
  name="$(basename "$h" .c)"
  seeds="tests/fuzz/corpus/${name#fuzz_}"
  work="$OUT/corpus/$name"
  log="$OUT/logs/$name.log"
  mkdir -p "$work"
  opts="$(directive fuzz-options "$h")"
  local dirs=("$work")
  [ -d "$seeds" ] && dirs+=("$seeds")
  # shellcheck disable=SC2086
  if ASAN_OPTIONS="detect_leaks=1:abort_on_error=1:allocator_may_return_null=0" \
    UBSAN_OPTIONS="print_stacktrace=1:halt_on_error=1" \
    "$OUT/bin/$name" -max_total_time="$SECONDS_EACH" -timeout=25 -rss_limit_mb=4096 \
    -print_final_stats=1 -artifact_prefix="$OUT/artifacts/$name-" $opts "${dirs[@]}" \
    >"$log" 2>&1; then
    echo "fuzz_check: $name: ok ($(grep -o 'stat::number_of_executed_units: *[0-9]*' "$log" |
      grep -o '[0-9]*$' || echo '?') runs in ${SECONDS_EACH} s)"
    echo 0 >"$OUT/logs/$name.status"
  else
    echo "fuzz_check: $name: FAILED (log: $log)" >&2
    tail -n 60 "$log" >&2
    echo 1 >"$OUT/logs/$name.status"
  fi
}

rm -f "$OUT"/logs/*.status
running=0
for h in "${HARNESSES[@]}"; do
  run_one "$h" &
  running=$((running + 1))
  if [ "$running" -ge "$JOBS" ]; then
    wait -n || true
    running=$((running - 1))
  fi
done
wait || true

failed=0
for h in "${HARNESSES[@]}"; do
  name="$(basename "$h" .c)"
  if [ "$(cat "$OUT/logs/$name.status" 2>/dev/null || echo 1)" != 0 ]; then
    failed=$((failed + 1))
  fi
done
echo "fuzz_check: ${#HARNESSES[@]} harnesses, $failed failed, $(($(date +%s) - start)) s in all"
[ "$failed" -eq 0 ]
