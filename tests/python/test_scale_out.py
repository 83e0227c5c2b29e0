"""Scale-out on one machine (docs/scaling.md): three servers on loopback behind one client that
balances with round_robin over all of them, the pattern of a headless Kubernetes Service. One
server is killed (SIGKILL) mid-run. Every request must come back oracle-exact (the golden
samples of tests/data), either at once or, after failing UNAVAILABLE, on a retry by the
client; each server's own metrics must show that it took part.
"""

from __future__ import annotations

import json
import signal
import threading
import urllib.request
from pathlib import Path

import numpy as np
import pytest

from conftest import REPO, start_server, stop_server

GOLDEN = [json.loads(line) for line in
          (REPO / "tests" / "data" / "golden_samples.jsonl").read_text().splitlines() if line]
FILL = {"FILL_POLICY_BOTH": "both", "FILL_POLICY_NEGATIVES_ONLY": "negatives_only",
        "FILL_POLICY_NONE": "none"}
SAMPLE_OK = 'gpusampler_requests_total{code="OK",method="Sample"}'


def ok_samples(metrics_port: int) -> float:
    with urllib.request.urlopen(f"http://127.0.0.1:{metrics_port}/metrics", timeout=5) as r:
        for line in r.read().decode().splitlines():
            if line.startswith(SAMPLE_OK + " "):
                return float(line.split()[1])
    raise AssertionError(f"no {SAMPLE_OK} on :{metrics_port}")


def test_round_robin_over_three_servers_survives_one_killed(tmp_path: Path) -> None:
    import gpusampler
    from gpusampler.errors import GpuSamplerError, UnavailableError

    servers = [start_server(tmp_path / f"s{i}", ["--cpu-threads", "1",
                                                  "--shutdown-grace-seconds", "2"])
               for i in range(3)]
    victim = servers[2]
    total, threads = 600, 4
    kill_after = total // 3
    lock = threading.Lock()
    state = {"next": 0, "done": 0, "retried": 0, "other_errors": [], "wrong": [],
             "killed": False, "victim_ok": 0.0, "survivors_at_kill": [0.0, 0.0]}
    killed = threading.Event()

    # No retries inside the client library: every UNAVAILABLE surfaces here and is retried
    # by this loop, so the test sees each one.
    client = gpusampler.Client([s.target for s in servers], timeout=20, max_attempts=1)

    def one(i: int) -> None:
        case = GOLDEN[i % len(GOLDEN)]
        spec = case["spec"]
        for attempt in range(6):
            try:
                r = client.sample(np.array(case["labels"], dtype=np.int64),
                                  num_samples=spec["num_samples"],
                                  positive_fraction=spec["positive_fraction"],
                                  positive_label=spec["positive_label"],
                                  negative_label=spec["negative_label"],
                                  fill=FILL[spec["fill_policy"]], seed=case["seed"])
            except UnavailableError:
                with lock:
                    state["retried"] += 1
                killed.wait(0.05)
                continue
            except GpuSamplerError as e:
                with lock:
                    state["other_errors"].append(f"{i}: {e}")
                return
            if (r.indices.tolist() != case["indices"]
                    or r.num_positive.tolist() != case["num_positive"]
                    or r.num_negative.tolist() != case["num_negative"]):
                with lock:
                    state["wrong"].append(i)
            return
        with lock:
            state["other_errors"].append(f"{i}: still UNAVAILABLE after 6 attempts")

    def worker() -> None:
        while True:
            with lock:
                i = state["next"]
                if i >= total:
                    return
                state["next"] += 1
            one(i)
            with lock:
                state["done"] += 1
                kill_now = state["done"] >= kill_after and not state["killed"]
                if kill_now:
                    state["killed"] = True
            if kill_now:
                # The victim's share so far, then SIGKILL: calls in flight there fail.
                state["victim_ok"] = ok_samples(victim.metrics_port)
                victim.process.send_signal(signal.SIGKILL)
                state["survivors_at_kill"] = [ok_samples(s.metrics_port) for s in servers[:2]]
                victim.process.wait()
                killed.set()

    try:
        before = [ok_samples(s.metrics_port) for s in servers]
        pool = [threading.Thread(target=worker) for _ in range(threads)]
        for t in pool:
            t.start()
        for t in pool:
            t.join(timeout=120)
        assert not any(t.is_alive() for t in pool), "load did not finish"
        survivors_after = [ok_samples(s.metrics_port) for s in servers[:2]]
    finally:
        client.close()
        for s in servers[:2]:
            assert stop_server(s) == 0, s.log_text()
        if victim.process.poll() is None:
            victim.process.kill()

    assert state["killed"], "the victim was never killed"
    assert state["done"] == total
    assert not state["other_errors"], state["other_errors"][:5]
    assert not state["wrong"], f"requests {state['wrong'][:10]} differ from the golden samples"
    served = [survivors_after[0] - before[0], survivors_after[1] - before[1],
              state["victim_ok"] - before[2]]
    print(f"\nscale-out: {total} requests over 3 servers, answered {served} "
          f"(victim's before its SIGKILL); {state['retried']} UNAVAILABLE retried, all exact")
    assert all(n > 0 for n in served), f"a server took no traffic: {served}"
    # After the kill, round_robin kept both survivors busy.
    for at_kill, after in zip(state["survivors_at_kill"], survivors_after):
        assert after > at_kill, f"a survivor took no traffic after the kill: {at_kill} -> {after}"


def test_datasets_across_three_replicas_sharing_one_directory(tmp_path: Path) -> None:
    """Three CPU replicas share one --dataset-dir (docs/scaling.md): an upload through one is
    sampled through all at once, a replica SIGKILLed mid-upload leaves nothing behind, and a
    replica added later serves the dataset too. Every answer is checked against the golden
    samples (test_repository.py builds the dataset from them)."""
    import grpc

    from test_repository import (POLL, case_request, check_case, chunks, pb, sample_all, stub,
                                 upload)

    repo = tmp_path / "repo"
    repo.mkdir()
    servers = [start_server(tmp_path / f"s{i}", ["--dataset-dir", str(repo)] + POLL)
               for i in range(3)]
    late = None
    try:
        stubs = [stub(s.target) for s in servers]
        info = upload(stubs[0], "train", 1)
        versions = {info.sha256: 1}
        for s in stubs:
            assert sample_all(s, "train", versions) == []

        # The third replica dies (SIGKILL) while it receives a replacement.
        sent, release = threading.Event(), threading.Event()

        def stalled():
            for n, c in enumerate(chunks("train", 2, replace=True)):
                yield c
                if n == 2:
                    sent.set()
                    release.wait(30)
                    return

        fut = stubs[2].CreateDataset.future(stalled(), timeout=60)
        assert sent.wait(10)
        servers[2].process.send_signal(signal.SIGKILL)
        servers[2].process.wait()
        with pytest.raises(grpc.RpcError):
            fut.result(timeout=30)
        release.set()

        # A replica added later; then one round_robin channel over the live ones, as a
        # trainer given every address (or a headless Service) uses them.
        late = start_server(tmp_path / "late", ["--dataset-dir", str(repo)] + POLL)
        live = [servers[0], servers[1], late]
        target = "ipv4:" + ",".join(s.target for s in live)
        channel = grpc.insecure_channel(
            target, options=[("grpc.service_config",
                              json.dumps({"loadBalancingConfig": [{"round_robin": {}}]}))])
        from gpusampler.v1 import sampler_pb2_grpc as pb_grpc

        rr = pb_grpc.SamplerStub(channel)
        before = [ok_samples(s.metrics_port) for s in live]
        wrong = []
        for rep in range(3):
            for i in range(len(GOLDEN)):
                err = check_case(rr.Sample(case_request("train", i), timeout=30), i, versions)
                if err:
                    wrong.append(err)
        assert wrong == [], wrong[:5]
        served = [ok_samples(s.metrics_port) - b for s, b in zip(live, before)]
        assert all(n > 0 for n in served), f"a replica took no dataset requests: {served}"
        names = [d.name for d in rr.ListDatasets(pb.ListDatasetsRequest()).datasets]
        assert names == ["train"]
        assert sorted(p.name for p in repo.iterdir() if ".tmp-" not in p.name) == ["train.dataset"]
        print(f"\nrepository scale-out: {3 * len(GOLDEN)} dataset requests over "
              f"{len(live)} replicas, answered {served}, all golden-exact")
    finally:
        for s in servers[:2] + ([late] if late else []):
            assert stop_server(s) == 0, s.log_text()
        if servers[2].process.poll() is None:
            servers[2].process.kill()
