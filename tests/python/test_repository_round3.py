"""Issue 31 (hostile and careless clients, round 3), the repository's findings against a real
CPU server: a --dataset-dir that cannot be listed deletes nothing (logged once, counted),
gpusampler_dataset_bytes counts an upload while it arrives, and a load peaks near its size
(VmHWM of the server process), not at twice it.

The tests use the generated stubs only, not the client library.
"""

from __future__ import annotations

import os
import re
import threading
import time
import urllib.request
from pathlib import Path

import grpc
import numpy as np
import pytest

from conftest import start_server, stop_server

import gpusampler  # noqa: F401  (puts the generated stubs on the path)
from gpusampler.v1 import sampler_pb2 as pb
from gpusampler.v1 import sampler_pb2_grpc as pb_grpc


def metric(port: int, name: str) -> float:
    total = 0.0
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as r:
        for line in r.read().decode().splitlines():
            if line.startswith(name + " ") or line.startswith(name + "{"):
                total += float(line.split()[-1])
    return total


def stub(target: str) -> pb_grpc.SamplerStub:
    return pb_grpc.SamplerStub(grpc.insecure_channel(target))


def by_name(name: str) -> pb.SampleRequest:
    return pb.SampleRequest(
        dataset=name, rows=pb.Tensor(dtype=pb.DTYPE_INT64, shape=[1],
                                     data=np.array([0], dtype=np.int64).tobytes()),
        seed=3, spec=pb.SamplingSpec(num_samples=4, positive_fraction=0.5,
                                     fill_policy=pb.FILL_POLICY_BOTH))


def wait_for(cond, seconds: float = 10.0) -> bool:
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        if cond():
            return True
        time.sleep(0.1)
    return cond()


def test_an_unlistable_dataset_dir_keeps_the_resident_datasets(tmp_path: Path):
    repo = tmp_path / "repo"
    repo.mkdir()
    for name in ("a", "b"):
        np.save(repo / f"{name}.labels.npy", np.arange(64, dtype=np.int64) % 2)
    s = start_server(tmp_path / "s", ["--dataset-dir", str(repo), "--dataset-poll-seconds", "1"])
    try:
        st = stub(s.target)
        assert len(st.ListDatasets(pb.ListDatasetsRequest(), timeout=10).datasets) == 2
        moved = tmp_path / "repo.unmounted"
        os.rename(repo, moved)  # every listing now fails (as EMFILE or EACCES would)
        assert wait_for(lambda: metric(s.metrics_port,
                                       "gpusampler_dataset_scan_failures_total") >= 3)
        for name in ("a", "b"):  # still served
            st.Sample(by_name(name), timeout=10)
        assert metric(s.metrics_port, "gpusampler_datasets") == 2
        with pytest.raises(grpc.RpcError) as e:
            st.ListDatasets(pb.ListDatasetsRequest(), timeout=10)
        assert e.value.code() == grpc.StatusCode.UNAVAILABLE
        assert "--dataset-dir" in e.value.details()
        os.rename(moved, repo)
        os.unlink(repo / "b.labels.npy")  # a real deletion, seen once listing works again
        assert wait_for(lambda: metric(s.metrics_port, "gpusampler_datasets") == 1)
    finally:
        stop_server(s)
    log = s.log.read_text(errors="replace")
    assert len(re.findall(r"keeping the resident datasets", log)) == 1, log[-3000:]
    assert "listing works again" in log


def test_dataset_bytes_counts_an_upload_while_it_arrives(tmp_path: Path):
    s = start_server(tmp_path / "s", ["--upload-idle-timeout-ms", "20000"])
    try:
        arrived = threading.Event()
        go_on = threading.Event()
        n = 1 << 17  # 1 MiB of int64 labels per chunk

        def chunks():
            for i in range(3):
                yield pb.DatasetChunk(
                    name="up" if i == 0 else "",
                    labels=pb.Tensor(dtype=pb.DTYPE_INT64, shape=[n],
                                     data=(np.arange(n, dtype=np.int64) % 2).tobytes()))
                if i == 1:
                    arrived.set()
                    go_on.wait(30)

        result = {}
        t = threading.Thread(
            target=lambda: result.setdefault("info", stub(s.target).CreateDataset(chunks(),
                                                                                 timeout=60)))
        t.start()
        assert arrived.wait(30)
        # Two chunks (2 MiB) arrived; nothing is committed yet.
        assert wait_for(lambda: metric(s.metrics_port, "gpusampler_dataset_bytes") >= 2 * n * 8)
        assert metric(s.metrics_port, "gpusampler_datasets") == 0
        go_on.set()
        t.join(60)
        assert result["info"].num_elements == 3 * n
        assert metric(s.metrics_port, "gpusampler_dataset_bytes") == 3 * n * 8
    finally:
        stop_server(s)


def vm_kb(pid: int, field: str) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1])
    raise AssertionError(field)


def test_a_load_peaks_near_its_size(tmp_path: Path):
    size = 128 << 20  # 128 MiB of int64 labels (the issue measured 512 MiB: 1,046 MB peak)
    repo = tmp_path / "repo"
    repo.mkdir()
    s = start_server(tmp_path / "s", ["--dataset-dir", str(repo), "--dataset-poll-seconds", "0",
                                      "--max-dataset-bytes", str(2 * size)])
    try:
        st = stub(s.target)
        st.Sample(pb.SampleRequest(
            labels=pb.Tensor(dtype=pb.DTYPE_INT64, shape=[8],
                             data=np.arange(8, dtype=np.int64).tobytes()),
            spec=pb.SamplingSpec(num_samples=2, positive_fraction=0.5)), timeout=10)
        before = vm_kb(s.process.pid, "VmHWM")
        n = size // 8
        # Rows of 1024 elements, so that sampling row 0 costs nothing next to the load.
        np.save(repo / "big.row_splits.npy", np.append(np.arange(0, n, 1024), n).astype(np.int64))
        np.save(repo / "big.labels.npy", np.arange(n, dtype=np.int64) % 2)
        st.Sample(by_name("big"), timeout=120)  # the miss loads it
        grown_mb = (vm_kb(s.process.pid, "VmHWM") - before) / 1024
    finally:
        stop_server(s)
    # One copy plus one read piece (8 MiB) and allocator slack; two copies would be 256 MiB.
    assert grown_mb < 1.25 * (size >> 20), grown_mb


def test_an_upload_trickling_empty_chunks_ends_at_the_idle_timeout(tmp_path: Path):
    s = start_server(tmp_path / "s", ["--upload-idle-timeout-ms", "1000"])
    try:
        def chunks():
            yield pb.DatasetChunk(name="trickle", labels=pb.Tensor(
                dtype=pb.DTYPE_INT64, shape=[4], data=np.arange(4, dtype=np.int64).tobytes()))
            for _ in range(40):  # an empty chunk every 250 ms: 10 s, no data after the first
                time.sleep(0.25)
                yield pb.DatasetChunk(labels=pb.Tensor(dtype=pb.DTYPE_INT64, shape=[0]))

        t0 = time.monotonic()
        with pytest.raises(grpc.RpcError) as e:
            stub(s.target).CreateDataset(chunks(), timeout=30)
        assert e.value.code() == grpc.StatusCode.DEADLINE_EXCEEDED, e.value.details()
        assert "--upload-idle-timeout-ms" in e.value.details()
        assert time.monotonic() - t0 < 5  # not the 10 s of the trickle
        assert wait_for(lambda: metric(s.metrics_port, "gpusampler_dataset_bytes") == 0)
    finally:
        stop_server(s)
