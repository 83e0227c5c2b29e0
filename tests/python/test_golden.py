"""SPEC section 1 golden samples, reproduced bit for bit through the Python client, on the
CPU (the session server) and on the cuda-sim device (the CUDA pipeline run on the host)."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import torch

from conftest import REPO, start_server, stop_server

CASES = [json.loads(line) for line in (REPO / "tests/data/golden_samples.jsonl").read_text().splitlines() if line.strip()]
FILL = {"FILL_POLICY_BOTH": "both", "FILL_POLICY_NEGATIVES_ONLY": "negatives_only", "FILL_POLICY_NONE": "none"}


@pytest.fixture(scope="module")
def sim_server(tmp_path_factory):
    s = start_server(tmp_path_factory.mktemp("cuda-sim-server"), device="cuda-sim")
    yield s
    rc = stop_server(s)
    assert rc == 0, f"gpusampler-server --device cuda-sim exited {rc} on SIGTERM:\n{s.log_text()}"


@pytest.fixture(scope="module")
def sim_client(sim_server):
    import gpusampler

    with gpusampler.Client(sim_server.target, timeout=30) as c:
        info = c.info()
        assert info.backend == "cuda-sim" and [d.id for d in info.devices] == ["cuda-sim"], info
        yield c


@pytest.fixture(params=["cpu", "cuda-sim"])
def golden_client(request):
    """The session's CPU server, then a cuda-sim server: the same cases through both."""
    return request.getfixturevalue("client" if request.param == "cpu" else "sim_client")


def spec_args(case):
    s = case["spec"]
    return dict(
        num_samples=s["num_samples"],
        positive_fraction=s["positive_fraction"],
        positive_label=s["positive_label"],
        negative_label=s["negative_label"],
        fill=FILL[s["fill_policy"]],
        seed=case["seed"],
    )


def expected_labels(labels: np.ndarray, indices: np.ndarray) -> np.ndarray:
    out = np.full(indices.shape, -1, dtype=labels.dtype)
    for r in range(indices.shape[0]):
        valid = indices[r] >= 0
        out[r, valid] = labels[r, indices[r, valid]]
    return out


@pytest.mark.parametrize("case", CASES, ids=[c["name"] for c in CASES])
def test_golden_numpy(golden_client, case):
    labels = np.array(case["labels"], dtype=np.int64)
    out = golden_client.sample(labels, **spec_args(case))
    assert isinstance(out.indices, np.ndarray)
    assert out.indices.dtype == np.int64 and out.indices.shape == labels.shape[:1] + (case["spec"]["num_samples"],)
    np.testing.assert_array_equal(out.indices, np.array(case["indices"], dtype=np.int64))
    np.testing.assert_array_equal(out.num_positive, np.array(case["num_positive"], dtype=np.int32))
    np.testing.assert_array_equal(out.num_negative, np.array(case["num_negative"], dtype=np.int32))
    assert out.num_positive.dtype == np.int32 and out.num_negative.dtype == np.int32
    np.testing.assert_array_equal(out.labels, expected_labels(labels, out.indices))
    assert out.seed == case["seed"]
    assert out.features is None


@pytest.mark.parametrize("case", CASES[:8], ids=[c["name"] for c in CASES[:8]])
def test_golden_torch_and_one_row(golden_client, case):
    labels = torch.tensor(case["labels"], dtype=torch.int64)
    out = golden_client.sample(labels, **spec_args(case))
    assert isinstance(out.indices, torch.Tensor) and out.indices.dtype == torch.int64
    assert out.indices.tolist() == case["indices"]
    assert out.num_positive.tolist() == case["num_positive"]
    if labels.shape[0] == 1:
        # A 1-D [N] request is the same row without the batch dimension.
        one = golden_client.sample(labels[0], **spec_args(case))
        assert list(one.indices.shape) == [case["spec"]["num_samples"]]
        assert one.indices.tolist() == case["indices"][0]


def test_ragged_rows_match_dense_rows(golden_client):
    case = next(c for c in CASES if c["name"] == "batch_of_4_rows")
    flat = np.concatenate([np.array(r, dtype=np.int64) for r in case["labels"]])
    splits = np.cumsum([0] + [len(r) for r in case["labels"]])
    out = golden_client.sample(flat, row_splits=splits, **spec_args(case))
    np.testing.assert_array_equal(out.indices, np.array(case["indices"]))


def test_server_drawn_seed_replays(golden_client):
    rng = np.random.default_rng(3)
    labels = (rng.random((3, 200)) < 0.1).astype(np.int64)
    first = golden_client.sample(labels, num_samples=32)
    again = golden_client.sample(labels, num_samples=32, seed=first.seed)
    np.testing.assert_array_equal(first.indices, again.indices)
    other = golden_client.sample(labels, num_samples=32, seed=first.seed ^ 1)
    assert not np.array_equal(first.indices, other.indices)
