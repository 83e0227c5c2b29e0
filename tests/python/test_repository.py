"""The dataset repository (SPEC section 6) against real CPU servers sharing one --dataset-dir
with --dataset-poll-seconds 1: read your writes on every replica and on a replica started
later, replacement and deletion converging within 3 s with no answer mixing versions, a
replica SIGKILLed mid-upload leaving nothing, a repository larger than the budget served by
eviction, and the findings of the hostile-client review that live in the dataset code
(a bad later chunk, a stalled upload, special files in --dataset-dir).

Every dataset here is built from the golden samples of tests/data: row r of the dataset is
a golden case's row, so sampling it with the case's spec and seed must return the case's
golden indices exactly (the section 5 equivalence), and the features (float32 element
numbers, plus 0.5 in a second version) tell which version answered.

The tests use the generated stubs only, not the client library.
"""

from __future__ import annotations

import json
import os
import signal
import stat
import threading
import time
import urllib.request
from pathlib import Path
from typing import Dict, List, Optional, Tuple

import grpc
import numpy as np
import pytest

from conftest import REPO, start_server, stop_server

import gpusampler  # noqa: F401  (puts the generated stubs on the path)
from gpusampler.v1 import sampler_pb2 as pb
from gpusampler.v1 import sampler_pb2_grpc as pb_grpc

GOLDEN = [json.loads(line) for line in
          (REPO / "tests" / "data" / "golden_samples.jsonl").read_text().splitlines() if line]
# Goldens whose labels fit one dataset's dtype (int64): all of them.
FILL = {"FILL_POLICY_BOTH": pb.FILL_POLICY_BOTH,
        "FILL_POLICY_NEGATIVES_ONLY": pb.FILL_POLICY_NEGATIVES_ONLY,
        "FILL_POLICY_NONE": pb.FILL_POLICY_NONE}
POLL = ["--dataset-poll-seconds", "1", "--cpu-threads", "1", "--shutdown-grace-seconds", "2"]


# ---------------------------------------------------------------- the golden dataset
class Golden:
    """All golden rows, concatenated: labels [total], row_splits, and per case its rows."""

    def __init__(self) -> None:
        rows: List[List[int]] = []
        self.cases: List[Tuple[int, int, dict]] = []
        for case in GOLDEN:
            begin = len(rows)
            rows.extend(case["labels"])
            self.cases.append((begin, len(rows), case))
        lengths = [len(r) for r in rows]
        self.splits = np.concatenate([[0], np.cumsum(lengths)]).astype(np.int64)
        self.labels = np.concatenate([np.array(r, dtype=np.int64) for r in rows])
        self.total = int(self.splits[-1])

    def features(self, version: int) -> np.ndarray:
        # Element numbers (exact in float32), plus 0.5 in version 2.
        return (np.arange(self.total, dtype=np.float32) + (0.5 if version == 2 else 0.0))[:, None]


G = Golden()


def tensor(a: np.ndarray) -> pb.Tensor:
    dtypes = {np.dtype(np.int64): pb.DTYPE_INT64, np.dtype(np.float32): pb.DTYPE_FLOAT32,
              np.dtype(np.int8): pb.DTYPE_INT8}
    return pb.Tensor(dtype=dtypes[a.dtype], shape=list(a.shape),
                     data=np.ascontiguousarray(a).tobytes())


def chunks(name: str, version: int, replace: bool = False, per_chunk: int = 300):
    feats = G.features(version)
    for at in range(0, G.total, per_chunk):
        c = pb.DatasetChunk(labels=tensor(G.labels[at:at + per_chunk]),
                            features=tensor(feats[at:at + per_chunk]))
        if at == 0:
            c.name, c.replace = name, replace
            c.row_splits.CopyFrom(tensor(G.splits))
        yield c


def stub(target: str) -> pb_grpc.SamplerStub:
    return pb_grpc.SamplerStub(grpc.insecure_channel(target))


def upload(s: pb_grpc.SamplerStub, name: str, version: int, replace: bool = False):
    return s.CreateDataset(chunks(name, version, replace), timeout=60)


def case_request(name: str, i: int) -> pb.SampleRequest:
    begin, end, case = G.cases[i]
    spec = case["spec"]
    return pb.SampleRequest(
        dataset=name, rows=tensor(np.arange(begin, end, dtype=np.int64)), return_features=True,
        seed=case["seed"],
        spec=pb.SamplingSpec(num_samples=spec["num_samples"],
                             positive_fraction=spec["positive_fraction"],
                             positive_label=spec["positive_label"],
                             negative_label=spec["negative_label"],
                             fill_policy=FILL[spec["fill_policy"]]))


def check_case(r: pb.SampleResponse, i: int, versions: Dict[str, int]) -> Optional[str]:
    """None when `r` is case i's golden answer, computed wholly from the version its
    dataset_sha256 names (versions: sha256 -> 1 or 2); else what is wrong."""
    begin, end, case = G.cases[i]
    if r.dataset_sha256 not in versions:
        return f"case {i}: dataset_sha256 {r.dataset_sha256!r} is neither version"
    version = versions[r.dataset_sha256]
    idx = np.frombuffer(r.indices.data, dtype=np.int64).reshape(end - begin, -1)
    if idx.tolist() != case["indices"]:
        return f"case {i}: indices differ from the golden ones"
    if (np.frombuffer(r.num_positive.data, dtype=np.int32).tolist() != case["num_positive"]
            or np.frombuffer(r.num_negative.data, dtype=np.int32).tolist()
            != case["num_negative"]):
        return f"case {i}: counts differ from the golden ones"
    feats = np.frombuffer(r.features.data, dtype=np.float32).reshape(idx.shape)
    want = np.where(idx >= 0, G.splits[begin:end, None] + idx + (0.5 if version == 2 else 0.0),
                    0.0).astype(np.float32)
    if not np.array_equal(feats, want):
        return f"case {i}: features are not version {version}'s (the sha256 it names)"
    return None


def sample_all(s: pb_grpc.SamplerStub, name: str, versions: Dict[str, int]) -> List[str]:
    wrong = []
    for i in range(len(G.cases)):
        err = check_case(s.Sample(case_request(name, i), timeout=30), i, versions)
        if err:
            wrong.append(err)
    return wrong


def metric(port: int, name: str) -> float:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as r:
        for line in r.read().decode().splitlines():
            if line.startswith(name + " "):
                return float(line.split()[1])
    return 0.0


@pytest.fixture
def replicas(tmp_path: Path):
    """Starts replicas sharing tmp_path/repo; stops (or reaps) them all at the end."""
    repo = tmp_path / "repo"
    repo.mkdir()
    started = []

    def start(extra: Optional[List[str]] = None):
        s = start_server(tmp_path / f"s{len(started)}",
                         ["--dataset-dir", str(repo)] + POLL + (extra or []))
        started.append(s)
        return s

    start.repo = repo  # type: ignore[attr-defined]
    yield start
    for s in started:
        if s.process.poll() is None:
            assert stop_server(s) == 0, s.log_text()


# ---------------------------------------------------------------- SPEC section 6
def test_upload_through_one_replica_is_served_at_once_by_every_replica_and_a_late_one(replicas):
    servers = [replicas() for _ in range(3)]
    stubs = [stub(s.target) for s in servers]
    assert all(s.GetServerInfo(pb.GetServerInfoRequest()).dataset_repository for s in stubs)
    info = upload(stubs[0], "golden", 1)
    versions = {info.sha256: 1}
    # At once (read your writes), not after a poll: the other replicas load it on the miss.
    for s in stubs:
        assert sample_all(s, "golden", versions) == []
    assert (Path(replicas.repo) / "golden.dataset").exists()
    assert [d.name for d in stubs[2].ListDatasets(pb.ListDatasetsRequest()).datasets] == ["golden"]
    late = stub(replicas().target)
    listed = late.ListDatasets(pb.ListDatasetsRequest()).datasets
    assert [(d.name, d.sha256) for d in listed] == [("golden", info.sha256)]
    assert sample_all(late, "golden", versions) == []
    # Loaded at start (preload), counted.
    assert metric(servers[0].metrics_port, 'gpusampler_dataset_loads_total{result="error"}') == 0
    assert metric(servers[1].metrics_port, 'gpusampler_dataset_loads_total{result="ok"}') >= 1


def test_stream_requests_that_miss_load_off_the_callback_thread_in_order(replicas):
    """A SampleStream whose messages name a dataset this replica has not loaded: the load runs
    on a repository thread (a request for another, missing, name and a resident one in the
    same stream keep their places), and every answer is the golden one."""
    a, b = replicas(), replicas()
    info = upload(stub(a.target), "golden", 1)
    versions = {info.sha256: 1}
    sb = stub(b.target)
    requests = [case_request("golden", i) for i in range(len(G.cases))]
    missing = pb.SampleRequest()
    missing.CopyFrom(requests[0])
    missing.dataset = "never-uploaded"
    answers = list(sb.SampleStream(iter(requests), timeout=60))
    assert len(answers) == len(G.cases)
    for i, r in enumerate(answers):
        assert check_case(r, i, versions) is None
    # A miss of a name the repository lacks ends the stream NOT_FOUND after the answers
    # before it.
    got = []
    with pytest.raises(grpc.RpcError) as err:
        for r in sb.SampleStream(iter([requests[1], missing, requests[2]]), timeout=60):
            got.append(r)
    assert err.value.code() == grpc.StatusCode.NOT_FOUND
    assert len(got) == 1 and check_case(got[0], 1, versions) is None


def test_replacement_converges_within_3s_and_no_answer_mixes_versions(replicas):
    servers = [replicas() for _ in range(3)]
    stubs = [stub(s.target) for s in servers]
    v1 = upload(stubs[0], "rep", 1)
    for s in stubs:
        assert sample_all(s, "rep", {v1.sha256: 1}) == []
    stop = threading.Event()
    wrong: List[str] = []
    seen: Dict[int, set] = {0: set(), 1: set(), 2: set()}
    versions = {v1.sha256: 1}

    def hammer(k: int) -> None:
        i = 0
        while not stop.is_set():
            r = stubs[k].Sample(case_request("rep", i % len(G.cases)), timeout=30)
            err = check_case(r, i % len(G.cases), dict(versions))
            if err:
                wrong.append(f"replica {k}: {err}")
            seen[k].add(r.dataset_sha256)
            i += 1

    threads = [threading.Thread(target=hammer, args=(k,)) for k in range(3)]
    for t in threads:
        t.start()
    time.sleep(0.3)
    # The second version's sha256 must be known before an answer can name it.
    feats = G.features(2)
    import hashlib
    versions[hashlib.sha256(G.labels.tobytes() + feats.tobytes()).hexdigest()] = 2
    v2 = upload(stubs[1], "rep", 2, replace=True)
    assert versions[v2.sha256] == 2
    replaced_at = time.monotonic()
    converged = [None, None, None]
    while time.monotonic() - replaced_at < 3.0 and None in converged:
        for k in range(3):
            if converged[k] is None:
                r = stubs[k].Sample(case_request("rep", 0), timeout=30)
                if r.dataset_sha256 == v2.sha256:
                    converged[k] = time.monotonic() - replaced_at
        time.sleep(0.05)
    stop.set()
    for t in threads:
        t.join(timeout=30)
    assert None not in converged, f"not every replica serves the replacement within 3 s: {converged}"
    assert wrong == [], wrong[:5]
    # And from then on only the new version.
    for s in stubs:
        assert sample_all(s, "rep", {v2.sha256: 2}) == []
    print(f"\nreplacement served everywhere after {max(converged):.2f} s")


def test_deletion_is_not_found_everywhere_within_3s(replicas):
    servers = [replicas() for _ in range(3)]
    stubs = [stub(s.target) for s in servers]
    info = upload(stubs[0], "gone", 1)
    for s in stubs:
        assert sample_all(s, "gone", {info.sha256: 1}) == []
    stubs[2].DeleteDataset(pb.DeleteDatasetRequest(name="gone"))
    deleted_at = time.monotonic()
    pending = set(range(3))
    while pending and time.monotonic() - deleted_at < 3.0:
        for k in list(pending):
            try:
                stubs[k].Sample(case_request("gone", 0), timeout=30)
            except grpc.RpcError as e:
                assert e.code() == grpc.StatusCode.NOT_FOUND, e
                pending.discard(k)
        time.sleep(0.05)
    assert not pending, f"replicas {sorted(pending)} still serve a deleted dataset after 3 s"
    assert not (Path(replicas.repo) / "gone.dataset").exists()
    with pytest.raises(grpc.RpcError) as e:
        stubs[0].DeleteDataset(pb.DeleteDatasetRequest(name="gone"))
    assert e.value.code() == grpc.StatusCode.NOT_FOUND


def test_replica_killed_mid_upload_leaves_nothing_and_the_old_version_intact(replicas):
    a, victim = replicas(), replicas()
    sa, sv = stub(a.target), stub(victim.target)
    v1 = upload(sa, "keep", 1)
    assert sample_all(sv, "keep", {v1.sha256: 1}) == []
    sent, done = threading.Event(), threading.Event()

    def stalled(name: str, replace: bool):
        for n, c in enumerate(chunks(name, 2, replace)):
            yield c
            if n == 2:
                sent.set()
                done.wait(30)  # the replica dies meanwhile
                return

    futures = [sv.CreateDataset.future(stalled("keep", True), timeout=60),
               sv.CreateDataset.future(stalled("fresh", False), timeout=60)]
    assert sent.wait(10)
    time.sleep(0.3)
    victim.process.send_signal(signal.SIGKILL)
    victim.process.wait()
    for f in futures:
        with pytest.raises(grpc.RpcError):
            f.result(timeout=30)
    done.set()
    time.sleep(1.5)  # a poll interval
    assert sample_all(sa, "keep", {v1.sha256: 1}) == []
    with pytest.raises(grpc.RpcError) as e:
        sa.Sample(case_request("fresh", 0), timeout=30)
    assert e.value.code() == grpc.StatusCode.NOT_FOUND
    assert [d.name for d in sa.ListDatasets(pb.ListDatasetsRequest()).datasets] == ["keep"]
    # A replica started now sees the same.
    late = stub(replicas().target)
    assert [d.name for d in late.ListDatasets(pb.ListDatasetsRequest()).datasets] == ["keep"]
    assert sample_all(late, "keep", {v1.sha256: 1}) == []


def test_uncommitted_leftovers_are_ignored_and_old_ones_cleaned(replicas):
    repo = Path(replicas.repo)
    young = repo / "x.dataset.tmp-1-00000000000000aa"
    old = repo / "y.dataset.tmp-1-00000000000000bb"
    for p in (young, old):
        p.write_bytes(b"GSDATA01 half-written")
    hour_ago = time.time() - 3700
    os.utime(old, (hour_ago, hour_ago))
    s = replicas()
    st = stub(s.target)
    assert list(st.ListDatasets(pb.ListDatasetsRequest()).datasets) == []
    assert young.exists() and not old.exists()
    assert metric(s.metrics_port, 'gpusampler_dataset_loads_total{result="error"}') == 0


def write_plain(repo: Path, name: str, n: int, seed: int) -> np.ndarray:
    labels = np.random.default_rng(seed).integers(0, 2, size=n).astype(np.int64)
    np.save(repo / f"{name}.labels.npy", labels)
    return labels


def test_repository_larger_than_the_budget_with_a_bad_file_serves_every_good_dataset(replicas):
    repo = Path(replicas.repo)
    n = 100_000  # 800 kB of int64 labels each; the budget holds two
    data = {f"d{k}": write_plain(repo, f"d{k}", n, k) for k in range(5)}
    (repo / "broken.labels.npy").write_bytes(b"not an npy file")
    s = replicas(["--max-dataset-bytes", str(2 * n * 8 + 1000)])
    st = stub(s.target)
    inline = stub(s.target)
    for rnd in range(2):
        for name, labels in data.items():
            req = pb.SampleRequest(dataset=name, spec=pb.SamplingSpec(num_samples=64), seed=7)
            got = st.Sample(req, timeout=30)
            want = inline.Sample(pb.SampleRequest(labels=tensor(labels),
                                                  spec=pb.SamplingSpec(num_samples=64), seed=7),
                                 timeout=30)
            assert got.indices.data == want.indices.data, (rnd, name)
            assert got.labels.data == want.labels.data, (rnd, name)
    assert metric(s.metrics_port, "gpusampler_dataset_evictions_total") >= 8
    assert metric(s.metrics_port, 'gpusampler_dataset_loads_total{result="error"}') == 1
    assert metric(s.metrics_port, "gpusampler_dataset_bytes") <= 2 * n * 8 + 1000
    with pytest.raises(grpc.RpcError) as e:
        st.Sample(pb.SampleRequest(dataset="broken", spec=pb.SamplingSpec(num_samples=4)))
    assert e.value.code() == grpc.StatusCode.NOT_FOUND
    assert "broken.labels.npy" in e.value.details()
    # Hand-written files list with everything else (not resident: no devices).
    names = [d.name for d in st.ListDatasets(pb.ListDatasetsRequest()).datasets]
    assert names == ["d0", "d1", "d2", "d3", "d4"]
    assert "broken.labels.npy" in s.log_text()


def as_nobody():
    os.setgid(65534)
    os.setuid(65534)


def test_read_only_repository_refuses_create_and_delete_with_failed_precondition():
    import shutil
    import tempfile

    # Outside pytest's private tmp directory, so that nobody can reach it.
    base = Path(tempfile.mkdtemp(prefix="gpusampler-ro-"))
    base.chmod(0o777)
    tmp_path = base
    repo = tmp_path / "ro"
    repo.mkdir()
    labels = write_plain(repo, "ro", 1000, 3)
    repo.chmod(0o555)
    (tmp_path / "s").mkdir()
    (tmp_path / "s").chmod(0o777)
    try:
        if os.geteuid() == 0:
            # root writes anywhere: run the server as nobody, for whom the directory is read-only.
            import conftest
            orig = conftest.subprocess.Popen

            def popen(*a, **kw):
                kw["preexec_fn"] = as_nobody
                return orig(*a, **kw)

            conftest.subprocess.Popen = popen
            try:
                s = start_server(tmp_path / "s", ["--dataset-dir", str(repo)] + POLL)
            finally:
                conftest.subprocess.Popen = orig
        else:
            s = start_server(tmp_path / "s", ["--dataset-dir", str(repo)] + POLL)
        st = stub(s.target)
        got = st.Sample(pb.SampleRequest(dataset="ro", spec=pb.SamplingSpec(num_samples=8), seed=1))
        want = st.Sample(pb.SampleRequest(labels=tensor(labels), spec=pb.SamplingSpec(num_samples=8),
                                          seed=1))
        assert got.indices.data == want.indices.data
        for call in (lambda: upload(st, "new", 1),
                     lambda: st.DeleteDataset(pb.DeleteDatasetRequest(name="ro"))):
            with pytest.raises(grpc.RpcError) as e:
                call()
            assert e.value.code() == grpc.StatusCode.FAILED_PRECONDITION
            assert "--dataset-dir" in e.value.details()
        assert (repo / "ro.labels.npy").exists()
        assert stop_server(s) == 0
    finally:
        repo.chmod(0o755)
        shutil.rmtree(base, ignore_errors=True)


# ---------------------------------------------------------------- hostile and careless clients
def test_bad_later_chunk_keeps_nothing(replicas):
    s = replicas()
    channel = grpc.insecure_channel(s.target)
    raw = channel.stream_unary("/gpusampler.v1.Sampler/CreateDataset",
                               request_serializer=lambda b: b,
                               response_deserializer=pb.DatasetInfo.FromString)
    good = list(chunks("half", 1))
    msgs = [good[0].SerializeToString(), good[1].SerializeToString(), b"\xff\xff\xff\xff"]
    with pytest.raises(grpc.RpcError) as e:
        raw(iter(msgs), timeout=30)
    assert e.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert "chunk 2 does not parse" in e.value.details()
    st = stub(s.target)
    assert list(st.ListDatasets(pb.ListDatasetsRequest()).datasets) == []
    assert not any(Path(replicas.repo).iterdir())
    with pytest.raises(grpc.RpcError) as e2:
        st.Sample(case_request("half", 0))
    assert e2.value.code() == grpc.StatusCode.NOT_FOUND


def test_stalled_upload_frees_its_reservation_after_the_idle_timeout(replicas):
    budget = G.total * 12 + 2000  # one golden dataset (int64 labels + float32 features) fits
    s = replicas(["--upload-idle-timeout-ms", "2000", "--max-dataset-bytes", str(budget)])
    st = stub(s.target)
    release = threading.Event()

    def stalled():
        for n, c in enumerate(chunks("stall", 1)):
            yield c
            if n == 3:
                release.wait(20)
                return

    started = time.monotonic()
    fut = st.CreateDataset.future(stalled(), timeout=30)
    time.sleep(0.5)  # the server reserves the chunks sent
    # Meanwhile the budget is held by an upload in progress only: a positive pushback.
    with pytest.raises(grpc.RpcError) as e:
        upload(st, "other", 1)
    assert e.value.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
    pushback = dict(e.value.trailing_metadata() or ()).get("grpc-retry-pushback-ms")
    assert pushback is not None and int(pushback) > 0, pushback
    with pytest.raises(grpc.RpcError) as e:
        fut.result(timeout=20)
    elapsed = time.monotonic() - started
    release.set()
    assert e.value.code() == grpc.StatusCode.DEADLINE_EXCEEDED
    assert "--upload-idle-timeout-ms" in e.value.details()
    assert elapsed < 10, elapsed
    # Nothing kept, and the budget is free again.
    assert list(st.ListDatasets(pb.ListDatasetsRequest()).datasets) == []
    info = upload(st, "other", 1)
    assert sample_all(st, "other", {info.sha256: 1}) == []


def peak_rss_mb(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024
    raise AssertionError("no VmHWM")


def test_dataset_dir_special_files_are_skipped_and_the_server_starts_small(replicas):
    repo = Path(replicas.repo)
    (repo / "adir.labels.npy").mkdir()
    (repo / "zero.labels.npy").symlink_to("/dev/zero")
    os.mkfifo(repo / "fifo.labels.npy")
    with open(repo / "sparse.labels.npy", "wb") as f:
        f.truncate(3 << 29)  # 1.5 GiB of holes
    # A sparse file whose header is valid and claims 1.5 GiB: refused before its data is read.
    with open(repo / "huge.labels.npy", "wb") as f:
        header = "{'descr': '<i8', 'fortran_order': False, 'shape': (201326592,), }"
        header += " " * (118 - len(header)) + "\n"
        f.write(b"\x93NUMPY\x01\x00" + len(header).to_bytes(2, "little") + header.encode())
        f.truncate(128 + (3 << 29))
    labels = write_plain(repo, "good", 5000, 9)
    s = replicas()
    st = stub(s.target)
    got = st.Sample(pb.SampleRequest(dataset="good", spec=pb.SamplingSpec(num_samples=16), seed=2))
    want = st.Sample(pb.SampleRequest(labels=tensor(labels), spec=pb.SamplingSpec(num_samples=16),
                                      seed=2))
    assert got.indices.data == want.indices.data
    assert metric(s.metrics_port, 'gpusampler_dataset_loads_total{result="error"}') == 5
    assert metric(s.metrics_port, 'gpusampler_dataset_loads_total{result="ok"}') == 1
    peak = peak_rss_mb(s.process.pid)
    assert peak < 300, f"peak RSS {peak:.0f} MB"
    log = s.log_text()
    for name in ("adir", "zero", "fifo", "sparse", "huge"):
        assert f"{name}.labels.npy" in log, name
    # Polls do not count them again.
    time.sleep(2.5)
    assert metric(s.metrics_port, 'gpusampler_dataset_loads_total{result="error"}') == 5
    assert stat.S_ISFIFO(os.stat(repo / "fifo.labels.npy").st_mode)
