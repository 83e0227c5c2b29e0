#!/usr/bin/python3
"""Runs every expression of the rules, the dashboard and the prometheus-adapter rule through a
live Prometheus's HTTP API and requires data from each.

  check_expressions.py PROMETHEUS_URL RULES.yml DASHBOARD.json ADAPTER.yaml

- recording rules: the expression, and the recorded series (proof that Prometheus evaluated
  the rule);
- alerts: the signal, i.e. the expression without its final threshold comparison (a healthy
  server must not fire, but the signal must exist); every rule must report health "ok";
- dashboard panels: each target, with $job = gpusampler, $instance = .* and
  $__rate_interval = 1m;
- the HPA's prometheus-adapter rule: its metricsQuery with the series filled in.

Expressions over NVML's GPU gauges cannot have data on a machine without a GPU: for those the
query must succeed and the result is reported, not required (it is required when the scraped
server exports gpusampler_gpu_memory_total_bytes). Exit 1 on any failure.
"""
import json
import re
import sys
import urllib.parse
import urllib.request

import yaml

GPU_ONLY = re.compile(r"gpusampler_gpu_")


def query(url, expr):
    data = urllib.parse.urlencode({"query": expr}).encode()
    with urllib.request.urlopen(f"{url}/api/v1/query", data=data, timeout=10) as r:
        body = json.load(r)
    if body.get("status") != "success":
        raise RuntimeError(f"query failed: {body}")
    return body["data"]["result"]


def strip_threshold(expr):
    """The left side of the last comparison at the top level (outside (), [], {} and quotes)."""
    depth = 0
    quote = None
    cut = None
    i = 0
    while i < len(expr):
        c = expr[i]
        if quote:
            if c == "\\":
                i += 1
            elif c == quote:
                quote = None
        elif c in "\"'`":
            quote = c
        elif c in "([{":
            depth += 1
        elif c in ")]}":
            depth -= 1
        elif depth == 0 and c in "<>=!":
            two = expr[i:i + 2]
            if two in ("==", "!=", ">=", "<="):
                cut = i
                i += 1
            elif c in "<>":
                cut = i
        i += 1
    lhs = expr if cut is None else expr[:cut]
    # `A > x and B > y`: the signal is A (the first comparison's left side).
    m = re.search(r"\s(and|unless|or)\s", lhs)
    if cut is not None and m:
        return strip_threshold(lhs[:m.start()])
    return lhs.strip()


def main(url, rules_path, dashboard_path, adapter_path):
    checks = []  # (where, expression)
    with open(rules_path) as f:
        rules = yaml.safe_load(f)
    for group in rules["groups"]:
        for rule in group["rules"]:
            if "record" in rule:
                checks.append((f"record {rule['record']}", rule["expr"]))
                checks.append((f"recorded series {rule['record']}", rule["record"]))
            else:
                checks.append((f"alert {rule['alert']} (signal)", strip_threshold(rule["expr"])))
    with open(dashboard_path) as f:
        dashboard = json.load(f)
    for panel in dashboard["panels"]:
        for target in panel.get("targets", []):
            expr = (target["expr"].replace("$__rate_interval", "1m").replace("$job", "gpusampler")
                    .replace("$instance", ".*"))
            checks.append((f"panel '{panel['title']}' {target['refId']}", expr))
    with open(adapter_path) as f:
        adapter = yaml.safe_load(f)
    for rule in adapter["rules"]:
        series = rule["seriesQuery"]
        checks.append((f"adapter seriesQuery {series}", re.sub(r"\{.*", "", series)))
        expr = (rule["metricsQuery"].replace("<<.Series>>", re.sub(r"\{.*", "", series))
                .replace("<<.LabelMatchers>>", 'job="gpusampler"').replace("<<.GroupBy>>", "pod"))
        checks.append((f"adapter metricsQuery {rule['name']['as']}", expr))

    have_gpu = bool(query(url, "gpusampler_gpu_memory_total_bytes"))
    failures = 0
    for where, expr in checks:
        one_line = " ".join(expr.split())
        try:
            result = query(url, expr)
        except Exception as e:  # noqa: BLE001 - report every failing expression
            print(f"FAIL  {where}: {e}\n      {one_line}")
            failures += 1
            continue
        if result:
            sample = result[0]["value"][1]
            print(f"ok    {where}: {len(result)} series (first {sample})")
        elif GPU_ONLY.search(expr) and not have_gpu:
            print(f"no-gpu {where}: valid, no data (no GPU gauges on this server)")
        else:
            print(f"FAIL  {where}: no data\n      {one_line}")
            failures += 1

    with urllib.request.urlopen(f"{url}/api/v1/rules", timeout=10) as r:
        groups = json.load(r)["data"]["groups"]
    evaluated = [rule for g in groups for rule in g["rules"]]
    for rule in evaluated:
        if rule.get("health") != "ok":
            print(f"FAIL  rule {rule['name']}: health {rule.get('health')} {rule.get('lastError')}")
            failures += 1
    print(f"{len(checks) - failures} passed, {failures} failed "
          f"({len(evaluated)} rules evaluated by Prometheus)")
    return 1 if failures else 0


if __name__ == "__main__":
    if len(sys.argv) != 5:
        sys.exit(__doc__)
    sys.exit(main(*sys.argv[1:]))
