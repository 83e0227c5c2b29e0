"""Resident datasets through the Python client: upload in chunks, sample by name with the
same bytes as inline, rows in any order, features, list/delete, and the errors."""

import hashlib

import numpy as np
import pytest
import torch

import gpusampler


def ragged(seed: int, rows: int = 6, dim: int = 4):
    rng = np.random.default_rng(seed)
    lengths = rng.integers(0, 900, size=rows)
    splits = np.concatenate([[0], np.cumsum(lengths)]).astype(np.int64)
    labels = rng.integers(-1, 2, size=int(splits[-1])).astype(np.int64)
    features = rng.standard_normal((int(splits[-1]), dim)).astype(np.float32)
    return labels, features, splits


def test_upload_in_chunks_and_sample_equals_inline(client):
    labels, features, splits = ragged(1)
    info = client.create_dataset("py-ragged", labels, features, splits, replace=True,
                                 chunk_bytes=4096)
    assert info.num_rows == len(splits) - 1
    assert info.num_elements == len(labels)
    assert info.feature_shape == (4,)
    assert info.label_dtype == "DTYPE_INT64" and info.feature_dtype == "DTYPE_FLOAT32"
    # sha256 over the label bytes, then the feature bytes (checked with hashlib).
    assert info.sha256 == hashlib.sha256(labels.tobytes() + features.tobytes()).hexdigest()
    assert "py-ragged" in [d.name for d in client.list_datasets()]

    rows = [4, 0, 4, 2]
    got = client.sample(dataset="py-ragged", rows=rows, num_samples=37, return_features=True,
                        seed=123)
    sel_labels = np.concatenate([labels[splits[r]:splits[r + 1]] for r in rows])
    sel_features = np.concatenate([features[splits[r]:splits[r + 1]] for r in rows])
    sel_splits = np.concatenate([[0], np.cumsum([splits[r + 1] - splits[r] for r in rows])])
    want = client.sample(sel_labels, sel_features, row_splits=sel_splits, num_samples=37,
                         seed=123)
    for field in ("indices", "labels", "features", "num_positive", "num_negative"):
        np.testing.assert_array_equal(getattr(got, field), getattr(want, field), err_msg=field)
    assert got.indices.shape == (4, 37)
    assert got.features.shape == (4, 37, 4)


def test_whole_dataset_without_row_splits_answers_like_1d_labels(client):
    rng = np.random.default_rng(2)
    labels = rng.integers(0, 2, size=20000).astype(np.int8)
    client.create_dataset("py-flat", labels, replace=True)
    got = client.sample(dataset="py-flat", num_samples=256, seed=9)
    want = client.sample(labels, num_samples=256, seed=9)
    assert got.indices.shape == (256,)
    np.testing.assert_array_equal(got.indices, want.indices)
    np.testing.assert_array_equal(got.labels, want.labels)
    # torch rows give torch results.
    t = client.sample(dataset="py-flat", rows=torch.tensor([0]), num_samples=8, seed=9)
    assert isinstance(t.indices, torch.Tensor) and tuple(t.indices.shape) == (1, 8)


def test_delete_and_errors(client):
    labels = np.array([0, 1, 1, 0, 1], dtype=np.int64)
    client.create_dataset("py-del", labels, replace=True)
    with pytest.raises(gpusampler.AlreadyExistsError):
        client.create_dataset("py-del", labels)
    with pytest.raises(gpusampler.InvalidArgumentError, match="rows"):
        client.sample(dataset="py-del", rows=[3], num_samples=2)
    with pytest.raises(gpusampler.InvalidArgumentError, match="return_features"):
        client.sample(dataset="py-del", num_samples=2, return_features=True)
    with pytest.raises(TypeError, match="labels must be None"):
        client.sample(labels, dataset="py-del", num_samples=2)
    with pytest.raises(TypeError, match="need dataset"):
        client.sample(labels, rows=[0], num_samples=2)
    with pytest.raises(gpusampler.InvalidArgumentError, match="name"):
        client.create_dataset("bad name", labels)
    client.delete_dataset("py-del")
    with pytest.raises(gpusampler.NotFoundError):
        client.sample(dataset="py-del", num_samples=2)
    with pytest.raises(gpusampler.NotFoundError):
        client.delete_dataset("py-del")
