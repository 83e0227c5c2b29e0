"""gpusampler.Client: the Python client of the gpusampler.v1.Sampler service."""

from __future__ import annotations

import collections
import ipaddress
import itertools
import json
import math
import numbers
import queue
import threading
import sys
import time
import warnings
from dataclasses import dataclass, field
from typing import (TYPE_CHECKING, Any, Callable, Dict, Iterable, Iterator, List, Mapping,
                    Optional, Sequence, Set, Tuple, Union)

import grpc
import numpy as np

from gpusampler import _tensors
from gpusampler.errors import (
    DeadlineExceededError,
    GpuSamplerError,
    NotFoundError,
    ResourceExhaustedError,
    SamplingQualityWarning,
    from_rpc_error,
)
from gpusampler.v1 import sampler_pb2 as pb
from gpusampler.v1 import sampler_pb2_grpc as pb_grpc

_FILL = {
    "both": pb.FILL_POLICY_BOTH,
    "negatives_only": pb.FILL_POLICY_NEGATIVES_ONLY,
    "none": pb.FILL_POLICY_NONE,
}
_HEALTH = {0: "UNKNOWN", 1: "SERVING", 2: "NOT_SERVING", 3: "SERVICE_UNKNOWN"}


if TYPE_CHECKING:  # torch is optional at run time
    import torch

#: What results hold: numpy arrays for numpy (or list) inputs, torch tensors for torch inputs.
Array = Union["np.ndarray[Any, Any]", "torch.Tensor"]
_Kinds = Tuple[_tensors.Kind, Optional[_tensors.Kind]]


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


_INT64 = (-(1 << 63), (1 << 63) - 1)
_UINT64 = (0, (1 << 64) - 1)


@dataclass
class DatasetInfo:
    """A resident dataset stored on the server (``create_dataset``, ``list_datasets``)."""

    name: str
    num_rows: int
    num_elements: int
    label_dtype: str
    feature_dtype: Optional[str]
    feature_shape: Tuple[int, ...]
    bytes: int
    sha256: str
    devices: Tuple[str, ...]
    #: Without a shared repository and with several addresses: the addresses (as given to
    #: the client) that hold this version. Empty when one server or a repository answered.
    replicas: Tuple[str, ...] = ()

    @staticmethod
    def _from_pb(d: pb.DatasetInfo, replicas: Tuple[str, ...] = ()) -> "DatasetInfo":
        return DatasetInfo(
            name=d.name,
            num_rows=d.num_rows,
            num_elements=d.num_elements,
            label_dtype=pb.DType.Name(d.label_dtype),
            feature_dtype=pb.DType.Name(d.feature_dtype) if d.feature_dtype else None,
            feature_shape=tuple(d.feature_shape),
            bytes=d.bytes,
            sha256=d.sha256,
            devices=tuple(d.devices),
            replicas=replicas,
        )


def _check_int(name: str, value: Any, lo: Optional[int] = None, hi: Optional[int] = None) -> int:
    """``value`` as an int: Python or numpy integers only (not bool, float or str), within
    [lo, hi]. The messages name the argument."""
    if isinstance(value, (bool, np.bool_)) or not isinstance(value, numbers.Integral):
        raise TypeError(f"{name} must be an integer, got {type(value).__name__} {value!r}")
    v = int(value)
    if (lo is not None and v < lo) or (hi is not None and v > hi):
        lo_text = "-inf" if lo is None else ("-2**63" if lo == _INT64[0] else str(lo))
        hi_text = "inf" if hi is None else {_INT64[1]: "2**63 - 1", _UINT64[1]: "2**64 - 1"}.get(
            hi, str(hi))
        raise ValueError(f"{name} = {v} is outside [{lo_text}, {hi_text}]")
    return v


def _check_real(name: str, value: Any, lo: Optional[float] = None,
                hi: Optional[float] = None, *, open_lo: bool = False) -> float:
    """``value`` as a float: a real number (int or float, not bool or str), not NaN, within
    [lo, hi] (``open_lo``: (lo, hi]). The messages name the argument."""
    if isinstance(value, (bool, np.bool_)) or not isinstance(value, numbers.Real):
        raise TypeError(f"{name} must be a number, got {type(value).__name__} {value!r}")
    v = float(value)
    if math.isnan(v):
        raise ValueError(f"{name} is NaN")
    if lo is not None and (v <= lo if open_lo else v < lo):
        raise ValueError(f"{name} = {v} must be {'>' if open_lo else '>='} {lo}")
    if hi is not None and v > hi:
        raise ValueError(f"{name} = {v} must be <= {hi}")
    return v


def _check_timeout(name: str, value: Any) -> Optional[float]:
    return None if value is None else _check_real(name, value, 0.0, open_lo=True)


def service_config_json(
    max_attempts: int, initial_backoff: float, max_backoff: float, multiplier: float = 2.0
) -> str:
    """The gRPC service config: round_robin over all addresses, and retries with
    exponential backoff on UNAVAILABLE and RESOURCE_EXHAUSTED (gRFC A6)."""
    method: Dict[str, Any] = {
        "name": [{"service": "gpusampler.v1.Sampler"}, {"service": "grpc.health.v1.Health"}]
    }
    if max_attempts >= 2:
        method["retryPolicy"] = {
            "maxAttempts": int(max_attempts),
            "initialBackoff": f"{initial_backoff:.6f}s",
            "maxBackoff": f"{max_backoff:.6f}s",
            "backoffMultiplier": multiplier,
            "retryableStatusCodes": ["UNAVAILABLE", "RESOURCE_EXHAUSTED"],
        }
    return json.dumps({"loadBalancingConfig": [{"round_robin": {}}], "methodConfig": [method]})


def channel_targets(targets: Sequence[str]) -> List[str]:
    """Several IPv4 (or several IPv6) ``host:port`` literals become one ``ipv4:`` / ``ipv6:``
    target that the channel balances with round_robin; anything else is one channel each."""
    targets = list(targets)
    if len(targets) < 2:
        return targets

    def family(t: str) -> int:
        host = t.rsplit(":", 1)[0] if ":" in t else ""
        try:
            return ipaddress.ip_address(host.strip("[]")).version
        except ValueError:
            return 0

    families = {family(t) for t in targets}
    if len(families) == 1 and 0 not in families:
        return [("ipv4:" if 4 in families else "ipv6:") + ",".join(targets)]
    return targets


def _encode_health_request(service: str) -> bytes:
    raw = service.encode()
    if not raw:
        return b""
    out = bytearray([0x0A])
    n = len(raw)
    while n >= 0x80:
        out.append((n & 0x7F) | 0x80)
        n >>= 7
    out.append(n)
    return bytes(out) + raw


def _decode_health_response(data: bytes) -> int:
    # HealthCheckResponse{status = 1 (varint)}; hand-decoded so that this package does not
    # need grpcio-health-checking.
    pos, status = 0, 0

    def varint() -> int:
        nonlocal pos
        value, shift = 0, 0
        while True:
            b = data[pos]
            pos += 1
            value |= (b & 0x7F) << shift
            if not b & 0x80:
                return value
            shift += 7

    while pos < len(data):
        key = varint()
        wire = key & 7
        if wire == 0:
            value = varint()
            if key >> 3 == 1:
                status = value
        elif wire == 2:
            pos += varint()
        elif wire == 1:
            pos += 8
        elif wire == 5:
            pos += 4
        else:
            raise ValueError("malformed health response")
    return status


class _ClientBase:
    """A connection to one or more gpusampler servers. Thread-safe; reuse one per process.

    Args:
        target: ``"host:port"``, a gRPC target URI, or a list of them. Several IP literals
            share one channel balanced with ``round_robin``; otherwise calls rotate over
            one channel per target (each ``round_robin`` over its DNS addresses).
        timeout: default deadline in seconds of each call, and of each message of a
            stream (``sample_stream``: every response must arrive within ``timeout`` of
            sending its request). None: no deadline.
        token: bearer token, sent as ``authorization: Bearer <token>``.
        tls: use TLS. ``root_certificates`` (PEM bytes) defaults to the system roots;
            ``private_key`` and ``certificate_chain`` enable mutual TLS;
            ``server_name_override`` changes the name expected in the server certificate.
        max_message_bytes: largest request sent and response accepted.
        max_attempts: tries per call on UNAVAILABLE / RESOURCE_EXHAUSTED, with exponential
            backoff from ``initial_backoff`` to ``max_backoff`` seconds (gRPC caps it at 5;
            1 disables retries).
        wait_for_ready: False (default): a call fails at once with UNAVAILABLE when the
            server cannot be reached (after the retries above). True: a call waits, up to its
            deadline, for the channel to connect; use it at start-up while servers come up.
        keepalive_time: seconds between HTTP/2 keepalive pings while calls are open (None
            disables). A peer that does not answer within ``keepalive_timeout`` seconds is
            treated as gone: open calls fail with UNAVAILABLE instead of hanging on a dead
            connection. The server refuses pings more often than every 10 s.
        options: extra gRPC channel options as ``(name, value)`` pairs (for example
            ``("grpc.max_reconnect_backoff_ms", 2000)``), appended to the ones above.
        warn_quality: warn (``SamplingQualityWarning``, once per client and kind) when a
            row comes back short (fewer than ``num_samples`` selected elements) or with
            fewer positives than ``floor(num_samples * positive_fraction)``.

    Raises:
        TypeError / ValueError naming the argument when one has the wrong type or range.
    """

    def __init__(
        self,
        target: Union[str, Sequence[str]] = "127.0.0.1:50051",
        *,
        timeout: Optional[float] = 30.0,
        token: Optional[str] = None,
        tls: bool = False,
        root_certificates: Optional[bytes] = None,
        private_key: Optional[bytes] = None,
        certificate_chain: Optional[bytes] = None,
        server_name_override: Optional[str] = None,
        max_message_bytes: int = 256 << 20,
        max_attempts: int = 4,
        initial_backoff: float = 0.05,
        max_backoff: float = 2.0,
        wait_for_ready: bool = False,
        keepalive_time: Optional[float] = 30.0,
        keepalive_timeout: float = 10.0,
        options: Sequence[Tuple[str, Any]] = (),
        warn_quality: bool = False,
    ) -> None:
        targets = [target] if isinstance(target, str) else list(target)
        if not targets:
            raise ValueError("gpusampler.Client: no target")
        for t in targets:
            if not isinstance(t, str) or not t:
                raise TypeError(f"target must be a non-empty string, got {t!r}")
        timeout = _check_timeout("timeout", timeout)
        max_message_bytes = _check_int("max_message_bytes", max_message_bytes, 1, (1 << 31) - 1)
        max_attempts = _check_int("max_attempts", max_attempts, 1, 5)
        initial_backoff = _check_real("initial_backoff", initial_backoff, 0.0, open_lo=True)
        max_backoff = _check_real("max_backoff", max_backoff, 0.0, open_lo=True)
        keepalive_time = _check_timeout("keepalive_time", keepalive_time)
        keepalive_timeout = _check_real("keepalive_timeout", keepalive_timeout, 0.0, open_lo=True)
        for name, flag in (("tls", tls), ("wait_for_ready", wait_for_ready),
                           ("warn_quality", warn_quality)):
            if not isinstance(flag, bool):
                raise TypeError(f"{name} must be a bool, got {type(flag).__name__} {flag!r}")
        self.timeout = timeout
        self.max_message_bytes = max_message_bytes
        self._warn_quality = warn_quality
        self._warned: set = set()
        self._metadata: Tuple[Tuple[str, str], ...] = (
            (("authorization", f"Bearer {token}"),) if token else ()
        )
        self._wait_for_ready = wait_for_ready
        channel_options = [
            ("grpc.service_config", service_config_json(max_attempts, initial_backoff, max_backoff)),
            ("grpc.enable_retries", 1 if max_attempts >= 2 else 0),
            # Requests larger than the retry buffer (256 KiB by default) cannot be retried.
            ("grpc.per_rpc_retry_buffer_size", max_message_bytes),
            ("grpc.max_send_message_length", max_message_bytes),
            ("grpc.max_receive_message_length", max_message_bytes),
        ]
        if keepalive_time is not None:
            channel_options += [
                ("grpc.keepalive_time_ms", int(keepalive_time * 1000)),
                ("grpc.keepalive_timeout_ms", int(keepalive_timeout * 1000)),
                # Only while calls are open: idle connections stay quiet.
                ("grpc.keepalive_permit_without_calls", 0),
            ]
        if server_name_override:
            channel_options.append(("grpc.ssl_target_name_override", server_name_override))
        channel_options.extend(options)
        self._targets: List[str] = targets
        # What built this client, so that a DataLoader worker can open its own copy.
        self._config: Tuple[List[str], Dict[str, Any]] = (list(targets), dict(
            timeout=timeout, token=token, tls=tls, root_certificates=root_certificates,
            private_key=private_key, certificate_chain=certificate_chain,
            server_name_override=server_name_override, max_message_bytes=max_message_bytes,
            max_attempts=max_attempts, initial_backoff=initial_backoff, max_backoff=max_backoff,
            wait_for_ready=wait_for_ready, keepalive_time=keepalive_time,
            keepalive_timeout=keepalive_timeout, options=tuple(options),
            warn_quality=warn_quality))
        self._channel_options: List[Tuple[str, Any]] = channel_options
        self._credentials: Optional[grpc.ChannelCredentials] = None
        if tls or root_certificates or certificate_chain:
            self._credentials = grpc.ssl_channel_credentials(
                root_certificates=root_certificates,
                private_key=private_key,
                certificate_chain=certificate_chain,
            )
        self._next = itertools.count()
        self._request_ids = itertools.count()
        # None until a server has said whether it has a shared dataset repository.
        self._repository: Optional[bool] = None
        self._open()

    def _open(self) -> None:
        raise NotImplementedError

    def _new_channel(self, api: Any, target: str) -> Any:
        """A channel to ``target`` from ``api`` (``grpc`` or ``grpc.aio``)."""
        if self._credentials is not None:
            return api.secure_channel(target, self._credentials, options=self._channel_options)
        return api.insecure_channel(target, options=self._channel_options)

    # ------------------------------------------------------------------ helpers
    def _timeout(self, timeout: Optional[float]) -> Optional[float]:
        return self.timeout if timeout is None else timeout

    # Arguments of sample() that a request of sample_stream may carry.
    _SAMPLE_ARGS = ("labels", "features", "num_samples", "dataset", "rows", "return_features",
                    "positive_fraction", "positive_label", "negative_label", "fill", "seed",
                    "row_splits")

    def _prepare(self, args: Dict[str, Any]) -> Tuple[pb.SampleRequest, _Kinds]:
        """The request for sample()'s arguments (a dict of them), checked."""
        if "num_samples" not in args:
            raise TypeError("num_samples is required")
        spec = {k: args[k] for k in ("num_samples", "positive_fraction", "positive_label",
                                     "negative_label", "fill", "seed") if k in args}
        labels, features = args.get("labels"), args.get("features")
        row_splits, rows = args.get("row_splits"), args.get("rows")
        return_features = args.get("return_features", False)
        if args.get("dataset") is not None:
            request, kinds = self._build_dataset(args["dataset"], rows, return_features,
                                                 (labels, features, row_splits), **spec)
        else:
            if rows is not None or return_features:
                raise TypeError("rows and return_features need dataset=...; an inline request "
                                "gets features back when it sends them")
            request, kinds = self._build(labels, features, row_splits=row_splits, **spec)
        self._check_size(request)
        return request, kinds

    def _check_stream_defaults(self, defaults: Dict[str, Any]) -> None:
        unknown = sorted(set(defaults) - set(self._SAMPLE_ARGS))
        if unknown:
            raise TypeError(f"sample_stream got unknown keyword argument(s) {unknown}; a "
                            f"request takes sample()'s arguments: {list(self._SAMPLE_ARGS)}")

    def _stream_request(self, index: int, item: Any,
                        defaults: Dict[str, Any]) -> Tuple[pb.SampleRequest, _Kinds]:
        """Request ``index`` of sample_stream: a mapping of sample() arguments (inline
        ``labels`` or a ``dataset``), or just the labels; ``defaults`` fill in the rest.
        Errors name the request and sample()'s arguments."""
        args = dict(defaults)
        if isinstance(item, Mapping):
            unknown = sorted(str(k) for k in item if k not in self._SAMPLE_ARGS and k != "timeout")
            if unknown:
                raise TypeError(f"sample_stream: request {index} has unknown key(s) {unknown}; "
                                f"a request takes sample()'s arguments: "
                                f"{list(self._SAMPLE_ARGS)}")
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
            raise TypeError(f"sample_stream: request {index} has neither 'labels' nor "
                            "'dataset'")
        try:
            return self._prepare(args)
        except (TypeError, ValueError) as e:
            if type(e) not in (TypeError, ValueError):
                raise
            raise type(e)(f"sample_stream: request {index}: {e}") from None

    def _dataset_chunks(self, name: str, labels: Any, features: Any, row_splits: Any,
                        replace: bool, chunk_bytes: Optional[int],
                        progress: Optional[bool]) -> Callable[[], Iterator[pb.DatasetChunk]]:
        """create_dataset's arguments, checked, as a maker of the upload's chunk stream (one
        fresh stream per replica uploaded to)."""
        if not isinstance(name, str) or not name:
            raise TypeError(f"name must be a non-empty string, got {name!r}")
        if not isinstance(replace, bool):
            raise TypeError(f"replace must be a bool, got {type(replace).__name__} {replace!r}")
        if chunk_bytes is None:
            chunk_bytes = min(16 << 20, self.max_message_bytes // 4)
        chunk_bytes = _check_int("chunk_bytes", chunk_bytes, 1, self.max_message_bytes)
        if labels is None:
            raise TypeError("labels must be an array or tensor, got None")
        label_tensor, _ = _tensors.to_wire(labels, "labels")
        if len(label_tensor.shape) != 1:
            raise ValueError(f"labels must be 1-D [total], got shape {list(label_tensor.shape)}")
        total = label_tensor.shape[0]
        label_item = len(label_tensor.data) // total if total else 1
        feature_tensor, _ = _tensors.optional_to_wire(features, "features")
        feature_row = 0
        if feature_tensor is not None:
            if not feature_tensor.shape or feature_tensor.shape[0] != total:
                raise ValueError(f"features must be [total, ...] with total = {total}, got "
                                 f"shape {list(feature_tensor.shape)}")
            feature_row = len(feature_tensor.data) // total if total else 0
        splits_tensor = None
        if row_splits is not None:
            splits = row_splits.detach().cpu().numpy() if _tensors.is_torch(row_splits) else row_splits
            splits = np.asarray(splits)
            if splits.dtype.kind not in "iu":
                raise TypeError(f"row_splits must be integers, got {splits.dtype}")
            splits_tensor = _tensors.to_wire(splits.astype(np.int64), "row_splits")[0]
        per = max(1, chunk_bytes // max(1, label_item + feature_row))
        if progress is None:
            progress = sys.stderr.isatty() and total * (label_item + feature_row) > (64 << 20)

        def chunks() -> Iterator[pb.DatasetChunk]:
            at = 0
            while at < total or at == 0:
                end = min(total, at + per)
                c = pb.DatasetChunk(labels=pb.Tensor(
                    dtype=label_tensor.dtype, shape=[end - at],
                    data=label_tensor.data[at * label_item:end * label_item]))
                if at == 0:
                    c.name = name
                    c.replace = replace
                    if splits_tensor is not None:
                        c.row_splits.CopyFrom(splits_tensor)
                if feature_tensor is not None:
                    c.features.CopyFrom(pb.Tensor(
                        dtype=feature_tensor.dtype,
                        shape=[end - at] + list(feature_tensor.shape[1:]),
                        data=feature_tensor.data[at * feature_row:end * feature_row]))
                if progress:
                    done = end / total if total else 1.0
                    bar = "#" * int(done * 30)
                    sys.stderr.write(f"\rgpusampler: uploading {name} [{bar:<30}] "
                                     f"{done * 100:5.1f}%")
                    sys.stderr.flush()
                yield c
                if end >= total:
                    break
                at = end
            if progress:
                sys.stderr.write("\n")

        return chunks

    def _fanout_error(self, what: str, failed: Mapping[str, GpuSamplerError],
                      succeeded: Sequence[str]) -> GpuSamplerError:
        """One error for a dataset call that failed on some of the addresses it had to reach:
        the class of the first failure, a message naming every failed address and why, and
        ``failed`` / ``succeeded`` attributes for code that wants to act on them."""
        first = next(iter(failed.values()))
        n = len(failed) + len(succeeded)
        text = "; ".join(f"{a}: {e}" for a, e in failed.items())
        tail = f"; it succeeded on {', '.join(succeeded)}" if succeeded else ""
        error = type(first)(first.code, f"{what} failed on {len(failed)} of {n} addresses "
                            f"(no shared dataset repository, so each keeps its own copy): "
                            f"{text}{tail}")
        error.failed = dict(failed)
        error.succeeded = list(succeeded)
        return error

    @staticmethod
    def _merge_lists(lists: Sequence[Tuple[str, Sequence[pb.DatasetInfo]]]) -> List[DatasetInfo]:
        """Per-address dataset lists as one: a version (name and sha256) once, with the
        addresses that hold it."""
        order: List[Tuple[str, str]] = []
        first: Dict[Tuple[str, str], pb.DatasetInfo] = {}
        holders: Dict[Tuple[str, str], List[str]] = {}
        for address, infos in lists:
            for d in infos:
                key = (d.name, d.sha256)
                if key not in first:
                    order.append(key)
                    first[key] = d
                    holders[key] = []
                holders[key].append(address)
        return [DatasetInfo._from_pb(first[k], tuple(holders[k])) for k in order]

    def _check_deleted(self, name: str, done: List[str],
                       failed: Dict[str, GpuSamplerError]) -> None:
        """delete_dataset's outcome over the addresses it reached: an address without the
        dataset is done; NOT_FOUND only when none held it."""
        missing = {a: e for a, e in failed.items() if isinstance(e, NotFoundError)}
        others = {a: e for a, e in failed.items() if a not in missing}
        if others:
            raise self._fanout_error(f"delete_dataset({name!r})", others, done + list(missing))
        if missing and not done:
            if len(missing) == 1:
                raise next(iter(missing.values()))
            raise self._fanout_error(f"delete_dataset({name!r})", missing, [])

    def _listed(self, lists: Sequence[Tuple[str, Sequence[pb.DatasetInfo]]],
                failed: Dict[str, GpuSamplerError]) -> List[DatasetInfo]:
        if failed:
            raise self._fanout_error("list_datasets()", failed, [a for a, _ in lists])
        if len(lists) == 1 and not lists[0][0]:
            return [DatasetInfo._from_pb(d) for d in lists[0][1]]
        return self._merge_lists(lists)

    def _build(
        self,
        labels: Any,
        features: Any = None,
        *,
        num_samples: int,
        positive_fraction: float = 0.5,
        positive_label: int = 1,
        negative_label: int = 0,
        fill: str = "both",
        seed: Optional[int] = None,
        row_splits: Any = None,
    ) -> Tuple[pb.SampleRequest, Tuple[_tensors.Kind, Optional[_tensors.Kind]]]:
        # Types and wire ranges here, each message naming its argument; the semantic ranges
        # (num_samples >= 1, positive_fraction in [0, 1], ...) are the server's, which names
        # the field too.
        num_samples = _check_int("num_samples", num_samples, *_INT64)
        positive_fraction = _check_real("positive_fraction", positive_fraction)
        positive_label = _check_int("positive_label", positive_label, *_INT64)
        negative_label = _check_int("negative_label", negative_label, *_INT64)
        if not isinstance(fill, str):
            raise TypeError(f"fill must be a string, got {type(fill).__name__} {fill!r}")
        if fill not in _FILL:
            raise ValueError(f"fill must be one of {sorted(_FILL)}, got {fill!r}")
        if seed is not None:
            seed = _check_int("seed", seed, *_UINT64)
        if labels is None:
            raise TypeError("labels must be an array or tensor, got None")
        label_tensor, label_kind = _tensors.to_wire(labels, "labels")
        feature_tensor, feature_kind = _tensors.optional_to_wire(features, "features")
        request = pb.SampleRequest(
            request_id=str(next(self._request_ids)),
            spec=pb.SamplingSpec(
                num_samples=num_samples,
                positive_fraction=positive_fraction,
                positive_label=positive_label,
                negative_label=negative_label,
                fill_policy=_FILL[fill],
            ),
            labels=label_tensor,
        )
        if feature_tensor is not None:
            request.features.CopyFrom(feature_tensor)
        if row_splits is not None:
            splits = row_splits.detach().cpu().numpy() if _tensors.is_torch(row_splits) else row_splits
            splits = np.asarray(splits)
            if splits.dtype.kind not in "iu":
                raise TypeError(f"row_splits must be integers, got {splits.dtype}")
            request.row_splits.CopyFrom(_tensors.to_wire(splits.astype(np.int64), "row_splits")[0])
        if seed is not None:
            request.seed = seed
        return request, (label_kind, feature_kind)

    def _build_dataset(
        self,
        dataset: str,
        rows: Any,
        return_features: bool,
        inline: Tuple[Any, Any, Any],
        **spec: Any,
    ) -> Tuple[pb.SampleRequest, Tuple[_tensors.Kind, Optional[_tensors.Kind]]]:
        if not isinstance(dataset, str) or not dataset:
            raise TypeError(f"dataset must be a non-empty string, got {dataset!r}")
        if not isinstance(return_features, bool):
            raise TypeError("return_features must be a bool, got "
                            f"{type(return_features).__name__} {return_features!r}")
        for field, value in zip(("labels", "features", "row_splits"), inline):
            if value is not None:
                raise TypeError(f"{field} must be None with dataset={dataset!r} (the dataset "
                                "supplies it)")
        # The spec is checked as for inline requests (one-element labels as a stand-in).
        request, _ = self._build(np.zeros(1, np.int64), **spec)
        request.ClearField("labels")
        request.dataset = dataset
        request.return_features = return_features
        # numpy results, or torch on the device of a torch ``rows``.
        kind = _tensors.Kind(torch=False)
        if rows is not None:
            ids = rows.detach().cpu().numpy() if _tensors.is_torch(rows) else rows
            ids = np.asarray(ids)
            if ids.ndim != 1 or (ids.size and ids.dtype.kind not in "iu"):
                raise TypeError(f"rows must be 1-D integers, got {ids.dtype} shape {ids.shape}")
            request.rows.CopyFrom(_tensors.to_wire(ids.astype(np.int64), "rows")[0])
            if _tensors.is_torch(rows):
                kind = _tensors.Kind(torch=True, device=rows.device)
        return request, (kind, kind if return_features else None)

    def _check_size(self, request: pb.SampleRequest) -> None:
        size = request.ByteSize()
        if size > self.max_message_bytes:
            raise ResourceExhaustedError(
                grpc.StatusCode.RESOURCE_EXHAUSTED,
                f"request has {size} bytes, over this client's max_message_bytes = "
                f"{self.max_message_bytes} (Client(max_message_bytes=...)); the server's own "
                f"limit is Client.info().limits.max_message_bytes (--max-message-bytes)")

    def _error(self, error: grpc.RpcError) -> GpuSamplerError:
        """The exception for a failed call; gRPC's own size-limit message gets the limit
        that produced it."""
        out = from_rpc_error(error)
        if out.code == grpc.StatusCode.RESOURCE_EXHAUSTED and out.details.startswith(
                "Received message larger than max"):
            limit = out.details.rstrip(")").rsplit(" ", 1)[-1]
            if limit == str(self.max_message_bytes):
                hint = ("the response is over this client's max_message_bytes = "
                        f"{self.max_message_bytes} (Client(max_message_bytes=...))")
            else:
                hint = ("the request is far over the server's --max-message-bytes (see "
                        "Client.info().limits.max_message_bytes); gRPC refused it unread")
            out = type(out)(out.code, f"{out.details}: {hint}")
        return out

    def _result(
        self,
        r: pb.SampleResponse,
        request: pb.SampleRequest,
        kinds: Tuple[_tensors.Kind, Optional[_tensors.Kind]],
        round_trip_us: int,
    ) -> SampleResult:
        label_kind, feature_kind = kinds
        if self._warn_quality:
            self._check_quality(r, request.spec)
        return SampleResult(
            indices=_tensors.from_wire(r.indices, label_kind),
            labels=_tensors.from_wire(r.labels, label_kind),
            features=_tensors.from_wire(r.features, feature_kind)
            if feature_kind is not None and r.HasField("features")
            else None,
            num_positive=_tensors.from_wire(r.num_positive, label_kind),
            num_negative=_tensors.from_wire(r.num_negative, label_kind),
            seed=int(r.seed),
            timing=Timing(
                queue_us=r.timing.queue_us,
                compute_us=r.timing.compute_us,
                total_us=r.timing.total_us,
                batch_rows=r.timing.batch_rows,
                round_trip_us=round_trip_us,
            ),
            device=r.device,
            request_id=r.request_id,
            dataset_sha256=r.dataset_sha256,
        )

    def _check_quality(self, r: pb.SampleResponse, spec: pb.SamplingSpec) -> None:
        k = spec.num_samples
        target = math.floor(k * spec.positive_fraction)
        pos = np.frombuffer(r.num_positive.data, dtype="<i4")
        neg = np.frombuffer(r.num_negative.data, dtype="<i4")
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
                              SamplingQualityWarning, stacklevel=4)



class Client(_ClientBase):
    __doc__ = _ClientBase.__doc__

    def _open(self) -> None:
        self._channels: List[grpc.Channel] = [
            self._new_channel(grpc, t) for t in channel_targets(self._targets)]
        self._stubs = [pb_grpc.SamplerStub(c) for c in self._channels]
        self._health = [
            c.unary_unary(
                "/grpc.health.v1.Health/Check",
                request_serializer=_encode_health_request,
                response_deserializer=_decode_health_response,
            )
            for c in self._channels
        ]
        # One channel per address given, for the dataset calls that must reach each of them
        # (made on first use, when several IP literals share one balanced channel).
        self._address_channels: List[grpc.Channel] = []
        self._address_stubs: Optional[List[Any]] = None

    # ------------------------------------------------------------------ lifecycle
    def close(self) -> None:
        """Closes the channels. Calls in flight are cancelled."""
        for c in self._channels + self._address_channels:
            c.close()

    def __enter__(self) -> "Client":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    # ------------------------------------------------------------------ calls
    def sample(
        self,
        labels: Any = None,
        features: Any = None,
        *,
        num_samples: int,
        dataset: Optional[str] = None,
        rows: Any = None,
        return_features: bool = False,
        positive_fraction: float = 0.5,
        positive_label: int = 1,
        negative_label: int = 0,
        fill: str = "both",
        seed: Optional[int] = None,
        row_splits: Any = None,
        timeout: Optional[float] = None,
    ) -> SampleResult:
        """Samples ``num_samples`` elements from every row of ``labels``.

        Args:
            labels: integer or bool labels, ``[N]``, ``[B, N]``, or ``[total]`` with
                ``row_splits``; a numpy array, a torch tensor or anything ``np.asarray``
                takes. Elements equal to ``positive_label`` are positives, equal to
                ``negative_label`` negatives, all others ignored.
            features: optional ``[N, ...]`` / ``[B, N, ...]`` / ``[total, ...]`` of any dtype
                (bfloat16 included); the result then carries the sampled feature rows.
            num_samples: K, the fixed number of output slots per row.
            positive_fraction: share of K for positives (``floor(K * f)``), in [0, 1].
            fill: ``"both"`` (either class fills the other's shortfall),
                ``"negatives_only"`` (Detectron2) or ``"none"`` (strict ratio, padding).
            seed: Philox seed; the server draws one when None (returned in the result).
            row_splits: int ``[B+1]`` offsets for ragged rows.
            dataset: sample a resident dataset (``create_dataset``) instead of sending
                ``labels``: the request is a few bytes, and the answer is exactly the one
                for sending those rows inline. ``labels``, ``features`` and ``row_splits``
                must then be None.
            rows: with ``dataset``, which dataset rows to sample, in this order (int
                ``[B']``); None samples every row (``[K]`` outputs for a dataset uploaded
                without ``row_splits``).
            return_features: with ``dataset``, also return the K feature rows of each
                output row (gathered where the dataset is kept).
            timeout: deadline in seconds; defaults to the client's.

        Every argument is checked before anything is sent: integers must be integers
        (``num_samples=2.5`` or ``"256"`` is a TypeError), and each message names its
        argument. The sampling rules are in ``docs/semantics.md``.

        Returns:
            A SampleResult whose arrays are numpy if ``labels`` was numpy (or a list) and
            torch (on the same device) if it was a torch tensor; ``features`` follows the kind
            of ``features``.

        Raises:
            InvalidArgumentError, ResourceExhaustedError, UnavailableError,
            DeadlineExceededError, ... (see gpusampler.errors); TypeError for an argument of
            the wrong type or a dtype the wire format cannot carry; ValueError for a value out
            of range (``seed=-1``) or an unknown ``fill``.
        """
        timeout = _check_timeout("timeout", timeout)
        request, kinds = self._prepare(dict(
            labels=labels, features=features, num_samples=num_samples, dataset=dataset,
            rows=rows, return_features=return_features, positive_fraction=positive_fraction,
            positive_label=positive_label, negative_label=negative_label, fill=fill, seed=seed,
            row_splits=row_splits))
        stub = self._stubs[next(self._next) % len(self._stubs)]
        start = time.perf_counter()
        try:
            response = stub.Sample(
                request,
                timeout=self._timeout(timeout),
                metadata=self._metadata,
                wait_for_ready=self._wait_for_ready,
            )
        except grpc.RpcError as e:
            raise self._error(e) from None
        return self._result(response, request, kinds, int((time.perf_counter() - start) * 1e6))

    def sample_stream(
        self,
        requests: Iterable[Any],
        *,
        window: int = 8,
        timeout: Optional[float] = None,
        stream_timeout: Optional[float] = None,
        **defaults: Any,
    ) -> Iterator[SampleResult]:
        """Samples many requests over one SampleStream, with at most ``window`` in flight.

        Each item of ``requests`` is either a mapping of ``sample()`` arguments (``labels``,
        ``features``, ``num_samples``, ...) or just the labels; ``defaults`` fill in what an
        item leaves out. Items are read lazily, so ``requests`` may be an endless generator.
        Results come in request order. A failing request raises its error after the results
        of all earlier requests.

        Deadlines: ``timeout`` (default: the client's, 30 s unless set) is per message: each
        response must arrive within ``timeout`` seconds of its request being sent, else the
        stream is cancelled and DeadlineExceededError raised, so a frozen server cannot hang
        the loop. Time spent in your own loop body or waiting for your ``requests`` iterable
        does not count. ``stream_timeout`` (default: none) bounds the whole stream.

        Timing: ``round_trip_us`` runs from handing a request to gRPC until its response
        arrived; ``wait_us`` is how long the response then waited for you to ask for it
        (with a window, responses run ahead of a slower training step).

        Example::

            for out in client.sample_stream(({"labels": y} for y in batches), num_samples=64):
                train_step(out.features, out.labels)
        """
        window = _check_int("window", window, 1)
        per_message = self._timeout(_check_timeout("timeout", timeout))
        stream_timeout = _check_timeout("stream_timeout", stream_timeout)
        self._check_stream_defaults(defaults)
        slots = threading.Semaphore(window)
        lock = threading.Lock()
        # (request, kinds, sent time) of every request sent whose response has not arrived,
        # in order; the reader moves each to the inbox with its response.
        sent: "collections.deque[Tuple[pb.SampleRequest, Any, float]]" = collections.deque()
        inbox: "queue.Queue[Tuple[str, Any, float, Any]]" = queue.Queue()
        done = threading.Event()
        failure: List[BaseException] = []

        def produce() -> Iterator[pb.SampleRequest]:
            try:
                for index, item in enumerate(requests):
                    request, kinds = self._stream_request(index, item, defaults)
                    # Blocks gRPC's sending thread while the window is full; wakes up to
                    # notice a consumer that went away.
                    while not slots.acquire(timeout=0.1):
                        if done.is_set():
                            return
                    if done.is_set():
                        return
                    with lock:
                        sent.append((request, kinds, time.perf_counter()))
                    yield request
            except Exception as e:  # surfaced to the consumer once earlier results are out
                failure.append(e)
                inbox.put(("client_error", e, time.perf_counter(), None))

        stub = self._stubs[next(self._next) % len(self._stubs)]
        call = stub.SampleStream(
            produce(),
            timeout=stream_timeout,
            metadata=self._metadata,
            wait_for_ready=self._wait_for_ready,
        )

        def read() -> None:
            # Stamps each response as it arrives, so that round_trip_us leaves out the time
            # it then waits for the consumer. At most `window` responses are ever buffered.
            try:
                for response in call:
                    arrived = time.perf_counter()
                    with lock:
                        origin = sent.popleft()
                    inbox.put(("response", response, arrived, origin))
                inbox.put(("end", None, time.perf_counter(), None))
            except grpc.RpcError as e:
                inbox.put(("rpc_error", e, time.perf_counter(), None))

        reader = threading.Thread(target=read, name="gpusampler-stream-reader", daemon=True)
        reader.start()
        try:
            while True:
                with lock:
                    oldest = sent[0] if sent else None
                if per_message is not None and oldest is not None:
                    left = oldest[2] + per_message - time.perf_counter()
                    if left <= 0:
                        call.cancel()
                        raise DeadlineExceededError(
                            grpc.StatusCode.DEADLINE_EXCEEDED,
                            f"sample_stream: no response within timeout={per_message:g} s of "
                            f"sending request {oldest[0].request_id!r} (per-message deadline); "
                            f"the stream was cancelled")
                    wait = min(left, 0.1)
                else:
                    wait = 0.1  # nothing in flight: wait for the producer, re-checking
                try:
                    kind, value, arrived, origin = inbox.get(timeout=wait)
                except queue.Empty:
                    continue
                if kind == "response":
                    request, kinds, sent_at = origin
                    slots.release()
                    result = self._result(value, request, kinds, int((arrived - sent_at) * 1e6))
                    result.timing.wait_us = int((time.perf_counter() - arrived) * 1e6)
                    yield result
                elif kind == "end":
                    break
                elif kind == "rpc_error":
                    if failure:
                        raise failure[0]
                    raise self._error(value) from None
                else:  # client_error: the producer stopped; the rest of the responses first
                    continue
        finally:
            done.set()
            call.cancel()
        if failure:
            raise failure[0]

    def health(self, service: str = "", *, timeout: Optional[float] = None) -> str:
        """grpc.health.v1 status of ``service`` ("" = the whole server): "SERVING",
        "NOT_SERVING", "UNKNOWN" or "SERVICE_UNKNOWN"."""
        check = self._health[next(self._next) % len(self._health)]
        try:
            status = check(
                service,
                timeout=self._timeout(timeout),
                metadata=self._metadata,
                wait_for_ready=self._wait_for_ready,
            )
        except grpc.RpcError as e:
            raise self._error(e) from None
        return _HEALTH.get(status, "UNKNOWN")

    def info(self, *, timeout: Optional[float] = None) -> ServerInfo:
        """The server's version, devices, backend and limits."""
        stub = self._stubs[next(self._next) % len(self._stubs)]
        try:
            r = stub.GetServerInfo(
                pb.GetServerInfoRequest(),
                timeout=self._timeout(timeout),
                metadata=self._metadata,
                wait_for_ready=self._wait_for_ready,
            )
        except grpc.RpcError as e:
            raise self._error(e) from None
        return ServerInfo._from_pb(r)

    # ------------------------------------------------------------------ datasets
    def create_dataset(
        self,
        name: str,
        labels: Any,
        features: Any = None,
        row_splits: Any = None,
        *,
        replace: bool = False,
        chunk_bytes: Optional[int] = None,
        progress: Optional[bool] = None,
        timeout: Optional[float] = None,
    ) -> DatasetInfo:
        """Uploads a resident dataset, which ``sample(dataset=name, ...)`` then samples.

        Args:
            name: ``[A-Za-z0-9._-]{1,128}``.
            labels: 1-D integer or bool labels ``[total]`` (numpy, torch, or a sequence).
            features: optional ``[total, ...]`` feature rows of any dtype.
            row_splits: optional int ``[B+1]`` row offsets; None makes one row of all.
            replace: overwrite a dataset of the same name (requests already accepted
                finish against the old one).
            chunk_bytes: bytes per upload message; default a quarter of
                ``max_message_bytes`` (at most 16 MiB), so any size uploads.
            progress: print a progress bar to stderr; default when stderr is a terminal
                and the upload is over 64 MiB.
            timeout: deadline in seconds of the whole upload; defaults to the client's.

        The upload is atomic: if it fails or is cancelled the server keeps nothing.

        Raises:
            AlreadyExistsError, InvalidArgumentError (naming the field),
            ResourceExhaustedError (the server's ``--max-dataset-bytes``), ...
        """
        timeout = _check_timeout("timeout", timeout)
        make_chunks = self._dataset_chunks(name, labels, features, row_splits, replace,
                                           chunk_bytes, progress)
        targets = self._dataset_targets(timeout)
        if targets is None:  # any one replica: one address, or a shared repository
            stub = self._stubs[next(self._next) % len(self._stubs)]
            try:
                return DatasetInfo._from_pb(stub.CreateDataset(
                    make_chunks(), timeout=self._timeout(timeout), metadata=self._metadata,
                    wait_for_ready=self._wait_for_ready))
            except grpc.RpcError as e:
                raise self._error(e) from None
        # No repository: every address keeps its own copy, so that a request sent to any of
        # them finds it.
        infos: Dict[str, pb.DatasetInfo] = {}
        failed: Dict[str, GpuSamplerError] = {}
        for address, stub in targets:
            try:
                infos[address] = stub.CreateDataset(
                    make_chunks(), timeout=self._timeout(timeout), metadata=self._metadata,
                    wait_for_ready=self._wait_for_ready)
            except grpc.RpcError as e:
                failed[address] = self._error(e)
        if failed:
            raise self._fanout_error(f"create_dataset({name!r})", failed, list(infos))
        return DatasetInfo._from_pb(next(iter(infos.values())), tuple(infos))

    def delete_dataset(self, name: str, *, timeout: Optional[float] = None) -> None:
        """Deletes a resident dataset (requests already accepted still complete).

        Without a shared repository and with several addresses, deletes it on every address;
        an address that does not hold it counts as done, and NotFoundError comes only when
        none held it. With a repository, any one replica deletes it for all.

        Raises NotFoundError when there is none of that name; when some addresses fail, the
        error of the first names each failed address (``error.failed``).
        """
        if not isinstance(name, str):
            raise TypeError(f"name must be a string, got {type(name).__name__} {name!r}")
        timeout = _check_timeout("timeout", timeout)
        request = pb.DeleteDatasetRequest(name=name)
        targets = self._dataset_targets(timeout)
        if targets is None:
            targets = [("", self._stubs[next(self._next) % len(self._stubs)])]
        done: List[str] = []
        failed: Dict[str, GpuSamplerError] = {}
        for address, stub in targets:
            try:
                stub.DeleteDataset(request, timeout=self._timeout(timeout),
                                   metadata=self._metadata, wait_for_ready=self._wait_for_ready)
                done.append(address)
            except grpc.RpcError as e:
                failed[address] = self._error(e)
        self._check_deleted(name, done, failed)

    def list_datasets(self, *, timeout: Optional[float] = None) -> List[DatasetInfo]:
        """The resident datasets. Without a shared repository and with several addresses,
        the union over every address: each version once, ``replicas`` naming the addresses
        that hold it (an address that fails raises, naming it)."""
        timeout = _check_timeout("timeout", timeout)
        targets = self._dataset_targets(timeout)
        if targets is None:
            targets = [("", self._stubs[next(self._next) % len(self._stubs)])]
        lists: List[Tuple[str, Sequence[pb.DatasetInfo]]] = []
        failed: Dict[str, GpuSamplerError] = {}
        for address, stub in targets:
            try:
                r = stub.ListDatasets(pb.ListDatasetsRequest(), timeout=self._timeout(timeout),
                                      metadata=self._metadata,
                                      wait_for_ready=self._wait_for_ready)
                lists.append((address, list(r.datasets)))
            except grpc.RpcError as e:
                failed[address] = self._error(e)
        return self._listed(lists, failed)

    def _dataset_targets(self, timeout: Optional[float]) -> Optional[List[Tuple[str, Any]]]:
        """None when one call to any replica is enough (one address, or servers sharing a
        dataset repository); else every address given, each with its own stub."""
        if len(self._targets) < 2:
            return None
        if self._repository is None:
            self._repository = self.info(timeout=timeout).dataset_repository
        if self._repository:
            return None
        if self._address_stubs is None:
            if channel_targets(self._targets) == self._targets:
                self._address_stubs = list(self._stubs)
            else:
                self._address_channels = [self._new_channel(grpc, t) for t in self._targets]
                self._address_stubs = [pb_grpc.SamplerStub(c) for c in self._address_channels]
        return list(zip(self._targets, self._address_stubs))


__all__ = [
    "Client",
    "DatasetInfo",
    "SampleResult",
    "Timing",
    "ServerInfo",
    "DeviceInfo",
    "Limits",
    "GpuSamplerError",
    "SamplingQualityWarning",
    "service_config_json",
    "channel_targets",
]
