"""SamplingQualityWarning points at the caller's own line, for both clients' sample and
sample_stream (the shared result decoding sits a fixed number of frames below them)."""

from __future__ import annotations

import asyncio
import inspect
import warnings
from typing import List, Tuple

import numpy as np

import gpusampler
import gpusampler.aio

SHORT = np.array([[1, 0, 0, 0]], np.int64)  # 4 candidates for K = 10: a short row


def next_line() -> int:
    """The number of the line after the caller's."""
    frame = inspect.currentframe()
    assert frame is not None and frame.f_back is not None
    return frame.f_back.f_lineno + 1


def where(caught: List[warnings.WarningMessage]) -> List[Tuple[str, int]]:
    return [(w.filename, w.lineno) for w in caught
            if w.category is gpusampler.SamplingQualityWarning]


def test_blocking_client_warns_at_the_callers_line(server):
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        with gpusampler.Client(server.target, warn_quality=True) as c:
            line = next_line()
            c.sample(SHORT, num_samples=10, seed=1)
        assert where(caught) == [(__file__, line)] * 2  # short, and under the fraction
        caught.clear()
        with gpusampler.Client(server.target, warn_quality=True) as c:
            line = next_line()
            for _ in c.sample_stream([SHORT], num_samples=10, seed=1):
                pass
        assert where(caught) == [(__file__, line)] * 2


def test_asyncio_client_warns_at_the_callers_line(server):
    lines = []

    async def run() -> None:
        async with gpusampler.aio.Client(server.target, warn_quality=True) as c:
            lines.append(next_line())
            await c.sample(SHORT, num_samples=10, seed=1)
        async with gpusampler.aio.Client(server.target, warn_quality=True) as c:
            lines.append(next_line())
            async for _ in c.sample_stream([SHORT], num_samples=10, seed=1):
                pass

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        asyncio.run(run())
    assert where(caught) == [(__file__, lines[0])] * 2 + [(__file__, lines[1])] * 2
