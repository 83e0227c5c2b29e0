"""Issue 31, item 3 (no zombie): the server raises its soft RLIMIT_NOFILE to the hard limit,
and after its descriptors ran out once, either new gRPC connections work again or /readyz and
then /healthz fail (gRPC does not re-arm its listener after accept4 EMFILE,
grpc/grpc#20418), so that Kubernetes restarts the pod instead of keeping a ready zombie."""

from __future__ import annotations

import os
import resource
import socket
import subprocess
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import List, Optional, Tuple

import grpc
import pytest

from conftest import SERVER_BIN, require_binary

PREFACE = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n" + b"\x00\x00\x00\x04\x00\x00\x00\x00\x00"


def start_limited(workdir: Path, soft: int, hard: int,
                  extra: Optional[List[str]] = None) -> Tuple[subprocess.Popen, int, int]:
    """gpusampler-server under RLIMIT_NOFILE (soft, hard); returns (process, grpc, metrics)."""
    require_binary(SERVER_BIN)
    workdir.mkdir(parents=True, exist_ok=True)
    port_file = workdir / "ports"
    cmd = [str(SERVER_BIN), "--device", "cpu", "--cpu-threads", "1", "--address",
           "127.0.0.1:0", "--metrics-address", "127.0.0.1:0", "--port-file",
           str(port_file)] + (extra or [])

    def limit() -> None:
        resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))

    log = open(workdir / "server.log", "wb")
    proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, preexec_fn=limit)
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        if port_file.exists() and port_file.read_text().endswith("\n"):
            grpc_port, metrics_port = (int(x) for x in port_file.read_text().split())
            return proc, grpc_port, metrics_port
        if proc.poll() is not None:
            pytest.fail((workdir / "server.log").read_text(errors="replace"), pytrace=False)
        time.sleep(0.05)
    proc.kill()
    pytest.fail("the server did not start", pytrace=False)


def probe(metrics_port: int, path: str) -> int:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{metrics_port}{path}", timeout=3) as r:
            return r.status
    except urllib.error.HTTPError as e:
        return e.code
    except OSError:
        return -1  # not answered at all


def grpc_works(port: int) -> bool:
    """A health Check over a new connection (its own subchannel pool)."""
    from gpusampler import _health

    options = [("grpc.use_local_subchannel_pool", 1)]
    with grpc.insecure_channel(f"127.0.0.1:{port}", options=options) as channel:
        check = channel.unary_unary("/grpc.health.v1.Health/Check",
                                    request_serializer=lambda m: m.SerializeToString(),
                                    response_deserializer=lambda b: b)
        try:
            check(_health.request(""), timeout=2)
            return True
        except grpc.RpcError:
            return False


def stop(proc: subprocess.Popen) -> None:
    proc.terminate()
    try:
        proc.wait(timeout=30)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()


def test_soft_limit_is_raised_to_the_hard_limit(tmp_path):
    hard = resource.getrlimit(resource.RLIMIT_NOFILE)[1]
    hard = min(hard, 4096) if hard != resource.RLIM_INFINITY else 4096
    proc, _, _ = start_limited(tmp_path, 256, hard)
    try:
        limits = Path(f"/proc/{proc.pid}/limits").read_text()
        line = next(l for l in limits.splitlines() if l.startswith("Max open files"))
        assert line.split()[3:5] == [str(hard), str(hard)], line
    finally:
        stop(proc)


def exhaust(port: int, count: int, hold_s: float) -> int:
    """Opens `count` idle HTTP/2 connections, holds them, closes them; returns how many."""
    socks = []
    for _ in range(count):
        try:
            s = socket.create_connection(("127.0.0.1", port), timeout=2)
            s.sendall(PREFACE)
            socks.append(s)
        except OSError:
            break
    time.sleep(hold_s)
    for s in socks:
        s.close()
    return len(socks)


def test_no_ready_zombie_after_fd_exhaustion(tmp_path):
    soft = 192
    if resource.getrlimit(resource.RLIMIT_NOFILE)[0] < 3 * soft:
        pytest.skip("needs a descriptor limit of 600 for the attacking connections")
    proc, port, metrics = start_limited(
        tmp_path, soft, soft, ["--self-check-ms", "500", "--self-check-failures", "3"])
    try:
        assert grpc_works(port) and probe(metrics, "/readyz") == 200
        opened = exhaust(port, 2 * soft, hold_s=3.0)
        assert opened > soft
        # Either gRPC accepts new connections again, or the probes say it does not: first
        # /readyz, then /healthz (3 failed checks of 500 ms).
        deadline = time.monotonic() + 15
        seen = []
        while time.monotonic() < deadline:
            works = grpc_works(port)
            ready, healthy = probe(metrics, "/readyz"), probe(metrics, "/healthz")
            seen.append((works, ready, healthy))
            if works and ready == 200:
                return  # recovered (a gRPC that re-arms its listener)
            if not works and ready == 503 and healthy == 503:
                return  # a zombie that says so: Kubernetes restarts it
            time.sleep(0.3)
        pytest.fail(f"(grpc works, /readyz, /healthz) over 15 s: {seen}\n"
                    + (tmp_path / "server.log").read_text(errors="replace")[-3000:])
    finally:
        stop(proc)
