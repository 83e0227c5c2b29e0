#!/usr/bin/python3
"""Call storm (issue 31, item 2): connections that open many SampleStreams which send headers
and never a message, ignoring the server's SETTINGS (never ACKed, so gRPC's
max_concurrent_streams is not applied): a raw HTTP/2 client, no gRPC library.

  tests/stress/call_storm.py --server build/bin/gpusampler-server            # 100 x 128 (make test)
  tests/stress/call_storm.py --server build/bin/gpusampler-server --long     # 800 x 128 calls

The server runs with --max-inflight-bytes 268435456 and --first-message-timeout-ms 3000.
Checks: its RSS stays under the budget plus 256 MB during the storm and the 10 s after it,
falls back to within 64 MB of its RSS before the storm within 10 s of the attacker leaving,
the calls' fixed overhead held in the byte budget (gpusampler_inflight_bytes: 16 KiB per live
call) is back to 0 by then (no call of the storm is still alive in the service), and a
golden-sized request is then served. Each second after the attacker left it prints RSS and
that gauge, which tells memory still held by live calls from memory that gRPC holds before
the service sees a call. --before skips the checks that a server without the call limits
fails, to print its numbers.
"""
import argparse
import os
import socket
import subprocess
import sys
import time
import urllib.request

import grpc

from cpu_server import start  # a sibling module (the script's directory is on sys.path)

BUDGET = 268435456
PREFACE = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n" + b"\x00\x00\x00\x04\x00\x00\x00\x00\x00"


def literal(name: bytes, value: bytes) -> bytes:
    """HPACK literal header field without indexing, new name, no Huffman (RFC 7541 6.2.2)."""
    assert len(name) < 127 and len(value) < 127
    return b"\x00" + bytes([len(name)]) + name + bytes([len(value)]) + value


BLOCK = b"".join([
    literal(b":method", b"POST"), literal(b":scheme", b"http"),
    literal(b":path", b"/gpusampler.v1.Sampler/SampleStream"),
    literal(b":authority", b"storm"), literal(b"content-type", b"application/grpc"),
    literal(b"te", b"trailers"),
])


def headers_frame(stream_id: int) -> bytes:
    # HEADERS, END_HEADERS (0x4), no END_STREAM: the call stays open, waiting for a message.
    n = len(BLOCK)
    return bytes([n >> 16, (n >> 8) & 255, n & 255, 1, 4]) + stream_id.to_bytes(4, "big") + BLOCK


def rss_mb(pid: int) -> float:
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    return 0.0


def inflight_bytes(metrics_port: int) -> float:
    """gpusampler_inflight_bytes, or -1 when /metrics does not answer."""
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{metrics_port}/metrics", timeout=5) as r:
            for line in r.read().decode().splitlines():
                if line.startswith("gpusampler_inflight_bytes "):
                    return float(line.split()[1])
    except OSError:
        pass
    return -1.0


def served(port: int) -> bool:
    sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "..", "client", "python"))
    import gpusampler
    with gpusampler.Client(f"127.0.0.1:{port}", timeout=30) as c:
        r = c.sample([[1, 0] * 2000], num_samples=16, seed=1)
        return r.indices.shape == (1, 16)


def storm(port: int, connections: int, calls: int, pid: int, hold_s: float):
    socks = []
    peak = 0.0
    for _ in range(connections):
        s = socket.create_connection(("127.0.0.1", port))
        s.sendall(PREFACE + b"".join(headers_frame(2 * i + 1) for i in range(calls)))
        socks.append(s)
        peak = max(peak, rss_mb(pid))
    end = time.monotonic() + hold_s
    while time.monotonic() < end:
        peak = max(peak, rss_mb(pid))
        time.sleep(0.1)
    for s in socks:
        s.close()
    return peak


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--server", required=True)
    ap.add_argument("--long", action="store_true")
    ap.add_argument("--before", action="store_true", help="print only (a server without limits)")
    args = ap.parse_args()
    connections, calls = (800, 128) if args.long else (100, 128)
    extra = [] if args.before else ["--first-message-timeout-ms", "3000"]
    proc, port, d = start(args.server, ["--max-inflight-bytes", str(BUDGET)] + extra)
    with open(os.path.join(d, "ports")) as f:
        metrics_port = int(f.read().split()[1])
    try:
        base = rss_mb(proc.pid)
        t0 = time.monotonic()
        peak = storm(port, connections, calls, proc.pid, hold_s=3.0)
        print(f"{connections} connections x {calls} headers-only SampleStreams in "
              f"{time.monotonic() - t0:.1f} s: RSS before {base:.0f} MB, peak {peak:.0f} MB "
              f"(bound {BUDGET / 2**20 + 256:.0f} MB)")
        after, held = [], []
        for _ in range(10):
            time.sleep(1)
            after.append(rss_mb(proc.pid))
            held.append(inflight_bytes(metrics_port))
        print("RSS each second after the attacker left (MB):", [round(x) for x in after])
        print("gpusampler_inflight_bytes each second after (MiB):",
              [round(x / 2**20, 1) for x in held])
        ok = served(port)
        print("a request is served afterwards:", ok)
        if args.before:
            return 0
        failed = []
        peak = max([peak] + after)  # the attacker's leaving counts too
        if peak >= BUDGET / 2**20 + 256:
            failed.append(f"peak RSS {peak:.0f} MB >= budget + 256 MB")
        if min(after) > base + 64:
            failed.append(f"RSS {min(after):.0f} MB did not fall back to {base:.0f} + 64 MB in 10 s")
        if held[-1] != 0:
            failed.append(f"{held[-1]:.0f} bytes of the budget still held by calls 10 s after")
        if not ok:
            failed.append("no request served after the storm")
        for f in failed:
            print("FAILED:", f)
        return 1 if failed else 0
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            proc.kill()


if __name__ == "__main__":
    sys.exit(main())
