#!/usr/bin/env bash
# Sanitizer and fuzz CI (CPU only): the `asan` preset (clang -O1, ASan + UBSan) runs the
# kernels and server suites, the device-facing part of the server suite once more on the cuda-sim
# device (ctest label cuda-sim), and fuzzes request parsing, validation and a CPU sample for FUZZ_SECONDS (default
# 60) from the golden seeds; then the `tsan` preset (ThreadSanitizer) runs the server and client
# suites, the kernels tests that drive sim streams from other threads (CudaLauncher, Completion,
# the cudasimdevice backends) and a subset of the cuda-sim server suite (TSAN=0 skips it, for
# local speed). Any sanitizer report not suppressed fails the script. Only the targets those
# suites need are built. Prints the time.
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
# TSan: every report is printed (halt_on_error=0) and the process then exits 66, which fails its
# test. ignore_noninstrumented_modules=1: memory accesses made by intercepted functions (memcpy,
# free...) called from the uninstrumented libraries are not checked, while the synchronization
# they do through intercepted calls (pthread, file descriptors) still counts.
export TSAN_OPTIONS="halt_on_error=0:exitcode=66:second_deadlock_stack=1:ignore_noninstrumented_modules=1:suppressions=$PWD/tests/sanitizers/tsan.supp"

# Each phase prints its time, so that CI's time can be cut where it goes.
phase_start=$SECONDS
phase() { echo "sanitizers.sh: $1 $(( SECONDS - phase_start )) s"; phase_start=$SECONDS; }
cmake --preset asan
cmake --build build-asan -j "$JOBS" --target gpusampler_kernels_test gpusampler_server_test \
  gpusampler_request_fuzzer
phase "asan build"
# kernels includes the cuda-sim backends (cudasim, cudasimlarge, cudasimdevice), CudaSimTest and
# the CudaLauncher tests on the sim device. ClassesLargeTest (one 2^27-element row on the CPU,
# ~7 GB) and StagedClassesTest.RowOfTwoToThe25 (a 2^25 row on cuda-sim, 71 s in release) run in
# make test; under ASan they would add minutes and check nothing the smaller class tests do not.
ctest --test-dir build-asan -L 'kernels|server' \
  -E '^kernels_isa_|ClassesLargeTest|StagedClassesTest[.]RowOfTwoToThe25' \
  --output-on-failure -j "$JOBS"
# The server suite on cuda-sim: the suites whose answers come from the CUDA worker (staged
# launches, device datasets and their gather, regions written from staging, epochs' device
# route, streams, fusion, drain, device errors); the rest of it is the CPU run's code again.
asan_sim='^cuda_sim[.](GoldenThroughGrpc|DatasetTest|DatasetScoresTest|SampleStreamTest'
asan_sim+='|ServiceStreamTest|ServiceTest|DrainTest|BatchingIndependence|RegionsTest|EpochsTest'
asan_sim+='|DeviceErrorTest|SchedulerTest|PinnedBudgetTest|CountsTest)[.]'
ctest --test-dir build-asan -L cuda-sim -R "$asan_sim" --output-on-failure -j "$JOBS"
phase "asan ctest"

corpus=build-asan/fuzz-corpus
mkdir -p "$corpus" build-asan/fuzz-seeds
/usr/bin/python3 tests/fuzz/make_seeds.py tests/data/golden_samples.jsonl build-asan/fuzz-seeds
build-asan/bin/gpusampler_request_fuzzer -max_total_time="$FUZZ_SECONDS" -max_len=65536 \
  -rss_limit_mb=2048 -print_final_stats=1 -artifact_prefix=build-asan/ \
  "$corpus" build-asan/fuzz-seeds 2>&1 | tail -n 25
phase "fuzz"

# TSan (default; TSAN=0 skips it). Debian's gRPC and abseil are uninstrumented, so the
# happens-before edges they create (an operation's tag handed to gRPC on one thread and run on
# another, absl::Mutex, the server's OnDone executor) are invisible to TSan: without help nearly
# every gRPC call is reported. tests/sanitizers/tsan_grpc_sync.cc, LD_PRELOADed, declares those
# edges to TSan at gRPC's C API and absl's exported Mutex functions; what is left unexplained by
# them is listed, with reasons, in tests/sanitizers/tsan.supp (never a frame of our code).
if [ "${TSAN:-1}" != 0 ]; then
  tsan_start=$SECONDS
  cmake --preset tsan
  cmake --build build-tsan -j "$JOBS" --target gpusampler_server_test \
    gpusampler_client_unit_test gpusampler_client_server_test gpusampler_kernels_test
  clang++ -std=c++17 -shared -fPIC -O1 -Wall tests/sanitizers/tsan_grpc_sync.cc \
    -o build-tsan/libtsan_grpc_sync.so -ldl -lpthread
  phase "tsan build"
  # BinaryTest.* drive a spawned gpusampler-server process through its port file, signals
  # and timing; TSan in the test process sees only its gRPC client, and its slowdown makes
  # their in-flight windows flaky (a drain test once saw fewer than 3 requests in flight).
  # They run under ASan above and in make test.
  LD_PRELOAD="$PWD/build-tsan/libtsan_grpc_sync.so" \
    ctest --test-dir build-tsan -L 'server|client' -E '^BinaryTest[.]' --output-on-failure \
    -j "$JOBS"
  # The cuda-sim device: its streams are host threads (kernels/src/sim/sim_device.cc) running
  # the copies, kernels and completion callbacks that other threads enqueue, including a
  # callback arriving after CudaLauncher gave up (the timeout test). Kernels: the tests that use
  # sim streams (the host-mode cudasim backends run on the caller's thread and are left to
  # ASan; so are the two long cudasimdevice brute-force rows). Server: the cuda-sim suites whose
  # CUDA workers launch on sim streams while gRPC threads come and go (requests, fusion,
  # datasets' device copies and gather, streams, drain, concurrent clients).
  sim_kernels='CudaLauncherTest\.|CompletionTest\.|LauncherOnDevice\..*/cudasim'
  sim_kernels+='|GoldenBackendTest\..*/cudasimdevice'
  sim_kernels+='|BruteForceTest\.(EdgeSizes|EveryDtype|Ragged|SeedAndRow).*/cudasimdevice'
  sim_server='^cuda_sim\.(GoldenThroughGrpc|DatasetTest|SampleStreamTest|ServiceStreamTest|DrainTest|BatchingIndependence)\.'
  LD_PRELOAD="$PWD/build-tsan/libtsan_grpc_sync.so" \
    ctest --test-dir build-tsan -L 'kernels|cuda-sim' -R "$sim_kernels|$sim_server" \
    --output-on-failure -j "$JOBS"
  phase "tsan ctest"
  echo "sanitizers.sh: tsan $(( SECONDS - tsan_start )) s"
fi

echo "sanitizers.sh: $(( (SECONDS - start) / 60 )) min $(( (SECONDS - start) % 60 )) s"
