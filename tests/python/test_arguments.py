"""Strict argument checking in the Python client: integers must be integers, numbers must
be numbers, and every message names its argument. Nothing is sent for a bad argument."""

from __future__ import annotations

import numpy as np
import pytest

import gpusampler

LABELS = np.array([[1, 0, 0, 1, 0, 0, 0, 1]] * 2, dtype=np.int64)


@pytest.mark.parametrize(
    "kwargs, error, words",
    [
        (dict(num_samples=2.5), TypeError, ["num_samples", "integer", "2.5"]),
        (dict(num_samples="256"), TypeError, ["num_samples", "integer", "'256'"]),
        (dict(num_samples=True), TypeError, ["num_samples", "bool"]),
        (dict(num_samples=np.float64(4)), TypeError, ["num_samples"]),
        (dict(num_samples=1 << 63), ValueError, ["num_samples", "2**63 - 1"]),
        (dict(num_samples=4, seed=-1), ValueError, ["seed", "-1", "2**64 - 1"]),
        (dict(num_samples=4, seed=1 << 64), ValueError, ["seed"]),
        (dict(num_samples=4, seed=3.0), TypeError, ["seed", "float"]),
        (dict(num_samples=4, positive_fraction="0.5"), TypeError, ["positive_fraction"]),
        (dict(num_samples=4, positive_fraction=float("nan")), ValueError, ["positive_fraction", "NaN"]),
        (dict(num_samples=4, positive_label=1.5), TypeError, ["positive_label"]),
        (dict(num_samples=4, negative_label="0"), TypeError, ["negative_label"]),
        (dict(num_samples=4, fill="half"), ValueError, ["fill", "'half'"]),
        (dict(num_samples=4, fill=None), TypeError, ["fill"]),
        (dict(num_samples=4, timeout=0), ValueError, ["timeout"]),
        (dict(num_samples=4, timeout="1"), TypeError, ["timeout"]),
    ],
    ids=lambda v: None,
)
def test_sample_refuses_bad_arguments_naming_them(client, kwargs, error, words):
    with pytest.raises(error) as info:
        client.sample(LABELS, **kwargs)
    for word in words:
        assert word in str(info.value), (word, str(info.value))


def test_integer_like_numpy_values_are_accepted(client):
    out = client.sample(LABELS, num_samples=np.int32(4), seed=np.uint64((1 << 64) - 1),
                        positive_fraction=np.float32(0.5), positive_label=np.int8(1))
    assert out.seed == (1 << 64) - 1
    assert out.indices.shape == (2, 4)


@pytest.mark.parametrize(
    "kwargs, error, word",
    [
        (dict(timeout=-1), ValueError, "timeout"),
        (dict(max_attempts=2.0), TypeError, "max_attempts"),
        (dict(max_attempts=6), ValueError, "max_attempts"),
        (dict(max_message_bytes="1"), TypeError, "max_message_bytes"),
        (dict(initial_backoff=0), ValueError, "initial_backoff"),
        (dict(keepalive_time="30"), TypeError, "keepalive_time"),
        (dict(wait_for_ready="yes"), TypeError, "wait_for_ready"),
        (dict(warn_quality=1), TypeError, "warn_quality"),
    ],
)
def test_client_options_are_checked(kwargs, error, word):
    with pytest.raises(error) as info:
        gpusampler.Client("127.0.0.1:1", **kwargs)
    assert word in str(info.value)


def test_stream_arguments_are_checked(client):
    with pytest.raises(TypeError, match="window"):
        next(client.sample_stream([LABELS], num_samples=4, window=2.0))
    with pytest.raises(ValueError, match="window"):
        next(client.sample_stream([LABELS], num_samples=4, window=0))
    # A bad item fails with its argument named, after the results before it.
    items = [{"labels": LABELS, "num_samples": 4}, {"labels": LABELS, "num_samples": "4"}]
    got = []
    with pytest.raises(TypeError, match="num_samples"):
        for r in client.sample_stream(items):
            got.append(r)
    assert len(got) == 1
