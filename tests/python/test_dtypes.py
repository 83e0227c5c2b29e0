"""numpy and torch in, the same kind out: the label and feature dtype matrix."""

from __future__ import annotations

import numpy as np
import pytest
import torch

B, N, K, D = 3, 50, 12, 3
SEED = 1234

LABEL_NUMPY = [np.bool_, np.int8, np.uint8, np.int16, np.int32, np.int64]
LABEL_TORCH = [torch.bool, torch.int8, torch.uint8, torch.int16, torch.int32, torch.int64]
FEATURE_NUMPY = [np.bool_, np.int8, np.uint8, np.int16, np.int32, np.int64, np.float16, np.float32, np.float64]
FEATURE_TORCH = [torch.bool, torch.int8, torch.uint8, torch.int16, torch.int32, torch.int64,
                 torch.float16, torch.bfloat16, torch.float32, torch.float64]


def base_labels() -> np.ndarray:
    # Few positives so that some rows pad (K > P + Q would be needed for padding with
    # FILL_BOTH; row 2 has only 5 labelled elements).
    rng = np.random.default_rng(11)
    labels = (rng.random((B, N)) < 0.2).astype(np.int64)
    labels[2, 5:] = 2  # ignored value: row 2 has 5 candidates, so 7 padding slots
    return labels


@pytest.fixture(scope="module")
def reference(client):
    labels = base_labels()
    labels01 = np.where(labels == 2, 1, labels)  # for dtypes without an "ignored" value
    return {
        "ignore": client.sample(labels, num_samples=K, seed=SEED),
        "binary": client.sample(labels01, num_samples=K, seed=SEED),
    }


def padding_label(dtype) -> int:
    return 0 if dtype in (np.bool_, np.uint8, torch.bool, torch.uint8) else -1


@pytest.mark.parametrize("dtype", LABEL_NUMPY, ids=lambda d: np.dtype(d).name)
def test_numpy_label_dtypes(client, reference, dtype):
    labels = base_labels()
    binary = dtype == np.bool_
    ref = reference["binary" if binary else "ignore"]
    if binary:
        labels = np.where(labels == 2, 1, labels)
    x = labels.astype(dtype)
    out = client.sample(x, num_samples=K, seed=SEED)
    assert isinstance(out.labels, np.ndarray) and out.labels.dtype == np.dtype(dtype)
    np.testing.assert_array_equal(out.indices, ref.indices)
    for r in range(B):
        valid = out.indices[r] >= 0
        np.testing.assert_array_equal(out.labels[r, valid], x[r, out.indices[r, valid]])
        assert (out.labels[r, ~valid] == padding_label(dtype)).all()
    assert (out.indices[2] < 0).sum() == (0 if binary else K - 5)


@pytest.mark.parametrize("dtype", LABEL_TORCH, ids=str)
def test_torch_label_dtypes(client, reference, dtype):
    labels = base_labels()
    binary = dtype == torch.bool
    ref = reference["binary" if binary else "ignore"]
    if binary:
        labels = np.where(labels == 2, 1, labels)
    x = torch.from_numpy(labels).to(dtype)
    out = client.sample(x, num_samples=K, seed=SEED)
    for t in (out.indices, out.labels, out.num_positive, out.num_negative):
        assert isinstance(t, torch.Tensor)
    assert out.labels.dtype == dtype and out.indices.dtype == torch.int64
    assert out.num_positive.dtype == torch.int32
    np.testing.assert_array_equal(out.indices.numpy(), ref.indices)
    valid = out.indices >= 0
    for r in range(B):
        assert torch.equal(out.labels[r][valid[r]], x[r][out.indices[r][valid[r]]])
    assert (out.labels[~valid] == padding_label(dtype)).all()


def make_features(dtype, torch_kind: bool):
    rng = np.random.default_rng(5)
    raw = rng.normal(size=(B, N, D)) * 50
    if torch_kind:
        t = torch.from_numpy(raw)
        return (t > 0) if dtype == torch.bool else t.to(dtype)
    return (raw > 0) if dtype == np.bool_ else raw.astype(dtype)


def check_gather(out_indices, features, out_features, zero):
    for r in range(B):
        for s in range(K):
            i = int(out_indices[r][s])
            if i >= 0:
                assert (out_features[r][s] == features[r][i]).all(), (r, s, i)
            else:
                assert (out_features[r][s] == zero).all(), (r, s)


@pytest.mark.parametrize("dtype", FEATURE_NUMPY, ids=lambda d: np.dtype(d).name)
def test_numpy_feature_dtypes(client, reference, dtype):
    features = make_features(dtype, False)
    out = client.sample(base_labels(), features, num_samples=K, seed=SEED)
    assert isinstance(out.features, np.ndarray)
    assert out.features.dtype == np.dtype(dtype) and out.features.shape == (B, K, D)
    np.testing.assert_array_equal(out.indices, reference["ignore"].indices)
    # Bitwise: compare the bytes, so that -0.0 vs 0.0 or NaN payloads would show.
    check_gather(out.indices, features.view(np.uint8).reshape(B, N, -1),
                 out.features.view(np.uint8).reshape(B, K, -1), 0)


@pytest.mark.parametrize("dtype", FEATURE_TORCH, ids=str)
def test_torch_feature_dtypes(client, reference, dtype):
    features = make_features(dtype, True)
    out = client.sample(torch.from_numpy(base_labels()), features, num_samples=K, seed=SEED)
    assert isinstance(out.features, torch.Tensor)
    assert out.features.dtype == dtype and tuple(out.features.shape) == (B, K, D)
    np.testing.assert_array_equal(out.indices.numpy(), reference["ignore"].indices)
    check_gather(out.indices, features, out.features, torch.zeros((), dtype=dtype))


def test_mixed_kinds_follow_each_input(client):
    labels = torch.from_numpy(base_labels())
    features = make_features(np.float32, False)
    out = client.sample(labels, features, num_samples=K, seed=SEED)
    assert isinstance(out.indices, torch.Tensor)
    assert isinstance(out.features, np.ndarray)


def test_non_contiguous_and_big_endian_inputs(client, reference):
    labels = base_labels()
    strided = np.asfortranarray(labels)  # same values, different memory order
    out = client.sample(strided, num_samples=K, seed=SEED)
    np.testing.assert_array_equal(out.indices, reference["ignore"].indices)
    big = labels.astype(">i4")
    out = client.sample(big, num_samples=K, seed=SEED)
    np.testing.assert_array_equal(out.indices, reference["ignore"].indices)
    t = torch.from_numpy(labels.T.copy()).t()  # non-contiguous torch view
    out = client.sample(t, num_samples=K, seed=SEED)
    np.testing.assert_array_equal(out.indices.numpy(), reference["ignore"].indices)


def test_unsupported_dtypes_raise_type_error(client):
    with pytest.raises(TypeError, match="uint16"):
        client.sample(np.zeros(10, dtype=np.uint16), num_samples=2)
    with pytest.raises(TypeError, match="complex"):
        client.sample(torch.zeros(10, dtype=torch.complex64), num_samples=2)
    with pytest.raises(ValueError, match="fill"):
        client.sample(np.zeros(10, dtype=np.int64), num_samples=2, fill="sometimes")
