"""gpusampler-cli dataset create|list|delete and sample --dataset, against the suite's
server: the CLI's answer equals the inline one, and its errors exit 1 naming the problem."""

from __future__ import annotations

import json

import numpy as np

from test_cli import run


def test_dataset_create_list_sample_delete(cli_bin, server, client, tmp_path):
    rng = np.random.default_rng(21)
    labels = rng.integers(-1, 2, size=3000).astype(np.int64)
    features = rng.normal(size=(3000, 3)).astype(np.float32)
    splits = np.array([0, 1000, 1800, 3000], dtype=np.int64)
    np.save(tmp_path / "labels.npy", labels)
    np.save(tmp_path / "features.npy", features)
    np.save(tmp_path / "splits.npy", splits)
    np.save(tmp_path / "rows.npy", np.array([2, 0], dtype=np.int64))

    out = run(cli_bin, server, "dataset", "create", "cli-ds", "--labels", tmp_path / "labels.npy",
              "--features", tmp_path / "features.npy", "--row-splits", tmp_path / "splits.npy",
              "--replace")
    assert "cli-ds" in out.stdout and "rows 3" in out.stdout, out.stdout
    listed = [json.loads(line) for line in
              run(cli_bin, server, "dataset", "list", "--json").stdout.splitlines()]
    mine = [d for d in listed if d["name"] == "cli-ds"]
    assert mine and mine[0]["num_elements"] == 3000 and mine[0]["feature_shape"] == [3]

    run(cli_bin, server, "sample", "--dataset", "cli-ds", "--rows", tmp_path / "rows.npy",
        "--return-features", "--num-samples", 50, "--seed", 77, "--out-dir", tmp_path / "out")
    got_idx = np.load(tmp_path / "out" / "indices.npy")
    got_feat = np.load(tmp_path / "out" / "features.npy")
    sel = np.concatenate([labels[1800:3000], labels[0:1000]])
    sel_f = np.concatenate([features[1800:3000], features[0:1000]])
    want = client.sample(sel, sel_f, row_splits=[0, 1200, 2200], num_samples=50, seed=77)
    np.testing.assert_array_equal(got_idx, want.indices)
    np.testing.assert_array_equal(got_feat, want.features)

    run(cli_bin, server, "dataset", "delete", "cli-ds")
    gone = run(cli_bin, server, "dataset", "delete", "cli-ds", check=False)
    assert gone.returncode == 1 and "NOT_FOUND" in gone.stderr + gone.stdout


def test_sample_needs_exactly_one_source(cli_bin, server, tmp_path):
    both = run(cli_bin, server, "sample", "--dataset", "x", "--labels", tmp_path / "l.npy",
               "--num-samples", 4, "--out-dir", tmp_path, check=False)
    assert both.returncode == 2 and "exactly one of --labels and --dataset" in both.stderr
    rows_inline = run(cli_bin, server, "sample", "--labels", tmp_path / "l.npy", "--rows",
                      tmp_path / "r.npy", "--num-samples", 4, "--out-dir", tmp_path, check=False)
    assert rows_inline.returncode == 2 and "need --dataset" in rows_inline.stderr


def test_version(cli_bin):
    import subprocess

    out = subprocess.run([str(cli_bin), "--version"], capture_output=True, text=True, timeout=30)
    assert out.returncode == 0, out.stderr
    assert out.stdout.startswith("gpusampler-cli 0.1.0 ("), out.stdout


def test_bench_dataset_prints_throughput_json(cli_bin, server, client):
    labels = (np.random.default_rng(5).random(10000) < 0.02).astype(np.int64)
    splits = np.arange(0, 10001, 1000, dtype=np.int64)
    client.create_dataset("bench-ds", labels, row_splits=splits, replace=True)
    drawn = json.loads(run(cli_bin, server, "bench", "--dataset", "bench-ds", "--rows", 3,
                           "-n", 30, "-c", 2, "--k", 64, "--json", "-q").stdout)
    assert drawn["ok"] == 30 and drawn["errors"] == {} and drawn["throughput_rps"] > 0
    assert drawn["dataset"] == "bench-ds" and drawn["rows"] == 3 and drawn["dataset_rows_drawn"]
    assert drawn["rows_per_s"] > 0 and drawn["p50_ms"] is not None
    whole = json.loads(run(cli_bin, server, "bench", "--dataset", "bench-ds", "-n", 10, "--stream",
                           "--return-features", "--json", "-q", check=False).stdout)
    # No features stored: return_features is INVALID_ARGUMENT on every request.
    assert whole["ok"] == 0 and "INVALID_ARGUMENT" in whole["errors"]
    whole = json.loads(run(cli_bin, server, "bench", "--dataset", "bench-ds", "-n", 10, "--stream",
                           "--json", "-q").stdout)
    assert whole["ok"] == 10 and whole["rows"] == 10 and not whole["dataset_rows_drawn"]
    missing = run(cli_bin, server, "bench", "--dataset", "bench-nope", "-n", 1, check=False)
    assert missing.returncode == 1 and "NOT_FOUND" in missing.stderr
    usage = run(cli_bin, server, "bench", "--return-features", "-n", 1, check=False)
    assert usage.returncode == 2 and "needs --dataset" in usage.stderr
    client.delete_dataset("bench-ds")
