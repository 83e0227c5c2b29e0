#!/usr/bin/python3
"""Fair share of bytes (issue 31, item 5): reconnecting never-readers against legitimate
8 MiB requests.

  tests/stress/fair_share.py --server build/bin/gpusampler-server            # 30 s (make test)
  tests/stress/fair_share.py --server build/bin/gpusampler-server --long     # 90 s
  tests/stress/fair_share.py --server <main's binary> --before               # print only

The server runs with --max-inflight-bytes 268435456 and its defaults otherwise. The attacker
keeps 8 connections, each with 2 SampleStreams that send 40 requests of 14 bytes asking for
1M padded slots (an 8 MB answer each) and never read; every 10 s it drops them all and
reconnects on 8 new connections. Meanwhile one legitimate client (gpusampler.Client, its
default retries on RESOURCE_EXHAUSTED with the server's pushback) sends a request of 1M INT64
labels (8 MiB) every 0.5 s, one at a time, each with a 60 s deadline. Checks: at most 10% of
the legitimate requests fail (RESOURCE_EXHAUSTED or anything else), every answer has its
num_samples indices, and the server then serves a request and exits 0.
"""
import argparse
import os
import signal
import subprocess
import sys
import threading
import time

import grpc
import numpy as np

from cpu_server import start  # a sibling module (the script's directory is on sys.path)

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
sys.path.insert(0, os.path.join(ROOT, "client", "python"))
import gpusampler  # noqa: E402
from gpusampler._proto.gpusampler.v1 import sampler_pb2 as pb  # noqa: E402
from gpusampler._proto.gpusampler.v1 import sampler_pb2_grpc as pbg  # noqa: E402

BUDGET = 268435456
CONNECTIONS = 8
STREAMS_PER_CONNECTION = 2
RECONNECT_S = 10.0


def attacker(port, stop, rounds):
    pad = pb.SampleRequest(labels=pb.Tensor(dtype=pb.DTYPE_INT8, shape=[1], data=b"\x01"),
                           spec=pb.SamplingSpec(num_samples=1 << 20,
                                                fill_policy=pb.FILL_POLICY_NONE))
    opts = [("grpc.use_local_subchannel_pool", 1), ("grpc.max_receive_message_length", -1)]
    while not stop.is_set():
        channels = [grpc.insecure_channel(f"127.0.0.1:{port}", options=opts)
                    for _ in range(CONNECTIONS)]
        calls = []
        for ch in channels:
            stub = pbg.SamplerStub(ch)
            for _ in range(STREAMS_PER_CONNECTION):
                calls.append(stub.SampleStream(iter([pad] * 40)))  # never read
        rounds[0] += 1
        stop.wait(RECONNECT_S)
        for c in calls:
            c.cancel()
        for ch in channels:
            ch.close()


def main():
    code, proc, before, d = run()
    proc.send_signal(signal.SIGTERM)
    try:
        rc = proc.wait(timeout=60)
    except subprocess.TimeoutExpired:
        proc.kill()
        rc = None
    if rc != 0 and not before:
        print(f"FAILED: server exit {rc} (log in {d})")
        return 1
    return code


def run():
    ap = argparse.ArgumentParser()
    ap.add_argument("--server", required=True)
    ap.add_argument("--long", action="store_true")
    ap.add_argument("--before", action="store_true", help="print only (a server without it)")
    args = ap.parse_args()
    duration = 90.0 if args.long else 30.0
    proc, port, d = start(args.server, ["--log-level", "error", "--max-inflight-bytes",
                                        str(BUDGET)], prefix="gpusampler-fair-")
    labels = np.zeros((1, 1 << 20), dtype=np.int64)
    labels[0, ::2] = 1
    stop = threading.Event()
    rounds = [0]
    t = threading.Thread(target=attacker, args=(port, stop, rounds), daemon=True)
    t.start()
    time.sleep(2.0)  # the never-readers hold the budget first
    outcomes = {}
    wrong = 0
    latencies = []
    with gpusampler.Client(f"127.0.0.1:{port}", timeout=60) as client:
        t0 = time.monotonic()
        while time.monotonic() - t0 < duration:
            s = time.monotonic()
            try:
                r = client.sample(labels, num_samples=64, seed=len(latencies))
                name = "OK"
                if r.indices.shape != (1, 64):
                    wrong += 1
            except Exception as e:  # counted by kind, every kind a failure
                name = type(e).__name__
            latencies.append(time.monotonic() - s)
            outcomes[name] = outcomes.get(name, 0) + 1
            time.sleep(max(0.0, 0.5 - (time.monotonic() - s)))
    stop.set()
    t.join(timeout=30)
    total = sum(outcomes.values())
    failed = total - outcomes.get("OK", 0)
    lat = sorted(latencies)
    print(f"{total} legitimate 8 MiB requests in {duration:.0f} s against {rounds[0]} "
          f"rounds of {CONNECTIONS} x {STREAMS_PER_CONNECTION} never-reading streams: "
          f"{outcomes}; {failed} failed ({100.0 * failed / max(total, 1):.1f}%); latency "
          f"p50 {lat[len(lat) // 2]:.2f} s, max {lat[-1]:.2f} s", flush=True)
    with gpusampler.Client(f"127.0.0.1:{port}", timeout=60) as client:
        served = client.sample([[1, 0] * 2000], num_samples=16, seed=1).indices.shape == (1, 16)
    print("a request is served afterwards:", served)
    if args.before:
        return 0, proc, True, d
    problems = []
    if failed * 10 > total:
        problems.append(f"{failed} of {total} legitimate requests failed (> 10%)")
    if wrong:
        problems.append(f"{wrong} answers without 64 indices")
    if not served:
        problems.append("no request served afterwards")
    for p in problems:
        print("FAILED:", p)
    return (1 if problems else 0), proc, False, d


if __name__ == "__main__":
    sys.exit(main())
