"""The server process as an operator meets it: an idle server exits within 1 s of SIGTERM
(also holding an idle client connection); `--device cuda` without a usable GPU exits non-zero
naming the reason, and `--device auto` logs why it serves on the CPU; RESOURCE_EXHAUSTED
answers are counted by reason, so over-limit client errors are told apart from shedding."""

from __future__ import annotations

import re
import signal
import subprocess
import time
import urllib.request

import numpy as np
import pytest

import gpusampler
from conftest import SERVER_BIN, require_binary, start_server


def exit_seconds(server) -> tuple:
    # Idle: SERVING and nothing in flight for a moment.
    time.sleep(0.5)
    start = time.monotonic()
    server.process.send_signal(signal.SIGTERM)
    rc = server.process.wait(timeout=30)
    return time.monotonic() - start, rc


# An idle client connection must not hold the exit: gRPC's graceful shutdown waited 4.5 s on
# one until the drain closed at once when no call is open.
def test_idle_server_with_an_idle_connection_exits_within_one_second(tmp_path):
    server = start_server(tmp_path / "conn")
    with gpusampler.Client(server.target) as client:
        assert client.health() == "SERVING"  # the connection stays open, idle
        seconds, rc = exit_seconds(server)
    assert rc == 0, server.log_text()
    assert seconds < 1.0, f"idle server with a client took {seconds:.3f} s to exit"


def gpu_usable() -> bool:
    try:
        return subprocess.run(["nvidia-smi", "-L"], capture_output=True, timeout=20).returncode == 0
    except (OSError, subprocess.TimeoutExpired):
        return False


@pytest.mark.skipif(gpu_usable(), reason="a GPU is usable here: --device cuda serves on it")
def test_device_cuda_without_a_gpu_exits_non_zero_naming_the_reason(tmp_path):
    require_binary(SERVER_BIN)
    run = subprocess.run([str(SERVER_BIN), "--device", "cuda", "--address", "127.0.0.1:0",
                          "--metrics-address", "127.0.0.1:0"],
                         capture_output=True, text=True, timeout=60)
    assert run.returncode != 0
    text = run.stdout + run.stderr
    assert "--device cuda: no CUDA device is available: " in text, text
    # The reason: no driver at all, the CUDA runtime's error and versions, or a build without
    # CUDA; never a status code name.
    assert re.search(r"no NVIDIA driver found|cudaGetDeviceCount failed: cudaError\w+|"
                     r"reports no device|no CUDA backend", text), text
    assert "INVALID_ARGUMENT" not in text, text


@pytest.mark.skipif(gpu_usable(), reason="a GPU is usable here: --device auto serves on it")
def test_device_auto_logs_why_it_serves_on_the_cpu(tmp_path):
    server = start_server(tmp_path / "auto", device="auto")
    try:
        with gpusampler.Client(server.target) as client:
            assert client.info().backend == "cpu"
        log = server.log_text()
        assert "--device auto: serving on the CPU, no usable CUDA device: " in log, log
    finally:
        server.process.send_signal(signal.SIGTERM)
        server.process.wait(timeout=30)


def exhausted(metrics_port: int) -> dict:
    text = urllib.request.urlopen(f"http://127.0.0.1:{metrics_port}/metrics", timeout=10).read()
    out = {}
    for m in re.finditer(r'^gpusampler_resource_exhausted_total\{method="(\w+)",reason="(\w+)"\}'
                         r' (\S+)$', text.decode(), re.M):
        out[(m.group(1), m.group(2))] = float(m.group(3))
    return out


def test_over_limit_errors_are_counted_apart_from_shedding(server, client):
    before = exhausted(server.metrics_port)
    assert {("Sample", r) for r in ("shed", "limit", "other")} <= set(before)  # built at start
    k = client.info().limits.max_num_samples + 1
    labels = np.zeros(10, np.int64)
    with gpusampler.Client(server.target, max_attempts=1) as c:
        for _ in range(3):
            with pytest.raises(gpusampler.ResourceExhaustedError):
                c.sample(labels, num_samples=k)
        with pytest.raises(gpusampler.ResourceExhaustedError):
            list(c.sample_stream([labels, labels], num_samples=k))
    after = exhausted(server.metrics_port)
    assert after[("Sample", "limit")] - before[("Sample", "limit")] == 3
    assert after[("SampleStream", "limit")] - before[("SampleStream", "limit")] == 1
    for method in ("Sample", "SampleStream"):
        assert after[(method, "shed")] == before[(method, "shed")]
