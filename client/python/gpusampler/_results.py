"""What the clients hand back: sample results (decoded from SampleResponse in the kind of
array that was sent), server info, and the warnings about short or under-filled rows."""

from __future__ import annotations

import math
import warnings
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, List, Optional, Set, Union

import numpy as np

from gpusampler import _tensors
from gpusampler.errors import SamplingQualityWarning
from gpusampler.v1 import sampler_pb2 as pb

if TYPE_CHECKING:  # torch is optional at run time
    import torch

#: What results hold: numpy arrays for numpy (or list) inputs, torch tensors for torch inputs.
Array = Union["np.ndarray[Any, Any]", "torch.Tensor"]


@dataclass
class Timing:
    """Where the time of one request went. Server fields come from ServerTiming."""

    queue_us: int  #: from acceptance to launch, in the server
    compute_us: int  #: the launch that sampled this request
    total_us: int  #: from acceptance to response, in the server
    batch_rows: int  #: rows that shared the launch (fused requests included)
    #: measured by this client: from handing the request to gRPC until its response arrived
    round_trip_us: int
    #: streams only: how long the arrived response then waited in the client until the
    #: caller asked for it (the window running ahead of a slower consumer); 0 for sample()
    wait_us: int = 0


@dataclass
class SampleResult:
    """One sampled request, in the kind (numpy or torch) that was sent.

    ``indices`` is int64 ``[B, K]`` (``[K]`` for 1-D labels), relative to each row, with
    -1 marking padding; ``labels`` has the input dtype (padding -1, or 0 for uint8/bool);
    ``features`` is ``[B, K, ...]`` in the input dtype (zeros for padding) or None for a
    labels-only request; ``num_positive``/``num_negative`` are int32 ``[B]``; ``seed`` replays
    the result; ``dataset_sha256`` names the dataset version that answered a dataset request
    (empty for inline requests).
    """

    indices: Array
    labels: Array
    features: Optional[Array]
    num_positive: Array
    num_negative: Array
    seed: int
    timing: Timing
    device: str = ""
    request_id: str = ""
    dataset_sha256: str = ""
    #: With ``classes``: int32 ``[B, C]`` (``[C]`` for 1-D labels), m_c per row; else None.
    num_per_class: Optional[Array] = None
    #: Epoch requests (``epoch=``): this rank's steps in the epoch; 0 otherwise.
    epoch_steps: int = 0


def sample_result(r: pb.SampleResponse, kinds: _tensors.Kinds, round_trip_us: int,
                  arrays: Optional[dict] = None) -> SampleResult:
    """The result of response ``r``, decoded as ``kinds`` says; ``arrays`` (shared memory:
    the tensors viewing a region, by field name) instead of the response's tensor bytes."""
    label_kind, feature_kind = kinds
    if arrays is not None:
        return SampleResult(
            indices=arrays["indices"], labels=arrays["labels"],
            features=arrays["features"] if feature_kind is not None else None,
            num_positive=arrays["num_positive"], num_negative=arrays["num_negative"],
            seed=int(r.seed), timing=_timing(r, round_trip_us), device=r.device,
            request_id=r.request_id, dataset_sha256=r.dataset_sha256,
            num_per_class=arrays["num_per_class"], epoch_steps=int(r.epoch_steps))
    return SampleResult(
        indices=_tensors.from_wire(r.indices, label_kind),
        labels=_tensors.from_wire(r.labels, label_kind),
        features=_tensors.from_wire(r.features, feature_kind)
        if feature_kind is not None and r.HasField("features")
        else None,
        num_positive=_tensors.from_wire(r.num_positive, label_kind),
        num_negative=_tensors.from_wire(r.num_negative, label_kind),
        seed=int(r.seed),
        timing=_timing(r, round_trip_us),
        device=r.device,
        request_id=r.request_id,
        dataset_sha256=r.dataset_sha256,
        num_per_class=_tensors.from_wire(r.num_per_class, label_kind)
        if r.HasField("num_per_class") else None,
        epoch_steps=int(r.epoch_steps),
    )


def _timing(r: pb.SampleResponse, round_trip_us: int) -> Timing:
    return Timing(queue_us=r.timing.queue_us, compute_us=r.timing.compute_us,
                  total_us=r.timing.total_us, batch_rows=r.timing.batch_rows,
                  round_trip_us=round_trip_us)


class QualityWarnings:
    """``Client(warn_quality=True)``: one SamplingQualityWarning per client and kind, for
    rows that came back short or with fewer positives than asked."""

    def __init__(self, enabled: bool) -> None:
        self.enabled = enabled
        self._warned: Set[str] = set()

    def check(self, r: pb.SampleResponse, spec: pb.SamplingSpec, stacklevel: int,
              counts: Optional[Any] = None) -> None:
        """Warns about response ``r`` to a request of ``spec``; ``stacklevel`` (as
        warnings.warn takes it, counted from here) points at the caller's call. ``counts``:
        (num_positive, num_negative) when they are not in ``r`` (shared memory)."""
        if not self.enabled or spec.classes:  # the two-class checks; classes say their own
            return
        k = spec.num_samples
        target = math.floor(k * spec.positive_fraction)
        if counts is not None:
            pos, neg = (np.asarray(_tensors.host_array(c)) for c in counts)
        else:
            pos = _tensors.from_wire(r.num_positive, _tensors.NUMPY)
            neg = _tensors.from_wire(r.num_negative, _tensors.NUMPY)
        short = int(np.count_nonzero(pos.astype(np.int64) + neg < k))
        under = int(np.count_nonzero(pos < target))
        for kind, count, text in (
            ("short", short, f"{short} of {len(pos)} rows have fewer than num_samples = {k} "
             "candidates of the two classes; the rest of each such row is padding "
             "(indices -1)"),
            ("under", under, f"{under} of {len(pos)} rows have fewer positives than "
             f"floor(num_samples * positive_fraction) = {target}: the rows hold too few "
             "positives"),
        ):
            if count and kind not in self._warned:
                self._warned.add(kind)
                warnings.warn(f"gpusampler: {text} (request {r.request_id}; warned once per "
                              "client; see gpusampler_short_rows_total and "
                              "gpusampler_positive_fraction on the server)",
                              SamplingQualityWarning, stacklevel=stacklevel)


@dataclass
class DeviceInfo:
    id: str  #: "cpu" or "cuda:N"
    name: str  #: e.g. "cpu" or "NVIDIA H200"
    memory_bytes: int


@dataclass
class Limits:
    """Server limits; requests beyond them fail with ResourceExhaustedError."""

    max_message_bytes: int
    max_rows: int
    max_elements: int
    max_row_elements: int
    max_num_samples: int
    max_batch_rows: int


@dataclass
class ServerInfo:
    version: str
    revision: str
    backend: str  #: "cpu", "cuda" or "cuda-sim" (the CUDA path run on the host)
    devices: List[DeviceInfo] = field(default_factory=list)
    limits: Optional[Limits] = None
    #: True when the server keeps datasets in a repository shared by its replicas
    #: (``--dataset-dir``): then any one replica serves every dataset.
    dataset_repository: bool = False

    @staticmethod
    def _from_pb(r: pb.ServerInfo) -> "ServerInfo":
        lim = r.limits
        return ServerInfo(
            version=r.version,
            revision=r.revision,
            backend=r.backend,
            devices=[DeviceInfo(d.id, d.name, d.memory_bytes) for d in r.devices],
            limits=Limits(lim.max_message_bytes, lim.max_rows, lim.max_elements,
                          lim.max_row_elements, lim.max_num_samples, lim.max_batch_rows)
            if r.HasField("limits") else None,
            dataset_repository=bool(r.dataset_repository),
        )
