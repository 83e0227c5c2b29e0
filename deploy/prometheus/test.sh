#!/usr/bin/env bash
# The rules and the dashboard against a real Prometheus (Debian's `prometheus`), as CI runs
# them after `make test`:
#   1. promtool check rules and promtool test rules (a unit test per alert);
#   2. a gpusampler-server on loopback (port 0) under load from gpusampler-cli bench (unary
#      and SampleStream), scraped every second by a Prometheus on loopback that loads the
#      rules (group intervals set to 1 s so they evaluate within the test);
#   3. every recording rule, alert signal, dashboard panel and prometheus-adapter query run
#      through the HTTP API: each must return data (check_expressions.py).
#   BUILD_DIR   where bin/gpusampler-server and bin/gpusampler-cli are (default build)
set -euo pipefail
cd "$(dirname "$0")/../.."
build="${BUILD_DIR:-build}"
[ -x "$build/bin/gpusampler-server" ] || { echo "prometheus test: no $build/bin/gpusampler-server (make build)"; exit 1; }
work=$(mktemp -d)
pids=()
cleanup() {
  for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
  wait 2>/dev/null || true
  rm -rf "$work"
}
trap cleanup EXIT

promtool check rules deploy/prometheus/gpusampler.rules.yml
promtool test rules deploy/prometheus/*test*.yml

"$build/bin/gpusampler-server" --device "${GPUSAMPLER_TEST_DEVICE:-cpu}" --cpu-threads 1 \
  --address 127.0.0.1:0 --metrics-address 127.0.0.1:0 --port-file "$work/ports" \
  >"$work/server.log" 2>&1 &
pids+=($!)
for _ in $(seq 1 100); do [ -s "$work/ports" ] && break; sleep 0.1; done
read -r grpc_port metrics_port <"$work/ports" || { cat "$work/server.log"; exit 1; }
prom_port=$(/usr/bin/python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')

sed 's/^\(\s*\)interval: 30s/\1interval: 1s/' deploy/prometheus/gpusampler.rules.yml >"$work/rules.yml"
cat >"$work/prometheus.yml" <<CONF
global: {scrape_interval: 1s, evaluation_interval: 1s}
rule_files: ["$work/rules.yml"]
scrape_configs:
  - job_name: gpusampler
    static_configs: [{targets: ["127.0.0.1:$metrics_port"]}]
CONF
prometheus --config.file="$work/prometheus.yml" --storage.tsdb.path="$work/data" \
  --web.listen-address="127.0.0.1:$prom_port" --log.level=warn >"$work/prometheus.log" 2>&1 &
pids+=($!)
url="http://127.0.0.1:$prom_port"
for _ in $(seq 1 100); do
  /usr/bin/python3 -c "import urllib.request; urllib.request.urlopen('$url/-/ready', timeout=1)" 2>/dev/null && break
  sleep 0.2
done
echo "prometheus test: server gRPC :$grpc_port metrics :$metrics_port, Prometheus :$prom_port"

# Load: unary and streaming, small requests, for 20 s (bounded: stops by itself).
cli="$build/bin/gpusampler-cli"
"$cli" --target "127.0.0.1:$grpc_port" bench --concurrency 2 --duration 20 --rows 4 --n 2048 \
  --k 64 --dim 4 >"$work/bench-unary.log" 2>&1 &
pids+=($!)
"$cli" --target "127.0.0.1:$grpc_port" bench --stream --concurrency 1 --window 4 --duration 20 \
  --rows 2 --n 1024 --k 32 --dim 0 --labels-only >"$work/bench-stream.log" 2>&1 &
pids+=($!)
wait "${pids[2]}" "${pids[3]}" || { tail "$work"/bench-*.log; exit 1; }
sleep 3  # a last scrape and rule evaluation after the load
/usr/bin/python3 deploy/prometheus/check_expressions.py "$url" \
  deploy/prometheus/gpusampler.rules.yml deploy/grafana/gpusampler.json \
  deploy/k8s/prometheus-adapter/config.yaml
