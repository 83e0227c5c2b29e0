#!/usr/bin/env bash
# Installs gpusampler's dependencies from Debian 12's packages. Idempotent: packages already
# present are skipped, and apt is not touched when nothing is missing. CUDA is not installed
# here; the build uses /usr/local/cuda when it exists.
#
#   deploy/install-deps.sh            build, test and runtime packages (developers, CI)
#   deploy/install-deps.sh --build    only what compiles the server and the CLI (the image's
#                                     builder stage: no tests, Python or Prometheus)
#   deploy/install-deps.sh --runtime  only what the built binaries need (the container image)
#   deploy/install-deps.sh --container-test
#                                     podman (with runc), debootstrap and python3-venv for
#                                     deploy/container/test.sh and the deploy/ checks
set -euo pipefail

runtime=(
  ca-certificates
  libgrpc++1.51 libgrpc29 libprotobuf32 libspdlog1.10 libfmt9
  libprometheus-cpp-core1.0 libprometheus-cpp-pull1.0 libcivetweb1 zlib1g
)
compile=(
  build-essential cmake pkg-config
  libgrpc++-dev protobuf-compiler-grpc libprotobuf-dev protobuf-compiler
  libspdlog-dev libfmt-dev prometheus-cpp-dev libcivetweb-dev zlib1g-dev libcli11-dev
)
build=(
  git
  libgtest-dev libgmock-dev libbenchmark-dev nlohmann-json3-dev
  prometheus
  python3 python3-grpcio python3-grpc-tools python3-protobuf python3-numpy
  python3-pytest python3-torch python3-setuptools python3-pip python3-yaml
  openssl clang libclang-rt-14-dev
)
# runc, not crun: crun fails on hosts with a hybrid cgroup v1/v2 setup.
container_test=(
  podman runc conmon catatonit containernetworking-plugins iptables debootstrap
  python3-venv
)

case "${1:-}" in
  --runtime) packages=("${runtime[@]}") ;;
  --build) packages=("${runtime[@]}" "${compile[@]}") ;;
  --container-test) packages=("${container_test[@]}") ;;
  "") packages=("${runtime[@]}" "${compile[@]}" "${build[@]}") ;;
  *) echo "usage: $0 [--build | --runtime | --container-test]" >&2; exit 2 ;;
esac

missing=()
for p in "${packages[@]}"; do
  if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed"; then
    missing+=("$p")
  fi
done

if [ ${#missing[@]} -eq 0 ]; then
  echo "install-deps: all ${#packages[@]} packages present"
  exit 0
fi

echo "install-deps: installing ${missing[*]}"
SUDO=""
if [ "$(id -u)" -ne 0 ]; then SUDO="sudo"; fi
export DEBIAN_FRONTEND=noninteractive
$SUDO apt-get update -qq
$SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}"
