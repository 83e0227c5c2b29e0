#!/usr/bin/python3
"""Issue 31, item 3, by hand: the fd-exhaustion attack of tests/python/test_fd_exhaustion.py
with numbers (bench/results/hostile-round3-connections.md). Extra arguments go to the server."""
import sys, time, os
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "python"))
import test_fd_exhaustion as t
from pathlib import Path
import tempfile
extra = sys.argv[1:]
d = Path(tempfile.mkdtemp())
proc, port, metrics = t.start_limited(d, 192, 192, extra)
print("before attack: grpc", t.grpc_works(port), "readyz", t.probe(metrics, "/readyz"),
      "healthz", t.probe(metrics, "/healthz"))
served, refused = t.exhaust(port, 384, 3.0)
print("attack: 384 connections,", served, "served,", refused, "closed by the server")
ok = 0; n = 0; codes = []
end = time.monotonic() + 10
while time.monotonic() < end:
    w = t.grpc_works(port); n += 1; ok += w
    codes.append((t.probe(metrics, "/readyz"), t.probe(metrics, "/healthz")))
    time.sleep(0.3)
print(f"new gRPC connections that worked: {ok} of {n}")
print("(/readyz, /healthz) first:", codes[0], "last:", codes[-1])
t.stop(proc)
