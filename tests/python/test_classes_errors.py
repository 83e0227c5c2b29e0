"""SPEC section 7 at the edge: each rule about classes and scores gives INVALID_ARGUMENT with
the field (and the numbers) named, and the server keeps serving. Requests the client would
refuse itself go through the raw stub."""

from __future__ import annotations

import grpc
import numpy as np
import pytest

import gpusampler
from gpusampler.v1 import sampler_pb2 as pb
from gpusampler.v1 import sampler_pb2_grpc as pb_grpc

LABELS = (np.arange(200) % 3).astype(np.int64).reshape(2, 100)


def tensor(a: np.ndarray, dtype: int) -> pb.Tensor:
    return pb.Tensor(dtype=dtype, shape=list(a.shape), data=np.ascontiguousarray(a).tobytes())


def request(classes, *, labels=LABELS, scores=None, k=8, **spec) -> pb.SampleRequest:
    r = pb.SampleRequest(spec=pb.SamplingSpec(num_samples=k, classes=classes, **spec),
                         labels=tensor(labels, pb.DTYPE_INT64), seed=1)
    if scores is not None:
        r.scores.CopyFrom(tensor(scores.astype(np.float32), pb.DTYPE_FLOAT32))
    return r


def cls(lo, hi, selection=pb.SELECTION_UNIFORM, **share):
    return pb.ClassSpec(labels=[pb.LabelRange(lo=lo, hi=hi)], selection=selection, **share)


TWO = [cls(1, 1, fraction=0.5), cls(0, 0, rest=True)]
GOOD_SCORES = np.ones(LABELS.shape, np.float32)


def with_score(value, at=(1, 37)):
    s = GOOD_SCORES.copy()
    s[at] = value
    return s


RAW_CASES = {
    "positive_fraction": (request(TWO, positive_fraction=0.5), ["spec.positive_fraction"]),
    "positive_label": (request(TWO, positive_label=1), ["spec.positive_label"]),
    "negative_label": (request(TWO, negative_label=0), ["spec.negative_label"]),
    "fill_policy": (request(TWO, fill_policy=pb.FILL_POLICY_NONE), ["spec.fill_policy"]),
    "no_share": (request([cls(1, 1), cls(0, 0, rest=True)]), ["spec.classes[0]", "share"]),
    "rest_false": (request([cls(1, 1, count=2), cls(0, 0, rest=False)]),
                   ["spec.classes[1].rest"]),
    "lo_gt_hi": (request([cls(5, 3, count=2)]), ["spec.classes[0].labels[0]", "5", "3"]),
    "overlap": (request([cls(0, 4, count=2), cls(3, 9, rest=True)]),
                ["spec.classes[0]", "classes[1]", "overlap"]),
    "targets_over_k": (request([cls(0, 0, count=5), cls(1, 1, count=4)]),
                       ["spec.classes", "9", "num_samples 8"]),
    "fill_order_range": (request(TWO, fill_order=[2]), ["spec.fill_order[0]", "2"]),
    "fill_order_twice": (request(TWO, fill_order=[1, 1]), ["spec.fill_order[1]", "twice"]),
    "mixed_without_hard_fraction": (
        request([cls(0, 2, pb.SELECTION_MIXED, rest=True)], scores=GOOD_SCORES),
        ["spec.classes[0].hard_fraction"]),
    "selection_unknown": (request([cls(0, 2, 9, rest=True)]), ["spec.classes[0].selection"]),
    "fill_order_without_classes": (
        pb.SampleRequest(spec=pb.SamplingSpec(num_samples=8, fill_order=[0]),
                         labels=tensor(LABELS, pb.DTYPE_INT64)), ["spec.fill_order"]),
    "weighted_without_scores": (request([cls(0, 2, pb.SELECTION_WEIGHTED, rest=True)]),
                                ["scores", "spec.classes[0]", "WEIGHTED"]),
    "hardest_without_scores": (request([cls(0, 0, count=1), cls(1, 2, pb.SELECTION_HARDEST,
                                                               rest=True)]),
                               ["scores", "spec.classes[1]", "HARDEST"]),
    "scores_inf": (request(TWO, scores=with_score(np.inf)), ["scores[1][37]", "inf"]),
    "scores_minus_inf_uniform": (request(TWO, scores=with_score(-np.inf)),
                                 ["scores[1][37]", "-inf"]),
    "scores_negative_weighted": (
        request([cls(0, 2, pb.SELECTION_WEIGHTED, rest=True)], scores=with_score(-2.0)),
        ["scores[1][37]", "-2", "WEIGHTED"]),
    "scores_shape": (request(TWO, scores=np.ones((2, 99), np.float32)),
                     ["scores.shape", "[2, 99]", "[2, 100]"]),
    "scores_rank": (request(TWO, scores=np.ones((1,) * 9, np.float32)),
                    ["scores.shape has 9 dims"]),
    # Refused from the wire bytes, before parsing (100 packed dims).
    "scores_rank_before_parse": (pb.SampleRequest(
        spec=pb.SamplingSpec(num_samples=8, classes=TWO), labels=tensor(LABELS, pb.DTYPE_INT64),
        scores=pb.Tensor(dtype=pb.DTYPE_FLOAT32, shape=[1] * 100, data=b"\0" * 4)),
        ["scores.shape has more than 8 dims"]),
    "scores_one_row": (request(TWO, labels=LABELS[0], scores=with_score(np.inf, (0, 5))[0]),
                       ["scores[5]", "inf"]),
}


@pytest.fixture(scope="module")
def stub(server):
    channel = grpc.insecure_channel(server.target)
    yield pb_grpc.SamplerStub(channel)
    channel.close()


@pytest.mark.parametrize("name", list(RAW_CASES))
def test_rule_names_the_field_and_server_keeps_serving(stub, client, name):
    req, words = RAW_CASES[name]
    with pytest.raises(grpc.RpcError) as info:
        stub.Sample(req, timeout=30)
    assert info.value.code() == grpc.StatusCode.INVALID_ARGUMENT, info.value.details()
    for w in words:
        assert w in info.value.details(), (w, info.value.details())
    # Still serving.
    out = client.sample(LABELS, num_samples=8, seed=3)
    assert out.indices.shape == (2, 8) and (out.indices >= 0).all()


def test_scores_dtype_must_be_float32(stub):
    req = request(TWO)
    req.scores.CopyFrom(tensor(np.ones(LABELS.shape, np.float64), pb.DTYPE_FLOAT64))
    with pytest.raises(grpc.RpcError) as info:
        stub.Sample(req, timeout=30)
    assert info.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert "scores.dtype" in info.value.details()


def test_ragged_scores_name_row_and_element(client):
    labels = np.zeros(10, np.int64)
    scores = np.ones(10, np.float32)
    scores[7] = np.inf
    with pytest.raises(gpusampler.InvalidArgumentError) as info:
        client.sample(labels, row_splits=np.array([0, 4, 10]), num_samples=2, scores=scores,
                      classes=[gpusampler.Class(0, rest=True)])
    assert "scores[7] (row 1, element 3)" in info.value.details


def test_nan_scores_and_ranges_past_the_dtype_are_fine(client):
    """NaN scores are allowed (not members of a HARDEST class); a range may reach past the
    label dtype (int8 here) and a binary-only representability check does not apply."""
    labels = np.array([[0, 1, 1, 1, 0, 1]], np.int8)
    scores = np.array([[1, np.nan, 3, 2, 1, 5]], np.float32)
    out = client.sample(labels, num_samples=4, seed=5, scores=scores, classes=[
        gpusampler.Class((1, 1000), count=2, selection="hardest"),
        gpusampler.Class((-500, 0), rest=True)])
    assert out.num_per_class.tolist() == [[2, 2]]
    # num_positive / num_negative are m_0 / m_1 with two classes.
    assert out.num_positive.tolist() == [2] and out.num_negative.tolist() == [2]


def test_dataset_scores_every_chunk_or_none(stub, client):
    chunks = [pb.DatasetChunk(name="scores-chunks", labels=tensor(np.zeros(4, np.int64),
                                                                   pb.DTYPE_INT64),
                              scores=tensor(np.ones(4, np.float32), pb.DTYPE_FLOAT32)),
              pb.DatasetChunk(labels=tensor(np.zeros(4, np.int64), pb.DTYPE_INT64))]
    with pytest.raises(grpc.RpcError) as info:
        stub.CreateDataset(iter(chunks), timeout=30)
    assert info.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert "scores" in info.value.details() and "all chunks or in none" in info.value.details()
    assert "scores-chunks" not in [d.name for d in client.list_datasets()]


def test_dataset_scores_checked_at_upload_and_request(client):
    labels = np.arange(20, dtype=np.int64) % 2
    bad = np.ones(20, np.float32)
    bad[3] = np.inf
    with pytest.raises(gpusampler.InvalidArgumentError) as info:
        client.create_dataset("scores-inf", labels, scores=bad)
    assert "scores[3]" in info.value.details and "inf" in info.value.details
    negative = np.ones(20, np.float32)
    negative[13] = -1.0
    client.create_dataset("scores-negative", labels, row_splits=np.array([0, 10, 20]),
                          scores=negative, replace=True)
    try:
        weighted = [gpusampler.Class(1, count=2), gpusampler.Class(0, rest=True,
                                                                    selection="weighted")]
        with pytest.raises(gpusampler.InvalidArgumentError) as info:
            client.sample(dataset="scores-negative", num_samples=4, classes=weighted)
        assert "row 1 element 3" in info.value.details and "-1" in info.value.details
        # Sent scores win over the stored ones (and are aligned with the named rows).
        out = client.sample(dataset="scores-negative", rows=np.array([1]), num_samples=4,
                            classes=weighted, scores=np.ones(10, np.float32), seed=2)
        assert out.num_per_class.tolist() == [[2, 2]]
        with pytest.raises(gpusampler.InvalidArgumentError) as info:
            client.sample(dataset="scores-negative", rows=np.array([1]), num_samples=4,
                          classes=weighted, scores=np.ones(20, np.float32))
        assert "scores.shape" in info.value.details and "[10]" in info.value.details
        # A uniform-only request does not need scores, and does not check negatives.
        out = client.sample(dataset="scores-negative", num_samples=4, seed=2,
                            classes=[gpusampler.Class((0, 1), rest=True)])
        assert out.num_per_class.tolist() == [[4], [4]]
    finally:
        client.delete_dataset("scores-negative")


def test_dataset_without_scores_for_weighted(client):
    client.create_dataset("no-scores", np.zeros(8, np.int64), replace=True)
    try:
        with pytest.raises(gpusampler.InvalidArgumentError) as info:
            client.sample(dataset="no-scores", num_samples=2,
                          classes=[gpusampler.Class(0, rest=True, selection="weighted")])
        assert "scores" in info.value.details and "stores none" in info.value.details
    finally:
        client.delete_dataset("no-scores")
