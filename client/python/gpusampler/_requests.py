"""SampleRequests from sample()'s arguments (and from the items of sample_stream), checked
before anything is sent: types and wire ranges here, each message naming its argument; the
semantic ranges (num_samples >= 1, positive_fraction in [0, 1], ...) are the server's, which
names the field too."""

from __future__ import annotations

from typing import Any, Dict, Iterator, Mapping, Optional, Tuple

import grpc
import numpy as np

from gpusampler import _classes, _epochs, _shm, _tensors
from gpusampler._args import INT64, UINT64, check_bool, check_int, check_name, check_real
from gpusampler.errors import ResourceExhaustedError
from gpusampler.v1 import sampler_pb2 as pb

Kinds = _tensors.Kinds

FILL = {
    "both": pb.FILL_POLICY_BOTH,
    "negatives_only": pb.FILL_POLICY_NEGATIVES_ONLY,
    "none": pb.FILL_POLICY_NONE,
}

#: Arguments of sample() that a request of sample_stream may carry.
SAMPLE_ARGS = ("labels", "features", "num_samples", "dataset", "rows", "return_features",
               "positive_fraction", "positive_label", "negative_label", "fill", "seed",
               "row_splits", "classes", "fill_order", "scores", "epoch", "output_region")
_SPEC_ARGS = ("num_samples", "positive_fraction", "positive_label", "negative_label", "fill",
              "seed", "classes", "fill_order")


def prepare(args: Mapping[str, Any], ids: Iterator[int],
            max_message_bytes: int) -> Tuple[pb.SampleRequest, Kinds]:
    """The request for sample()'s arguments (a mapping of them), checked; ``ids`` numbers
    the requests of one client."""
    if "num_samples" not in args:
        raise TypeError("num_samples is required")
    spec = {k: args[k] for k in _SPEC_ARGS if k in args}
    labels, features = args.get("labels"), args.get("features")
    row_splits, rows = args.get("row_splits"), args.get("rows")
    return_features = args.get("return_features", False)
    if args.get("dataset") is not None:
        request, kinds = _dataset(args["dataset"], rows, return_features,
                                  (labels, features, row_splits), ids, spec)
    else:
        if rows is not None or return_features:
            raise TypeError("rows and return_features need dataset=...; an inline request "
                            "gets features back when it sends them")
        request, kinds = _inline(labels, features, row_splits, ids, **spec)
    _set_scores(request, args.get("scores"))
    # Epochs (docs/semantics.md): the server refuses one without a dataset, naming the field.
    if args.get("epoch") is not None:
        request.epoch.CopyFrom(_epochs.epoch_message(args["epoch"]))
    # Shared memory (docs/shared-memory.md): the answer's bytes go into this region.
    if args.get("output_region") is not None:
        request.output_region.CopyFrom(_shm.output_message(args["output_region"]))
    _check_size(request, max_message_bytes)
    return request, kinds


def stream_request(index: int, item: Any, defaults: Mapping[str, Any], ids: Iterator[int],
                   max_message_bytes: int) -> Tuple[pb.SampleRequest, Kinds]:
    """Request ``index`` of sample_stream, checked; errors name the request and sample()'s
    arguments."""
    args = _stream_args(index, item, defaults)
    try:
        return prepare(args, ids, max_message_bytes)
    except (TypeError, ValueError) as e:
        if type(e) not in (TypeError, ValueError):
            raise
        raise type(e)(f"sample_stream: request {index}: {e}") from None


def _stream_args(index: int, item: Any, defaults: Mapping[str, Any]) -> Dict[str, Any]:
    """Request ``index`` of sample_stream as sample()'s arguments: the item is a mapping of
    them (inline ``labels`` or a ``dataset``) or just the labels; ``defaults`` fill in the
    rest."""
    args = dict(defaults)
    if isinstance(item, Mapping):
        unknown = sorted(str(k) for k in item if k not in SAMPLE_ARGS and k != "timeout")
        if unknown:
            raise TypeError(f"sample_stream: request {index} has unknown key(s) {unknown}; "
                            f"a request takes sample()'s arguments: {list(SAMPLE_ARGS)}")
        args.update(item)
        # The item's own kind of request (inline or dataset) beats a default's.
        if "dataset" in item and "labels" not in item:
            args.pop("labels", None)
        elif "labels" in item and "dataset" not in item:
            args.pop("dataset", None)
    else:
        args["labels"] = item
        args.pop("dataset", None)
    args.pop("timeout", None)
    if args.get("labels") is None and args.get("dataset") is None:
        raise TypeError(f"sample_stream: request {index} has neither 'labels' nor 'dataset'")
    return args


def check_stream_defaults(defaults: Mapping[str, Any]) -> None:
    unknown = sorted(set(defaults) - set(SAMPLE_ARGS))
    if unknown:
        raise TypeError(f"sample_stream got unknown keyword argument(s) {unknown}; a "
                        f"request takes sample()'s arguments: {list(SAMPLE_ARGS)}")


def _inline(
    labels: Any,
    features: Any,
    row_splits: Any,
    ids: Iterator[int],
    *,
    num_samples: int,
    positive_fraction: float = 0.5,
    positive_label: int = 1,
    negative_label: int = 0,
    fill: str = "both",
    seed: Optional[int] = None,
    classes: Any = None,
    fill_order: Any = None,
) -> Tuple[pb.SampleRequest, Kinds]:
    num_samples = check_int("num_samples", num_samples, *INT64)
    positive_fraction = check_real("positive_fraction", positive_fraction)
    positive_label = check_int("positive_label", positive_label, *INT64)
    negative_label = check_int("negative_label", negative_label, *INT64)
    if not isinstance(fill, str):
        raise TypeError(f"fill must be a string, got {type(fill).__name__} {fill!r}")
    if fill not in FILL:
        raise ValueError(f"fill must be one of {sorted(FILL)}, got {fill!r}")
    if seed is not None:
        seed = check_int("seed", seed, *UINT64)
    if labels is None:
        raise TypeError("labels must be an array or tensor, got None")
    label_tensor, label_kind = _tensors.to_wire(labels, "labels")
    feature_tensor, feature_kind = _tensors.optional_to_wire(features, "features")
    request = pb.SampleRequest(
        request_id=str(next(ids)),
        spec=pb.SamplingSpec(num_samples=num_samples, positive_fraction=positive_fraction,
                             positive_label=positive_label, negative_label=negative_label,
                             fill_policy=FILL[fill]),
        labels=label_tensor,
    )
    if feature_tensor is not None:
        request.features.CopyFrom(feature_tensor)
    if row_splits is not None:
        request.row_splits.CopyFrom(row_splits_tensor(row_splits))
    if seed is not None:
        request.seed = seed
    _set_classes(request.spec, classes, fill_order, (positive_fraction, positive_label,
                                                     negative_label, fill))
    return request, (label_kind, feature_kind)


# ---- Classes (docs/semantics.md, "Classes") ----

_BINARY_DEFAULTS = (("positive_fraction", 0.5), ("positive_label", 1), ("negative_label", 0),
                    ("fill", "both"))


def _set_classes(spec: pb.SamplingSpec, classes: Any, fill_order: Any,
                 binary: Tuple[float, int, int, str]) -> None:
    """With ``classes``, the spec carries them (and ``fill_order``) instead of the two-class
    fields, which must then be left at their defaults."""
    if classes is None:
        if fill_order is not None:
            raise TypeError("fill_order needs classes=[...] (it names classes)")
        return
    checked = _classes.check_classes(classes)
    for (name, default), value in zip(_BINARY_DEFAULTS, binary):
        if value != default:
            raise TypeError(f"{name} must be left at its default with classes=[...] (the "
                            "classes' shares and fill_order say it)")
    for field in ("positive_fraction", "positive_label", "negative_label", "fill_policy"):
        spec.ClearField(field)
    spec.classes.extend(c.to_wire() for c in checked)
    if fill_order is not None:
        spec.fill_order.extend(_classes.check_fill_order(fill_order))


def _set_scores(request: pb.SampleRequest, scores: Any) -> None:
    """``scores`` (any real array or tensor, laid out like the labels; with a dataset,
    aligned with the concatenation of the requested rows) as the FLOAT32 wire tensor."""
    if scores is None:
        return
    array = _tensors.host_array(scores)
    if array.dtype.kind not in "fiu" or array.dtype == np.bool_:
        raise TypeError(f"scores must be real numbers, got {array.dtype}")
    request.scores.CopyFrom(_tensors.to_wire(np.ascontiguousarray(array, np.float32),
                                             "scores")[0])


def row_splits_tensor(row_splits: Any) -> pb.Tensor:
    """``row_splits`` (any integer array or tensor) as the int64 wire tensor."""
    splits = _tensors.host_array(row_splits)
    if splits.dtype.kind not in "iu":
        raise TypeError(f"row_splits must be integers, got {splits.dtype}")
    return _tensors.to_wire(splits.astype(np.int64), "row_splits")[0]


def _dataset(dataset: str, rows: Any, return_features: bool, inline: Tuple[Any, Any, Any],
             ids: Iterator[int], spec: Dict[str, Any]) -> Tuple[pb.SampleRequest, Kinds]:
    check_name("dataset", dataset)
    check_bool("return_features", return_features)
    for field, value in zip(("labels", "features", "row_splits"), inline):
        if value is not None:
            raise TypeError(f"{field} must be None with dataset={dataset!r} (the dataset "
                            "supplies it)")
    # The spec is checked as for inline requests (one-element labels as a stand-in).
    request, _ = _inline(np.zeros(1, np.int64), None, None, ids, **spec)
    request.ClearField("labels")
    request.dataset = dataset
    request.return_features = return_features
    # numpy results, or torch on the device of a torch ``rows``.
    kind = _tensors.NUMPY
    if rows is not None:
        ids_array = _tensors.host_array(rows)
        if ids_array.ndim != 1 or (ids_array.size and ids_array.dtype.kind not in "iu"):
            raise TypeError(f"rows must be 1-D integers, got {ids_array.dtype} shape "
                            f"{ids_array.shape}")
        request.rows.CopyFrom(_tensors.to_wire(ids_array.astype(np.int64), "rows")[0])
        if _tensors.is_torch(rows):
            kind = _tensors.Kind(torch=True, device=rows.device)
    return request, (kind, kind if return_features else None)


def _check_size(request: pb.SampleRequest, max_message_bytes: int) -> None:
    size = request.ByteSize()
    if size > max_message_bytes:
        raise ResourceExhaustedError(
            grpc.StatusCode.RESOURCE_EXHAUSTED,
            f"request has {size} bytes, over this client's max_message_bytes = "
            f"{max_message_bytes} (Client(max_message_bytes=...)); the server's own "
            f"limit is Client.info().limits.max_message_bytes (--max-message-bytes)")
