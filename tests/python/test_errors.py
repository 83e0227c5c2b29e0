"""gRPC status codes map to gpusampler exceptions, with the server's message."""

from __future__ import annotations

import re
import socket
import urllib.request

import numpy as np
import pytest

import gpusampler

LABELS = (np.arange(200) % 3 == 0).astype(np.int64).reshape(2, 100)


@pytest.mark.parametrize(
    "kwargs, field",
    [
        (dict(labels=LABELS, num_samples=0), "num_samples"),
        (dict(labels=LABELS, num_samples=4, positive_fraction=1.5), "positive_fraction"),
        (dict(labels=LABELS.astype(np.float32), num_samples=4), "labels"),
        (dict(labels=LABELS, features=np.zeros((2, 99, 3), np.float32), num_samples=4), "features"),
        (dict(labels=LABELS.reshape(-1), row_splits=np.array([0, 150, 120, 200]), num_samples=4),
         "row_splits"),
    ],
    ids=["k0", "fraction", "float_labels", "feature_shape", "row_splits"],
)
def test_invalid_argument(client, kwargs, field):
    with pytest.raises(gpusampler.InvalidArgumentError) as info:
        client.sample(**kwargs)
    assert info.value.code.name == "INVALID_ARGUMENT"
    assert field in info.value.details
    assert isinstance(info.value, ValueError)  # callers can catch it as a ValueError


def requests_total(server, code: str) -> float:
    text = urllib.request.urlopen(f"http://127.0.0.1:{server.metrics_port}/metrics", timeout=10).read().decode()
    total = 0.0
    for line in text.splitlines():
        if line.startswith("gpusampler_requests_total{") and 'method="Sample"' in line and f'code="{code}"' in line:
            total += float(line.rsplit(" ", 1)[1])
    return total


def test_limit_error_is_not_retried_whatever_max_attempts(server):
    with gpusampler.Client(server.target) as probe:
        k = probe.info().limits.max_num_samples + 1
    for attempts in (1, 3):
        before = requests_total(server, "RESOURCE_EXHAUSTED")
        with gpusampler.Client(server.target, max_attempts=attempts, initial_backoff=0.01,
                               max_backoff=0.02) as c:
            with pytest.raises(gpusampler.ResourceExhaustedError) as info:
                c.sample(LABELS, num_samples=k)
        assert f"exceeds max_num_samples = {k - 1} (--max-num-samples)" in info.value.details
        # grpc-retry-pushback-ms: -1 stopped the channel's retry policy: one attempt.
        assert requests_total(server, "RESOURCE_EXHAUSTED") - before == 1


def test_deadline_exceeded(client):
    big = np.zeros((64, 20000), dtype=np.int64)
    with pytest.raises(gpusampler.DeadlineExceededError) as info:
        client.sample(big, np.zeros((64, 20000, 8), np.float32), num_samples=512, timeout=1e-4)
    assert isinstance(info.value, TimeoutError)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_unavailable_when_nothing_listens():
    with gpusampler.Client(f"127.0.0.1:{free_port()}", max_attempts=2, timeout=10) as c:
        with pytest.raises(gpusampler.UnavailableError) as info:
            c.sample(LABELS, num_samples=4)
        assert isinstance(info.value, ConnectionError)
        with pytest.raises(gpusampler.UnavailableError):
            c.health()


def test_error_classes_cover_the_codes():
    import grpc
    from gpusampler.errors import from_rpc_error

    class Fake(grpc.RpcError):
        def __init__(self, code):
            self._code = code

        def code(self):
            return self._code

        def details(self):
            return "why"

    assert type(from_rpc_error(Fake(grpc.StatusCode.UNAUTHENTICATED))) is gpusampler.UnauthenticatedError
    assert type(from_rpc_error(Fake(grpc.StatusCode.CANCELLED))) is gpusampler.CancelledError
    assert type(from_rpc_error(Fake(grpc.StatusCode.DATA_LOSS))) is gpusampler.GpuSamplerError
    assert re.match(r"UNAUTHENTICATED: why", str(from_rpc_error(Fake(grpc.StatusCode.UNAUTHENTICATED))))
