#!/usr/bin/python3
"""Stress suite: a real gpusampler-server (CPU) under load and under hostile clients.

  tests/stress/stress.py --server build/bin/gpusampler-server            # short (CI, ~1 min)
  tests/stress/stress.py --server build/bin/gpusampler-server --long     # long (~15 min)

Cases (each on a fresh server, which must exit 0 at the end):
  soak      concurrency 64, every answer checked against the golden cases, RSS bound
  overload  --queue-capacity 8 at concurrency 64: only OK / RESOURCE_EXHAUSTED, and the
            client's counts per code equal the server's gpusampler_requests_total
  drain     SIGTERM under load: every call answered OK or UNAVAILABLE (never CANCELLED),
            exit 0 within the grace
  hostile   --max-inflight-bytes 268435456: streams that never read their 9 MB answers, a
            512 MiB gzip bomb, labels and features of rank 8M; the server's peak RSS stays
            under 512 MB and it then answers a golden request exactly
  pinned    (the budget can be pinned) --max-inflight-bytes 268435456
            --stream-write-timeout-ms 5000: 64 never-reading streams on 64 connections end
            RESOURCE_EXHAUSTED naming the flag and release the budget within 12 s; a 2 MiB
            request from another connection is then served
  transport (bytes gRPC is still receiving; issue 31 item 7) 48 concurrent 56 MiB unary
            calls on 2 connections against --max-inflight-bytes 268435456: the server's peak
            RSS (VmHWM) stays under 400 MB (--transport-calls, --transport-bound-mb,
            --server-flag to vary it). Heavy (2.7 GB through loopback, ~3 GB in this
            client): run by hand with --only transport; not part of the default run.
Exits non-zero on the first failed check.
"""
import argparse
import concurrent.futures as cf
import json
import os
import re
import signal
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request

import grpc
import numpy as np

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
sys.path.insert(0, os.path.join(ROOT, "client", "python"))
from gpusampler._proto.gpusampler.v1 import sampler_pb2 as pb  # noqa: E402
from gpusampler._proto.gpusampler.v1 import sampler_pb2_grpc as pbg  # noqa: E402

MB = 1 << 20


def check(cond, what):
    if not cond:
        print(f"FAIL: {what}", flush=True)
        sys.exit(1)
    print(f"ok: {what}", flush=True)


class Server:
    def __init__(self, binary, *flags):
        self.dir = tempfile.mkdtemp(prefix="gpusampler-stress-")
        port_file = os.path.join(self.dir, "ports")
        self.log = open(os.path.join(self.dir, "server.log"), "w")
        self.proc = subprocess.Popen(
            [binary, "--device", "cpu", "--address", "127.0.0.1:0",
             "--metrics-address", "127.0.0.1:0", "--port-file", port_file,
             "--log-level", "warn", *flags],
            stdout=self.log, stderr=subprocess.STDOUT)
        deadline = time.time() + 60
        while not os.path.exists(port_file):
            if self.proc.poll() is not None or time.time() > deadline:
                raise RuntimeError(f"server did not start (log in {self.dir})")
            time.sleep(0.05)
        self.grpc_port, self.metrics_port = map(int, open(port_file).read().split())
        self.target = f"127.0.0.1:{self.grpc_port}"

    def channel(self, **options):
        opts = [("grpc.max_send_message_length", -1), ("grpc.max_receive_message_length", -1)]
        opts += list(options.items())
        return grpc.insecure_channel(self.target, options=opts)

    def rss_mb(self, field="VmRSS"):
        for line in open(f"/proc/{self.proc.pid}/status"):
            if line.startswith(field + ":"):
                return int(line.split()[1]) / 1024
        return 0.0

    def metrics(self):
        url = f"http://127.0.0.1:{self.metrics_port}/metrics"
        return urllib.request.urlopen(url, timeout=10).read().decode()

    def stop(self, grace_s=30):
        self.proc.send_signal(signal.SIGTERM)
        try:
            return self.proc.wait(timeout=grace_s + 10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            return None


def golden_cases():
    cases = []
    for line in open(os.path.join(ROOT, "tests", "data", "golden_samples.jsonl")):
        c = json.loads(line)
        rows = c["labels"]
        if len({len(r) for r in rows}) != 1:
            continue  # ragged cases: not needed here
        labels = np.array(rows, dtype=np.int64)
        s = c["spec"]
        req = pb.SampleRequest(
            labels=pb.Tensor(dtype=pb.DTYPE_INT64, shape=list(labels.shape),
                             data=labels.tobytes()),
            spec=pb.SamplingSpec(num_samples=s["num_samples"],
                                 positive_fraction=s["positive_fraction"],
                                 positive_label=s["positive_label"],
                                 negative_label=s["negative_label"],
                                 fill_policy=pb.FillPolicy.Value(s["fill_policy"])),
            seed=c["seed"], request_id=c["name"])
        cases.append((req, np.array(c["indices"], dtype=np.int64)))
    return cases


def exact(case, response):
    req, want = case
    got = np.frombuffer(response.indices.data, dtype=np.int64).reshape(want.shape)
    return response.request_id == req.request_id and np.array_equal(got, want)


def known_good(server, what):
    stub = pbg.SamplerStub(server.channel())
    for case in golden_cases()[:3]:
        check(exact(case, stub.Sample(case[0], timeout=30)),
              f"{what}: a golden request afterwards is answered exactly")


def code_of(fn):
    try:
        fn()
        return "OK"
    except grpc.RpcError as e:
        return e.code().name


def soak(binary, n):
    s = Server(binary)
    cases = golden_cases()
    stub = pbg.SamplerStub(s.channel())
    wrong = []
    errors = []
    peak = [0.0]
    stop = threading.Event()

    def watch():
        while not stop.is_set():
            peak[0] = max(peak[0], s.rss_mb())
            time.sleep(0.2)

    def one(i):
        case = cases[i % len(cases)]
        try:
            if not exact(case, stub.Sample(case[0], timeout=60)):
                wrong.append(i)
        except grpc.RpcError as e:
            errors.append(e.code().name)

    t = threading.Thread(target=watch)
    t.start()
    with cf.ThreadPoolExecutor(64) as pool:
        list(pool.map(one, range(n)))
    stop.set()
    t.join()
    check(not errors and not wrong, f"soak: {n} requests at concurrency 64, 0 errors "
          f"({len(errors)}), 0 wrong answers ({len(wrong)})")
    check(peak[0] < 512, f"soak: RSS peak {peak[0]:.0f} MB < 512 MB")
    check(s.stop() == 0, "soak: exit 0")


def server_counts(text, method):
    counts = {}
    for m in re.finditer(r'^gpusampler_requests_total\{([^}]*)\} (\S+)$', text, re.M):
        labels = dict(re.findall(r'(\w+)="([^"]*)"', m.group(1)))
        if labels.get("method") == method:
            counts[labels["code"]] = counts.get(labels["code"], 0) + int(float(m.group(2)))
    return {k: v for k, v in counts.items() if v}


def overload(binary, n):
    s = Server(binary, "--queue-capacity", "8", "--cpu-workers", "1", "--cpu-threads", "1",
               "--max-batch-rows", "1")
    stub = pbg.SamplerStub(s.channel(**{"grpc.enable_retries": 0}))
    labels = np.random.default_rng(1).integers(0, 2, size=(4, 50000)).astype(np.int64)
    req = pb.SampleRequest(labels=pb.Tensor(dtype=pb.DTYPE_INT64, shape=[4, 50000],
                                            data=labels.tobytes()),
                           spec=pb.SamplingSpec(num_samples=256), seed=3)
    before = server_counts(s.metrics(), "Sample")
    with cf.ThreadPoolExecutor(64) as pool:
        codes = list(pool.map(lambda _: code_of(lambda: stub.Sample(req, timeout=60)), range(n)))
    client = {c: codes.count(c) for c in set(codes)}
    check(set(client) <= {"OK", "RESOURCE_EXHAUSTED"} and client.get("RESOURCE_EXHAUSTED"),
          f"overload: only OK / RESOURCE_EXHAUSTED, some shed: {client}")
    time.sleep(1.5)  # the interceptor has counted every finished call; the scrape is fresh
    after = server_counts(s.metrics(), "Sample")
    server = {c: after.get(c, 0) - before.get(c, 0) for c in after}
    server = {c: v for c, v in server.items() if v}
    check(server == client, f"overload: server counts {server} == client counts {client}")
    known_good(s, "overload")
    check(s.stop() == 0, "overload: exit 0")


def drain(binary, n):
    s = Server(binary, "--shutdown-grace-seconds", "20", "--cpu-threads", "1",
               "--max-batch-rows", "4")
    cases = golden_cases()
    stub = pbg.SamplerStub(s.channel(**{"grpc.enable_retries": 0}))
    big = np.random.default_rng(2).integers(0, 2, size=(8, 200000)).astype(np.int64)
    slow = pb.SampleRequest(labels=pb.Tensor(dtype=pb.DTYPE_INT64, shape=[8, 200000],
                                             data=big.tobytes()),
                            spec=pb.SamplingSpec(num_samples=1024), seed=5)
    results = []
    lock = threading.Lock()

    def one(i):
        if i % 2:
            code = code_of(lambda: stub.Sample(slow, timeout=60))
            ok = True
        else:
            case = cases[i % len(cases)]
            try:
                ok = exact(case, stub.Sample(case[0], timeout=60))
                code = "OK"
            except grpc.RpcError as e:
                code, ok = e.code().name, True
        with lock:
            results.append((code, ok))

    pool = cf.ThreadPoolExecutor(32)
    futures = [pool.submit(one, i) for i in range(n)]
    time.sleep(1.0)
    t0 = time.time()
    rc = s.stop(grace_s=20)
    took = time.time() - t0
    for f in futures:
        f.result()
    pool.shutdown()
    codes = {c: sum(1 for r in results if r[0] == c) for c in {r[0] for r in results}}
    check(set(codes) <= {"OK", "UNAVAILABLE"} and codes.get("OK"),
          f"drain: every call answered OK or UNAVAILABLE, none CANCELLED: {codes}")
    check(all(ok for _, ok in results), "drain: every OK answer exact")
    check(rc == 0 and took < 20 + 5, f"drain: exit {rc} after {took:.1f} s (grace 20 s)")


def hostile(binary, long):
    budget = ["--max-inflight-bytes", str(268435456)]

    # Streams that never read: each request is 14 bytes and asks for 1M padded slots
    # (9 MB of answer).
    s = Server(binary, *budget)
    one = np.array([1], dtype=np.int8)
    pad = pb.SampleRequest(labels=pb.Tensor(dtype=pb.DTYPE_INT8, shape=[1], data=one.tobytes()),
                           spec=pb.SamplingSpec(num_samples=1 << 20,
                                                fill_policy=pb.FILL_POLICY_NONE))
    print(f"hostile stream: request of {pad.ByteSize()} bytes", flush=True)
    streams = []
    channels = [s.channel() for _ in range(8)]
    for ch in channels:
        stub = pbg.SamplerStub(ch)
        calls = stub.SampleStream(iter([pad] * (400 if long else 100)))
        streams.append(calls)  # never read
    time.sleep(20 if long else 8)
    peak = s.rss_mb("VmHWM")
    check(peak < 512, f"hostile stream: 8 never-reading streams, server peak RSS {peak:.0f} MB "
          "< 512 MB")
    for c in streams:
        c.cancel()
    known_good(s, "hostile stream")
    check(s.stop() == 0, "hostile stream: exit 0")

    # A 512 MiB gzip bomb (about 0.5 MB on the wire), four at once.
    s = Server(binary, *budget)
    zeros = np.zeros(512 * MB // 8, dtype=np.int64)
    bomb = pb.SampleRequest(labels=pb.Tensor(dtype=pb.DTYPE_INT64, shape=[zeros.size],
                                             data=zeros.tobytes()),
                            spec=pb.SamplingSpec(num_samples=8)).SerializeToString()
    del zeros
    ch = s.channel()
    call = ch.unary_unary("/gpusampler.v1.Sampler/Sample", request_serializer=lambda b: b,
                          response_deserializer=lambda b: b)
    with cf.ThreadPoolExecutor(4) as pool:
        codes = list(pool.map(lambda _: code_of(
            lambda: call(bomb, timeout=120, compression=grpc.Compression.Gzip)), range(4)))
    del bomb
    peak = s.rss_mb("VmHWM")
    check("OK" not in codes, f"hostile gzip: 512 MiB bombs refused: {codes}")
    check(peak < 512, f"hostile gzip: server peak RSS {peak:.0f} MB < 512 MB")
    known_good(s, "hostile gzip")
    check(s.stop() == 0, "hostile gzip: exit 0")

    # Rank 8M: labels of 8M dims, features of 8M trailing dims, eight at once.
    s = Server(binary, *budget)
    stub = pbg.SamplerStub(s.channel())
    dims = [1] * (8 << 20)
    rank_labels = pb.SampleRequest(labels=pb.Tensor(dtype=pb.DTYPE_INT8, shape=dims,
                                                    data=b"\x01"),
                                   spec=pb.SamplingSpec(num_samples=1))
    rank_features = pb.SampleRequest(
        labels=pb.Tensor(dtype=pb.DTYPE_INT8, shape=[1], data=b"\x01"),
        features=pb.Tensor(dtype=pb.DTYPE_INT8, shape=[1] + dims, data=b"\x01"),
        spec=pb.SamplingSpec(num_samples=1))
    with cf.ThreadPoolExecutor(8) as pool:
        codes = list(pool.map(lambda i: code_of(lambda: stub.Sample(
            rank_labels if i % 2 else rank_features, timeout=60)), range(8)))
    peak = s.rss_mb("VmHWM")
    check(set(codes) == {"INVALID_ARGUMENT"}, f"hostile rank: rank 8M refused: {set(codes)}")
    check(peak < 512, f"hostile rank: server peak RSS {peak:.0f} MB < 512 MB")
    known_good(s, "hostile rank")
    check(s.stop() == 0, "hostile rank: exit 0")


def inflight_bytes(server):
    m = re.search(r"^gpusampler_inflight_bytes (\S+)$", server.metrics(), re.M)
    return float(m.group(1)) if m else -1.0


def pinned(binary):
    s = Server(binary, "--max-inflight-bytes", str(268435456), "--stream-write-timeout-ms", "5000")
    one = np.array([1], dtype=np.int8)
    pad = pb.SampleRequest(labels=pb.Tensor(dtype=pb.DTYPE_INT8, shape=[1], data=one.tobytes()),
                           spec=pb.SamplingSpec(num_samples=1 << 20,
                                                fill_policy=pb.FILL_POLICY_NONE))
    channels = [s.channel(**{"grpc.use_local_subchannel_pool": 1}) for _ in range(64)]
    t0 = time.time()
    streams = [pbg.SamplerStub(ch).SampleStream(iter([pad] * 40)) for ch in channels]  # never read
    peak = 0.0
    while time.time() - t0 < 4:
        peak = max(peak, inflight_bytes(s))
        time.sleep(0.2)
    check(peak > 128 * MB, f"pinned: never-reading streams hold the budget ({peak / MB:.0f} MB)")
    released = None
    while time.time() - t0 < 30:
        if inflight_bytes(s) < 16 * MB:
            released = time.time() - t0
            break
        time.sleep(0.2)
    check(released is not None and released < 12,
          f"pinned: 64 never-reading streams on 64 connections released the budget after "
          f"{released if released is None else round(released, 1)} s (< 12 s)")
    codes = {}
    for c in streams:
        try:  # the status comes after what this client has buffered
            for _ in c:
                pass
        except grpc.RpcError:
            pass
        details = c.details() or ""
        flag = next((f for f in ("--stream-write-timeout-ms", "--max-inflight-bytes")
                     if f in details), "")
        codes[(c.code().name, flag)] = codes.get((c.code().name, flag), 0) + 1
    # Streams that held answers end naming --stream-write-timeout-ms; those whose first
    # request found the budget full were refused at once, naming --max-inflight-bytes.
    check(set(codes) <= {("RESOURCE_EXHAUSTED", "--stream-write-timeout-ms"),
                         ("RESOURCE_EXHAUSTED", "--max-inflight-bytes")} and
          codes.get(("RESOURCE_EXHAUSTED", "--stream-write-timeout-ms"), 0) > 0,
          f"pinned: every stream ended RESOURCE_EXHAUSTED naming its flag: {codes}")
    labels = np.random.default_rng(1).integers(-1, 2, size=(2 * MB) // 8).astype(np.int64)
    legit = pb.SampleRequest(labels=pb.Tensor(dtype=pb.DTYPE_INT64, shape=[labels.size],
                                              data=labels.tobytes()),
                             spec=pb.SamplingSpec(num_samples=64), seed=3)
    stub = pbg.SamplerStub(s.channel(**{"grpc.use_local_subchannel_pool": 1}))
    r = stub.Sample(legit, timeout=30)
    check(len(r.indices.data) == 64 * 8, "pinned: a 2 MiB request from another connection is "
          "then served")
    known_good(s, "pinned")
    check(s.stop() == 0, "pinned: exit 0")


def transport(binary, n=48, extra=(), bound_mb=400):
    s = Server(binary, "--max-inflight-bytes", str(268435456), "--max-message-bytes",
               str(64 * MB), *extra)
    labels = np.zeros((56 * MB) // 8, dtype=np.int64)
    labels[::3] = 1
    big = pb.SampleRequest(labels=pb.Tensor(dtype=pb.DTYPE_INT64, shape=[labels.size],
                                            data=labels.tobytes()),
                           spec=pb.SamplingSpec(num_samples=8)).SerializeToString()
    del labels
    calls = []
    for _ in range(2):
        ch = s.channel(**{"grpc.use_local_subchannel_pool": 1})
        calls.append(ch.unary_unary("/gpusampler.v1.Sampler/Sample",
                                    request_serializer=lambda b: b,
                                    response_deserializer=lambda b: b))
    t0 = time.time()
    def one(i):
        try:
            calls[i % 2](big, timeout=300)
            return "OK"
        except grpc.RpcError as e:  # which limit refused it: the budget or gRPC's own quota
            if "--max-inflight-bytes" not in (e.details() or ""):
                print("  refused by gRPC:", e.code().name, (e.details() or "")[:200], flush=True)
            return e.code().name + (" (--max-inflight-bytes)"
                                    if "--max-inflight-bytes" in (e.details() or "") else "")

    with cf.ThreadPoolExecutor(n) as pool:
        codes = list(pool.map(one, range(n)))
    peak = s.rss_mb("VmHWM")
    counts = {c: codes.count(c) for c in set(codes)}
    print(f"transport: {n} x 56 MiB on 2 connections in {time.time() - t0:.0f} s: {counts}; "
          f"server VmHWM {peak:.0f} MB", flush=True)
    # RESOURCE_EXHAUSTED either from the budget (naming --max-inflight-bytes, with a retry
    # pushback) or from gRPC's memory quota, which resets a stream still arriving under
    # pressure (RST_STREAM ENHANCE_YOUR_CALM, seen as RESOURCE_EXHAUSTED).
    check(set(codes) <= {"OK", "RESOURCE_EXHAUSTED (--max-inflight-bytes)", "RESOURCE_EXHAUSTED"}
          and "OK" in codes, f"transport: only OK or RESOURCE_EXHAUSTED: {counts}")
    check(peak < bound_mb, f"transport: server peak RSS {peak:.0f} MB < {bound_mb} MB")
    known_good(s, "transport")
    check(s.stop() == 0, "transport: exit 0")


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--server", default=os.path.join(ROOT, "build", "bin", "gpusampler-server"))
    p.add_argument("--long", action="store_true")
    p.add_argument("--only", choices=["soak", "overload", "drain", "hostile", "pinned",
                                      "transport"])
    p.add_argument("--transport-calls", type=int, default=48)
    p.add_argument("--transport-bound-mb", type=float, default=400)
    p.add_argument("--server-flag", action="append", default=[],
                   help="extra server flag for the transport case (repeat; measurements)")
    a = p.parse_args()
    t0 = time.time()
    runs = {
        "soak": lambda: soak(a.server, 100000 if a.long else 3000),
        "overload": lambda: overload(a.server, 20000 if a.long else 1500),
        "drain": lambda: drain(a.server, 2000 if a.long else 300),
        "hostile": lambda: hostile(a.server, a.long),
        "pinned": lambda: pinned(a.server),
        "transport": lambda: transport(a.server, a.transport_calls, a.server_flag,
                                       a.transport_bound_mb),
    }
    for name, run in runs.items():
        if a.only == name or (a.only is None and name != "transport"):
            run()
    print(f"stress: all checks passed in {time.time() - t0:.0f} s")


if __name__ == "__main__":
    main()
