"""SampleIterable's prefetch thread: the same batches as the blocking path, a bounded queue,
errors raised at the step they belong to, pin_memory's documented fallback without CUDA, and
no thread left behind once the iterator is exhausted, closed or dropped."""

from __future__ import annotations

import gc
import threading
import time

import numpy as np
import pytest
import torch
from torch.utils.data import DataLoader

import gpusampler
from gpusampler.data import SampleIterable

ROWS = 6000
OUR_THREADS = ("gpusampler-prefetch", "gpusampler-stream-reader")


@pytest.fixture(scope="module")
def dataset(client):
    rng = np.random.default_rng(9)
    labels = (rng.random(ROWS) < 0.02).astype(np.int64)
    features = rng.standard_normal((ROWS, 4)).astype(np.float32)
    splits = np.linspace(0, ROWS, 4).astype(np.int64)
    client.create_dataset("prefetch-ds", labels, features, splits, replace=True)


@pytest.fixture(autouse=True)
def no_launcher(monkeypatch):
    for name in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE"):
        monkeypatch.delenv(name, raising=False)


def make(server, **kw) -> SampleIterable:
    args = dict(dataset="prefetch-ds", num_samples=32, steps=6, seed=4, return_features=True)
    args.update(kw)
    return SampleIterable(server.target, **args)


def ours() -> list:
    return [t for t in threading.enumerate() if t.name in OUR_THREADS]


def wait_for_no_threads(timeout: float = 10.0) -> None:
    deadline = time.monotonic() + timeout
    while ours() and time.monotonic() < deadline:
        gc.collect()
        time.sleep(0.05)
    assert not ours(), f"threads left running: {ours()}"


def assert_same(a: list, b: list) -> None:
    assert len(a) == len(b)
    for x, y in zip(a, b):
        assert (x.step, x.seed, x.dataset_sha256) == (y.step, y.seed, y.dataset_sha256)
        for field in ("indices", "labels", "features", "num_positive", "num_negative"):
            assert torch.equal(getattr(x, field), getattr(y, field)), field


def producing(server, producer: str, **kw) -> SampleIterable:
    """A SampleIterable whose prefetch thread runs ``producer`` ("unary", the default, or
    "stream")."""
    ds = make(server, **kw)
    ds._producer = producer
    return ds


PRODUCERS = ["unary", "stream"]


def test_prefetch_gives_the_blocking_paths_batches(server, dataset):
    blocking = list(make(server, prefetch=0))
    assert [b.step for b in blocking] == list(range(6))
    assert [b.seed for b in blocking] == [SampleIterable.seed_for(4, 0, i) for i in range(6)]
    assert make(server)._producer == "unary"
    for producer in PRODUCERS:
        for prefetch in (1, 2, 5):
            assert_same(blocking, list(producing(server, producer, prefetch=prefetch)))
    assert_same(blocking, list(DataLoader(make(server, prefetch=2), batch_size=None)))
    b = blocking[0]
    assert b.features.shape == (3, 32, 4) and b.features.dtype == torch.float32
    wait_for_no_threads()


@pytest.mark.parametrize("producer", PRODUCERS)
def test_prefetch_is_a_thread_with_a_bounded_queue(server, dataset, monkeypatch, producer):
    asked = []
    seed_for = SampleIterable.seed_for
    monkeypatch.setattr(SampleIterable, "seed_for", staticmethod(
        lambda seed, rank, step: asked.append(step) or seed_for(seed, rank, step)))
    it = iter(producing(server, producer, steps=None, prefetch=2))
    first = next(it)
    assert first.step == 0 and [t.name for t in ours()].count("gpusampler-prefetch") == 1
    time.sleep(0.5)  # the consumer stalls: the thread must stop, not run ahead without end
    # 1 taken + 2 queued + 1 in the thread's hand; a stream adds 2 in flight and 1 built
    # by its sender, waiting for a slot in the window
    most = 4 if producer == "unary" else 7
    assert 3 <= len(asked) <= most, asked
    time.sleep(0.3)
    assert len(asked) <= most, asked
    it.close()
    with pytest.raises(StopIteration):
        next(it)
    wait_for_no_threads()


@pytest.mark.parametrize("prefetch,producer", [(0, "unary"), (2, "unary"), (2, "stream")])
def test_error_surfaces_at_its_step(server, dataset, monkeypatch, prefetch, producer):
    seed_for = SampleIterable.seed_for

    def failing(seed: int, rank: int, step: int) -> int:
        if step == 3:
            raise RuntimeError("no seed for step 3")
        return seed_for(seed, rank, step)

    monkeypatch.setattr(SampleIterable, "seed_for", staticmethod(failing))
    it = iter(producing(server, producer, prefetch=prefetch))
    got = []
    with pytest.raises(RuntimeError, match="no seed for step 3"):
        for b in it:
            got.append(b.step)
    assert got == [0, 1, 2]  # every batch before the failing step, then its error
    wait_for_no_threads()


@pytest.mark.parametrize("prefetch,producer", [(0, "unary"), (2, "unary"), (2, "stream")])
def test_server_errors_surface_in_the_consumer(server, dataset, prefetch, producer):
    with pytest.raises(gpusampler.NotFoundError):
        next(iter(producing(server, producer, dataset="no-such-dataset", prefetch=prefetch)))
    with pytest.raises(gpusampler.UnavailableError):  # nothing listens there
        next(iter(SampleIterable("127.0.0.1:1", dataset="x", num_samples=4, steps=2,
                                 prefetch=prefetch)))
    wait_for_no_threads()


@pytest.mark.parametrize("producer", PRODUCERS)
def test_no_thread_left_behind(server, dataset, producer):
    # Dropped after two batches of an endless run.
    it = iter(producing(server, producer, steps=None))
    next(it), next(it)
    assert ours()
    del it
    wait_for_no_threads()
    # Closed explicitly, and as a context manager.
    it = iter(producing(server, producer, steps=None))
    next(it)
    it.close()
    wait_for_no_threads()
    with iter(producing(server, producer, steps=None)) as it:
        next(it)
    wait_for_no_threads()
    # A for loop over a DataLoader that breaks.
    for b in DataLoader(producing(server, producer, steps=None), batch_size=None):
        if b.step == 2:
            break
    wait_for_no_threads()
    # Exhausted.
    assert len(list(producing(server, producer, steps=3))) == 3
    wait_for_no_threads()


def test_pin_memory(server, dataset):
    if torch.cuda.is_available():  # pragma: no cover - CPU-only torch where the tests run
        batches = list(make(server, pin_memory=True))
        assert all(b.indices.is_pinned() and b.features.is_pinned() for b in batches)
    else:
        with pytest.warns(UserWarning, match=r"pin_memory=True.*needs CUDA.*ordinary"):
            ds = make(server, pin_memory=True)
        assert ds.pin_memory is False
        batches = list(ds)
    assert_same(list(make(server, prefetch=0)), batches)
    with pytest.raises(TypeError, match="pin_memory must be a bool"):
        make(server, pin_memory=1)
    with pytest.raises(ValueError, match="prefetch = -1"):
        make(server, prefetch=-1)
    wait_for_no_threads()
