#!/usr/bin/env bash
# Sanitizer and fuzz CI (CPU only): the `asan` preset (clang -O1, ASan + UBSan) runs the
# kernels and server suites and fuzzes request parsing, validation and a CPU sample for
# FUZZ_SECONDS (default 60) from the golden seeds; with TSAN=1 the `tsan` preset runs the
# server and client suites. Only the targets those suites need are built. Prints the time.
set -euo pipefail
cd "$(dirname "$0")/.."
JOBS="${JOBS:-2}"
FUZZ_SECONDS="${FUZZ_SECONDS:-60}"
start=$SECONDS
bash deploy/install-deps.sh

# gRPC, protobuf and abseil come from Debian, uninstrumented: what they do inside is not
# checked (tests/sanitizers/tsan.supp); tests/sanitizers/ubsan.supp lists the one UBSan check
# turned off, with its reason. UBSan halts on any other report.
export ASAN_OPTIONS="detect_leaks=0:abort_on_error=1:detect_stack_use_after_return=0"
export UBSAN_OPTIONS="print_stacktrace=1:halt_on_error=1:suppressions=$PWD/tests/sanitizers/ubsan.supp"
export TSAN_OPTIONS="halt_on_error=1:second_deadlock_stack=1:suppressions=$PWD/tests/sanitizers/tsan.supp"

cmake --preset asan
cmake --build build-asan -j "$JOBS" --target gpusampler_kernels_test gpusampler_server_test \
  gpusampler_request_fuzzer
ctest --test-dir build-asan -L 'kernels|server' -E '^kernels_isa_' --output-on-failure -j "$JOBS"

corpus=build-asan/fuzz-corpus
mkdir -p "$corpus" build-asan/fuzz-seeds
/usr/bin/python3 tests/fuzz/make_seeds.py tests/data/golden_samples.jsonl build-asan/fuzz-seeds
build-asan/bin/gpusampler_request_fuzzer -max_total_time="$FUZZ_SECONDS" -max_len=65536 \
  -rss_limit_mb=2048 -print_final_stats=1 -artifact_prefix=build-asan/ \
  "$corpus" build-asan/fuzz-seeds 2>&1 | tail -n 25

# TSan (TSAN=1): not yet part of CI. Debian's gRPC and abseil are uninstrumented, so data
# they hand between threads (metadata strings, absl's deadlock-detector arrays) is reported
# as races in nearly every server test; tests/sanitizers/tsan.supp holds the suppressions
# found so far, more are needed before this step can gate CI.
if [ "${TSAN:-0}" = 1 ]; then
  cmake --preset tsan
  cmake --build build-tsan -j "$JOBS" --target gpusampler_server_test \
    gpusampler_client_unit_test gpusampler_client_server_test
  ctest --test-dir build-tsan -L 'server|client' --output-on-failure -j "$JOBS"
fi

echo "sanitizers.sh: $(( (SECONDS - start) / 60 )) min $(( (SECONDS - start) % 60 )) s"
