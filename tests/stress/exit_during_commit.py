#!/usr/bin/python3
"""Exit during a large CreateDataset commit (issue 31, item 9): how long SIGTERM takes to end
the server when it arrives as a replace's commit begins (its temporary file appears in
--dataset-dir), against --shutdown-grace-seconds. Prints the numbers; checks nothing.

  tests/stress/exit_during_commit.py --server build/bin/gpusampler-server [--mib 768] [--grace 1]
"""
import argparse
import os
import signal
import sys
import tempfile
import threading
import time

import grpc
import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "..", "client", "python"))
import gpusampler  # noqa: F401,E402  (puts the generated stubs on the path)
from gpusampler.v1 import sampler_pb2 as pb  # noqa: E402
from gpusampler.v1 import sampler_pb2_grpc as pb_grpc  # noqa: E402

from cpu_server import start  # noqa: E402

MB = 1 << 20


def chunks(name, elements, dim, replace):
    per = (8 * MB) // (4 * dim)
    for at in range(0, elements, per):
        n = min(per, elements - at)
        c = pb.DatasetChunk(
            labels=pb.Tensor(dtype=pb.DTYPE_INT8, shape=[n],
                             data=(np.arange(n) % 2).astype(np.int8).tobytes()),
            features=pb.Tensor(dtype=pb.DTYPE_FLOAT32, shape=[n, dim],
                               data=np.ones((n, dim), np.float32).tobytes()))
        if at == 0:
            c.name, c.replace = name, replace
        yield c


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--server", required=True)
    ap.add_argument("--mib", type=int, default=768)
    ap.add_argument("--grace", type=float, default=1.0)
    args = ap.parse_args()
    repo = tempfile.mkdtemp(prefix="gpusampler-commit-")
    proc, port, d = start(args.server, ["--dataset-dir", repo, "--shutdown-grace-seconds",
                                        str(args.grace), "--max-dataset-bytes", str(4 << 30)])
    stub = pb_grpc.SamplerStub(grpc.insecure_channel(f"127.0.0.1:{port}"))
    stub.CreateDataset(chunks("big", 3000, 4, False), timeout=60)
    sent = {}

    def watch():
        while proc.poll() is None:
            if any(".dataset.tmp-" in n for n in os.listdir(repo)):
                sent["t"] = time.monotonic()
                proc.send_signal(signal.SIGTERM)
                return
            time.sleep(0.001)

    w = threading.Thread(target=watch)
    w.start()
    f = stub.CreateDataset.future(chunks("big", args.mib * MB // 16, 4, True), timeout=300)
    w.join()
    rc = proc.wait(timeout=300)
    took = time.monotonic() - sent["t"]
    try:
        f.result(timeout=60)
        outcome = "OK (committed)"
    except grpc.RpcError as e:
        outcome = e.code().name
    print(f"{args.mib} MiB replace, grace {args.grace} s: exit {rc}, {took:.2f} s from SIGTERM "
          f"to exit; uploader: {outcome}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
