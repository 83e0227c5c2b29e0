"""Checks on the rendered kustomize output (run by deploy/k8s/test.sh with the tools venv's
Python): what an operator's admission review asks of a workload, beyond schema validity.

  check.py RENDERED.yaml OVERLAY ADAPTER_CONFIG.yaml SERVICEMONITOR_SCHEMA.json \
      RULES.yml PROMETHEUSRULE_SCHEMA.json RUNBOOKS.md

The PrometheusRule must hold exactly RULES.yml's groups (one source), and every alert must
carry a runbook_url naming a section of RUNBOOKS.md that exists.
"""
import json
import re
import sys

import jsonschema
import yaml


def fail(msg):
    print(f"k8s check FAILED: {msg}")
    sys.exit(1)


def anchors(markdown_path):
    """GitHub's heading anchors: lowercase, punctuation other than - and _ dropped, spaces
    to -."""
    out = set()
    with open(markdown_path) as f:
        for line in f:
            m = re.match(r"#{1,6}\s+(.*?)\s*$", line)
            if m:
                text = re.sub(r"[^\w\- ]", "", m.group(1).strip().lower())
                out.add(text.replace(" ", "-"))
    return out


def check_rules(docs, overlay, rules_path, schema_path, runbooks_path):
    rule = docs["PrometheusRule"]
    with open(schema_path) as f:
        jsonschema.validate(rule, json.load(f))
    with open(rules_path) as f:
        groups = yaml.safe_load(f)["groups"]
    if rule["spec"]["groups"] != groups:
        fail(f"{overlay}: the PrometheusRule's groups differ from {rules_path} (run "
             "python3 deploy/prometheus/prometheusrule.py)")
    have = anchors(runbooks_path)
    alerts = [r for g in groups for r in g["rules"] if "alert" in r]
    for r in alerts:
        url = r.get("annotations", {}).get("runbook_url", "")
        page, _, anchor = url.partition("#")
        if not page.endswith("docs/runbooks.md") or not anchor:
            fail(f"alert {r['alert']}: runbook_url {url!r} names no section of docs/runbooks.md")
        if anchor not in have:
            fail(f"alert {r['alert']}: runbook_url anchor #{anchor} is not a heading of "
                 f"{runbooks_path}")
    return len(alerts)


def check_repository(docs, pod, overlay):
    """The dataset repository: every replica mounts one ReadWriteMany claim at
    GPUSAMPLER_DATASET_DIR; the single-node overlay uses an emptyDir and one replica."""
    volumes = {v["name"]: v for v in pod.get("volumes", [])}
    for c in pod["containers"]:
        env = {e["name"]: e.get("value") for e in c.get("env", [])}
        path = env.get("GPUSAMPLER_DATASET_DIR")
        if not path:
            fail(f"{overlay}: no GPUSAMPLER_DATASET_DIR (the dataset repository)")
        mounts = [m for m in c.get("volumeMounts", []) if m["mountPath"] == path]
        if len(mounts) != 1 or mounts[0].get("readOnly"):
            fail(f"{overlay}: {path} is not mounted read-write")
        vol = volumes.get(mounts[0]["name"], {})
        if overlay == "single-node":
            if "emptyDir" not in vol or "persistentVolumeClaim" in vol:
                fail("single-node: the repository is not an emptyDir")
            if "PersistentVolumeClaim" in docs:
                fail("single-node: renders a PersistentVolumeClaim it does not use")
            hpa = docs["HorizontalPodAutoscaler"]["spec"]
            if hpa.get("maxReplicas") != 1:
                fail("single-node: an emptyDir repository is per pod, but the HPA may add pods")
        else:
            claim = vol.get("persistentVolumeClaim", {}).get("claimName")
            pvc = docs.get("PersistentVolumeClaim")
            if not claim or not pvc or pvc["metadata"]["name"] != claim:
                fail(f"{overlay}: {path} is not the rendered PersistentVolumeClaim")
            if pvc["spec"].get("accessModes") != ["ReadWriteMany"]:
                fail(f"{overlay}: the repository claim is not ReadWriteMany (replicas share it)")


def main(rendered, overlay, adapter_path, schema_path, rules_path, rule_schema_path,
         runbooks_path):
    with open(rendered) as f:
        docs = {d["kind"]: d for d in yaml.safe_load_all(f) if d}
    for kind in ("Deployment", "Service", "PodDisruptionBudget", "HorizontalPodAutoscaler",
                 "ServiceMonitor", "PrometheusRule"):
        if kind not in docs:
            fail(f"{overlay}: no {kind}")

    pod = docs["Deployment"]["spec"]["template"]["spec"]
    psc = pod.get("securityContext", {})
    if psc.get("runAsNonRoot") is not True:
        fail("pod securityContext.runAsNonRoot is not true")
    if psc.get("runAsUser") != 10001 or psc.get("runAsGroup") != 10001:
        fail("pod does not run as the image's numeric user 10001:10001")
    for c in pod["containers"]:
        sc = c.get("securityContext", {})
        if sc.get("readOnlyRootFilesystem") is not True:
            fail(f"container {c['name']}: root filesystem not read-only")
        if sc.get("allowPrivilegeEscalation") is not False:
            fail(f"container {c['name']}: privilege escalation allowed")
        if sc.get("capabilities", {}).get("drop") != ["ALL"]:
            fail(f"container {c['name']}: capabilities not all dropped")
        res = c.get("resources", {})
        for want in ("cpu", "memory"):
            if want not in res.get("requests", {}):
                fail(f"container {c['name']}: no {want} request")
        if "memory" not in res.get("limits", {}):
            fail(f"container {c['name']}: no memory limit")
        if overlay == "gpu" and res["limits"].get("nvidia.com/gpu") != 1:
            fail("gpu overlay: the container does not ask for one nvidia.com/gpu")
        if overlay in ("cpu", "single-node") and any("nvidia" in k for k in res.get("limits", {})):
            fail("cpu overlay asks for a GPU")
        if not any(m["mountPath"] == "/tmp" for m in c.get("volumeMounts", [])):
            fail(f"container {c['name']}: no writable /tmp for the port file")
        env = {e["name"]: e.get("value") for e in c.get("env", [])}
        want_device = {"gpu": "cuda", "cpu": "cpu", "base": "auto", "single-node": "cpu"}[overlay]
        if env.get("GPUSAMPLER_DEVICE") != want_device:
            fail(f"{overlay}: GPUSAMPLER_DEVICE is {env.get('GPUSAMPLER_DEVICE')}")
        if int(env.get("GPUSAMPLER_MAX_CONNECTION_AGE_MS", "0")) <= 0:
            fail("no GPUSAMPLER_MAX_CONNECTION_AGE_MS: clients would never rebalance")
        # HTTP probes on the metrics port: they work whether gRPC serves plaintext, TLS or
        # mTLS (/readyz follows health; /healthz is the process).
        want_path = {"startupProbe": "/readyz", "readinessProbe": "/readyz",
                     "livenessProbe": "/healthz"}
        for probe, path in want_path.items():
            get = c.get(probe, {}).get("httpGet", {})
            if get.get("path") != path or get.get("port") not in ("metrics", 9464):
                fail(f"container {c['name']}: {probe} is not httpGet {path} on the metrics port")

    check_repository(docs, pod, overlay)

    svc = docs["Service"]["spec"]
    if svc.get("clusterIP") != "None":
        fail("the Service is not headless (clients need every pod IP for round_robin)")
    ports = {p["name"] for p in svc["ports"]}

    sm = docs["ServiceMonitor"]
    with open(schema_path) as f:
        jsonschema.validate(sm, json.load(f))
    for ep in sm["spec"]["endpoints"]:
        if ep["port"] not in ports:
            fail(f"ServiceMonitor scrapes port {ep['port']}, which the Service lacks")

    hpa = docs["HorizontalPodAutoscaler"]
    if hpa["apiVersion"] != "autoscaling/v2":
        fail("HPA is not autoscaling/v2")
    with open(adapter_path) as f:
        served = {r["name"]["as"] for r in yaml.safe_load(f)["rules"]}
    for m in hpa["spec"]["metrics"]:
        name = m["pods"]["metric"]["name"]
        if name not in served:
            fail(f"HPA metric {name} is not served by the prometheus-adapter rules")
    alerts = check_rules(docs, overlay, rules_path, rule_schema_path, runbooks_path)
    print(f"k8s check: {overlay}: securityContext, resources, probes, headless Service, "
          f"ServiceMonitor (schema), HPA on {sorted(served)}, PrometheusRule = rules file with "
          f"{alerts} alerts, each with a runbook section, ok")


if __name__ == "__main__":
    if len(sys.argv) != 8:
        sys.exit(__doc__)
    main(*sys.argv[1:])
