"""The asyncio pattern that overlaps sampling with a synchronous training step, as
gpusampler/aio.py and client/README-trainer.md document it: create the task of step i+1
before training step i, and give the event loop two turns. The server must have answered
step i+1's request while step i trained (the loop blocked), and the batches must be the ones
SampleIterable.seed_for's seeds give."""

from __future__ import annotations

import asyncio
import re
import time
import urllib.request

import numpy as np

import gpusampler.aio
from gpusampler.data import SampleIterable

STEPS = 4
SEED = 13


def sample_requests_done(server) -> float:
    text = urllib.request.urlopen(f"http://127.0.0.1:{server.metrics_port}/metrics",
                                  timeout=10).read().decode()
    return sum(float(v) for v in re.findall(
        r'gpusampler_requests_total\{code="OK",method="Sample"\} (\S+)', text))


def test_two_loop_turns_overlap_a_synchronous_step(server, client):
    labels = (np.random.default_rng(2).random((2, 3000)) < 0.05).astype(np.int64)
    answered_by_step_end = []  # Sample calls the server had answered by each step's end
    seeds = []

    def train_step(out) -> None:  # synchronous: the event loop does not run meanwhile
        time.sleep(0.25)
        answered_by_step_end.append(sample_requests_done(server) - base)
        seeds.append(out.seed)

    async def train() -> None:
        async with gpusampler.aio.Client(server.target) as aio_client:
            def sample(step: int):
                return aio_client.sample(labels, num_samples=32,
                                         seed=SampleIterable.seed_for(SEED, 0, step))

            nonlocal base
            base = sample_requests_done(server)
            # The documented pattern.
            next_batch = asyncio.ensure_future(sample(0))
            for step in range(STEPS):
                out = await next_batch
                if step + 1 < STEPS:
                    next_batch = asyncio.ensure_future(sample(step + 1))
                    await asyncio.sleep(0)  # turn 1: the task starts and creates the call
                    await asyncio.sleep(0)  # turn 2: the call sends its request
                train_step(out)

    base = 0.0
    asyncio.run(train())
    # By the end of step i the server had answered step i+1 too: its request went out
    # before step i trained, and was answered while it did (with one turn, it would be
    # sent only when the loop runs again, after the step: [1, 2, 3, 4]).
    assert answered_by_step_end == [2.0, 3.0, 4.0, 4.0], answered_by_step_end
    assert seeds == [SampleIterable.seed_for(SEED, 0, i) for i in range(STEPS)]
    want = client.sample(labels, num_samples=32, seed=SampleIterable.seed_for(SEED, 0, 2))
    assert seeds[2] == want.seed


def sampled_rows(server) -> float:
    """Rows the server has sampled (one per request of 1-D labels), streams included."""
    text = urllib.request.urlopen(f"http://127.0.0.1:{server.metrics_port}/metrics",
                                  timeout=10).read().decode()
    pattern = r"^gpusampler_sampled_rows_total(?:\{[^}]*\})? (\S+)"
    return sum(float(v) for v in re.findall(pattern, text, re.M))


def test_a_stream_window_overlaps_a_synchronous_step(server):
    """With sample_stream (window >= 2) the next request is already out when the loop body
    runs, so the server samples it during the synchronous step without extra turns."""
    labels = (np.random.default_rng(3).random(3000) < 0.05).astype(np.int64)
    sampled_by_step_end = []

    async def train() -> None:
        async with gpusampler.aio.Client(server.target) as aio_client:
            base = sampled_rows(server)
            requests = ({"labels": labels, "seed": SampleIterable.seed_for(SEED, 0, i)}
                        for i in range(STEPS))
            async for out in aio_client.sample_stream(requests, num_samples=32, window=2):
                time.sleep(0.25)  # the synchronous step
                sampled_by_step_end.append(sampled_rows(server) - base)

    asyncio.run(train())
    # By the end of step i the server had sampled step i+1 (and perhaps i+2).
    assert len(sampled_by_step_end) == STEPS
    assert all(n >= min(i + 2, STEPS) for i, n in enumerate(sampled_by_step_end)), (
        sampled_by_step_end)
