#!/usr/bin/env bash
# The whole test suite, as CI runs it: setup, a Release build (with CUDA when nvcc exists) and
# its ctest, the API reference (Doxygen, warnings are errors), an AddressSanitizer +
# UndefinedBehaviorSanitizer build and its ctest, bounded fuzzing of every harness in
# tests/fuzz, then an install and two consumer programs built against the installed package
# (CMake and pkg-config): one using tensors only (libflexpoint, which must not need zlib or
# MPI) and one that trains (libflexpoint_train), and the Python binding's tests.
set -euo pipefail
ROOT="$(cd "$(dirname "$0")/.." && pwd)"
cd "$ROOT"
bash tools/setup.sh
if [ -x /usr/local/cuda/bin/nvcc ] && ! command -v nvcc >/dev/null; then
  export PATH="/usr/local/cuda/bin:$PATH"
fi
JOBS="${JOBS:-$(nproc)}"
# ctest -j runs JOBS test processes at once, each with its OpenMP threads on the same cores;
# libgomp's spinning waiters would hold the cores the other processes need (docs/performance.md,
# "Several processes on the same cores", has the measurements). The results do not depend on
# it; a caller's own setting is kept.
export OMP_WAIT_POLICY="${OMP_WAIT_POLICY:-passive}"

# The builds below take about 0.6 GB together (docs/testing.md). A machine with less than
# FLEXPOINT_TEST_MIN_FREE_KB free (default 4 GB; CI machines have run out of disk in the
# Release build) removes the sanitizer, no-MPI and fuzzing trees once their stages are done,
# so that only one of them is on disk at a time beside the Release tree, which the install
# and the Python tests need to the end.
echo "== Free disk where the builds go: $(df -Ph . | awk 'NR == 2 {print $4}')"
drop_tree_if_short() {
  local free
  free=$(df -Pk . | awk 'NR == 2 {print $4}')
  if [ "$free" -lt "${FLEXPOINT_TEST_MIN_FREE_KB:-4000000}" ]; then
    echo "== Short of disk ($free KB free): removing $1, whose stage is done"
    rm -rf "$1"
  fi
}
echo "== Release build"
cmake -S . -B build/release -DCMAKE_BUILD_TYPE=Release >/dev/null
cmake --build build/release -j "$JOBS"
ctest --test-dir build/release --output-on-failure -j "$JOBS"

echo "== API reference (Doxygen; any warning fails)"
cmake --build build/release --target docs

echo "== AddressSanitizer + UndefinedBehaviorSanitizer build"
cmake -S . -B build/asan -DCMAKE_BUILD_TYPE=RelWithDebInfo -DFLEXPOINT_SANITIZE=address,undefined \
  -DFLEXPOINT_CUDA=OFF -DFLEXPOINT_BUILD_BENCH=OFF >/dev/null
cmake --build build/asan -j "$JOBS"
# The exhaustive 2^32 conversion sweep and the other programs labelled "slow" run in the
# Release build above; under the sanitizers they would take far longer than the CI budget.
ASAN_OPTIONS=detect_leaks=1:abort_on_error=1 UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1 \
  ctest --test-dir build/asan --output-on-failure -j "$JOBS" -LE slow
drop_tree_if_short build/asan

echo "== Without MPI: the library, the CLI and the tests of training and its distributed API"
# MPI is optional (FLEXPOINT_MPI=AUTO finds it here): a build without it must compile and pass
# these, with the communicator constructors returning FX_EUNSUPPORTED and test_distributed
# skipping (exit 77). The Release build above covers everything with MPI.
cmake -S . -B build/nompi -DCMAKE_BUILD_TYPE=Release -DFLEXPOINT_MPI=OFF -DFLEXPOINT_CUDA=OFF \
  -DFLEXPOINT_BUILD_BENCH=OFF >/dev/null
cmake --build build/nompi -j "$JOBS" --target flexpoint flexpoint_train flexpoint-train \
  flexpoint_tests error_table
ctest --test-dir build/nompi --output-on-failure -j "$JOBS" \
  -R '^(test_distributed_api|test_distributed|test_train|test_policy|test_eval_formats|test_cli)$'
drop_tree_if_short build/nompi

echo "== Bounded fuzzing (libFuzzer + ASan + UBSan, FUZZ_SECONDS per harness)"
FUZZ_REQUIRE=1 bash tools/fuzz_check.sh
drop_tree_if_short "${FUZZ_BUILD_DIR:-build/fuzz}"

echo "== Install and build the consumers against the installed package"
rm -rf build/prefix build/consumer
cmake --install build/release --prefix "$ROOT/build/prefix" >/dev/null
PREFIX_LIB="$ROOT/build/prefix/lib"
# libflexpoint is the tensor library alone: its NEEDED entries name neither zlib nor MPI
needed=$(readelf -d "$PREFIX_LIB/libflexpoint.so" | grep NEEDED || true)
if printf '%s\n' "$needed" | grep -E 'libz\.|libmpi'; then
  echo "libflexpoint.so needs zlib or MPI (above); they belong to libflexpoint_train" >&2
  exit 1
fi
readelf -d "$PREFIX_LIB/libflexpoint_train.so" | grep -q 'NEEDED.*libflexpoint\.so' ||
  { echo "libflexpoint_train.so does not link libflexpoint.so" >&2; exit 1; }
# CMake: consumer links flexpoint::flexpoint, train_consumer flexpoint::flexpoint_train
cmake -S examples/consumer -B build/consumer -DCMAKE_PREFIX_PATH="$ROOT/build/prefix" >/dev/null
cmake --build build/consumer
if readelf -d build/consumer/consumer | grep NEEDED | grep -E 'libflexpoint_train|libz\.|libmpi'; then
  echo "the tensor-only consumer needs more than libflexpoint (above)" >&2
  exit 1
fi
LD_LIBRARY_PATH="$PREFIX_LIB:${LD_LIBRARY_PATH:-}" ./build/consumer/consumer
LD_LIBRARY_PATH="$PREFIX_LIB:${LD_LIBRARY_PATH:-}" ./build/consumer/train_consumer
# pkg-config: flexpoint.pc for the tensor program, flexpoint_train.pc (Requires: flexpoint) for
# the training one
export PKG_CONFIG_PATH="$PREFIX_LIB/pkgconfig"
cc -std=c11 examples/consumer/main.c $(pkg-config --cflags --libs flexpoint) \
  -o build/consumer/consumer_pc
cc -std=c11 examples/consumer/train_main.c $(pkg-config --cflags --libs flexpoint_train) -lm \
  -o build/consumer/train_consumer_pc
unset PKG_CONFIG_PATH
LD_LIBRARY_PATH="$PREFIX_LIB:${LD_LIBRARY_PATH:-}" ./build/consumer/consumer_pc
LD_LIBRARY_PATH="$PREFIX_LIB:${LD_LIBRARY_PATH:-}" ./build/consumer/train_consumer_pc

if [ -d python/tests ]; then
  echo "== Python binding tests"
  # the binding loads libflexpoint.so and, from the same folder, libflexpoint_train.so
  FLEXPOINT_LIBRARY="$ROOT/build/release/libflexpoint.so" python3 -m pytest -q python/tests
  # again with host FLEX16_5 writes deferred (their bookkeeping completed later, as on a GPU)
  FLEXPOINT_TEST_DEFER_HOST=1 FLEXPOINT_LIBRARY="$ROOT/build/release/libflexpoint.so" \
    python3 -m pytest -q python/tests
fi
echo "== all tests passed"
