#!/usr/bin/env bash
# bench/gpu/prove.sh: the GPU proof in one prepared call on a device machine (an H200 with
# the CUDA 13 driver, Python and PyTorch 2, none of the project's dev packages), in one
# command of at most 520 s. Nothing is built there: the binaries travel in a bundle made here
# (`pack`, <= 40 MiB), and each carried binary gets its libraries through its own command's
# LD_LIBRARY_PATH (never the script's: torch must load its own libstdc++ / CUDA libraries).
#
# Steps, in order of value (each with its own time limit, cut to what the budget has left):
#   1. the CUDA kernel tests (the cases that skip without a device; none may skip there);
#   2. the bench cells, gpusampler on CUDA: (a) B=32 x 1e3, K=100, D=16; (b) B=32 x 1e6,
#      K=1e5, D=16; (c) B=1 x 1e7, K=1e6, D=0; then the rest of B=32 x 1e4..1e5;
#   3. ncu per kernel on (a), (b) and (c): time, DRAM bytes, shared-memory wavefronts,
#      registers and achieved occupancy of every kernel of one launch;
#   4. compute-sanitizer memcheck, racecheck, synccheck and initcheck on the CUDA tests;
#   5. the PyTorch baselines (eager and torch.compile) on (a), (b), (c), in one process;
#   6. the service: probe, drain, in-process and loopback bench (bench/service_bench_gpu.sh);
#   7. the PyTorch baselines on the remaining cells.
# What comes back (at most 8 files; this writes 5 under $OUT): report.md (also printed on
# stdout), bench.jsonl (every bench record, gpusampler and PyTorch), ncu.csv, steps.tsv and
# logs.tar.gz (every log).
#
# usage:
#   bench/gpu/prove.sh pack [BUILD_DIR]   # here: bundle the binaries and their libraries into
#                                         # BUILD_DIR/gpu-carry (default build) and its
#                                         # tarball BUILD_DIR/gpu-carry.tgz, <= 40 MiB
#   bench/gpu/prove.sh run  [BUILD_DIR]   # there, with BUILD_DIR/gpu-carry.tgz carried
#   REHEARSE=1 bench/gpu/prove.sh run     # here, without a GPU: the same steps with the bench
#                                         # and the service on the cuda-sim device, PyTorch on
#                                         # the CPU, small cells; ncu and compute-sanitizer
#                                         # are reported absent
# The device call (one command, timeout_s 520, carry ["build/gpu-carry.tgz"]; the steps stop by
# PROVE_SECONDS, the report and the tarball take a few seconds more):
#   bash bench/gpu/prove.sh run build
# env: OUT            where results go (default /tmp/gpusampler-prove)
#      PROVE_SECONDS  budget for all steps (default 490)
#      PROVE_STEP_SCALE multiply every step's time limit (the rehearsal on a slow machine)
#      PYTHON         interpreter with torch (default python3; the rehearsal /usr/bin/python3)
set -uo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
root="$(cd "$here/../.." && pwd)"
mode="${1:-run}"
build="${2:-build}"
[[ "$build" = /* ]] || build="$root/$build"
carry="$build/gpu-carry"
rehearse="${REHEARSE:-0}"
bins="gpusampler-server gpusampler-probe gpusampler-service-bench gpusampler-bench gpusampler_kernels_test"
max_bundle_mib=40

case "$mode" in
  pack)
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
    # What travels is one gzip'd tarball (the binaries' CUDA fat binaries compress ~3x).
    tar -czf "$carry.tgz" -C "$build" gpu-carry
    mib=$(( ($(stat -c %s "$carry.tgz") + 1048575) / 1048576 ))
    echo "prove.sh pack: $carry.tgz is ${mib} MiB (limit ${max_bundle_mib} MiB; $(du -sh "$carry" | cut -f1) unpacked)"
    (( mib <= max_bundle_mib )) || { echo "prove.sh pack: bundle over ${max_bundle_mib} MiB" >&2; exit 1; }
    exit 0
    ;;
  run) ;;
  *) echo "usage: prove.sh pack|run [BUILD_DIR]" >&2; exit 2 ;;
esac

out="${OUT:-/tmp/gpusampler-prove}"
mkdir -p "$out"
logs="$(mktemp -d)"
budget="${PROVE_SECONDS:-490}"
py="${PYTHON:-python3}"
backend=cuda
server_device=cuda
torch_device=cuda
# B:N:K:D cells: (a), (b), (c) first, then the rest.
cells="32:1000:100:16 32:1000000:100000:16 1:10000000:1000000:0 32:10000:1000:16 32:100000:10000:16"
ncu_cells="32:1000:100:16 32:1000000:100000:16 1:10000000:1000000:0"
if [[ "$rehearse" == 1 ]]; then
  backend=cuda-sim
  server_device=cuda-sim
  torch_device=cpu
  cells="32:1000:100:16 32:10000:1000:16 1:100000:10000:0"
  ncu_cells="32:1000:100:16"
  [[ -n "${PYTHON:-}" ]] || py=/usr/bin/python3
fi
steps="$logs/steps.tsv"
: >"$steps"
records="$logs/bench.jsonl"
: >"$records"


left() { echo $(( budget - SECONDS )); }
# step NAME SECONDS CMD...: runs CMD with a timeout of min(SECONDS, what is left - 10), logs
# to $logs/NAME.log and records the outcome.
step() {
  local name="$1" want=$(( $2 * ${PROVE_STEP_SCALE:-1} )); shift 2
  local limit=$(( $(left) - 10 ))
  (( limit < want )) || limit="$want"
  if (( limit < 3 )); then
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
  "$py" -c 'import torch; print("torch", torch.__version__, "cuda", torch.version.cuda, "available", torch.cuda.is_available())' 2>&1
  for tool in ncu compute-sanitizer; do command -v "$tool" || echo "no $tool"; done
  echo "cpus: $(nproc)"
  [[ -d "$carry/bin" ]] && echo "bundle: $(du -sh "$carry" | cut -f1)" || echo "no bundle at $carry"
} >"$logs/machine.txt" 2>&1

# The bundle travels as a tarball; unpack it once.
if [[ ! -d "$carry/bin" && -f "$carry.tgz" ]]; then
  tar -xzf "$carry.tgz" -C "$build" || echo "prove.sh: cannot unpack $carry.tgz" >&2
fi
# Each carried binary runs through a wrapper that gives it (and only it) the bundle's
# libraries; ncu and compute-sanitizer follow the wrapper into the binary.
mkdir -p "$logs/wrap"
for b in gpusampler_kernels_test gpusampler-bench; do
  printf '#!/bin/sh\nLD_LIBRARY_PATH="%s/lib" exec "%s/bin/%s" "$@"\n' "$carry" "$carry" "$b" >"$logs/wrap/$b"
  chmod +x "$logs/wrap/$b"
done
test_bin="$logs/wrap/gpusampler_kernels_test"
bench_bin="$logs/wrap/gpusampler-bench"
# The carried test binary reads tests/data at the path it was built with; point that at ours.
if [[ -f "$carry/source-root" ]]; then
  src="$(cat "$carry/source-root")"
  if [[ "$src" != "$root" && ! -e "$src/tests/data" ]]; then
    mkdir -p "$src/tests" 2>/dev/null && ln -sfn "$root/tests/data" "$src/tests/data" 2>/dev/null || true
  fi
fi

# 1. The CUDA kernel tests (on the rehearsal the same cases skip or run on cuda-sim).
cuda_filter='*cuda*:*Cuda*:*CUDA*:*StagedLaunch*-*PipelineInputsTest*/cudasim*'
if [[ -x "$carry/bin/gpusampler_kernels_test" ]]; then
  step tests-cuda 60 "$test_bin" --gtest_filter="$cuda_filter" || true
else
  printf 'tests-cuda\tno test binary in the bundle\t0\n' >>"$steps"
fi

# 2. The bench cells, gpusampler.
cell_iters() { local e=$(( $1 * $2 )); (( e <= 100000 )) && echo 200 || { (( e <= 10000000 )) && echo 50 || echo 20; }; }
[[ "$rehearse" != 1 ]] || cell_iters() { echo 3; }
for cell in $cells; do
  IFS=: read -r b n k d <<<"$cell"
  name="bench-${b}x${n}"
  if step "$name" 30 "$bench_bin" --backend "$backend" --rows "$b" --n "$n" --k "$k" \
       --dim "$d" --iters "$(cell_iters "$b" "$n")" --warmup 3 --json; then
    grep '^{' "$logs/$name.log" >>"$records" || true
  fi
done

# 3. ncu per kernel on (a), (b), (c): every kernel of a warm-up launch and one timed launch
# (ncu replays each kernel, caches flushed, clocks left alone).
: >"$logs/ncu.csv"
if command -v ncu >/dev/null 2>&1 && [[ "$rehearse" != 1 ]]; then
  metrics="gpu__time_duration.sum,dram__bytes_read.sum,dram__bytes_write.sum,l1tex__data_pipe_lsu_wavefronts_mem_shared.sum,sm__warps_active.avg.pct_of_peak_sustained_active,launch__registers_per_thread,launch__grid_size,sm__throughput.avg.pct_of_peak_sustained_elapsed,dram__throughput.avg.pct_of_peak_sustained_elapsed"
  for cell in $ncu_cells; do
    IFS=: read -r b n k d <<<"$cell"
    name="ncu-${b}x${n}"
    step "$name" 40 ncu --clock-control none --csv --metrics "$metrics" \
      --launch-count 16 "$bench_bin" --backend cuda --rows "$b" --n "$n" \
      --k "$k" --dim "$d" --iters 1 --warmup 1 || true
    grep '^"' "$logs/$name.log" | sed "s/^/\"${b}x${n}\",/" >>"$logs/ncu.csv" || true
  done
else
  printf 'ncu\tnot run (%s)\t0\n' "$([[ "$rehearse" == 1 ]] && echo rehearsal || echo 'no ncu')" >>"$steps"
fi

# 4. compute-sanitizer on the CUDA tests (small launches: graphs, faults, keys, staged launch).
san_filter='CudaGraphTest.*:KeysTest.CudaKernel:CudaErrorTest.*:*StagedLaunchTest*cuda0:*PipelineInputsTest*/cuda'
if command -v compute-sanitizer >/dev/null 2>&1 && [[ -x "$carry/bin/gpusampler_kernels_test" && "$rehearse" != 1 ]]; then
  for tool in memcheck racecheck synccheck initcheck; do
    step "sanitizer-$tool" 35 compute-sanitizer --tool "$tool" --error-exitcode 99 \
      "$test_bin" --gtest_filter="$san_filter" || true
  done
else
  printf 'sanitizers\tnot run (%s)\t0\n' "$([[ "$rehearse" == 1 ]] && echo rehearsal || echo 'no compute-sanitizer or test binary')" >>"$steps"
fi

# 5. The PyTorch baselines, (a) (b) (c) first, in one Python process (one interpreter start
# and one CUDA context; torch.compile compiles per shape as each cell comes). Not carried: no
# LD_LIBRARY_PATH. The baselines take D >= 1: a D = 0 cell runs them with D = 1.
export TORCHINDUCTOR_COMPILE_THREADS="$(nproc)"
torch_cells() {  # CELL... -> B:N:K:D:ITERS,...
  local out="" cell b n k d
  for cell in "$@"; do
    IFS=: read -r b n k d <<<"$cell"
    out+="${out:+,}$b:$n:$k:$d:$(cell_iters "$b" "$n")"
  done
  echo "$out"
}
first_cells="$(printf '%s\n' $cells | head -3 | tr '\n' ' ')"
rest_cells="$(printf '%s\n' $cells | tail -n +4 | tr '\n' ' ')"
step torch-abc 150 "$py" "$root/bench/pytorch_baselines.py" --sampler all --device "$torch_device" \
  --cells "$(torch_cells $first_cells)" --warmup 3 --json || true
grep '^{' "$logs/torch-abc.log" >>"$records" 2>/dev/null || true

# 6. The service, before the lesser cells: probe, drain, in-process and loopback bench.
if [[ -x "$carry/bin/gpusampler-server" ]]; then
  mkdir -p "$logs/service"
  step service 80 env OUT="$logs/service" DEVICE="$server_device" \
    "$root/bench/service_bench_gpu.sh" run "$build" || true
else
  printf 'service\tno carried server bundle (run prove.sh pack here first)\t0\n' >>"$steps"
fi

# 7. The PyTorch baselines on the remaining cells, with what time is left.
if [[ -n "${rest_cells// /}" ]]; then
  step torch-rest 60 "$py" "$root/bench/pytorch_baselines.py" --sampler all --device "$torch_device" \
    --cells "$(torch_cells $rest_cells)" --warmup 3 --json || true
  grep '^{' "$logs/torch-rest.log" >>"$records" 2>/dev/null || true
fi

# The report.
report="$out/report.md"
{
  echo "# gpusampler on an H200: issue 17's proof"
  echo
  [[ "$rehearse" != 1 ]] || echo "**REHEARSAL without a GPU** (bench and service on cuda-sim, the CUDA pipeline on the host; PyTorch on the CPU; times are not a GPU's): checks the script only."
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
  echo "## CUDA kernel tests"
  echo
  echo '```'
  if [[ -f "$logs/tests-cuda.log" ]]; then
    grep -E '^\[  (PASSED|FAILED) |tests? ran|FAILED  \]' "$logs/tests-cuda.log" | tail -12
    echo "skipped: $(grep -c '^\[  SKIPPED \]' "$logs/tests-cuda.log" || true) (must be 0 on a GPU machine)"
  else
    echo "not run"
  fi
  echo '```'
  echo
  echo "## Bench (gpusampler --backend $backend; PyTorch --device $torch_device)"
  echo
  "$py" - "$records" <<'PYEOF' || true
import json, sys
recs = []
for line in open(sys.argv[1]):
    line = line.strip()
    if line.startswith("{"):
        try: recs.append(json.loads(line))
        except ValueError: pass
def key(r): return (int(r["rows"]), int(r["n"]), int(r["k"]))
cells = []
for r in recs:
    if key(r) not in cells: cells.append(key(r))
def rec(c, impl):
    for r in recs:
        if key(r) == c and r.get("impl") == impl and "median_ms" in r and "skipped" not in r:
            return r
    return None
fmt = lambda v: "n/a" if v is None else f"{v:.4g}"
impls = ["gpusampler", "pytorch-topk", "pytorch-topk_compiled"]
# Ours: device time (device_us: events around the kernels, outputs left on the device, as
# torch's outputs stay there) for the ratio; end to end (median_ms: upload, kernels, download,
# completion) in its own column.
print("| B | N | K | D | gpusampler device ms | gpusampler end to end ms | " +
      " | ".join(f"{i} ms" for i in impls[1:]) +
      " | compile / ours (device) | h2d B | d2h B | graph captures / 100 | launches | B/elem | smem B/elem | stream ops |")
print("|" + "---:|" * (len(impls) + 13))
for c in cells:
    g = rec(c, "gpusampler")
    m = [None if rec(c, i) is None else float(rec(c, i)["median_ms"]) for i in impls]
    dev = None if g is None or g.get("device_us") is None else float(g["device_us"]) / 1000.0
    x = "n/a" if dev is None or m[2] is None or dev <= 0 else f"{m[2] / dev:.2f}x"
    d = g.get("dim", "") if g else ""
    get = lambda f: "n/a" if g is None or f not in g or g[f] is None else (f"{g[f]:.2f}" if isinstance(g[f], float) else str(g[f]))
    print(f"| {c[0]} | {c[1]} | {c[2]} | {d} | {fmt(dev)} | {fmt(m[0])} | " + " | ".join(fmt(v) for v in m[1:]) +
          f" | {x} | {get('h2d_bytes')} | {get('d2h_bytes')} | {get('graph_captures')} | {get('launches')} | {get('bytes_per_element')} | {get('smem_bytes_per_element')} | {get('stream_ops')} |")
skipped = sorted({r["skipped"] for r in recs if "skipped" in r})
if skipped: print("\nskipped: " + "; ".join(skipped))
PYEOF
  echo
  echo "## ncu per kernel ((a), (b), (c); ncu.csv)"
  echo
  if [[ -s "$logs/ncu.csv" ]]; then
    echo '```'
    cut -c1-220 "$logs/ncu.csv" | head -80
    echo '```'
  else
    echo "not run (see steps)"
  fi
  echo
  echo "## compute-sanitizer (filter \`$san_filter\`)"
  echo
  echo '```'
  for tool in memcheck racecheck synccheck initcheck; do
    f="$logs/sanitizer-$tool.log"
    [[ -f "$f" ]] || { echo "$tool: not run"; continue; }
    echo "$tool: $(grep -E 'ERROR SUMMARY|RACECHECK SUMMARY|Error:' "$f" | tail -2 | tr '\n' ' ')"
  done
  echo '```'
  echo
  echo "## Service (bench/service_bench_gpu.sh run, device $server_device)"
  echo
  for f in probe.txt service-bench-cuda.md inprocess-cuda.json; do
    [[ -f "$logs/service/$f" ]] || continue
    echo "### $f"
    echo
    echo '```'
    head -c 4000 "$logs/service/$f"
    echo '```'
  done
  if [[ -f "$logs/service/metrics.txt" ]]; then
    echo
    echo '```'
    grep -E '^gpusampler_(gpu_utilization_ratio|gpu_memory_[a-z_]*|device_busy_ratio)' \
      "$logs/service/metrics.txt" | head -20 || echo "(no GPU gauge: NVML absent?)"
    echo '```'
  fi
} >"$report"

# What comes back: five files.
cp "$records" "$out/bench.jsonl"
cp "$logs/ncu.csv" "$out/ncu.csv"
cp "$steps" "$out/steps.tsv"
tar -czf "$out/logs.tar.gz" -C "$logs" . 2>/dev/null || true
rm -rf "$logs"
cat "$report"
echo "prove.sh: $out/{report.md,bench.jsonl,ncu.csv,steps.tsv,logs.tar.gz} in ${SECONDS}s" >&2
