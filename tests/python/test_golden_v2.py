"""SPEC section 7 golden samples (classes, fill orders, scores, every selection), reproduced
bit for bit through the Python client on the CPU server and on a cuda-sim server, inline and
through a resident dataset (stored scores, and scores sent with named rows, which win)."""

from __future__ import annotations

import json

import numpy as np
import pytest

from conftest import REPO, start_server, stop_server

CASES = [json.loads(line) for line in
         (REPO / "tests/data/golden_v2.jsonl").read_text().splitlines() if line.strip()]
SELECTION = {"SELECTION_UNSPECIFIED": "uniform", "SELECTION_UNIFORM": "uniform",
             "SELECTION_WEIGHTED": "weighted", "SELECTION_HARDEST": "hardest",
             "SELECTION_MIXED": "mixed"}


@pytest.fixture(scope="module")
def sim_server(tmp_path_factory):
    s = start_server(tmp_path_factory.mktemp("cuda-sim-server-v2"), device="cuda-sim")
    yield s
    rc = stop_server(s)
    assert rc == 0, f"gpusampler-server --device cuda-sim exited {rc} on SIGTERM:\n{s.log_text()}"


@pytest.fixture(scope="module")
def sim_client(sim_server):
    import gpusampler

    with gpusampler.Client(sim_server.target, timeout=30) as c:
        assert c.info().backend == "cuda-sim"
        yield c


@pytest.fixture(params=["cpu", "cuda-sim"])
def golden_client(request):
    return request.getfixturevalue("client" if request.param == "cpu" else "sim_client")


def classes_of(case):
    import gpusampler

    out = []
    for c in case["classes"]:
        share = {k: c[k] for k in ("count", "fraction", "rest") if k in c}
        extra = {"hard_fraction": c["hard_fraction"]} if "hard_fraction" in c else {}
        out.append(gpusampler.Class([(r["lo"], r["hi"]) for r in c["labels"]], **share,
                                    selection=SELECTION[c.get("selection", "SELECTION_UNIFORM")],
                                    **extra))
    return out


def flat(case, key, dtype):
    rows = case[key]
    values = [[np.nan if x is None else x for x in r] for r in rows]
    return np.concatenate([np.array(r, dtype=dtype).reshape(-1) for r in values]), \
        np.cumsum([0] + [len(r) for r in rows]).astype(np.int64)


def inline_args(case):
    """labels (and scores) as [B, N] when the rows are of one length, else ragged."""
    labels, splits = flat(case, "labels", np.int64)
    args = dict(num_samples=case["num_samples"], seed=case["seed"], classes=classes_of(case),
                fill_order=case["fill_order"])
    scores = flat(case, "scores", np.float32)[0] if "scores" in case else None
    lengths = set(len(r) for r in case["labels"])
    if len(lengths) == 1:
        b = len(case["labels"])
        args["labels"] = labels.reshape(b, -1)
        if scores is not None:
            args["scores"] = scores.reshape(b, -1)
    else:
        args.update(labels=labels, row_splits=splits)
        if scores is not None:
            args["scores"] = scores
    return args


def expected_counts(case):
    m = np.array(case["num_per_class"], dtype=np.int32)
    b, c = m.shape
    if c == 2:
        return m[:, 0], m[:, 1]
    if c == 1:
        return m[:, 0], np.zeros(b, np.int32)
    return np.zeros(b, np.int32), np.zeros(b, np.int32)


def expected_labels(case, indices):
    out = np.full(indices.shape, -1, dtype=np.int64)
    for r, row in enumerate(case["labels"]):
        valid = indices[r] >= 0
        out[r, valid] = np.array(row, dtype=np.int64)[indices[r, valid]]
    return out


def check(case, out, order=None):
    """``out`` answers ``case`` (its rows in ``order``, default as written)."""
    order = list(range(len(case["labels"]))) if order is None else order
    want_idx = np.array(case["indices"], dtype=np.int64)[order]
    np.testing.assert_array_equal(np.asarray(out.indices).reshape(want_idx.shape), want_idx)
    per_class = np.array(case["num_per_class"], dtype=np.int32)[order]
    assert out.num_per_class is not None and out.num_per_class.dtype == np.int32
    np.testing.assert_array_equal(np.asarray(out.num_per_class).reshape(per_class.shape),
                                  per_class)
    pos, neg = expected_counts(case)
    np.testing.assert_array_equal(out.num_positive, pos[order])
    np.testing.assert_array_equal(out.num_negative, neg[order])
    np.testing.assert_array_equal(np.asarray(out.labels).reshape(want_idx.shape),
                                  expected_labels(case, np.array(case["indices"]))[order])


@pytest.mark.parametrize("case", CASES, ids=[c["name"] for c in CASES])
def test_golden_v2_inline(golden_client, case):
    out = golden_client.sample(**inline_args(case))
    check(case, out)
    assert out.seed == case["seed"]


@pytest.mark.parametrize("case", CASES, ids=[c["name"] for c in CASES])
def test_golden_v2_dataset(golden_client, case):
    """The dataset request answers exactly what the inline request of the same rows does:
    with the stored scores, and with scores sent for named rows (which win over stored
    ones, here all 1.0)."""
    labels, splits = flat(case, "labels", np.int64)
    scores = flat(case, "scores", np.float32)[0] if "scores" in case else None
    name = f"golden-v2-{case['name']}"
    info = golden_client.create_dataset(name, labels, row_splits=splits, scores=scores,
                                        replace=True)
    spec = dict(num_samples=case["num_samples"], seed=case["seed"], classes=classes_of(case),
                fill_order=case["fill_order"])
    try:
        inline = golden_client.sample(**inline_args(case))
        stored = golden_client.sample(dataset=name, **spec)
        assert stored.dataset_sha256 == info.sha256
        for field in ("indices", "labels", "num_positive", "num_negative", "num_per_class"):
            got, want = getattr(stored, field), getattr(inline, field)
            assert (got is None) == (want is None), field
            if got is not None:
                np.testing.assert_array_equal(np.asarray(got).reshape(-1),
                                              np.asarray(want).reshape(-1))
        check(case, stored)
        if scores is None:
            return
        # Scores sent with the request win; rows named in reverse order. Row r of a request
        # keys its own random numbers (r is the row's index in the request), so the answer is
        # the inline request of the reversed rows with those scores, not the golden rows
        # reordered.
        golden_client.create_dataset(name, labels, row_splits=splits,
                                     scores=np.ones_like(scores), replace=True)
        order = list(range(len(case["labels"])))[::-1]
        reversed_case = dict(case, labels=[case["labels"][r] for r in order],
                             scores=[case["scores"][r] for r in order])
        sent = np.concatenate([scores[splits[r]:splits[r + 1]] for r in order])
        out = golden_client.sample(dataset=name, rows=np.array(order), scores=sent, **spec)
        want = golden_client.sample(**inline_args(reversed_case))
        for field in ("indices", "labels", "num_positive", "num_negative", "num_per_class"):
            np.testing.assert_array_equal(np.asarray(getattr(out, field)).reshape(-1),
                                          np.asarray(getattr(want, field)).reshape(-1), field)
        # And the sent scores did win: with the stored all-1.0 scores the weighted answer differs.
        ones = golden_client.sample(dataset=name, rows=np.array(order), **spec)
        if case["name"].startswith("weighted"):
            assert not np.array_equal(np.asarray(ones.indices), np.asarray(out.indices))
    finally:
        golden_client.delete_dataset(name)


def test_dataset_sha256_covers_scores(client):
    """sha256 covers labels, features and scores in that order, and bytes count the scores."""
    import hashlib

    labels = np.arange(10, dtype=np.int64) % 2
    scores = np.linspace(0, 1, 10, dtype=np.float32)
    plain = client.create_dataset("sha-v2-plain", labels, replace=True)
    with_scores = client.create_dataset("sha-v2-scores", labels, scores=scores, replace=True)
    try:
        assert plain.sha256 == hashlib.sha256(labels.tobytes()).hexdigest()
        assert with_scores.sha256 == hashlib.sha256(labels.tobytes() + scores.tobytes()).hexdigest()
        assert with_scores.bytes == plain.bytes + scores.nbytes
    finally:
        client.delete_dataset("sha-v2-plain")
        client.delete_dataset("sha-v2-scores")
