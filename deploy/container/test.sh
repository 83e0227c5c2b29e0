#!/usr/bin/env bash
# Builds the container image from this checkout with podman and proves it (`make
# test-container`; .ci/run runs it after `make test`):
#   - podman, runc and debootstrap come from Debian's packages (deploy/install-deps.sh);
#   - the base is Debian 12 made with debootstrap from this machine's configured apt source
#     (no registry), imported once and reused while it exists (GPUSAMPLER_REBUILD_BASE=1
#     makes it again);
#   - the image is built with --format docker (OCI drops HEALTHCHECK) and the revision as a
#     build argument, then run as Kubernetes runs it (read-only root, all capabilities
#     dropped, no new privileges) on a non-default gRPC address, and checked:
#     `podman healthcheck run` passes, every golden sample of tests/data comes back
#     oracle-exact through the image's own gpusampler-cli, /metrics is served, the server
#     runs as 10001:10001, and SIGTERM exits 0.
# Needs root (rootful podman). Prints the image size and the time of each phase.
set -euo pipefail
cd "$(dirname "$0")/../.."
repo="$PWD"
t0=$(date +%s)
say() { echo "test-container: [$(($(date +%s) - t0)) s] $*"; }
fail() { echo "test-container: FAIL: $*" >&2; exit 1; }

[ "$(id -u)" -eq 0 ] || fail "needs root (rootful podman and debootstrap)"
bash deploy/install-deps.sh --container-test

work="${GPUSAMPLER_CONTAINER_WORK:-/var/tmp/gpusampler-container}"
mkdir -p "$work"
# This run's own files (several runs may share the machine and the base image).
run=$(mktemp -d "$work/run.XXXXXX")
name="gpusampler-test-$$"
cleanup() {
  podman rm -f -t 0 "$name" >/dev/null 2>&1 || true
  rm -rf "$run"
}
trap cleanup EXIT
# This machine's specifics: crun fails on the hybrid cgroup setup (runc works), and
# podman's default rlimits exceed what root may set here.
cat >"$run/containers.conf" <<'EOF'
[containers]
default_ulimits = ["nofile=20000:20000", "nproc=32768:32768"]

[engine]
runtime = "runc"
cgroup_manager = "cgroupfs"
events_logger = "file"
EOF
export CONTAINERS_CONF="$run/containers.conf"

# --- base: Debian 12 from the configured apt source -------------------------------------
base=localhost/gpusampler-debian:12
# The first Debian bookworm (not -security) source this machine's apt uses.
apt_mirror() {
  local m=""
  if [ -r /etc/apt/sources.list.d/debian.sources ]; then
    m=$(awk '/^URIs:/ {u=$2} /^Suites:/ && / bookworm( |$)/ {print u; exit}' \
      /etc/apt/sources.list.d/debian.sources)
  fi
  if [ -z "$m" ] && [ -r /etc/apt/sources.list ]; then
    m=$(awk '$1 == "deb" && $3 == "bookworm" {print $2; exit}' /etc/apt/sources.list)
  fi
  echo "${m:-http://deb.debian.org/debian}"
}
if [ -n "${GPUSAMPLER_REBUILD_BASE:-}" ] || ! podman image exists "$base"; then
  mirror=$(apt_mirror)
  say "debootstrap Debian 12 (minbase) from $mirror"
  rootfs="$run/rootfs"
  rm -rf "$rootfs"
  nice -n 19 debootstrap --variant=minbase bookworm "$rootfs" "$mirror" >"$run/debootstrap.log" 2>&1 ||
    { tail -20 "$run/debootstrap.log"; fail "debootstrap"; }
  # The image's apt uses the same sources as this machine (Debian's own only).
  if [ -r /etc/apt/sources.list.d/debian.sources ]; then
    cp /etc/apt/sources.list.d/debian.sources "$rootfs/etc/apt/sources.list.d/"
    rm -f "$rootfs/etc/apt/sources.list"
  fi
  # Slim, as Debian's -slim images: no package cache, lists, docs, manuals or translations.
  rm -rf "$rootfs"/var/cache/apt/archives/*.deb "$rootfs"/var/lib/apt/lists/* \
    "$rootfs"/usr/share/man/* "$rootfs"/usr/share/info/* "$rootfs"/usr/share/locale/*
  find "$rootfs/usr/share/doc" -mindepth 1 -not -name copyright -not -type d -delete
  tar -C "$rootfs" -c . | podman import --change 'CMD ["/bin/bash"]' - "$base" >/dev/null
  rm -rf "$rootfs"
  say "base $base imported"
else
  say "base $base present (GPUSAMPLER_REBUILD_BASE=1 rebuilds it)"
fi

# --- lint -------------------------------------------------------------------------------
tools=$(bash deploy/tools-venv.sh)
"$tools/bin/hadolint" Dockerfile || fail "hadolint reports problems in Dockerfile"
say "hadolint: Dockerfile clean"

# --- build ------------------------------------------------------------------------------
image=localhost/gpusampler:test
revision=$(git describe --always --dirty --tags 2>/dev/null || echo unknown)
say "building $image (revision $revision)"
b0=$(date +%s)
nice -n 19 podman build --format docker --pull=never --layers \
  --build-arg DEBIAN_IMAGE="$base" --build-arg GPUSAMPLER_REVISION="$revision" \
  --iidfile "$run/image-id" -t "$image" . >"$run/build.log" 2>&1 ||
  { tail -40 "$run/build.log"; fail "podman build"; }
# From here on the image is named by its id: a concurrent run may move the tag.
image=$(cat "$run/image-id")
build_s=$(($(date +%s) - b0))
size=$(podman image inspect --format '{{.Size}}' "$image")
say "image $image built in ${build_s} s; image size $((size / 1000000)) MB ($size bytes)"
[ "$(podman image inspect --format '{{.Config.User}}' "$image")" = "10001:10001" ] ||
  fail "image USER is not 10001:10001"
podman image inspect --format '{{json .Config.Healthcheck}}' "$image" | grep -q gpusampler-healthcheck ||
  fail "image has no HEALTHCHECK (built in OCI format?)"

# --- run --------------------------------------------------------------------------------
cases="$run/cases"
/usr/bin/python3 deploy/container/golden.py prepare "$cases"
# A non-default gRPC port given on the command line: the HEALTHCHECK must follow it.
grpc_port=50123
# --health-interval disable: no systemd timer here; the test runs the image's HEALTHCHECK
# itself with `podman healthcheck run`.
podman run -d --name "$name" --health-interval disable --read-only --tmpfs /tmp --cap-drop=ALL \
  --security-opt no-new-privileges -p 127.0.0.1::9464 -v "$cases:/cases:ro" \
  "$image" --device cpu --address "0.0.0.0:$grpc_port" --shutdown-grace-seconds 5 \
  >/dev/null 2>"$run/run.log" || { cat "$run/run.log"; fail "podman run"; }
metrics_port=$(podman port "$name" 9464/tcp | head -1 | sed 's/.*://')
say "container $name started (gRPC :$grpc_port inside, metrics on 127.0.0.1:$metrics_port)"

healthy=""
for _ in $(seq 1 60); do
  if podman healthcheck run "$name" >/dev/null 2>&1; then healthy=1; break; fi
  [ "$(podman inspect --format '{{.State.Running}}' "$name")" = "true" ] ||
    { podman logs "$name" | tail -20; fail "container exited before it was healthy"; }
  sleep 1
done
[ -n "$healthy" ] || { podman logs "$name" | tail -20; fail "podman healthcheck run never passed"; }
say "podman healthcheck run: healthy (GET /readyz on the metrics port from the port file)"
# The probes Kubernetes uses: plain HTTP on the metrics port, whatever gRPC serves.
for path in /readyz /healthz; do
  code=$(/usr/bin/python3 -c 'import sys, urllib.request
print(urllib.request.urlopen(sys.argv[1], timeout=5).status)' \
    "http://127.0.0.1:$metrics_port$path" 2>/dev/null) || code=""
  [ "$code" = 200 ] || fail "GET $path on the metrics port: ${code:-no answer}, not 200"
done
say "GET /readyz and /healthz on the metrics port: 200"

ids=$(podman exec "$name" sh -c 'echo "$(id -u):$(id -g)"')
[ "$ids" = "10001:10001" ] || fail "server runs as $ids, not 10001:10001"
server_uid=$(podman top "$name" user huser | awk 'NR > 1 && /10001/ {print $1; exit}')
say "user: uid:gid $ids (server process user $server_uid)"

mkdir -p "$run/out"
podman exec "$name" sh -c '
  set -e
  while read -r case k f p n fill seed; do
    gpusampler-cli --target 127.0.0.1:'"$grpc_port"' sample --labels "/cases/$case/labels.npy" \
      -k "$k" --positive-fraction "$f" --positive-label "$p" --negative-label "$n" \
      --fill "$fill" --seed "$seed" --out-dir "/tmp/out/$case" >/dev/null
  done < /cases/cases.txt
  tar -C /tmp/out -c .' | tar -C "$run/out" -x
podman exec "$name" gpusampler-cli --target "127.0.0.1:$grpc_port" sample \
  --labels /cases/batch_of_4_rows/labels.npy -k 6 --seed 0 --out-dir /tmp/show
/usr/bin/python3 deploy/container/golden.py check "$run/out" || fail "samples differ from tests/data"

scrape=$(/usr/bin/python3 -c "import urllib.request, sys
print(urllib.request.urlopen('http://127.0.0.1:$metrics_port/metrics', timeout=5).read().decode())")
ok_samples=$(echo "$scrape" | awk '/^gpusampler_requests_total\{code="OK",method="Sample"\}/ {print $2}')
echo "$scrape" | grep '^gpusampler_build_info' || fail "no gpusampler_build_info in /metrics"
echo "$scrape" | grep -q "revision=\"$revision\"" || fail "build_info revision is not $revision"
[ "${ok_samples%.*}" -ge 14 ] 2>/dev/null || fail "/metrics counts $ok_samples OK Sample calls, expected >= 14"
say "/metrics served: $(echo "$scrape" | grep -c '^gpusampler_') gpusampler_ series, $ok_samples OK Sample calls"

say "SIGTERM"
podman kill --signal TERM "$name" >/dev/null
code=$(podman wait "$name")
podman logs "$name" 2>&1 | tail -3
[ "$code" = "0" ] || fail "exit code $code after SIGTERM"
say "exit code after SIGTERM: $code"

echo "test-container: PASS: image $image ($(podman image inspect --format '{{.RepoTags}}' "$image")), $((size / 1000000)) MB, built in ${build_s} s;" \
  "healthy; golden samples oracle-exact; uid 10001:10001; exit 0 on SIGTERM;" \
  "total $(($(date +%s) - t0)) s"
