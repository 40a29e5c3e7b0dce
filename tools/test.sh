#!/usr/bin/env bash
# The whole test suite, as CI runs it: setup, a Release build (with CUDA when nvcc exists) and
# its ctest, the API reference (Doxygen, warnings are errors), an AddressSanitizer +
# UndefinedBehaviorSanitizer build and its ctest, bounded fuzzing of every harness in
# tests/fuzz, then an install and a consumer program built against the installed package (CMake
# and pkg-config), and the Python binding's tests.
set -euo pipefail
ROOT="$(cd "$(dirname "$0")/.." && pwd)"
cd "$ROOT"
bash tools/setup.sh
if [ -x /usr/local/cuda/bin/nvcc ] && ! command -v nvcc >/dev/null; then
  export PATH="/usr/local/cuda/bin:$PATH"
fi
JOBS="${JOBS:-$(nproc)}"

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
# The exhaustive 2^32 conversion sweep (label "slow") runs in the Release build above; under
# the sanitizers it would take far longer than the CI budget.
ASAN_OPTIONS=detect_leaks=1:abort_on_error=1 UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1 \
  ctest --test-dir build/asan --output-on-failure -j "$JOBS" -LE slow

echo "== Without MPI: the library, the CLI and the tests of training and its distributed API"
# MPI is optional (FLEXPOINT_MPI=AUTO finds it here): a build without it must compile and pass
# these, with the communicator constructors returning FX_EUNSUPPORTED and test_distributed
# skipping (exit 77). The Release build above covers everything with MPI.
cmake -S . -B build/nompi -DCMAKE_BUILD_TYPE=Release -DFLEXPOINT_MPI=OFF -DFLEXPOINT_CUDA=OFF \
  -DFLEXPOINT_BUILD_BENCH=OFF >/dev/null
cmake --build build/nompi -j "$JOBS" --target flexpoint flexpoint-train test_distributed_api \
  test_train test_policy test_eval_formats error_table
ctest --test-dir build/nompi --output-on-failure -j "$JOBS" \
  -R '^(test_distributed_api|test_distributed|test_train|test_policy|test_eval_formats|test_cli)$'

echo "== Bounded fuzzing (libFuzzer + ASan + UBSan, FUZZ_SECONDS per harness)"
FUZZ_REQUIRE=1 bash tools/fuzz_check.sh

echo "== Install and build a consumer against the installed package"
rm -rf build/prefix build/consumer
cmake --install build/release --prefix "$ROOT/build/prefix" >/dev/null
cmake -S examples/consumer -B build/consumer -DCMAKE_PREFIX_PATH="$ROOT/build/prefix" >/dev/null
cmake --build build/consumer
LD_LIBRARY_PATH="$ROOT/build/prefix/lib:${LD_LIBRARY_PATH:-}" ./build/consumer/consumer
PKG_CONFIG_PATH="$ROOT/build/prefix/lib/pkgconfig" \
  cc -std=c11 examples/consumer/main.c $(PKG_CONFIG_PATH="$ROOT/build/prefix/lib/pkgconfig" pkg-config --cflags --libs flexpoint) \
  -o build/consumer/consumer_pc
LD_LIBRARY_PATH="$ROOT/build/prefix/lib:${LD_LIBRARY_PATH:-}" ./build/consumer/consumer_pc

if [ -d python/tests ]; then
  echo "== Python binding tests"
  FLEXPOINT_LIBRARY="$ROOT/build/release/libflexpoint.so" python3 -m pytest -q python/tests
  # again with host FLEX16_5 writes deferred (their bookkeeping completed later, as on a GPU)
  FLEXPOINT_TEST_DEFER_HOST=1 FLEXPOINT_LIBRARY="$ROOT/build/release/libflexpoint.so" \
    python3 -m pytest -q python/tests
fi
echo "== all tests passed"
