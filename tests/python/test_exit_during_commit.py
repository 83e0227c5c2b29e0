"""Issue 31, item 9: a SIGTERM during a large CreateDataset commit exits within the grace
instead of waiting for the commit (before: 2.10 s for a grace of 1 s during a 768 MiB
commit), and the version committed before stays intact.

A replace of 256 MiB is uploaded; once its commit has begun (its temporary file is in
--dataset-dir), the server gets SIGTERM with --shutdown-grace-seconds 0. It must exit 0
without the commit ("exiting without them" in its log) and the uploader must get an error;
a server started afterwards on the same directory serves the first version, by its sha256.
No timing is asserted: the process exiting while the commit still ran is the property.
"""

from __future__ import annotations

import signal
import threading
import time
from pathlib import Path

import grpc
import numpy as np
import pytest

from conftest import start_server, stop_server

import gpusampler  # noqa: F401  (puts the generated stubs on the path)
from gpusampler.v1 import sampler_pb2 as pb
from gpusampler.v1 import sampler_pb2_grpc as pb_grpc

MB = 1 << 20


def tensor(a: np.ndarray) -> pb.Tensor:
    dtypes = {np.dtype(np.int8): pb.DTYPE_INT8, np.dtype(np.float32): pb.DTYPE_FLOAT32}
    return pb.Tensor(dtype=dtypes[a.dtype], shape=list(a.shape),
                     data=np.ascontiguousarray(a).tobytes())


def chunks(name: str, elements: int, dim: int, replace: bool, fill: float):
    """One row of `elements` labels and [elements, dim] float32 features, 8 MiB at a time."""
    labels = np.tile(np.array([1, 0, -1], dtype=np.int8), elements // 3 + 1)[:elements]
    per = max(1, (8 * MB) // (4 * dim))
    for at in range(0, elements, per):
        n = min(per, elements - at)
        c = pb.DatasetChunk(labels=tensor(labels[at:at + n]),
                            features=tensor(np.full((n, dim), fill, dtype=np.float32)))
        if at == 0:
            c.name, c.replace = name, replace
        yield c


def test_sigterm_during_a_large_commit_exits_within_the_grace_and_keeps_the_old_version(
        tmp_path: Path):
    repo = tmp_path / "repo"
    repo.mkdir()
    extra = ["--dataset-dir", str(repo), "--shutdown-grace-seconds", "0", "--cpu-threads", "1",
             "--max-dataset-bytes", str(1 << 30)]
    s = start_server(tmp_path / "s0", extra)
    stub = pb_grpc.SamplerStub(grpc.insecure_channel(
        s.target, options=[("grpc.max_send_message_length", 64 * MB)]))
    v1 = stub.CreateDataset(chunks("big", 3000, 4, False, 1.0), timeout=60)

    # The replace: 256 MiB of features. SIGTERM once its commit has begun.
    elements, dim = (256 * MB) // 16, 4
    committing = threading.Event()

    def watch():
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            if any(".dataset.tmp-" in p.name for p in repo.iterdir()):
                committing.set()
                s.process.send_signal(signal.SIGTERM)
                return
            time.sleep(0.002)

    watcher = threading.Thread(target=watch)
    watcher.start()
    future = stub.CreateDataset.future(chunks("big", elements, dim, True, 2.0), timeout=120)
    watcher.join()
    assert committing.is_set(), "the commit never began"
    assert s.process.wait(timeout=60) == 0
    log = s.log.read_text(errors="replace")
    assert "dataset commit(s) running; exiting without them" in log, log[-4000:]
    with pytest.raises(grpc.RpcError) as e:
        future.result(timeout=60)
    assert e.value.code() in (grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.CANCELLED), e.value

    # The committed version is the first one, whole; the interrupted replace left nothing
    # that loads (its temporary file is ignored, and removed once an hour old).
    s2 = start_server(tmp_path / "s1", extra)
    try:
        stub2 = pb_grpc.SamplerStub(grpc.insecure_channel(s2.target))
        listed = stub2.ListDatasets(pb.ListDatasetsRequest()).datasets
        assert [(d.name, d.sha256) for d in listed] == [("big", v1.sha256)]
        r = stub2.Sample(pb.SampleRequest(
            dataset="big", rows=pb.Tensor(dtype=pb.DTYPE_INT64, shape=[1],
                                          data=np.array([0], dtype=np.int64).tobytes()),
            return_features=True, seed=1,
            spec=pb.SamplingSpec(num_samples=4, positive_fraction=0.5)), timeout=30)
        feats = np.frombuffer(r.features.data, dtype=np.float32)
        assert feats.size > 0 and np.all(feats == 1.0), feats[:8]
    finally:
        assert stop_server(s2) == 0, s2.log_text()
