#!/bin/sh
# The container HEALTHCHECK: exit 0 only when the server in this container is SERVING, at the
# address it was started with. The port comes from the port file the server writes once
# SERVING (GPUSAMPLER_PORT_FILE, set in the image), so `--address` on the command line,
# GPUSAMPLER_ADDRESS and port 0 are all followed; before that file exists the server is not
# SERVING yet. The host is GPUSAMPLER_ADDRESS's, with wildcard addresses dialled on loopback.
set -eu
address="${GPUSAMPLER_ADDRESS:-0.0.0.0:50051}"
host="${address%:*}"
port="${address##*:}"
if [ -n "${GPUSAMPLER_PORT_FILE:-}" ]; then
  if [ ! -r "$GPUSAMPLER_PORT_FILE" ]; then
    echo "gpusampler-healthcheck: no port file $GPUSAMPLER_PORT_FILE yet (not SERVING)" >&2
    exit 1
  fi
  read -r port _ < "$GPUSAMPLER_PORT_FILE"
fi
case "$host" in
  "" | 0.0.0.0 | "[::]" | "*" | "[::0]") host=127.0.0.1 ;;
esac
# The CLI exits 2/3/4 like grpc-health-probe; Docker reserves 2, and any failure is
# "unhealthy" (1) to it.
gpusampler-cli --target "$host:$port" --timeout 3 --max-attempts 1 health || exit 1
