"""Client.sample_stream: order, equality with unary calls, the window, and failures."""

from __future__ import annotations

import numpy as np
import pytest
import torch

import gpusampler


def make_labels(i: int) -> np.ndarray:
    rng = np.random.default_rng(i)
    return (rng.random((2, 100 + i)) < 0.15).astype(np.int64)


def test_stream_matches_unary_in_order(client):
    items = [{"labels": make_labels(i), "seed": 1000 + i} for i in range(20)]
    results = list(client.sample_stream(items, num_samples=8, window=4))
    assert len(results) == 20
    ids = [int(r.request_id) for r in results]
    assert ids == sorted(ids) and len(set(ids)) == 20
    for item, got in zip(items, results):
        want = client.sample(item["labels"], num_samples=8, seed=item["seed"])
        np.testing.assert_array_equal(got.indices, want.indices)
        np.testing.assert_array_equal(got.labels, want.labels)
        assert got.seed == item["seed"]


def test_stream_keeps_at_most_window_requests_ahead(client):
    window = 2
    pulled = 0

    def items():
        nonlocal pulled
        for i in range(12):
            pulled += 1
            yield {"labels": make_labels(i), "seed": i}

    seen = 0
    for _ in client.sample_stream(items(), num_samples=4, window=window):
        # The producer may hold one item it has built but not yet sent (waiting for a
        # slot); beyond that, at most `window` are unanswered.
        assert pulled - seen <= window + 1, (pulled, seen)
        seen += 1
    assert seen == 12


def test_stream_accepts_bare_labels_and_torch(client):
    labels = [torch.from_numpy(make_labels(i)) for i in range(3)]
    features = torch.randn(2, 100, 4)
    results = list(client.sample_stream(labels, num_samples=5, seed=9))
    assert all(isinstance(r.indices, torch.Tensor) for r in results)
    with_features = list(client.sample_stream(
        [{"labels": labels[0], "features": features.to(torch.bfloat16)}], num_samples=5, seed=9))
    assert with_features[0].features.dtype == torch.bfloat16
    assert torch.equal(with_features[0].indices, results[0].indices)


def test_server_error_mid_stream_after_earlier_results(client):
    items = [{"labels": make_labels(i), "num_samples": 4} for i in range(3)]
    items.append({"labels": make_labels(3), "num_samples": 0})  # invalid: K must be >= 1
    items.append({"labels": make_labels(4), "num_samples": 4})
    got = []
    with pytest.raises(gpusampler.InvalidArgumentError) as info:
        for r in client.sample_stream(items, window=8):
            got.append(r)
    assert len(got) == 3
    assert "num_samples" in info.value.details


def test_client_error_mid_stream_after_earlier_results(client):
    items = [make_labels(0), make_labels(1), np.zeros(5, dtype=np.uint32)]
    got = []
    with pytest.raises(TypeError, match="uint32"):
        for r in client.sample_stream(items, num_samples=4):
            got.append(r)
    assert len(got) == 2


def test_abandoned_stream_does_not_hang(client):
    def endless():
        i = 0
        while True:
            i += 1
            yield make_labels(i % 7)

    stream = client.sample_stream(endless(), num_samples=4, window=3)
    for n, _ in enumerate(stream):
        if n == 5:
            break
    stream.close()  # cancels the call; the producer thread notices and stops
    assert client.health() == "SERVING"


def test_stream_takes_dataset_requests(client):
    labels = (np.random.default_rng(4).random(3000) < 0.03).astype(np.int64)
    splits = np.array([0, 1000, 2500, 3000], dtype=np.int64)
    client.create_dataset("stream-ds", labels, row_splits=splits, replace=True)
    items = [{"dataset": "stream-ds", "seed": 10}, {"labels": make_labels(1), "seed": 11},
             {"dataset": "stream-ds", "rows": [2, 0], "seed": 12}]
    got = list(client.sample_stream(items, num_samples=16, window=2))
    want = [client.sample(dataset="stream-ds", num_samples=16, seed=10),
            client.sample(make_labels(1), num_samples=16, seed=11),
            client.sample(dataset="stream-ds", rows=[2, 0], num_samples=16, seed=12)]
    for g, w in zip(got, want):
        np.testing.assert_array_equal(g.indices, w.indices)
        np.testing.assert_array_equal(g.labels, w.labels)
    assert got[2].indices.shape == (2, 16)
    # A dataset default, with items that only pick rows.
    got = list(client.sample_stream([{"rows": [1]}, {"rows": [0, 1]}], dataset="stream-ds",
                                    num_samples=4, seed=3))
    assert [r.indices.shape for r in got] == [(1, 4), (2, 4)]


def test_stream_errors_name_public_api_only(client):
    def first_error(items, **kw):
        with pytest.raises((TypeError, ValueError)) as info:
            list(client.sample_stream(items, num_samples=4, **kw))
        text = str(info.value)
        assert "_build" not in text and "_prepare" not in text, text
        return text

    assert "request 1 has unknown key(s) ['dataset_name']" in first_error(
        [{"dataset": "stream-ds"}, {"dataset_name": "stream-ds"}])
    assert "request 0 has neither 'labels' nor 'dataset'" in first_error([{"seed": 1}])
    assert "request 0: rows and return_features need dataset" in first_error(
        [{"labels": make_labels(0), "rows": [0]}])
    assert "request 0: num_samples must be an integer" in first_error(
        [{"dataset": "stream-ds", "num_samples": 1.5}])
    with pytest.raises(TypeError, match="unknown keyword argument.*'windw'"):
        list(client.sample_stream([], num_samples=4, windw=2))
