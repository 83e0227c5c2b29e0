"""Fixed-length rows in the repository (docs/datasets.md, "Row shapes"): a hand-written
NAME.labels.npy of shape [B, N] (with NAME.features.npy [B, N, ...] and NAME.scores.npy
[B, N]) is B rows of N elements, held as a stride. Sampling it answers byte for byte what
the same rows uploaded with row_splits answer: all rows, named rows, classes that select by
the stored scores, a ROWS epoch step, and ELEMENTS on a one-row [1, N] file. On the CPU and
on cuda-sim.
"""

from __future__ import annotations

import numpy as np
import pytest

from conftest import start_server, stop_server

import gpusampler

B, N, DIM = 7, 40, 3


def same(a, b) -> None:
    for field in ("indices", "labels", "num_positive", "num_negative", "features"):
        x, y = getattr(a, field), getattr(b, field)
        if x is None or y is None:
            assert x is None and y is None, field
            continue
        assert x.dtype == y.dtype and x.shape == y.shape, field
        np.testing.assert_array_equal(x, y, err_msg=field)
    assert a.seed == b.seed and a.dataset_sha256 == b.dataset_sha256
    assert a.indices.size == 0 or (a.indices >= 0).any()  # not an answer of padding only


@pytest.fixture(params=["cpu", "cuda-sim"])
def repo_client(request, tmp_path):
    rng = np.random.default_rng(30)
    labels = rng.integers(-1, 3, size=(B, N)).astype(np.int16)
    features = rng.standard_normal((B, N, DIM)).astype(np.float32)
    scores = rng.random((B, N)).astype(np.float32)
    one = rng.integers(0, 2, size=(1, 500)).astype(np.int8)
    repo = tmp_path / "repo"
    repo.mkdir()
    np.save(repo / "fx.features.npy", features)
    np.save(repo / "fx.scores.npy", scores)
    np.save(repo / "fx.labels.npy", labels)  # last: it makes the dataset exist
    np.save(repo / "one.labels.npy", one)
    s = start_server(tmp_path / "server", device=request.param,
                     extra=["--dataset-dir", str(repo), "--dataset-poll-seconds", "0"])
    with gpusampler.Client(s.target, timeout=30) as c:
        assert c.info().backend == request.param
        # The same rows with row_splits, uploaded (committed to the repository too).
        c.create_dataset("rs", labels.reshape(-1), features.reshape(B * N, DIM),
                         row_splits=np.arange(0, B * N + 1, N, dtype=np.int64),
                         scores=scores.reshape(-1))
        c.create_dataset("one-rs", one.reshape(-1), row_splits=np.array([0, one.size]))
        yield c, labels
    assert stop_server(s) == 0, s.log_text()


def test_a_2d_labels_file_is_b_rows_of_n(repo_client):
    c, labels = repo_client
    info = {d.name: d for d in c.list_datasets()}
    fx, rs = info["fx"], info["rs"]
    assert (fx.num_rows, fx.num_elements, fx.label_dtype) == (B, B * N, "DTYPE_INT16")
    assert tuple(fx.feature_shape) == (DIM,)
    # Labels, features and scores: no row_splits held (rs also holds B + 1 int64 offsets).
    assert fx.bytes == B * N * (2 + 4 * DIM + 4)
    assert rs.bytes == fx.bytes + (B + 1) * 8
    assert fx.sha256 == rs.sha256  # the same label, feature and score bytes


@pytest.mark.parametrize("rows", [None, [6, 0, 6, 3], [2], []])
def test_sampling_equals_the_same_rows_with_row_splits(repo_client, rows):
    c, labels = repo_client
    kw = dict(num_samples=9, seed=17, positive_fraction=0.3, return_features=True)
    if rows is not None:
        kw["rows"] = np.array(rows, np.int64)
    a = c.sample(dataset="fx", **kw)
    b = c.sample(dataset="rs", **kw)
    same(a, b)
    assert a.indices.shape == (B if rows is None else len(rows), 9)
    # The indices are element positions inside each row: their labels are the row's.
    for r, row in enumerate(range(B) if rows is None else rows):
        for i, label in zip(a.indices[r], a.labels[r]):
            if i >= 0:
                assert labels[row, i] == label


def test_stored_scores_are_laid_out_like_the_labels(repo_client):
    c, _ = repo_client
    classes = [gpusampler.Class(1, count=3, selection="hardest"),
               gpusampler.Class((-1, 0), count=4, selection="weighted")]
    for rows in (None, np.array([5, 1], np.int64)):
        kw = dict(num_samples=7, seed=3, classes=classes)
        if rows is not None:
            kw["rows"] = rows
        same(c.sample(dataset="fx", **kw), c.sample(dataset="rs", **kw))


def test_epochs_equal_the_same_rows_with_row_splits(repo_client):
    c, _ = repo_client
    for step in range(2):
        e = dict(mode="rows", world_size=3, rank=2, step=step, rows_per_step=2, shuffle_seed=4)
        a = c.sample(dataset="fx", num_samples=5, seed=2, epoch=e)
        same(a, c.sample(dataset="rs", num_samples=5, seed=2, epoch=e))
        assert a.epoch_steps == 2  # ceil(ceil(7 / 3) / 2)
    # ELEMENTS needs one row: a [1, N] file is one, answered [1, K] as with row_splits [0, N].
    e = dict(mode="elements", world_size=2, rank=1, step=3, shuffle_seed=9)
    a = c.sample(dataset="one", num_samples=6, seed=5, epoch=e)
    same(a, c.sample(dataset="one-rs", num_samples=6, seed=5, epoch=e))
    assert a.indices.shape == (1, 6)
    with pytest.raises(gpusampler.GpuSamplerError) as err:
        c.sample(dataset="fx", num_samples=4, epoch=e)
    assert "has 7 rows" in err.value.details
