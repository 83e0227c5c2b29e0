"""gpusampler.Class and the classes arguments of sample(): the wire form, and the argument
checks that happen before anything is sent (no server needed)."""

from __future__ import annotations

import itertools

import numpy as np
import pytest

import gpusampler
from gpusampler import _requests
from gpusampler.v1 import sampler_pb2 as pb


def prepare(**args):
    return _requests.prepare(args, itertools.count(), 1 << 30)[0]


@pytest.mark.parametrize("labels, ranges", [
    (3, [(3, 3)]),
    ((2, 9), [(2, 9)]),
    ([0, (5, 9), -1], [(0, 0), (5, 9), (-1, -1)]),
    (np.int64(7), [(7, 7)]),
    ((-(1 << 63), (1 << 63) - 1), [(-(1 << 63), (1 << 63) - 1)]),
])
def test_labels_forms(labels, ranges):
    c = gpusampler.Class(labels, rest=True)
    assert c.labels == ranges
    wire = c.to_wire()
    assert [(r.lo, r.hi) for r in wire.labels] == ranges


def test_shares_and_selections_on_the_wire():
    c = gpusampler.Class(1, count=5, selection="hardest").to_wire()
    assert c.WhichOneof("share") == "count" and c.count == 5
    assert c.selection == pb.SELECTION_HARDEST and not c.HasField("hard_fraction")
    c = gpusampler.Class(1, fraction=0.25, selection="mixed", hard_fraction=0.5).to_wire()
    assert c.WhichOneof("share") == "fraction" and c.fraction == 0.25
    assert c.selection == pb.SELECTION_MIXED and c.hard_fraction == 0.5
    c = gpusampler.Class(1, rest=True).to_wire()
    assert c.WhichOneof("share") == "rest" and c.rest and c.selection == pb.SELECTION_UNIFORM
    # count=0 is a share too (a class that only fills).
    assert gpusampler.Class(1, count=0).to_wire().WhichOneof("share") == "count"


@pytest.mark.parametrize("kwargs, error, words", [
    (dict(labels=1), TypeError, "exactly one share"),
    (dict(labels=1, count=1, rest=True), TypeError, "exactly one share"),
    (dict(labels=1, count=1.5), TypeError, "Class count"),
    (dict(labels=1, fraction="0.5"), TypeError, "Class fraction"),
    (dict(labels=1, rest=1), TypeError, "Class rest"),
    (dict(labels=1.0, rest=True), TypeError, "Class labels"),
    (dict(labels=[], rest=True), ValueError, "empty"),
    (dict(labels=[(1, 2, 3)], rest=True), TypeError, "Class labels"),
    (dict(labels=1 << 63, rest=True), ValueError, "Class labels"),
    (dict(labels=1, rest=True, selection="random"), ValueError, "selection"),
    (dict(labels=1, rest=True, selection="mixed"), TypeError, "hard_fraction"),
    (dict(labels=1, rest=True, hard_fraction=0.5), TypeError, "hard_fraction"),
])
def test_class_argument_errors(kwargs, error, words):
    with pytest.raises(error, match=words):
        gpusampler.Class(**kwargs)


def test_sample_with_classes_sends_no_binary_fields():
    r = prepare(labels=np.array([0, 1, 2]), num_samples=2, seed=1, scores=[0.5, 1, 2],
                classes=[gpusampler.Class(1, fraction=0.5), gpusampler.Class((0, 2), rest=True)],
                fill_order=[1, 0])
    for field in ("positive_fraction", "positive_label", "negative_label"):
        assert not r.spec.HasField(field)
    assert r.spec.fill_policy == pb.FILL_POLICY_UNSPECIFIED
    assert len(r.spec.classes) == 2 and list(r.spec.fill_order) == [1, 0]
    assert r.scores.dtype == pb.DTYPE_FLOAT32 and list(r.scores.shape) == [3]
    assert np.frombuffer(r.scores.data, np.float32).tolist() == [0.5, 1.0, 2.0]


def test_binary_request_is_unchanged():
    r = prepare(labels=np.array([0, 1]), num_samples=2)
    assert r.spec.positive_fraction == 0.5 and r.spec.HasField("positive_label")
    assert not r.spec.classes and not r.HasField("scores")


@pytest.mark.parametrize("kwargs, error, words", [
    (dict(classes=[gpusampler.Class(1, rest=True)], positive_fraction=0.25), TypeError,
     "positive_fraction"),
    (dict(classes=[gpusampler.Class(1, rest=True)], fill="none"), TypeError, "fill"),
    (dict(classes=gpusampler.Class(1, rest=True)), TypeError, "list of gpusampler.Class"),
    (dict(classes=[]), ValueError, "classes is empty"),
    (dict(classes=[{"labels": 1}]), TypeError, r"classes\[0\]"),
    (dict(fill_order=[0]), TypeError, "fill_order needs classes"),
    (dict(classes=[gpusampler.Class(1, rest=True)], fill_order=[0.5]), TypeError,
     r"fill_order\[0\]"),
    (dict(classes=[gpusampler.Class(1, rest=True)], scores=np.array(["a", "b"])), TypeError,
     "scores"),
])
def test_sample_argument_errors(kwargs, error, words):
    with pytest.raises(error, match=words):
        prepare(labels=np.array([0, 1]), num_samples=2, **kwargs)


def test_dataset_request_carries_classes_and_scores():
    r = prepare(dataset="d", rows=np.array([2, 0]), num_samples=3, scores=np.ones(7),
                classes=[gpusampler.Class(0, rest=True, selection="weighted")])
    assert r.dataset == "d" and not r.HasField("labels")
    assert r.spec.classes[0].selection == pb.SELECTION_WEIGHTED
    assert list(r.scores.shape) == [7]
