"""gpusampler-cli: sample through .npy files, bench --json, health and info."""

from __future__ import annotations

import json
import struct
import subprocess

import numpy as np
import pytest

from test_errors import free_port


def run(cli_bin, server, *args, check=True):
    result = subprocess.run([str(cli_bin), "--target", server.target, *map(str, args)],
                            capture_output=True, text=True, timeout=120)
    if check and result.returncode != 0:
        pytest.fail(f"gpusampler-cli {' '.join(map(str, args))} exited {result.returncode}:\n"
                    f"{result.stdout}\n{result.stderr}")
    return result


def test_sample_round_trip_through_npy(cli_bin, server, client, tmp_path):
    rng = np.random.default_rng(8)
    labels = np.where(rng.random((4, 300)) < 0.05, 1, 0).astype(np.int32)
    labels[:, ::17] = -1
    features = rng.normal(size=(4, 300, 5)).astype(np.float16)
    np.save(tmp_path / "labels.npy", labels)
    np.save(tmp_path / "features.npy", features)
    out_dir = tmp_path / "out"
    run(cli_bin, server, "sample", "--labels", tmp_path / "labels.npy", "--features",
        tmp_path / "features.npy", "--num-samples", 24, "--positive-fraction", 0.25,
        "--fill", "negatives_only", "--seed", 31337, "--out-dir", out_dir)
    want = client.sample(labels, features, num_samples=24, positive_fraction=0.25,
                         fill="negatives_only", seed=31337)
    for name in ("indices", "labels", "features", "num_positive", "num_negative"):
        got = np.load(out_dir / f"{name}.npy")
        expected = getattr(want, name)
        assert got.dtype == expected.dtype, name
        np.testing.assert_array_equal(got, expected, err_msg=name)
    assert (want.num_positive <= 6).all()  # floor(24 * 0.25)


def test_sample_one_row_labels_only(cli_bin, server, client, tmp_path):
    labels = np.array([True, False] * 20)
    np.save(tmp_path / "labels.npy", labels)
    out_dir = tmp_path / "out"
    run(cli_bin, server, "sample", "--labels", tmp_path / "labels.npy", "-k", 6, "--seed", 5,
        "--out-dir", out_dir)
    assert not (out_dir / "features.npy").exists()
    got = np.load(out_dir / "indices.npy")
    assert got.shape == (6,)
    np.testing.assert_array_equal(got, client.sample(labels, num_samples=6, seed=5).indices)
    assert np.load(out_dir / "labels.npy").dtype == np.bool_


def npy_bytes(header: str, payload: bytes) -> bytes:
    text = header.encode() + b" " * ((64 - (10 + len(header) + 1) % 64) % 64) + b"\n"
    return b"\x93NUMPY\x01\x00" + struct.pack("<H", len(text)) + text + payload


@pytest.mark.parametrize(
    "content, message",
    [
        (npy_bytes("{'descr': '<i8', 'fortran_order': True, 'shape': (2, 2), }", bytes(32)), "Fortran"),
        (npy_bytes("{'descr': '>i8', 'fortran_order': False, 'shape': (4,), }", bytes(32)), "'>i8'"),
        (npy_bytes("{'descr': '<i8', 'fortran_order': False, 'shape': (5,), }", bytes(32)), "40"),
        (npy_bytes("{'descr': '<u4', 'fortran_order': False, 'shape': (8,), }", bytes(32)), "'<u4'"),
        (b"not an npy file at all", "magic"),
    ],
    ids=["fortran", "big_endian", "short_data", "uint32", "not_npy"],
)
def test_strict_npy_reader_rejects(cli_bin, server, tmp_path, content, message):
    (tmp_path / "bad.npy").write_bytes(content)
    result = run(cli_bin, server, "sample", "--labels", tmp_path / "bad.npy", "-k", 2,
                 "--out-dir", tmp_path / "out", check=False)
    assert result.returncode != 0
    assert message in result.stderr, result.stderr


def test_npy_writer_matches_numpy(cli_bin, server, tmp_path):
    # The hand-written header helper above must itself be right for the tests to mean
    # anything: numpy reads a well-formed file made the same way.
    (tmp_path / "ok.npy").write_bytes(
        npy_bytes("{'descr': '<i8', 'fortran_order': False, 'shape': (4,), }",
                  np.arange(4, dtype="<i8").tobytes()))
    np.testing.assert_array_equal(np.load(tmp_path / "ok.npy"), np.arange(4))
    run(cli_bin, server, "sample", "--labels", tmp_path / "ok.npy", "-k", 2, "--out-dir",
        tmp_path / "out")


BENCH_FIELDS = ("requests", "errors", "duration_s", "throughput_rps", "p50_ms", "p90_ms",
                "p99_ms", "max_ms")


@pytest.mark.parametrize("mode", [[], ["--stream", "--window", "3", "--labels-only"]],
                         ids=["unary", "stream"])
def test_bench_json(cli_bin, server, mode):
    result = run(cli_bin, server, "bench", "--json", "--requests", 60, "--concurrency", 3,
                 "--rows", 2, "--n", 256, "--k", 16, "--dim", 4, *mode)
    report = json.loads(result.stdout)
    for name in BENCH_FIELDS:
        assert name in report, name
    assert report["requests"] == 60 and report["errors"] == {}
    assert report["throughput_rps"] > 0 and report["duration_s"] > 0
    assert 0 < report["p50_ms"] <= report["p90_ms"] <= report["p99_ms"] <= report["max_ms"]


def test_bench_counts_errors_by_code(cli_bin, server):
    result = run(cli_bin, server, "--max-attempts", 1, "bench", "--json", "--requests", 10,
                 "--concurrency", 2, "--k", 0, check=False)
    assert result.returncode == 1
    report = json.loads(result.stdout)
    assert report["errors"] == {"INVALID_ARGUMENT": 10}


def test_bench_duration_and_rate(cli_bin, server):
    result = run(cli_bin, server, "bench", "--json", "--duration", 1.0, "--rate", 40,
                 "--concurrency", 2, "--rows", 1, "--n", 64, "--k", 8, "--labels-only")
    report = json.loads(result.stdout)
    assert 30 <= report["requests"] <= 41  # paced at 40/s for one second
    assert 0.9 <= report["duration_s"] < 3


def test_health_and_info(cli_bin, server):
    result = run(cli_bin, server, "health")
    assert result.stdout.strip() == "SERVING"
    dead = subprocess.run([str(cli_bin), "--target", f"127.0.0.1:{free_port()}", "--timeout", "5",
                           "--max-attempts", "1", "health"], capture_output=True, text=True,
                          timeout=60)
    assert dead.returncode != 0 and "UNAVAILABLE" in dead.stderr
    info = json.loads(run(cli_bin, server, "info", "--json").stdout)
    assert info["backend"] == "cpu" and info["limits"]["max_num_samples"] != "0"
    text = run(cli_bin, server, "info").stdout
    assert "backend   cpu" in text
