#!/usr/bin/python3
"""ELEMENTS epoch step latency (SPEC section 8) against the dataset's size: one-row datasets
of --sizes elements (int8 labels, --positive-rate positives, the rest negatives), K =
--num-samples, the binary spec at positive_fraction 0.5.

For each size: the first step of the epoch (which builds the per-class member lists, one
pass over the row), then --steps steps, each a different (rank, step) of a W = 8 epoch.
Reports the server's compute_us (the step's work at the edge) and the client's round trip.
Starts its own server from --server-bin on --device (cpu, cuda-sim, or cuda:N: there the
step is the ELEMENTS kernel over device-resident member lists) with a --max-dataset-bytes
that holds the largest dataset and its lists.

    /usr/bin/python3 bench/epochs_bench.py --server-bin build/bin/gpusampler-server --device cpu
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "client" / "python"))
import gpusampler  # noqa: E402


def start(server_bin: str, workdir: Path, budget: int, device: str):
    ports = workdir / "ports"
    log = open(workdir / "server.log", "wb")
    proc = subprocess.Popen([server_bin, "--device", device, "--address", "127.0.0.1:0",
                             "--metrics-address", "127.0.0.1:0", "--port-file", str(ports),
                             "--max-dataset-bytes", str(budget),
                             "--max-message-bytes", str(64 << 20)],
                            stdout=log, stderr=subprocess.STDOUT)
    for _ in range(600):
        if ports.exists() and ports.read_text().endswith("\n"):
            return proc, f"127.0.0.1:{ports.read_text().split()[0]}"
        time.sleep(0.05)
    proc.kill()
    raise SystemExit("server did not start")


def pct(xs, q):
    return float(np.percentile(np.array(xs), q))


def run(client, n: int, args) -> dict:
    rng = np.random.default_rng(n)
    labels = (rng.random(n) < args.positive_rate).astype(np.int8)
    name = f"epochs-bench-{n}"
    t0 = time.perf_counter()
    client.create_dataset(name, labels, replace=True)
    upload_s = time.perf_counter() - t0
    world = 8

    def step(rank, t):
        s = time.perf_counter()
        r = client.sample(dataset=name, num_samples=args.num_samples, seed=t,
                          epoch=dict(mode="elements", world_size=world, rank=rank, step=t,
                                     epoch=1, shuffle_seed=3))
        return r, (time.perf_counter() - s) * 1e6

    first, first_rt = step(0, 0)
    steps = first.epoch_steps
    compute, rtt = [], []
    for j in range(args.steps):
        # Spread over the epoch: every rank, steps far apart (positions far apart in N).
        r, us = step(j % world, (j * 7919) % steps)
        compute.append(r.timing.compute_us)
        rtt.append(us)
    client.delete_dataset(name)
    return {"n": n, "upload_s": round(upload_s, 2), "epoch_steps": steps,
            "first_step_compute_us": first.timing.compute_us,
            "first_step_round_trip_us": round(first_rt),
            "compute_us_p50": pct(compute, 50), "compute_us_p90": pct(compute, 90),
            "round_trip_us_p50": round(pct(rtt, 50)), "round_trip_us_p90": round(pct(rtt, 90))}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--server-bin", default="build/bin/gpusampler-server")
    p.add_argument("--device", default="cpu", help="the server's --device")
    p.add_argument("--sizes", default="10000,1000000,100000000")
    p.add_argument("--num-samples", type=int, default=256)
    p.add_argument("--positive-rate", type=float, default=0.01)
    p.add_argument("--steps", type=int, default=500)
    p.add_argument("--json", help="write the rows here too")
    args = p.parse_args()
    sizes = [int(float(x)) for x in args.sizes.split(",")]
    budget = 6 * max(sizes) + (64 << 20)  # labels + 4-byte member lists, with room
    with tempfile.TemporaryDirectory() as tmp:
        proc, target = start(args.server_bin, Path(tmp), budget, args.device)
        try:
            with gpusampler.Client(target, timeout=600) as client:
                rows = [run(client, n, args) for n in sizes]
        finally:
            proc.terminate()
            proc.wait()
    base = rows[0]["compute_us_p50"]
    for r in rows:
        r["device"] = args.device
        r["compute_p50_vs_smallest"] = round(r["compute_us_p50"] / base, 2)
        print(json.dumps(r))
    if args.json:
        Path(args.json).write_text("\n".join(json.dumps(r) for r in rows) + "\n")


if __name__ == "__main__":
    main()
