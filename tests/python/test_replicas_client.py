"""Clients given several addresses of servers WITHOUT a shared dataset repository (each
keeps its own datasets): the Python client, gpusampler.aio and gpusampler-cli (the C++
client) upload to, list and delete from every address, name the ones that fail, and every
sample through the balanced client finds the dataset."""

from __future__ import annotations

import asyncio
import json
import socket
import subprocess
import time
from pathlib import Path

import numpy as np
import pytest

import gpusampler
import gpusampler.aio
from conftest import CLI_BIN, require_binary, start_server, stop_server


@pytest.fixture(scope="module")
def pair(tmp_path_factory):
    servers = [start_server(tmp_path_factory.mktemp(f"replica{i}")) for i in range(2)]
    yield servers
    for s in servers:
        assert stop_server(s) == 0, s.log_text()


def dead_address() -> str:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return f"127.0.0.1:{s.getsockname()[1]}"


def names_on(target: str, repository: bool = False) -> list:
    with gpusampler.Client(target) as c:
        assert c.info().dataset_repository is repository
        return [d.name for d in c.list_datasets()]


def data(seed: int):
    rng = np.random.default_rng(seed)
    labels = (rng.random(4000) < 0.02).astype(np.int64)
    features = rng.standard_normal((4000, 4)).astype(np.float32)
    splits = np.array([0, 1500, 4000], dtype=np.int64)
    return labels, features, splits


def test_python_client_reaches_every_replica(pair):
    a, b = (s.target for s in pair)
    labels, features, splits = data(1)
    with gpusampler.Client([a, b]) as client:
        info = client.create_dataset("rep-py", labels, features, splits)
        assert info.replicas == (a, b)
        assert "rep-py" in names_on(a) and "rep-py" in names_on(b)
        listed = [d for d in client.list_datasets() if d.name == "rep-py"]
        assert len(listed) == 1 and listed[0].replicas == (a, b)
        # Calls balance over both servers; each one holds the dataset, so all succeed and
        # every answer is the inline one.
        for seed in range(12):
            got = client.sample(dataset="rep-py", rows=[1, 0], num_samples=32, seed=seed,
                                return_features=True)
            sel = np.concatenate([labels[1500:], labels[:1500]])
            sel_f = np.concatenate([features[1500:], features[:1500]])
            want = client.sample(sel, sel_f, row_splits=[0, 2500, 4000], num_samples=32,
                                 seed=seed)
            np.testing.assert_array_equal(got.indices, want.indices)
            np.testing.assert_array_equal(got.features, want.features)
        client.delete_dataset("rep-py")
        assert "rep-py" not in names_on(a) and "rep-py" not in names_on(b)
        with pytest.raises(gpusampler.NotFoundError):
            client.delete_dataset("rep-py")


def test_one_ipv4_list_target_uploads_to_every_address(pair, tmp_path: Path):
    # Issue 31: Client("ipv4:a,b,c") without a repository uploaded to 1 of 3 (round_robin
    # picked one); each address of the list is a replica of its own, like [a, b, c].
    third = start_server(tmp_path / "third")
    try:
        targets = [s.target for s in pair] + [third.target]
        labels, features, splits = data(3)
        with gpusampler.Client("ipv4:" + ",".join(targets)) as client:
            info = client.create_dataset("rep-list", labels, features, splits)
            assert info.replicas == tuple(targets)
            for t in targets:
                assert "rep-list" in names_on(t), t
            listed = [d for d in client.list_datasets() if d.name == "rep-list"]
            assert len(listed) == 1 and listed[0].replicas == tuple(targets)
            client.delete_dataset("rep-list")
            for t in targets:
                assert "rep-list" not in names_on(t), t
    finally:
        assert stop_server(third) == 0, third.log_text()


def test_python_client_names_the_address_that_failed(pair):
    a = pair[0].target
    dead = dead_address()
    labels, _, _ = data(2)
    with gpusampler.Client([a, dead], max_attempts=2, timeout=10) as client:
        with pytest.raises(gpusampler.UnavailableError) as info:
            client.create_dataset("rep-half", labels)
        text = str(info.value)
        assert f"failed on 1 of 2 addresses" in text and dead in text, text
        assert f"it succeeded on {a}" in text
        assert list(info.value.failed) == [dead] and info.value.succeeded == [a]
        assert "rep-half" in names_on(a)
        with pytest.raises(gpusampler.UnavailableError, match=dead):
            client.list_datasets()
        with pytest.raises(gpusampler.UnavailableError, match=dead) as info:
            client.delete_dataset("rep-half")
        assert info.value.succeeded == [a]  # deleted where it could be
        assert "rep-half" not in names_on(a)


def test_aio_client_reaches_every_replica(pair):
    a, b = (s.target for s in pair)
    labels, features, splits = data(3)

    async def run():
        async with gpusampler.aio.Client([a, b]) as client:
            info = await client.create_dataset("rep-aio", labels, features, splits)
            listed = [d for d in await client.list_datasets() if d.name == "rep-aio"]
            held = (names_on(a), names_on(b))
            await client.delete_dataset("rep-aio")
            return info, listed, held

    info, listed, held = asyncio.run(run())
    assert info.replicas == (a, b) and listed[0].replicas == (a, b)
    assert all("rep-aio" in names for names in held)
    assert "rep-aio" not in names_on(a) + names_on(b)


def cli(*args, targets, check=True):
    require_binary(CLI_BIN)
    cmd = [str(CLI_BIN)]
    for t in targets:
        cmd += ["--target", t]
    result = subprocess.run(cmd + [str(x) for x in args], capture_output=True, text=True,
                            timeout=120)
    if check:
        assert result.returncode == 0, result.stdout + result.stderr
    return result


def test_cli_and_cpp_client_reach_every_replica(pair, tmp_path: Path):
    a, b = (s.target for s in pair)
    labels, features, splits = data(4)
    np.save(tmp_path / "labels.npy", labels)
    np.save(tmp_path / "features.npy", features)
    cli("dataset", "create", "rep-cli", "--labels", tmp_path / "labels.npy", "--features",
        tmp_path / "features.npy", targets=[a, b])
    assert "rep-cli" in names_on(a) and "rep-cli" in names_on(b)
    listed = [json.loads(line) for line in
              cli("dataset", "list", "--json", targets=[a, b]).stdout.splitlines()]
    assert [d["name"] for d in listed].count("rep-cli") == 1
    bench = cli("bench", "--dataset", "rep-cli", "-n", 20, "-c", 2, "--json", "-q",
                targets=[a, b])
    result = json.loads(bench.stdout)
    assert result["ok"] == 20 and result["errors"] == {}, result
    cli("dataset", "delete", "rep-cli", targets=[a, b])
    assert "rep-cli" not in names_on(a) + names_on(b)

    dead = dead_address()
    failed = cli("--max-attempts", 2, "dataset", "create", "rep-cli2", "--labels",
                 tmp_path / "labels.npy", targets=[a, dead], check=False)
    assert failed.returncode == 1, failed.stdout + failed.stderr
    assert dead in failed.stderr and "failed on 1 of 2 targets" in failed.stderr, failed.stderr
    assert f"it succeeded on {a}" in failed.stderr
    gone = cli("dataset", "delete", "rep-cli2", targets=[a, b])
    assert gone.returncode == 0  # held by one of the two: deleted there, done
    assert "rep-cli2" not in names_on(a)


@pytest.fixture(scope="module")
def shared(tmp_path_factory):
    repo = tmp_path_factory.mktemp("repo")
    servers = [start_server(tmp_path_factory.mktemp(f"shared{i}"),
                            ["--dataset-dir", str(repo), "--dataset-poll-seconds", "1"])
               for i in range(2)]
    yield servers
    for s in servers:
        assert stop_server(s) == 0, s.log_text()


def test_with_a_repository_one_replica_is_enough(shared, tmp_path: Path):
    a, b = (s.target for s in shared)
    labels, features, splits = data(5)
    with gpusampler.Client([a, b]) as client:
        assert client.info().dataset_repository is True
        # One upload (a second one to the other replica would be ALREADY_EXISTS).
        info = client.create_dataset("rep-shared", labels, features, splits)
        assert info.replicas == ()
        listed = [d for d in client.list_datasets() if d.name == "rep-shared"]
        assert len(listed) == 1 and listed[0].replicas == ()
        for target in (a, b):  # each replica serves it (read your writes)
            with gpusampler.Client(target) as one:
                got = one.sample(dataset="rep-shared", num_samples=16, seed=3)
                assert got.dataset_sha256 == info.sha256
        client.delete_dataset("rep-shared")
    deadline = time.monotonic() + 5
    while time.monotonic() < deadline:
        held = [t for t in (a, b) if "rep-shared" in names_on(t, repository=True)]
        if not held:
            break
        time.sleep(0.2)
    assert not held, f"{held} still list the deleted dataset"
    np.save(tmp_path / "labels.npy", labels)
    cli("dataset", "create", "rep-shared-cli", "--labels", tmp_path / "labels.npy",
        targets=[a, b])
    cli("dataset", "delete", "rep-shared-cli", targets=[a, b])
