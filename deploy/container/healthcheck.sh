#!/bin/bash
# The container HEALTHCHECK: exit 0 only when the server in this container is SERVING.
# It asks GET /readyz on the metrics port (200 only while health is SERVING, 503 while
# warming up or draining), which stays plain HTTP whether gRPC serves plaintext, TLS or mutual
# TLS, so no certificate is needed here. The ports come from the port file the server writes
# once SERVING (GPUSAMPLER_PORT_FILE, set in the image: "grpc_port metrics_port"), so
# `--metrics-address` on the command line, GPUSAMPLER_METRICS_ADDRESS and port 0 are all
# followed; before that file exists the server is not SERVING yet. The host is
# GPUSAMPLER_METRICS_ADDRESS's, with wildcard addresses dialled on loopback. Without a metrics
# endpoint (--metrics-address ""), the gRPC health check is asked instead (plaintext only).
# bash's /dev/tcp and coreutils' timeout: nothing beyond the base image.
set -eu
address="${GPUSAMPLER_METRICS_ADDRESS-0.0.0.0:9464}"
grpc_address="${GPUSAMPLER_ADDRESS:-0.0.0.0:50051}"
port="${address##*:}"
grpc_port="${grpc_address##*:}"
if [ -n "${GPUSAMPLER_PORT_FILE:-}" ]; then
  if [ ! -r "$GPUSAMPLER_PORT_FILE" ]; then
    echo "gpusampler-healthcheck: no port file $GPUSAMPLER_PORT_FILE yet (not SERVING)" >&2
    exit 1
  fi
  read -r grpc_port port < "$GPUSAMPLER_PORT_FILE"
fi
loopback() {
  case "$1" in
    "" | 0.0.0.0 | "[::]" | "*" | "[::0]") echo 127.0.0.1 ;;
    \[*\]) echo "${1#[}" | sed 's/]$//' ;;
    *) echo "$1" ;;
  esac
}
if [ -z "$address" ] || [ "${port:-0}" = 0 ]; then
  host=$(loopback "${grpc_address%:*}")
  # The CLI exits 2/3/4 like grpc-health-probe; Docker reserves 2, and any failure is
  # "unhealthy" (1) to it.
  gpusampler-cli --target "$host:$grpc_port" --timeout 3 --max-attempts 1 health || exit 1
  exit 0
fi
host=$(loopback "${address%:*}")
status=$(timeout 3 bash -c '
  exec 3<>"/dev/tcp/$0/$1" || exit 1
  printf "GET /readyz HTTP/1.0\r\nHost: %s\r\n\r\n" "$0" >&3
  read -r _ code _ <&3 && echo "$code"' "$host" "$port" 2>/dev/null) || status=""
if [ "$status" = 200 ]; then exit 0; fi
echo "gpusampler-healthcheck: GET http://$host:$port/readyz: ${status:-no answer} (not SERVING)" >&2
exit 1
