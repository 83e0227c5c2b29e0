"""classes, fill_order and scores through every Python entry point: the aio client and
gpusampler.data.SampleIterable answer what Client.sample answers, num_per_class included."""

from __future__ import annotations

import asyncio

import numpy as np

import gpusampler
import gpusampler.aio
from gpusampler.data import SampleIterable

RNG = np.random.default_rng(12)
LABELS = RNG.integers(0, 4, size=(2, 300)).astype(np.int64)
SCORES = RNG.random((2, 300)).astype(np.float32)
CLASSES = [gpusampler.Class(1, fraction=0.25, selection="hardest"),
           gpusampler.Class([0, (2, 3)], rest=True, selection="weighted")]


def same(a, b):
    for field in ("indices", "labels", "num_positive", "num_negative", "num_per_class"):
        x, y = np.asarray(getattr(a, field)), np.asarray(getattr(b, field))
        assert x.dtype == y.dtype and x.tobytes() == y.tobytes(), field


def test_aio_answers_the_blocking_client(server, client):
    client.create_dataset("classes-aio", LABELS.reshape(-1), row_splits=np.array([0, 300, 600]),
                          scores=SCORES.reshape(-1), replace=True)

    async def run():
        async with gpusampler.aio.Client(server.target) as aio:
            return [await aio.sample(LABELS, num_samples=16, seed=4, classes=CLASSES,
                                     fill_order=[1], scores=SCORES),
                    await aio.sample(dataset="classes-aio", num_samples=16, seed=4,
                                     classes=CLASSES, fill_order=[1])]

    try:
        got = asyncio.run(run())
        want = [client.sample(LABELS, num_samples=16, seed=4, classes=CLASSES, fill_order=[1],
                              scores=SCORES),
                client.sample(dataset="classes-aio", num_samples=16, seed=4, classes=CLASSES,
                              fill_order=[1])]
        for g, w in zip(got, want):
            same(g, w)
        assert want[0].num_per_class is not None and want[0].num_per_class.dtype == np.int32
    finally:
        client.delete_dataset("classes-aio")


def test_sample_iterable_takes_classes(server, client):
    it = SampleIterable(server.target, labels=LABELS, num_samples=16, steps=2, seed=3,
                        classes=CLASSES, fill_order=[1], scores=SCORES)
    for b in it:
        want = client.sample(LABELS, num_samples=16, seed=b.seed, classes=CLASSES,
                             fill_order=[1], scores=SCORES)
        np.testing.assert_array_equal(b.indices.numpy(), want.indices)
        assert b.num_per_class is not None
        np.testing.assert_array_equal(b.num_per_class.numpy(), want.num_per_class)
