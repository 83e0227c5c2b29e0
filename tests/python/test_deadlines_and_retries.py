"""Deadlines (per message for streams), keepalive, and retries that follow the server's
grpc-retry-pushback-ms: one attempt for a limit error, retries for a full queue."""

from __future__ import annotations

import json
import os
import signal
import threading
from concurrent import futures

import grpc
import numpy as np
import pytest

import gpusampler
from conftest import start_server, stop_server
from gpusampler.v1 import sampler_pb2 as pb
from test_errors import LABELS, requests_total


@pytest.fixture
def frozen_server(tmp_path):
    """A server of its own that answers once, then is stopped with SIGSTOP (the process
    keeps its sockets open but never answers): what a hung or wedged replica looks like."""
    # A short drain grace: the drain need not wait for what the frozen server left half-done
    # (a connection it never finished accepting).
    server = start_server(tmp_path / "frozen", ["--shutdown-grace-seconds", "1"])
    with gpusampler.Client(server.target, timeout=30) as c:
        c.sample(LABELS, num_samples=4, seed=1)
    os.kill(server.process.pid, signal.SIGSTOP)
    try:
        yield server
    finally:
        os.kill(server.process.pid, signal.SIGCONT)
        assert stop_server(server) == 0


def test_stream_against_a_frozen_server_fails_by_its_per_message_deadline(frozen_server):
    with gpusampler.Client(frozen_server.target, timeout=1.0) as c:
        stream = c.sample_stream((LABELS for _ in range(3)), num_samples=4)
        with pytest.raises(gpusampler.DeadlineExceededError) as info:
            next(stream)
        assert "timeout=1 s" in info.value.details
        assert "per-message deadline" in info.value.details
        # The per-call override works the same way.
    with gpusampler.Client(frozen_server.target, timeout=None) as c:
        with pytest.raises(gpusampler.DeadlineExceededError):
            list(c.sample_stream([LABELS], num_samples=4, timeout=0.5))


def test_unary_call_against_a_frozen_server_fails_by_its_deadline(frozen_server):
    with gpusampler.Client(frozen_server.target, timeout=0.5) as c:
        with pytest.raises(gpusampler.DeadlineExceededError):
            c.sample(LABELS, num_samples=4)


def test_slow_consumer_is_not_a_deadline_and_wait_us_is_separate(server):
    """A response that arrived in time never times out while the caller is busy; the time
    it waited for the caller is wait_us, not part of round_trip_us."""
    import time

    with gpusampler.Client(server.target, timeout=1.0) as c:
        results = []
        for out in c.sample_stream((LABELS for _ in range(3)), num_samples=4, window=3):
            results.append(out)
            time.sleep(1.2)  # longer than the per-message deadline
    assert len(results) == 3
    # Responses 2 and 3 arrived while the loop slept and waited for the caller.
    assert all(r.timing.wait_us > 0 for r in results[1:])


def test_stream_timeout_bounds_the_whole_stream(frozen_server):
    with gpusampler.Client(frozen_server.target, timeout=None) as c:
        with pytest.raises(gpusampler.DeadlineExceededError):
            list(c.sample_stream([LABELS], num_samples=4, stream_timeout=0.5))


def test_limit_error_gets_exactly_one_attempt(server):
    with gpusampler.Client(server.target) as probe:
        k = probe.info().limits.max_num_samples + 1
    before = requests_total(server, "RESOURCE_EXHAUSTED")
    with gpusampler.Client(server.target, max_attempts=4, initial_backoff=0.01,
                           max_backoff=0.02) as c:
        with pytest.raises(gpusampler.ResourceExhaustedError) as info:
            c.sample(LABELS, num_samples=k)
    assert "--max-num-samples" in info.value.details
    # The server said grpc-retry-pushback-ms: -1, so gRPC did not retry.
    assert requests_total(server, "RESOURCE_EXHAUSTED") - before == 1


def test_request_over_the_server_message_limit_names_the_flag_once(tmp_path):
    small = start_server(tmp_path / "small", ["--max-message-bytes", str(1 << 20)])
    try:
        big = np.zeros((1, 150_000), np.int64)  # 1.2 MB: over 1 MiB, under the transport's 2 MiB
        before = requests_total(small, "RESOURCE_EXHAUSTED")
        with gpusampler.Client(small.target, max_attempts=4) as c:
            with pytest.raises(gpusampler.ResourceExhaustedError) as info:
                c.sample(big, num_samples=4)
        assert "over max_message_bytes = 1048576 (--max-message-bytes)" in info.value.details
        assert requests_total(small, "RESOURCE_EXHAUSTED") - before == 1
    finally:
        assert stop_server(small) == 0


def test_request_over_the_client_limit_is_refused_before_sending(server):
    with gpusampler.Client(server.target, max_message_bytes=1000) as c:
        with pytest.raises(gpusampler.ResourceExhaustedError) as info:
            c.sample(np.zeros(1000, np.int64), num_samples=4)
    assert "max_message_bytes = 1000" in info.value.details


class _Shedding(grpc.GenericRpcHandler):
    """Sample answers RESOURCE_EXHAUSTED with the given pushback `fail` times, then OK."""

    def __init__(self, pushback: str, fail: int):
        self.pushback, self.fail, self.attempts = pushback, fail, 0
        self.lock = threading.Lock()

    def service(self, details):
        if details.method != "/gpusampler.v1.Sampler/Sample":
            return None

        def sample(request, context):
            with self.lock:
                self.attempts += 1
                attempt = self.attempts
            if attempt <= self.fail:
                context.set_trailing_metadata((("grpc-retry-pushback-ms", self.pushback),))
                context.abort(grpc.StatusCode.RESOURCE_EXHAUSTED, "queue full (test)")
            r = pb.SampleResponse(request_id="0", seed=7)
            for t in (r.indices, r.labels):
                t.dtype, t.data = pb.DTYPE_INT64, np.zeros(4, "<i8").tobytes()
                t.shape.append(4)
            for t in (r.num_positive, r.num_negative):
                t.dtype, t.data = pb.DTYPE_INT32, np.zeros(1, "<i4").tobytes()
                t.shape.append(1)
            return r.SerializeToString()

        return grpc.unary_unary_rpc_method_handler(sample)


@pytest.mark.parametrize("pushback, fail, attempts, ok", [("20", 2, 3, True), ("-1", 2, 1, False)],
                         ids=["queue_full_retried", "do_not_retry"])
def test_client_retry_honours_the_pushback(pushback, fail, attempts, ok):
    handler = _Shedding(pushback, fail)
    server = grpc.server(futures.ThreadPoolExecutor(max_workers=2), handlers=[handler])
    port = server.add_insecure_port("127.0.0.1:0")
    server.start()
    try:
        with gpusampler.Client(f"127.0.0.1:{port}", max_attempts=4, timeout=10) as c:
            if ok:
                assert c.sample(LABELS[0], num_samples=4).seed == 7
            else:
                with pytest.raises(gpusampler.ResourceExhaustedError):
                    c.sample(LABELS[0], num_samples=4)
        assert handler.attempts == attempts
    finally:
        server.stop(None)


def test_keepalive_and_channel_options_reach_the_channel(monkeypatch):
    seen = {}
    real = grpc.insecure_channel

    def spy(target, options=None, **kwargs):
        seen.update(dict(options or ()))
        return real(target, options=options, **kwargs)

    monkeypatch.setattr(grpc, "insecure_channel", spy)
    with gpusampler.Client("127.0.0.1:1", keepalive_time=20, keepalive_timeout=5,
                           options=[("grpc.max_reconnect_backoff_ms", 1000)]):
        pass
    assert seen["grpc.keepalive_time_ms"] == 20000
    assert seen["grpc.keepalive_timeout_ms"] == 5000
    assert seen["grpc.max_reconnect_backoff_ms"] == 1000
    retry = json.loads(seen["grpc.service_config"])["methodConfig"][0]["retryPolicy"]
    assert "RESOURCE_EXHAUSTED" in retry["retryableStatusCodes"]
    seen.clear()
    with gpusampler.Client("127.0.0.1:1", keepalive_time=None):
        pass
    assert "grpc.keepalive_time_ms" not in seen
