"""Issue 31, item 6 (truthful counts): a unary Sample call whose body never fully arrived
(the client reset it mid-send, or closed its connection) is counted CANCELLED (or as a
transport abort), never INVALID_ARGUMENT: a raw HTTP/2 client sends the headers and part of
the message, then resets the stream or closes the connection."""

from __future__ import annotations

import socket
import time

import pytest

from conftest import start_server, stop_server
from test_errors import requests_total

PREFACE = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n" + b"\x00\x00\x00\x04\x00\x00\x00\x00\x00"


def literal(name: bytes, value: bytes) -> bytes:
    return b"\x00" + bytes([len(name)]) + name + bytes([len(value)]) + value


BLOCK = b"".join([
    literal(b":method", b"POST"), literal(b":scheme", b"http"),
    literal(b":path", b"/gpusampler.v1.Sampler/Sample"), literal(b":authority", b"x"),
    literal(b"content-type", b"application/grpc"), literal(b"te", b"trailers"),
])


def frame(kind: int, flags: int, stream: int, payload: bytes) -> bytes:
    n = len(payload)
    return (bytes([n >> 16, (n >> 8) & 255, n & 255, kind, flags]) + stream.to_bytes(4, "big")
            + payload)


def partial_call(port: int, stream: int, reset: bool) -> socket.socket:
    """HEADERS, then a DATA frame holding 20 of a 1000-byte message; then RST_STREAM
    (CANCEL) when `reset`, else the caller closes the connection."""
    s = socket.create_connection(("127.0.0.1", port))
    message_prefix = b"\x00" + (1000).to_bytes(4, "big")
    s.sendall(PREFACE + frame(1, 4, stream, BLOCK) +
              frame(0, 0, stream, message_prefix + b"\x0a" * 20))
    time.sleep(0.05)
    if reset:
        s.sendall(frame(3, 0, stream, (8).to_bytes(4, "big")))
    return s


@pytest.fixture(scope="module")
def own_server(tmp_path_factory):
    s = start_server(tmp_path_factory.mktemp("counts"))
    yield s
    assert stop_server(s) == 0, s.log_text()


@pytest.mark.parametrize("reset", [True, False], ids=["reset", "closed"])
def test_a_body_that_never_arrived_is_not_invalid_argument(own_server, reset):
    port = int(own_server.target.rsplit(":", 1)[1])
    before = {c: requests_total(own_server, c) for c in ("INVALID_ARGUMENT", "CANCELLED")}
    socks = [partial_call(port, 1, reset) for _ in range(10)]
    time.sleep(0.3)
    for s in socks:
        s.close()
    # Counted once the server has seen the calls end (the metrics updater runs every second).
    deadline = time.monotonic() + 15
    while time.monotonic() < deadline:
        invalid = requests_total(own_server, "INVALID_ARGUMENT") - before["INVALID_ARGUMENT"]
        cancelled = requests_total(own_server, "CANCELLED") - before["CANCELLED"]
        if invalid > 0 or cancelled >= 10:
            break
        time.sleep(0.2)
    assert invalid == 0, f"{invalid} of 10 unfinished bodies counted INVALID_ARGUMENT"
    assert cancelled == 10, f"{cancelled} of 10 counted CANCELLED"
