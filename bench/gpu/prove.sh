#!/usr/bin/env bash
# bench/gpu/prove.sh: issue 8's GPU proof in one prepared call on a device machine (an H200
# with CUDA 13, CMake, Python and PyTorch 2, but no gRPC / protobuf / spdlog / prometheus-cpp
# dev packages), inside ~8 minutes. It
#   1. builds the kernels-only preset there for sm_90 (kernels, their tests, gpusampler-bench;
#      without GTest there, the tests are taken from the carried bundle instead);
#   2. runs the kernel test suite (the CUDA cases run; none may be skipped);
#   3. runs compute-sanitizer memcheck, racecheck and synccheck on the CUDA tests, if present;
#   4. runs the kernel bench against PyTorch eager and torch.compile (bench/compare.sh
#      --backend cuda; B=32 x N=1e3..1e6 and B=1 x N=1e7, K = N/10, int64 labels);
#   5. runs the service checks and bench from the carried server bundle
#      (bench/service_bench_gpu.sh run; the loopback bench scrapes the GPU utilization gauge);
#   6. writes bench/results/h200.md (and every log) under $OUT.
#
# usage:
#   bench/gpu/prove.sh pack [BUILD_DIR]   # here: bundle server, benches and kernel tests with
#                                         # their ldd-collected libraries into
#                                         # BUILD_DIR/gpu-carry (default build-gpu)
#   bench/gpu/prove.sh run  [BUILD_DIR]   # there, with BUILD_DIR/gpu-carry carried
#   REHEARSE=1 bench/gpu/prove.sh run     # here, without a GPU: the same steps on the
#                                         # cuda-sim device (the CUDA pipeline, workers and
#                                         # launcher run on the host), to check the script
# The device call (one command, timeout_s 560, carry ["build-gpu/gpu-carry"]):
#   bash bench/gpu/prove.sh run build-gpu
# env: OUT            where results go (default /tmp/gpusampler-prove)
#      PROVE_SECONDS  budget for all steps (default 470); steps are cut to what is left
#      PROVE_CMAKE_ARGS extra configure arguments (the rehearsal passes
#                     -DCMAKE_DISABLE_FIND_PACKAGE_GTest=ON to take the no-GTest path)
#      PROVE_SIZES    cells of the kernel bench (default "32:1000 32:10000 32:100000
#                     32:1000000 1:10000000")
#      PROVE_STEP_SCALE multiply every step's time limit (the rehearsal on a slow machine)
#      PROVE_ARCH     CUDA architectures of the build there (default 90)
#      PYTHON         interpreter with torch (default python3)
set -uo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
root="$(cd "$here/../.." && pwd)"
mode="${1:-run}"
build="${2:-build-gpu}"
[[ "$build" = /* ]] || build="$root/$build"
carry="$build/gpu-carry"
rehearse="${REHEARSE:-0}"

case "$mode" in
  pack)
    bins="gpusampler-server gpusampler-probe gpusampler-service-bench gpusampler-bench gpusampler_kernels_test"
    rm -rf "$carry"
    mkdir -p "$carry/bin" "$carry/lib"
    for b in $bins; do
      [[ -x "$build/bin/$b" ]] || { echo "prove.sh pack: missing $build/bin/$b (build first)" >&2; exit 1; }
      cp "$build/bin/$b" "$carry/bin/"
    done
    # Every shared library they load, except glibc's and the driver's (the device machine
    # has its own, matching its kernel module).
    for b in $bins; do ldd "$build/bin/$b"; done | awk '/=> \//{print $3}' | sort -u |
      grep -vE '/(libc|libm|libpthread|libdl|librt|ld-linux[^/]*|libcuda|libnvidia-ml)\.so' |
      xargs -I{} cp -L {} "$carry/lib/"
    strip --strip-unneeded "$carry/bin/"* "$carry/lib/"* 2>/dev/null || true
    # The kernel tests read their golden data from the source tree they were built in.
    echo "$root" >"$carry/source-root"
    du -sh "$carry"
    exit 0
    ;;
  run) ;;
  *) echo "usage: prove.sh pack|run [BUILD_DIR]" >&2; exit 2 ;;
esac

out="${OUT:-/tmp/gpusampler-prove}"
mkdir -p "$out/logs" "$out/bench/results"
logs="$out/logs"
budget="${PROVE_SECONDS:-470}"
py="${PYTHON:-python3}"
arch="${PROVE_ARCH:-90}"
sizes="${PROVE_SIZES:-32:1000 32:10000 32:100000 32:1000000 1:10000000}"
backend=cuda
server_device=cuda
if [[ "$rehearse" == 1 ]]; then
  backend=cuda-sim
  server_device=cuda-sim
  sizes="${PROVE_SIZES:-32:1000 1:10000}"
  [[ -n "${PYTHON:-}" ]] || py=/usr/bin/python3
fi
steps="$logs/steps.tsv"
: >"$steps"

left() { echo $(( budget - SECONDS )); }
# step NAME SECONDS CMD...: runs CMD with a timeout of min(SECONDS, what is left - 15),
# logs to $logs/NAME.log and records the outcome.
step() {
  local name="$1" want=$(( $2 * ${PROVE_STEP_SCALE:-1} )); shift 2
  local limit=$(( $(left) - 15 ))
  (( limit < want )) || limit="$want"
  if (( limit < 5 )); then
    printf '%s\tskipped (no time left)\t0\n' "$name" >>"$steps"
    echo "== $name: skipped, no time left" >&2
    return 124
  fi
  echo "== $name (limit ${limit}s)" >&2
  local t0=$SECONDS rc=0
  timeout --kill-after=5 "$limit" "$@" >"$logs/$name.log" 2>&1 || rc=$?
  local status="ok"
  (( rc == 0 )) || status="failed (exit $rc)"
  (( rc != 124 && rc != 137 )) || status="timed out after ${limit}s"
  printf '%s\t%s\t%s\n' "$name" "$status" "$(( SECONDS - t0 ))" >>"$steps"
  echo "   $status in $(( SECONDS - t0 ))s" >&2
  return $rc
}

# 0. The machine.
{
  echo "date: $(date -u '+%Y-%m-%dT%H:%M:%SZ')"
  echo "commit: $(git -C "$root" rev-parse HEAD 2>/dev/null || echo unknown)"
  if command -v nvidia-smi >/dev/null 2>&1; then
    nvidia-smi --query-gpu=name,memory.total,driver_version,clocks.sm,clocks.mem --format=csv 2>&1
  else
    echo "no nvidia-smi"
  fi
  nvcc --version 2>&1 | tail -2 || echo "no nvcc"
  cmake --version 2>&1 | head -1
  "$py" -c 'import torch; print("torch", torch.__version__, "cuda", torch.version.cuda, "available", torch.cuda.is_available())' 2>&1
  command -v compute-sanitizer || echo "no compute-sanitizer"
  nproc
} >"$logs/machine.txt" 2>&1

export LD_LIBRARY_PATH="$carry/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"

# 1. The kernels-only build, for this GPU's architecture.
kbuild="$root/build-kernels-prove"
gen=()
command -v ninja >/dev/null 2>&1 && gen=(-G Ninja)
# The kernels-only preset's cache options, with this GPU's architecture only.
configure=(cmake -S "$root" -B "$kbuild" "${gen[@]}" -DCMAKE_BUILD_TYPE=Release
           -DGPUSAMPLER_KERNELS_ONLY=ON -DGPUSAMPLER_CUDA="$([[ "$rehearse" == 1 ]] && echo AUTO || echo ON)"
           -DCMAKE_CUDA_ARCHITECTURES="$arch" ${PROVE_CMAKE_ARGS:-})
tests_built=1
if ! step configure 60 "${configure[@]}"; then
  # No GTest / nlohmann_json there: kernels and bench only; the tests come from the bundle.
  tests_built=0
  rm -rf "$kbuild"
  step configure-no-tests 60 "${configure[@]}" -DGPUSAMPLER_BUILD_TESTS=OFF || true
fi
step build 200 cmake --build "$kbuild" -j "$(nproc)" || true

bench_bin="$kbuild/bin/gpusampler-bench"
[[ -x "$bench_bin" ]] || bench_bin="$carry/bin/gpusampler-bench"
test_bin="$kbuild/bin/gpusampler_kernels_test"
test_data_note="built here"
if [[ "$tests_built" != 1 || ! -x "$test_bin" ]]; then
  test_bin="$carry/bin/gpusampler_kernels_test"
  test_data_note="carried (built on the development machine)"
  # The carried binary reads tests/data at the path it was built with; point that at ours.
  if [[ -f "$carry/source-root" ]]; then
    src="$(cat "$carry/source-root")"
    if [[ "$src" != "$root" && ! -e "$src/tests/data" ]]; then
      mkdir -p "$src/tests" 2>/dev/null && ln -sfn "$root/tests/data" "$src/tests/data" 2>/dev/null || true
    fi
  fi
fi

# 2. The kernel test suite, CUDA cases included.
cuda_filter='*cuda*:*Cuda*:*CUDA*'
if [[ -x "$test_bin" ]]; then
  step tests 60 "$test_bin" --gtest_brief=1 || true
  step tests-cuda 45 "$test_bin" --gtest_filter="$cuda_filter" || true
else
  printf 'tests\tno test binary\t0\n' >>"$steps"
fi

# 3. compute-sanitizer on the CUDA tests (small batches: the graph, fault and keys tests).
san_filter='CudaGraphTest.*:KeysTest.CudaKernel:CudaErrorTest.*'
if command -v compute-sanitizer >/dev/null 2>&1 && [[ -x "$test_bin" && "$rehearse" != 1 ]]; then
  for tool in memcheck racecheck synccheck; do
    step "sanitizer-$tool" 35 compute-sanitizer --tool "$tool" --error-exitcode 99 \
      "$test_bin" --gtest_filter="$san_filter" || true
  done
else
  printf 'sanitizers\tnot run (%s)\t0\n' "$([[ "$rehearse" == 1 ]] && echo rehearsal || echo 'no compute-sanitizer or test binary')" >>"$steps"
fi

# 4. Kernel bench against PyTorch eager and torch.compile, one compare.sh call per cell so
# that a cell cut by the time limit loses only itself (torch.compile compiles per shape).
export TORCHINDUCTOR_COMPILE_THREADS="$(nproc)"
: >"$logs/kernel-bench-raw.jsonl"
for cell in $sizes; do
  step "kernel-bench-${cell/:/x}" 60 env GPUSAMPLER_BENCH="$bench_bin" \
    PYTHON="$(command -v "$py")" SIZES="$cell" "$root/bench/compare.sh" --backend "$backend" \
    --threads "$(nproc)" --raw "$logs/kernel-bench-${cell/:/x}.jsonl" || true
  cat "$logs/kernel-bench-${cell/:/x}.jsonl" >>"$logs/kernel-bench-raw.jsonl" 2>/dev/null || true
done

# 5. The service: probe, drain, in-process and loopback bench with the GPU utilization gauge.
if [[ -x "$carry/bin/gpusampler-server" ]]; then
  mkdir -p "$logs/service"
  step service 80 env OUT="$logs/service" DEVICE="$server_device" \
    "$root/bench/service_bench_gpu.sh" run "$build" || true
else
  printf 'service\tno carried server bundle (run prove.sh pack here first)\t0\n' >>"$steps"
fi

# 6. The report.
report="$out/bench/results/h200.md"
{
  echo "# gpusampler on an H200: issue 8's proof"
  echo
  [[ "$rehearse" != 1 ]] || echo "**REHEARSAL without a GPU** (backend and device cuda-sim: the CUDA pipeline on the host; its times are not a GPU's): checks the script only."
  echo
  echo "Written by \`bench/gpu/prove.sh run\` in ${SECONDS}s (budget ${budget}s)."
  echo
  echo '```'
  cat "$logs/machine.txt"
  echo '```'
  echo
  echo "## Steps"
  echo
  echo "| step | outcome | seconds |"
  echo "|---|---|---:|"
  awk -F'\t' '{printf "| %s | %s | %s |\n", $1, $2, $3}' "$steps"
  echo
  echo "## Kernel tests ($test_data_note)"
  echo
  echo '```'
  for f in tests tests-cuda; do
    [[ -f "$logs/$f.log" ]] || continue
    echo "$f:"
    grep -E '^\[  (PASSED|FAILED|SKIPPED) |tests? ran|FAILED  \]' "$logs/$f.log" | tail -12
  done
  echo '```'
  if [[ -f "$logs/tests-cuda.log" ]]; then
    skipped="$(grep -c '^\[  SKIPPED \]' "$logs/tests-cuda.log" || true)"
    echo
    echo "CUDA cases skipped: ${skipped:-0} (must be 0 on a GPU machine)."
  fi
  echo
  echo "## compute-sanitizer (filter \`$san_filter\`)"
  echo
  echo '```'
  for tool in memcheck racecheck synccheck; do
    f="$logs/sanitizer-$tool.log"
    [[ -f "$f" ]] || { echo "$tool: not run"; continue; }
    echo "$tool: $(grep -E 'ERROR SUMMARY|RACECHECK SUMMARY|Error:' "$f" | tail -2 | tr '\n' ' ')"
  done
  echo '```'
  echo
  echo "## Kernel bench vs PyTorch (bench/compare.sh --backend $backend)"
  echo
  first="${sizes%% *}"
  grep -E '^- (GPU|CPU|PyTorch|gpusampler|note|labels)' "$logs/kernel-bench-${first/:/x}.log" 2>/dev/null || true
  echo
  if [[ -s "$logs/kernel-bench-raw.jsonl" ]]; then
    # One table from every cell's records; issue 8's bar: >= 10x over torch.compile at B = 32.
    "$py" - "$logs/kernel-bench-raw.jsonl" <<'PYEOF' || true
import json, sys
recs = [json.loads(l) for l in open(sys.argv[1]) if l.strip().startswith("{")]
def key(r): return (int(r["rows"]), int(r["n"]), int(r["k"]))
impls = ["gpusampler", "pytorch-nonzero", "pytorch-topk", "pytorch-topk_compiled"]
cells = []
for r in recs:
    if key(r) not in cells: cells.append(key(r))
def med(c, impl):
    for r in recs:
        if key(r) == c and r.get("impl") == impl and "median_ms" in r and "skipped" not in r:
            return float(r["median_ms"])
    return None
fmt = lambda v: "n/a" if v is None else f"{v:.4g}"
print("| B | N | K | " + " | ".join(f"{i} ms" for i in impls) + " | torch.compile / gpusampler |")
print("|" + "---:|" * (len(impls) + 4))
for c in cells:
    m = [med(c, i) for i in impls]
    x = "n/a" if m[0] is None or m[3] is None or m[0] <= 0 else f"**{m[3] / m[0]:.1f}x**" + (" (bar >= 10x)" if c[0] == 32 else "")
    print(f"| {c[0]} | {c[1]} | {c[2]} | " + " | ".join(fmt(v) for v in m) + f" | {x} |")
skipped = sorted({r["skipped"] for r in recs if "skipped" in r})
if skipped: print("\nskipped: " + "; ".join(skipped))
PYEOF
  else
    echo "no kernel bench output (see logs/kernel-bench-*.log)"
  fi
  echo
  echo "## Service (bench/service_bench_gpu.sh run, device $server_device)"
  echo
  for f in probe.txt service-bench-cuda.md inprocess-cuda.json; do
    [[ -f "$logs/service/$f" ]] || continue
    echo "### $f"
    echo
    echo '```'
    head -c 6000 "$logs/service/$f"
    echo '```'
  done
  if [[ -f "$logs/service/metrics.txt" ]]; then
    echo
    echo "GPU gauges scraped from the server:"
    echo
    echo '```'
    grep -E '^gpusampler_(gpu_utilization_ratio|gpu_memory_[a-z_]*|device_busy_ratio)' \
      "$logs/service/metrics.txt" | head -20 || echo "(no GPU gauge: NVML absent?)"
    echo '```'
  fi
} >"$report"
cp "$report" "$out/h200.md" 2>/dev/null || true
echo "prove.sh: report $report (${SECONDS}s)" >&2
column -t -s $'\t' "$steps" >&2 || cat "$steps" >&2
