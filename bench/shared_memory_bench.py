"""Answers through a shared-memory region vs inline (SPEC section 9; bench/results/shared-memory.md).

One trainer on the server's host, a resident dataset, B rows per step, K samples per row,
float32 feature rows of D. Each round runs `--steps` steps inline then the same steps through
a region (rounds interleave, so both see the same machine); steps/s and the client's wall and
CPU time per step, median over rounds.

  /usr/bin/python3 bench/shared_memory_bench.py --server build/bin/gpusampler-server \
      --dims 1024 64 --rounds 5 --steps 20
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "client" / "python"))

import gpusampler  # noqa: E402


def start(server: str, work: Path) -> subprocess.Popen:
    ports = work / "ports"
    proc = subprocess.Popen([server, "--device", "cpu", "--address", "127.0.0.1:0",
                             "--metrics-address", "", "--port-file", str(ports),
                             "--allow-shared-memory", "--max-dataset-bytes", str(2 << 30),
                             "--log-level", "warn"])
    for _ in range(600):
        if ports.exists() and ports.read_text().endswith("\n"):
            return proc, int(ports.read_text().split()[0])
        time.sleep(0.05)
    proc.kill()
    raise SystemExit("server did not start")


def run(client, mode, steps, args, region):
    extra = {"output_region": region} if mode == "region" else {}
    wall0, cpu0 = time.perf_counter(), time.process_time()
    server_us = []
    for s in range(steps):
        out = client.sample(seed=s, **args, **extra)
        assert out.features is not None
        server_us.append(out.timing.total_us)
    wall, cpu = time.perf_counter() - wall0, time.process_time() - cpu0
    return (steps / wall, wall / steps * 1e3, cpu / steps * 1e3,
            statistics.median(server_us) / 1e3)


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--server", default=str(REPO / "build/bin/gpusampler-server"))
    p.add_argument("--dims", type=int, nargs="+", default=[1024, 64])
    p.add_argument("--rows", type=int, default=16)      # B
    p.add_argument("--k", type=int, default=256)        # K
    p.add_argument("--n", type=int, default=2048)       # elements per dataset row
    p.add_argument("--rounds", type=int, default=5)
    p.add_argument("--steps", type=int, default=20)
    a = p.parse_args()
    with tempfile.TemporaryDirectory() as work:
        proc, port = start(a.server, Path(work))
        try:
            client = gpusampler.Client(f"127.0.0.1:{port}", timeout=120)
            rng = np.random.default_rng(0)
            print("| D | answer MiB | mode | steps/s | client wall ms/step | client CPU ms/step "
                  "| server total ms/step |")
            print("|---|---|---|---|---|---|---|")
            for d in a.dims:
                total = a.rows * a.n
                labels = (rng.random(total) < 0.3).astype(np.int64)
                feats = rng.random((total, d), dtype=np.float32)
                splits = np.arange(0, total + 1, a.n, dtype=np.int64)
                name = f"bench-{d}"
                client.create_dataset(name, labels, feats, row_splits=splits, replace=True)
                del feats
                args = dict(dataset=name, return_features=True, num_samples=a.k)
                answer = a.rows * a.k * (8 + 8 + 4 * d) + 2 * a.rows * 4
                region = client.register_region(answer + 4096)
                results = {"inline": [], "region": []}
                run(client, "inline", 2, args, region)  # warm both paths
                run(client, "region", 2, args, region)
                for _ in range(a.rounds):
                    for mode in ("inline", "region"):
                        results[mode].append(run(client, mode, a.steps, args, region))
                med = {m: [statistics.median(x[i] for x in r) for i in range(4)]
                       for m, r in results.items()}
                for m in ("inline", "region"):
                    sps, wall, cpu, server = med[m]
                    print(f"| {d} | {answer / 2**20:.2f} | {m} | {sps:.1f} | {wall:.2f} | "
                          f"{cpu:.2f} | {server:.2f} |")
                print(f"| {d} | | **region / inline** | **{med['region'][0] / med['inline'][0]:.2f}x**"
                      " | | | |", flush=True)
                region.close()
                client.delete_dataset(name)
            client.close()
        finally:
            proc.terminate()
            proc.wait(timeout=30)


if __name__ == "__main__":
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    main()
