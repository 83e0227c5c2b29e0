"""Scores in the dataset repository (SPEC sections 6 and 7): a hand-written NAME.scores.npy
is loaded with its labels, and an upload with scores is committed (a GSDATA02 container) and
loaded by another replica with the same sha256 and bytes."""

from __future__ import annotations

import hashlib
from pathlib import Path

import numpy as np
import pytest

import gpusampler
from conftest import start_server, stop_server

FLAGS = ["--dataset-poll-seconds", "1", "--cpu-threads", "1", "--shutdown-grace-seconds", "2"]


@pytest.fixture
def replica(tmp_path: Path):
    repo = tmp_path / "repo"
    repo.mkdir()
    started = []

    def start():
        s = start_server(tmp_path / f"s{len(started)}", ["--dataset-dir", str(repo)] + FLAGS)
        started.append(s)
        return s

    start.repo = repo  # type: ignore[attr-defined]
    yield start
    for s in started:
        if s.process.poll() is None:
            assert stop_server(s) == 0, s.log_text()


def weighted(label: int):
    return [gpusampler.Class(label, rest=True, selection="weighted")]


def test_hand_written_scores_are_loaded(replica):
    labels = np.zeros(12, np.int64)
    scores = np.arange(1, 13, dtype=np.float32)
    np.save(replica.repo / "hand.labels.npy", labels)
    np.save(replica.repo / "hand.scores.npy", scores)
    s = replica()
    with gpusampler.Client(s.target, timeout=30) as c:
        [info] = [d for d in c.list_datasets() if d.name == "hand"]
        assert info.sha256 == hashlib.sha256(labels.tobytes() + scores.tobytes()).hexdigest()
        assert info.bytes == labels.nbytes + scores.nbytes
        # The stored scores are used: a weighted class needs no scores in the request.
        c.sample(dataset="hand", num_samples=4, seed=1, classes=weighted(0))


def test_hand_written_bad_scores_are_a_bad_file(replica):
    np.save(replica.repo / "bad.labels.npy", np.zeros(4, np.int64))
    np.save(replica.repo / "bad.scores.npy", np.array([1, np.inf, 0, 0], np.float32))
    s = replica()
    with gpusampler.Client(s.target, timeout=30) as c:
        assert "bad" not in [d.name for d in c.list_datasets() if d.devices]
        with pytest.raises(gpusampler.GpuSamplerError) as info:
            c.sample(dataset="bad", num_samples=2)
        assert "scores" in info.value.details


def test_upload_with_scores_round_trips_through_the_repository(replica):
    labels = (np.arange(40) % 3).astype(np.int32)
    scores = np.linspace(0.5, 2, 40, dtype=np.float32)
    first = replica()
    with gpusampler.Client(first.target, timeout=30) as c:
        up = c.create_dataset("up", labels, row_splits=np.array([0, 15, 40]), scores=scores)
    assert (replica.repo / "up.dataset").read_bytes()[:8] == b"GSDATA02"
    assert up.sha256 == hashlib.sha256(labels.tobytes() + scores.tobytes()).hexdigest()
    second = replica()
    with gpusampler.Client(second.target, timeout=30) as c:
        [info] = [d for d in c.list_datasets() if d.name == "up"]
        assert info.sha256 == up.sha256 and info.bytes == up.bytes
        c.sample(dataset="up", num_samples=4, seed=1, classes=weighted(0))
    # A dataset without scores keeps the version 01 container.
    with gpusampler.Client(first.target, timeout=30) as c:
        c.create_dataset("plain", labels)
    assert (replica.repo / "plain.dataset").read_bytes()[:8] == b"GSDATA01"
