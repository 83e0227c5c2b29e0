"""Issue 31, item 5 (fair share of bytes), through the server binary: never-reading
SampleStreams that hold the byte budget end RESOURCE_EXHAUSTED naming
--pressure-write-timeout-ms once a legitimate request waits for the budget (the write timeout
stays 30 s), and that request, retried by the client after the server's pushback, is served."""

from __future__ import annotations

import time

import grpc
import numpy as np

import gpusampler
from conftest import start_server, stop_server
from gpusampler._proto.gpusampler.v1 import sampler_pb2 as pb
from gpusampler._proto.gpusampler.v1 import sampler_pb2_grpc as pbg

BUDGET = 64 << 20


def test_never_readers_lose_their_bytes_to_a_waiting_request(tmp_path):
    server = start_server(tmp_path, ["--max-inflight-bytes", str(BUDGET)])
    try:
        # 14 bytes asking for 1M padded slots: an 8 MB answer each; the per-stream default is
        # a quarter of the budget (16 MiB), so four streams hold about all of it.
        pad = pb.SampleRequest(labels=pb.Tensor(dtype=pb.DTYPE_INT8, shape=[1], data=b"\x01"),
                               spec=pb.SamplingSpec(num_samples=1 << 20,
                                                    fill_policy=pb.FILL_POLICY_NONE))
        opts = [("grpc.use_local_subchannel_pool", 1), ("grpc.max_receive_message_length", -1)]
        channels = [grpc.insecure_channel(server.target, options=opts) for _ in range(4)]
        streams = [pbg.SamplerStub(ch).SampleStream(iter([pad] * 8), timeout=120)
                   for ch in channels]  # never read
        labels = np.zeros((1, 1 << 20), dtype=np.int64)  # 8 MiB, held twice: 16 MiB
        labels[0, ::2] = 1
        # The client's retries (4 attempts) follow the server's 250-500 ms pushback: within
        # about a second the never-readers have lost their bytes. A few calls, in case the
        # streams had not filled the budget yet when the first one ran.
        # Refusals before the pressure timeout has fired are allowed (a loaded machine may
        # run the attempts faster than the streams are ended); all six must be served well
        # within the 30 s --stream-write-timeout-ms, which alone would free the bytes.
        served, refused = 0, 0
        deadline = time.monotonic() + 20
        with gpusampler.Client(server.target, timeout=60) as client:
            while served < 6 and time.monotonic() < deadline:
                try:
                    r = client.sample(labels, num_samples=64, seed=served)
                except gpusampler.ResourceExhaustedError:
                    refused += 1
                    continue
                assert r.indices.shape == (1, 64)
                served += 1
        assert served == 6, f"served {served}, refused {refused} (after the client's retries)"
        ended = []
        for c in streams:
            try:
                for _ in c:  # what this client buffered, then the status
                    pass
            except grpc.RpcError:
                pass
            ended.append((c.code(), c.details() or ""))
        for ch in channels:
            ch.close()
        pressed = [d for code, d in ended if code == grpc.StatusCode.RESOURCE_EXHAUSTED
                   and "--pressure-write-timeout-ms" in d]
        assert pressed, ended
    finally:
        assert stop_server(server) == 0, server.log_text()
