"""gpusampler.aio.Client: the same methods and arguments as the blocking Client, and byte for
byte the same answers (unary, datasets, streams) and the same errors."""

from __future__ import annotations

import asyncio
import inspect

import numpy as np
import pytest
import torch

import gpusampler
import gpusampler.aio

PUBLIC = ["sample", "sample_stream", "health", "info", "create_dataset", "delete_dataset",
          "list_datasets", "close"]


def labels_for(i: int) -> np.ndarray:
    rng = np.random.default_rng(i)
    return (rng.random((3, 200 + 7 * i)) < 0.1).astype(np.int64)


def same(a: gpusampler.SampleResult, b: gpusampler.SampleResult) -> None:
    for field in ("indices", "labels", "features", "num_positive", "num_negative"):
        x, y = getattr(a, field), getattr(b, field)
        if x is None or y is None:
            assert x is None and y is None, field
            continue
        x = x.numpy() if isinstance(x, torch.Tensor) else x
        y = y.numpy() if isinstance(y, torch.Tensor) else y
        assert x.dtype == y.dtype and x.shape == y.shape, field
        assert x.tobytes() == y.tobytes(), field
    assert a.seed == b.seed and a.dataset_sha256 == b.dataset_sha256 and a.device == b.device


def test_same_methods_and_arguments():
    for name in PUBLIC:
        sync, aio = getattr(gpusampler.Client, name), getattr(gpusampler.aio.Client, name)
        assert inspect.signature(sync) == inspect.signature(aio) or name == "sample_stream", name
    # sample_stream: the same parameters; requests may also be an async iterable.
    s = inspect.signature(gpusampler.Client.sample_stream).parameters
    a = inspect.signature(gpusampler.aio.Client.sample_stream).parameters
    assert list(s) == list(a)
    assert inspect.signature(gpusampler.Client.__init__) == inspect.signature(
        gpusampler.aio.Client.__init__)
    assert inspect.isasyncgenfunction(gpusampler.aio.Client.sample_stream)


def test_answers_equal_the_blocking_client(server, client):
    features = np.random.default_rng(5).standard_normal((1000, 3)).astype(np.float32)
    labels = (np.random.default_rng(6).random(1000) < 0.05).astype(np.int64)
    client.create_dataset("aio-ds", labels, features, replace=True)

    async def run():
        async with gpusampler.aio.Client(server.target) as aio:
            assert await aio.health() == "SERVING"
            assert (await aio.info()).version == client.info().version
            out = []
            for i in range(4):
                out.append(await aio.sample(labels_for(i), num_samples=16, seed=100 + i))
            out.append(await aio.sample(torch.from_numpy(labels), torch.from_numpy(features),
                                        num_samples=32, seed=9, fill="none"))
            out.append(await aio.sample(dataset="aio-ds", num_samples=64, seed=11,
                                        return_features=True))
            names = [d.name for d in await aio.list_datasets()]
            return out, names

    got, names = asyncio.run(run())
    assert "aio-ds" in names
    want = [client.sample(labels_for(i), num_samples=16, seed=100 + i) for i in range(4)]
    want.append(client.sample(torch.from_numpy(labels), torch.from_numpy(features),
                              num_samples=32, seed=9, fill="none"))
    want.append(client.sample(dataset="aio-ds", num_samples=64, seed=11, return_features=True))
    for g, w in zip(got, want):
        same(g, w)
    assert isinstance(got[4].indices, torch.Tensor)


def test_stream_is_an_async_iterator_equal_to_the_blocking_stream(server, client):
    labels = (np.random.default_rng(8).random(5000) < 0.02).astype(np.int64)
    client.create_dataset("aio-stream-ds", labels, replace=True)
    items = [{"labels": labels_for(i), "seed": i} for i in range(6)]
    items += [{"dataset": "aio-stream-ds", "seed": 50 + i} for i in range(6)]

    async def agen():
        for item in items:
            await asyncio.sleep(0)
            yield item

    async def run():
        async with gpusampler.aio.Client(server.target) as aio:
            a = [r async for r in aio.sample_stream(items, num_samples=8, window=3)]
            b = [r async for r in aio.sample_stream(agen(), num_samples=8, window=2)]
            return a, b

    a, b = asyncio.run(run())
    want = list(client.sample_stream(items, num_samples=8, window=4))
    assert len(a) == len(b) == len(want) == 12
    for x, y, w in zip(a, b, want):
        same(x, w)
        same(y, w)
    assert not any(r.dataset_sha256 for r in a[:6])  # inline requests name no version


def test_same_errors(server, client):
    bad = np.array([[1, 0, 2]], dtype=np.float32)  # float labels: INVALID_ARGUMENT

    async def run():
        errors = []
        async with gpusampler.aio.Client(server.target) as aio:
            for call in (lambda: aio.sample(bad, num_samples=2),
                         lambda: aio.sample(dataset="aio-missing", num_samples=2),
                         lambda: aio.sample(labels_for(0), num_samples=2.5),
                         lambda: aio.delete_dataset("aio-missing")):
                try:
                    await call()
                except Exception as e:  # noqa: BLE001 - compared below
                    errors.append(e)
            # A bad request in a stream fails after the results before it.
            seen = 0
            try:
                async for _ in aio.sample_stream([labels_for(1), {"labelz": 1}], num_samples=4):
                    seen += 1
            except Exception as e:  # noqa: BLE001
                errors.append(e)
            return errors, seen

    errors, seen = asyncio.run(run())
    sync_errors = []
    for call in (lambda: client.sample(bad, num_samples=2),
                 lambda: client.sample(dataset="aio-missing", num_samples=2),
                 lambda: client.sample(labels_for(0), num_samples=2.5),
                 lambda: client.delete_dataset("aio-missing")):
        with pytest.raises(Exception) as info:
            call()
        sync_errors.append(info.value)
    with pytest.raises(Exception) as info:
        list(client.sample_stream([labels_for(1), {"labelz": 1}], num_samples=4))
    sync_errors.append(info.value)
    assert seen == 1
    assert [type(e) for e in errors] == [type(e) for e in sync_errors]
    assert [str(e) for e in errors] == [str(e) for e in sync_errors]
    assert isinstance(errors[0], gpusampler.InvalidArgumentError)
    assert isinstance(errors[1], gpusampler.NotFoundError)
    assert "_build" not in str(errors[4]) and "labelz" in str(errors[4])
