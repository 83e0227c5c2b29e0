"""gpusampler-cli sample with --class / --fill-order / --scores: the request the Python
client sends for the same classes, and usage errors (exit 2) for a malformed class."""

from __future__ import annotations

import subprocess

import numpy as np
import pytest

import gpusampler


def run(cli_bin, server, *args):
    return subprocess.run([str(cli_bin), "--target", server.target, *map(str, args)],
                          capture_output=True, text=True, timeout=120)


def test_sample_with_classes_matches_the_python_client(cli_bin, server, client, tmp_path):
    rng = np.random.default_rng(4)
    labels = rng.integers(-1, 6, size=(3, 200)).astype(np.int64)
    scores = rng.random((3, 200)).astype(np.float32)
    np.save(tmp_path / "labels.npy", labels)
    np.save(tmp_path / "scores.npy", scores)
    out_dir = tmp_path / "out"
    result = run(cli_bin, server, "sample", "--labels", tmp_path / "labels.npy", "-k", 20,
                 "--seed", 9, "--out-dir", out_dir,
                 "--class", "labels=1:2/5,fraction=0.25",
                 "--class", "labels=0,rest,selection=mixed,hard_fraction=0.5",
                 "--class", "labels=3:4,count=3,selection=weighted",
                 "--fill-order", "1,0", "--scores", tmp_path / "scores.npy")
    assert result.returncode == 0, result.stderr
    want = client.sample(labels, num_samples=20, seed=9, scores=scores, fill_order=[1, 0],
                         classes=[gpusampler.Class([(1, 2), 5], fraction=0.25),
                                  gpusampler.Class(0, rest=True, selection="mixed",
                                                   hard_fraction=0.5),
                                  gpusampler.Class((3, 4), count=3, selection="weighted")])
    for name in ("indices", "labels", "num_positive", "num_negative", "num_per_class"):
        got = np.load(out_dir / f"{name}.npy")
        expected = getattr(want, name)
        assert got.dtype == expected.dtype, name
        np.testing.assert_array_equal(got, expected, err_msg=name)


@pytest.mark.parametrize("args, words", [
    (["--class", "labels=1,rest", "--positive-fraction", 0.25], "--class replaces"),
    (["--class", "labels=1"], "exactly one of count=N, fraction=F and rest"),
    (["--class", "labels=1,rest,selection=random"], "selection: 'random'"),
    (["--fill-order", "1,0"], "--fill-order needs --class"),
    (["--class", "labels=1,rest", "--fill-order", "1,x"], "'x' is not a class index"),
])
def test_class_usage_errors(cli_bin, server, tmp_path, args, words):
    np.save(tmp_path / "labels.npy", np.zeros(10, np.int64))
    result = run(cli_bin, server, "sample", "--labels", tmp_path / "labels.npy", "-k", 2,
                 "--out-dir", tmp_path / "out", *args)
    assert result.returncode == 2, (result.returncode, result.stderr)
    assert words in result.stderr


def test_dataset_create_with_scores(cli_bin, server, client, tmp_path):
    import hashlib

    labels = np.arange(30, dtype=np.int64) % 2
    scores = np.linspace(1, 2, 30, dtype=np.float32)
    np.save(tmp_path / "labels.npy", labels)
    np.save(tmp_path / "scores.npy", scores)
    result = run(cli_bin, server, "dataset", "create", "cli-scores", "--labels",
                 tmp_path / "labels.npy", "--scores", tmp_path / "scores.npy", "--replace")
    assert result.returncode == 0, result.stderr
    try:
        [info] = [d for d in client.list_datasets() if d.name == "cli-scores"]
        assert info.sha256 == hashlib.sha256(labels.tobytes() + scores.tobytes()).hexdigest()
        assert info.bytes == labels.nbytes + scores.nbytes
    finally:
        client.delete_dataset("cli-scores")
