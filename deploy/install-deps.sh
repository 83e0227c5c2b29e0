#!/usr/bin/env bash
# Installs gpusampler's dependencies from Debian 12's packages. Idempotent: packages already
# present are skipped, and apt is not touched when nothing is missing. CUDA is not installed
# here; the build uses /usr/local/cuda when it exists.
#
#   deploy/install-deps.sh            build, test and runtime packages (developers, CI)
#   deploy/install-deps.sh --runtime  only what the built binaries need (the container image)
set -euo pipefail

runtime=(
  ca-certificates
  libgrpc++1.51 libgrpc29 libprotobuf32 libspdlog1.10 libfmt9
  libprometheus-cpp-core1.0 libprometheus-cpp-pull1.0 libcivetweb1 zlib1g
)
build=(
  build-essential cmake pkg-config git
  libgrpc++-dev protobuf-compiler-grpc libprotobuf-dev protobuf-compiler
  libspdlog-dev libfmt-dev prometheus-cpp-dev libcivetweb-dev zlib1g-dev
  libgtest-dev libgmock-dev libbenchmark-dev libcli11-dev nlohmann-json3-dev
  prometheus
  python3 python3-grpcio python3-grpc-tools python3-protobuf python3-numpy
  python3-pytest python3-torch python3-setuptools python3-pip
)

case "${1:-}" in
  --runtime) packages=("${runtime[@]}") ;;
  "") packages=("${runtime[@]}" "${build[@]}") ;;
  *) echo "usage: $0 [--runtime]" >&2; exit 2 ;;
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
