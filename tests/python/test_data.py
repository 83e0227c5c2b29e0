"""gpusampler.data.SampleIterable: seeded runs repeat, DataLoader (with and without workers)
gives the same batches, ranks get their own documented seeds, and the batches are exactly
the ones Client.sample answers for those seeds."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from torch.utils.data import DataLoader

import gpusampler
from gpusampler.data import Batch, SampleIterable

ROWS = 20000


@pytest.fixture(scope="module")
def dataset(client):
    rng = np.random.default_rng(3)
    labels = (rng.random(ROWS) < 0.01).astype(np.int64)
    splits = np.linspace(0, ROWS, 11).astype(np.int64)
    features = rng.standard_normal((ROWS, 8)).astype(np.float32)
    client.create_dataset("iterable-ds", labels, features, splits, replace=True)
    return labels, features, splits


def batches(it) -> list:
    return [b for b in it]


def assert_same(a: list, b: list) -> None:
    assert len(a) == len(b)
    for x, y in zip(a, b):
        assert x.step == y.step and x.seed == y.seed
        for field in ("indices", "labels", "features", "num_positive", "num_negative"):
            u, v = getattr(x, field), getattr(y, field)
            assert (u is None and v is None) or torch.equal(u, v), field


def test_seeded_runs_are_identical_and_match_client_sample(server, client, dataset):
    make = lambda seed: SampleIterable(server.target, dataset="iterable-ds", num_samples=64,
                                       steps=6, seed=seed, return_features=True, prefetch=3,
                                       rows=[1, 3, 5])
    first, again, other = batches(make(7)), batches(make(7)), batches(make(8))
    assert_same(first, again)
    assert not all(torch.equal(x.indices, y.indices) for x, y in zip(first, other))
    assert [b.step for b in first] == list(range(6))
    for b in first:
        assert isinstance(b, Batch) and b.features.dtype == torch.float32
        assert b.indices.shape == (3, 64) and b.features.shape == (3, 64, 8)
        assert b.seed == SampleIterable.seed_for(7, 0, b.step)
        want = client.sample(dataset="iterable-ds", rows=[1, 3, 5], num_samples=64,
                             seed=b.seed, return_features=True)
        np.testing.assert_array_equal(b.indices.numpy(), want.indices)
        np.testing.assert_array_equal(b.features.numpy(), want.features)
        assert b.dataset_sha256 == want.dataset_sha256


def test_dataloader_with_and_without_workers(server, client, dataset):
    ds = SampleIterable(client, dataset="iterable-ds", num_samples=32, steps=7, seed=11)
    plain = batches(ds)
    assert len(ds) == 7
    assert_same(plain, batches(DataLoader(ds, batch_size=None)))
    # Two workers (spawned: each opens its own connection) split the steps, and the
    # DataLoader hands them back in step order: the same batches.
    loader = DataLoader(ds, batch_size=None, num_workers=2, multiprocessing_context="spawn")
    assert_same(plain, batches(loader))


def test_ranks_get_their_own_seeds(server, dataset):
    r0 = batches(SampleIterable(server.target, dataset="iterable-ds", num_samples=16, steps=3,
                                seed=5, rank=0))
    r1 = batches(SampleIterable(server.target, dataset="iterable-ds", num_samples=16, steps=3,
                                seed=5, rank=1))
    assert [b.seed for b in r0] == [SampleIterable.seed_for(5, 0, i) for i in range(3)]
    assert [b.seed for b in r1] == [SampleIterable.seed_for(5, 1, i) for i in range(3)]
    assert len({b.seed for b in r0 + r1}) == 6


def test_inline_pool_and_arguments(server):
    labels = (np.random.default_rng(1).random((2, 500)) < 0.1).astype(np.int64)
    got = batches(SampleIterable(server.target, labels=labels, num_samples=10, steps=2, seed=3,
                                 positive_fraction=0.25))
    assert len(got) == 2 and got[0].indices.shape == (2, 10) and got[0].dataset_sha256 == ""
    with pytest.raises(TypeError, match="exactly one of dataset"):
        SampleIterable(server.target, num_samples=4)
    with pytest.raises(TypeError, match="unknown keyword"):
        SampleIterable(server.target, dataset="x", num_samples=4, fil="none")
    with pytest.raises(ValueError, match="prefetch"):
        SampleIterable(server.target, dataset="x", num_samples=4, prefetch=-1)


def test_bfloat16_features_come_back_as_bfloat16(server, client):
    x = torch.randn(600, 4).to(torch.bfloat16)
    y = (torch.rand(600) < 0.1).long()
    client.create_dataset("iterable-bf16", y, x, replace=True)
    (batch,) = batches(SampleIterable(server.target, dataset="iterable-bf16", num_samples=8,
                                      steps=1, seed=2, return_features=True))
    assert batch.features.dtype == torch.bfloat16
    want = client.sample(y, x, num_samples=8, seed=SampleIterable.seed_for(2, 0, 0))
    assert torch.equal(batch.features, want.features)
