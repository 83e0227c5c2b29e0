#!/usr/bin/env bash
# The service checks and benchmark on a GPU machine that lacks the gRPC / protobuf / spdlog
# packages: `pack` copies the binaries and every shared library they load (per ldd, minus
# glibc and the driver's own) into BUILD_DIR/gpu-carry; `run` (on the GPU machine) starts
# gpusampler-server on CUDA, probes it, drains it with SIGTERM, then runs the in-process and
# loopback benchmarks (the latter scrapes the GPU utilization gauge during each load).
#
#   bench/service_bench_gpu.sh pack [BUILD_DIR]       # here
#   bench/service_bench_gpu.sh run  [BUILD_DIR]       # there; results under $OUT (or .)
set -euo pipefail
mode=${1:?usage: service_bench_gpu.sh pack|run [BUILD_DIR]}
build=${2:-build}
carry=$build/gpu-carry
bins="gpusampler-server gpusampler-probe gpusampler-service-bench gpusampler-bench"

case $mode in
  pack)
    rm -rf "$carry"
    mkdir -p "$carry/bin" "$carry/lib"
    for b in $bins; do cp "$build/bin/$b" "$carry/bin/"; done
    for b in $bins; do ldd "$build/bin/$b"; done | awk '/=> \//{print $3}' | sort -u |
      grep -vE '/(libc|libm|libpthread|libdl|librt|ld-linux[^/]*|libcuda|libnvidia-ml)\.so' |
      xargs -I{} cp -L {} "$carry/lib/"
    du -sh "$carry"
    ;;
  run)
    export LD_LIBRARY_PATH=$carry/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
    out=${OUT:-.}
    device=${DEVICE:-cuda}  # DEVICE=cuda-sim (or cpu) rehearses the script without a GPU
    bench_backend=cuda
    [[ "$device" == cuda* ]] || bench_backend=cpu
    [[ "$device" != cuda-sim ]] || bench_backend=cuda-sim
    nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv >"$out/gpu.txt" 2>&1 || true
    lscpu >"$out/cpu.txt" 2>&1 || true
    "$carry/bin/gpusampler-bench" --backend "$bench_backend" --rows 1 --n 10000 --k 1000 --dim 16 --json \
      >"$out/inprocess-cuda.json" 2>&1 || true
    rm -f "$out/ports"
    "$carry/bin/gpusampler-server" --device "$device" --address 127.0.0.1:0 \
      --metrics-address 127.0.0.1:0 --port-file "$out/ports" >"$out/server.log" 2>&1 &
    pid=$!
    for _ in $(seq 1 600); do [ -s "$out/ports" ] && break; sleep 0.1; done
    read -r gport mport <"$out/ports"
    "$carry/bin/gpusampler-probe" --target "127.0.0.1:$gport" >"$out/probe.txt" 2>&1 || true
    "$carry/bin/gpusampler-probe" --target "127.0.0.1:$gport" --rows 64 >>"$out/probe.txt" 2>&1 || true
    exec 3<>"/dev/tcp/127.0.0.1/$mport"
    printf 'GET /metrics HTTP/1.0\r\n\r\n' >&3
    cat <&3 >"$out/metrics.txt" || true
    kill -TERM "$pid"
    rc=0
    wait "$pid" || rc=$?
    echo "server exit status after SIGTERM: $rc" >>"$out/probe.txt"
    "$carry/bin/gpusampler-service-bench" --device "$device" --seconds 3 \
      >"$out/service-bench-cuda.md" 2>&1 || true
    ;;
  *)
    echo "usage: service_bench_gpu.sh pack|run [BUILD_DIR]" >&2
    exit 2
    ;;
esac
