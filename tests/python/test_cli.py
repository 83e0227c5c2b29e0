"""gpusampler-cli: sample through .npy files, bench (--json, progress, early abort), health
with grpc-health-probe's exit codes, info, and usage errors (exit 2)."""

from __future__ import annotations

import json
import os
import re
import signal
import struct
import subprocess
from concurrent import futures

import grpc
import numpy as np
import pytest

from conftest import start_server, stop_server
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
    # The first message of each code, and no latencies where nothing succeeded.
    assert "spec.num_samples = 0" in report["error_messages"]["INVALID_ARGUMENT"]
    assert report["p50_ms"] is None and report["max_ms"] is None and report["ok"] == 0


def test_bench_duration_and_rate(cli_bin, server):
    result = run(cli_bin, server, "bench", "--json", "--duration", 1.0, "--rate", 40,
                 "--concurrency", 2, "--rows", 1, "--n", 64, "--k", 8, "--labels-only")
    report = json.loads(result.stdout)
    assert 30 <= report["requests"] <= 41  # paced at 40/s for one second
    assert 0.9 <= report["duration_s"] < 3


def test_health_and_info(cli_bin, server):
    result = run(cli_bin, server, "health")
    assert result.stdout.strip() == "SERVING"
    info = json.loads(run(cli_bin, server, "info", "--json").stdout)
    assert info["backend"] == "cpu"
    # Numbers are JSON numbers (proto3's JSON mapping would write int64 as strings).
    limits = info["limits"]
    assert all(type(limits[k]) is int for k in (
        "max_message_bytes", "max_rows", "max_elements", "max_row_elements", "max_num_samples",
        "max_batch_rows")), limits
    assert limits["max_num_samples"] > 0
    assert type(info["devices"][0]["memory_bytes"]) is int and info["devices"][0]["id"] == "cpu"
    text = run(cli_bin, server, "info").stdout
    assert "backend   cpu" in text


def cli(cli_bin, target, *args, timeout=60):
    return subprocess.run([str(cli_bin), "--target", target, *map(str, args)],
                          capture_output=True, text=True, timeout=timeout)


class _NotServing(grpc.GenericRpcHandler):
    def service(self, details):
        if details.method != "/grpc.health.v1.Health/Check":
            return None
        return grpc.unary_unary_rpc_method_handler(lambda request, context: b"\x08\x02")


def test_health_exit_codes_follow_grpc_health_probe(cli_bin, server, tmp_path):
    # 2: connection failure (nothing listens).
    dead = cli(cli_bin, f"127.0.0.1:{free_port()}", "--timeout", 5, "--max-attempts", 1, "health")
    assert dead.returncode == 2, dead
    assert "UNAVAILABLE" in dead.stderr
    # 3: the health RPC itself fails (unknown service: NOT_FOUND).
    rpc = cli(cli_bin, server.target, "health", "--service", "no.such.Service")
    assert rpc.returncode == 3, rpc
    assert "NOT_FOUND" in rpc.stderr
    # 4: reachable but NOT_SERVING.
    not_serving = grpc.server(futures.ThreadPoolExecutor(max_workers=1), handlers=[_NotServing()])
    port = not_serving.add_insecure_port("127.0.0.1:0")
    not_serving.start()
    try:
        result = cli(cli_bin, f"127.0.0.1:{port}", "health")
        assert result.returncode == 4, result
        assert result.stdout.strip() == "NOT_SERVING"
    finally:
        not_serving.stop(None)
    assert cli(cli_bin, server.target, "health").returncode == 0


def test_health_of_a_frozen_server_is_a_connection_failure(cli_bin, tmp_path):
    frozen = start_server(tmp_path / "frozen", ["--shutdown-grace-seconds", "1"])
    os.kill(frozen.process.pid, signal.SIGSTOP)
    try:
        result = cli(cli_bin, frozen.target, "--timeout", 1, "health")
        assert result.returncode == 2, result
        assert "DEADLINE_EXCEEDED" in result.stderr
    finally:
        os.kill(frozen.process.pid, signal.SIGCONT)
        assert stop_server(frozen) == 0


@pytest.mark.parametrize(
    "args, message",
    [
        (["frobnicate"], "unknown subcommand 'frobnicate'"),
        (["--timeout", "3", "frobnicate", "--x"], "unknown subcommand 'frobnicate'"),
        ([], "subcommand"),
        (["health", "--no-such-flag"], "--no-such-flag"),
        (["--timeout", "soon", "health"], "--timeout"),
        (["--max-attempts", "9", "health"], "--max-attempts"),
        (["bench", "--window", "0"], "--window"),
        (["sample", "--labels", "x.npy", "--out-dir", "o", "--num-samples", "2.5"], "--num-samples"),
        (["sample", "--labels", "x.npy", "--out-dir", "o", "-k", "4", "--seed", "-1"], "--seed"),
    ],
    ids=["unknown", "unknown_after_options", "none", "flag", "timeout", "attempts", "window",
         "k_float", "seed_negative"],
)
def test_usage_errors_exit_2_with_the_right_message(cli_bin, server, args, message):
    result = cli(cli_bin, server.target, *args)
    assert result.returncode == 2, result
    assert message in result.stderr, result.stderr
    assert "A subcommand is required" not in result.stderr or not args


PROGRESS = re.compile(r"^\[\s*\d+\.\d s\] \d+\.\d req/s, p50 (\d+\.\d+|n/a) ms, ok \d+, errors \d+$")


def test_bench_prints_progress_every_second_on_stderr(cli_bin, server):
    result = run(cli_bin, server, "bench", "--json", "--duration", 2.5, "--concurrency", 1,
                 "--rows", 1, "--n", 64, "--k", 8, "--labels-only")
    lines = [l for l in result.stderr.splitlines() if l.strip()]
    assert len(lines) >= 2, result.stderr
    assert all(PROGRESS.match(l) for l in lines), lines
    assert json.loads(result.stdout)["aborted"] is False


def test_bench_aborts_early_when_every_request_fails(cli_bin):
    target = f"127.0.0.1:{free_port()}"
    result = cli(cli_bin, target, "--max-attempts", 1, "bench", "--duration", 60,
                 "--abort-after", 1, "--concurrency", 2, timeout=50)
    assert result.returncode == 1
    assert "aborting: every request has failed for 1 s" in result.stderr
    assert re.search(r"^latency ms   p50 n/a  p90 n/a  p99 n/a  max n/a  mean n/a$", result.stdout,
                     re.M), result.stdout
    assert re.search(r"^  first UNAVAILABLE: .+", result.stdout, re.M), result.stdout
    assert "aborted      every request failed for 1 s" in result.stdout
    report = json.loads(cli(cli_bin, target, "--max-attempts", 1, "bench", "--json", "--quiet",
                            "--duration", 60, "--abort-after", 1, timeout=50).stdout)
    assert report["aborted"] is True and report["ok"] == 0 and report["p99_ms"] is None
    assert report["duration_s"] < 60
    assert report["error_messages"]["UNAVAILABLE"]
