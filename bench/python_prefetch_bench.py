#!/usr/bin/python3
"""Interleaved benchmark of gpusampler.data.SampleIterable's prefetch under a competing CPU
load: how long each training step waits for its batch, and steps/s.

Modes (each repetition runs every mode once, in a rotated order, so that a change in the
host's load hits them alike):

- ``alone``: the training step on one fixed batch, no sampling (the ceiling);
- ``blocking``: ``SampleIterable(prefetch=0)``: each step calls ``Client.sample``;
- ``prefetch2``: ``SampleIterable(prefetch=2)``: the background thread, one unary call
  after the other (the default);
- ``prefetch2_stream``: the same, the thread keeping 2 requests in flight on one
  SampleStream instead (``SampleIterable._producer = "stream"``);
- ``prefetch2_workers1``: the same through ``DataLoader(num_workers=1)`` (fork);
- ``aio2turns``: ``gpusampler.aio.Client.sample`` for step i+1 created before step i trains,
  with two event-loop turns (the pattern client/README-trainer.md documents).

The wait of a step is the time from asking for its batch until it is in hand
(``next(iterator)``, or the ``await`` of the task); steps/s is steps over the wall time of
the measured steps. The training step is a torch MLP (forward, backward, SGD) on the batch's
K x dim features, sized to take a few ms on its own (printed as ``alone``).

Starts its own CPU server from --server-bin (unless --target is given) and uploads a
resident dataset (--rows x --dim float32, 1% positives). ``--load N`` starts N processes
that spin on the CPU for the whole run (the competing load).

    /usr/bin/python3 bench/python_prefetch_bench.py --server-bin build/bin/gpusampler-server \\
        --reps 10 --steps 300 --load 1 --json out.json
"""

from __future__ import annotations

import argparse
import asyncio
import json
import multiprocessing
import os
import platform
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any, Callable, Dict, Iterator, List, Optional, Tuple

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "client" / "python"))

import numpy as np  # noqa: E402
import torch  # noqa: E402
from torch.utils.data import DataLoader  # noqa: E402

import gpusampler  # noqa: E402
import gpusampler.aio  # noqa: E402
from gpusampler.data import SampleIterable  # noqa: E402

MODES = ("alone", "blocking", "prefetch2", "prefetch2_stream", "prefetch2_workers1",
         "aio2turns")
DATASET = "prefetch-bench"


def spin(stop: Any) -> None:
    """A competing CPU load: pure-Python arithmetic until told to stop."""
    x = 0
    while not stop.is_set():
        for i in range(100_000):
            x = (x * 31 + i) & 0xFFFFFFFF


def start_server(binary: str, workdir: Path) -> Tuple[subprocess.Popen, str]:
    ports = workdir / "ports"
    proc = subprocess.Popen([binary, "--device", "cpu", "--address", "127.0.0.1:0",
                             "--metrics-address", "127.0.0.1:0", "--port-file", str(ports)],
                            stdout=open(workdir / "server.log", "wb"),
                            stderr=subprocess.STDOUT)
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        if ports.exists() and ports.read_text().endswith("\n"):
            return proc, f"127.0.0.1:{ports.read_text().split()[0]}"
        if proc.poll() is not None:
            raise SystemExit(f"server exited {proc.returncode}: "
                             f"{(workdir / 'server.log').read_text()}")
        time.sleep(0.05)
    proc.kill()
    raise SystemExit("server did not start")


class Trainer:
    """The synthetic training step: an MLP on the batch's features."""

    def __init__(self, dim: int, hidden: int) -> None:
        torch.manual_seed(0)
        self.model = torch.nn.Sequential(
            torch.nn.Linear(dim, hidden), torch.nn.ReLU(),
            torch.nn.Linear(hidden, hidden), torch.nn.ReLU(),
            torch.nn.Linear(hidden, 1))
        self.opt = torch.optim.SGD(self.model.parameters(), lr=1e-3)
        self.loss = torch.nn.BCEWithLogitsLoss()
        self.times: List[float] = []  #: seconds of each measured step (set per mode run)

    def step(self, features: torch.Tensor, labels: torch.Tensor) -> None:
        x = features.reshape(-1, features.shape[-1])
        y = labels.reshape(-1).clamp(min=0).float()
        self.opt.zero_grad()
        self.loss(self.model(x).squeeze(-1), y).backward()
        self.opt.step()


def measure(batches: Iterator[Any], trainer: Trainer, steps: int, warmup: int,
            to_xy: Callable[[Any], Tuple[torch.Tensor, torch.Tensor]]
            ) -> Tuple[List[float], float]:
    """Waits (s) of the measured steps, and their steps/s."""
    waits: List[float] = []
    start = 0.0
    for i in range(warmup + steps):
        if i == warmup:
            start = time.perf_counter()
        t = time.perf_counter()
        b = next(batches)
        t1 = time.perf_counter()
        trainer.step(*to_xy(b))
        if i >= warmup:
            waits.append(t1 - t)
            trainer.times.append(time.perf_counter() - t1)
    return waits, steps / (time.perf_counter() - start)


def run_mode(mode: str, args: argparse.Namespace, target: str, trainer: Trainer,
             fixed: Tuple[torch.Tensor, torch.Tensor], seed: int) -> Tuple[List[float], float]:
    n = args.warmup + args.steps
    spec = dict(dataset=DATASET, num_samples=args.k, positive_fraction=0.5,
                return_features=True, steps=n, seed=seed)
    xy = lambda b: (b.features, b.labels)  # noqa: E731
    if mode == "alone":
        return measure(iter(lambda: fixed, None), trainer, args.steps, args.warmup,
                       lambda b: b)
    if mode in ("blocking", "prefetch2", "prefetch2_stream"):
        ds = SampleIterable(target, prefetch=0 if mode == "blocking" else 2, **spec)
        if mode == "prefetch2_stream":
            ds._producer = "stream"
        it = iter(ds)
        try:
            return measure(it, trainer, args.steps, args.warmup, xy)
        finally:
            close = getattr(it, "close", None)
            if close:
                close()
    if mode == "prefetch2_workers1":
        loader = DataLoader(SampleIterable(target, prefetch=2, **spec), batch_size=None,
                            num_workers=1, multiprocessing_context="fork")
        it = iter(loader)
        try:
            return measure(it, trainer, args.steps, args.warmup, xy)
        finally:
            del it
    if mode == "aio2turns":
        return asyncio.run(run_aio(args, target, trainer, seed, n))
    raise ValueError(mode)


async def run_aio(args: argparse.Namespace, target: str, trainer: Trainer, seed: int,
                  n: int) -> Tuple[List[float], float]:
    async with gpusampler.aio.Client(target) as client:
        def sample(step: int) -> Any:
            return client.sample(dataset=DATASET, num_samples=args.k, positive_fraction=0.5,
                                 return_features=True,
                                 seed=SampleIterable.seed_for(seed, 0, step))

        waits: List[float] = []
        start = 0.0
        task = asyncio.ensure_future(sample(0))
        for i in range(n):
            if i == args.warmup:
                start = time.perf_counter()
            t = time.perf_counter()
            out = await task
            if i >= args.warmup:
                waits.append(time.perf_counter() - t)
            if i + 1 < n:
                task = asyncio.ensure_future(sample(i + 1))
                await asyncio.sleep(0)
                await asyncio.sleep(0)
            t1 = time.perf_counter()
            trainer.step(torch.from_numpy(out.features), torch.from_numpy(out.labels))
            if i >= args.warmup:
                trainer.times.append(time.perf_counter() - t1)
        return waits, args.steps / (time.perf_counter() - start)


def pct(xs: List[float], q: float) -> float:
    s = sorted(xs)
    return s[min(len(s) - 1, int(round(q / 100 * (len(s) - 1))))]


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--server-bin", default=str(REPO / "build" / "bin" / "gpusampler-server"))
    p.add_argument("--target", help="an already running server (else one is started)")
    p.add_argument("--rows", type=int, default=200_000)
    p.add_argument("--dim", type=int, default=16)
    p.add_argument("--k", type=int, default=256)
    p.add_argument("--hidden", type=int, default=64)
    p.add_argument("--reps", type=int, default=10)
    p.add_argument("--steps", type=int, default=300, help="measured steps per mode run")
    p.add_argument("--warmup", type=int, default=20)
    p.add_argument("--load", type=int, default=1, help="competing CPU-spinning processes")
    p.add_argument("--torch-threads", type=int, default=1)
    p.add_argument("--modes", default=",".join(MODES))
    p.add_argument("--json", help="write the raw results here")
    args = p.parse_args()
    modes = args.modes.split(",")
    torch.set_num_threads(args.torch_threads)

    with tempfile.TemporaryDirectory() as tmp:
        server = None
        target = args.target
        if target is None:
            server, target = start_server(args.server_bin, Path(tmp))
        stop = multiprocessing.get_context("fork").Event()
        load = [multiprocessing.get_context("fork").Process(target=spin, args=(stop,))
                for _ in range(args.load)]
        try:
            rng = np.random.default_rng(0)
            labels = (rng.random(args.rows) < 0.01).astype(np.int64)
            features = rng.standard_normal((args.rows, args.dim)).astype(np.float32)
            with gpusampler.Client(target, timeout=60) as c:
                c.create_dataset(DATASET, labels, features, replace=True)
            trainer = Trainer(args.dim, args.hidden)
            fixed = (torch.from_numpy(features[:args.k]), torch.from_numpy(labels[:args.k]))
            for proc in load:
                proc.start()
            results: Dict[str, Dict[str, List[Any]]] = {
                m: {"waits": [], "rate": [], "train": []} for m in modes}
            for rep in range(args.reps):
                order = modes[rep % len(modes):] + modes[:rep % len(modes)]
                for mode in order:
                    trainer.times = []
                    waits, rate = run_mode(mode, args, target, trainer, fixed, seed=rep)
                    results[mode]["waits"].append(waits)
                    results[mode]["rate"].append(rate)
                    results[mode]["train"].extend(trainer.times)
                    print(f"rep {rep} {mode:20s} {rate:7.1f} steps/s  wait p50 "
                          f"{pct(waits, 50) * 1e3:.3f} ms  p95 {pct(waits, 95) * 1e3:.3f} ms",
                          file=sys.stderr, flush=True)
        finally:
            stop.set()
            for proc in load:
                proc.join(5)
                if proc.is_alive():
                    proc.kill()
            if server is not None:
                server.send_signal(signal.SIGTERM)
                server.wait(30)

    summary = {}
    print("\n| mode | steps/s median (range) | wait p50 ms | p95 ms | p99 ms | steps < 0.1 ms "
          "| runs with >= 95% < 0.1 ms | train step p50 ms |")
    print("|---|---|---:|---:|---:|---:|---:|---:|")
    for mode in modes:
        rates = results[mode]["rate"]
        per_run = results[mode]["waits"]
        waits = [w for run in per_run for w in run]
        under = sum(w < 1e-4 for w in waits) / len(waits)
        good_runs = sum(sum(w < 1e-4 for w in run) / len(run) >= 0.95 for run in per_run)
        summary[mode] = dict(
            steps_per_s_median=statistics.median(rates), steps_per_s_min=min(rates),
            steps_per_s_max=max(rates), wait_p50_ms=pct(waits, 50) * 1e3,
            wait_p95_ms=pct(waits, 95) * 1e3, wait_p99_ms=pct(waits, 99) * 1e3,
            fraction_under_0_1ms=under, runs_with_95pct_under_0_1ms=good_runs,
            train_step_p50_ms=pct(results[mode]["train"], 50) * 1e3, runs=len(rates))
        print(f"| {mode} | {statistics.median(rates):.0f} ({min(rates):.0f}-{max(rates):.0f}) "
              f"| {pct(waits, 50) * 1e3:.3f} | {pct(waits, 95) * 1e3:.3f} "
              f"| {pct(waits, 99) * 1e3:.3f} | {under * 100:.1f}% | {good_runs}/{len(rates)} "
              f"| {pct(results[mode]['train'], 50) * 1e3:.2f} |")
    if args.json:
        Path(args.json).write_text(json.dumps(dict(
            args=vars(args), host=platform.node(), cpus=os.cpu_count(),
            summary=summary, rates={m: results[m]["rate"] for m in modes}), indent=1))


if __name__ == "__main__":
    main()
