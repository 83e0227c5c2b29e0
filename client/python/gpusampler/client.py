"""gpusampler.Client: the Python client of the gpusampler.v1.Sampler service."""

from __future__ import annotations

import ipaddress
import itertools
import json
import queue
import threading
import time
from dataclasses import dataclass, field
from typing import Any, Dict, Iterable, Iterator, List, Mapping, Optional, Sequence, Tuple, Union

import grpc
import numpy as np

from gpusampler import _tensors
from gpusampler.errors import GpuSamplerError, from_rpc_error
from gpusampler.v1 import sampler_pb2 as pb
from gpusampler.v1 import sampler_pb2_grpc as pb_grpc

_FILL = {
    "both": pb.FILL_POLICY_BOTH,
    "negatives_only": pb.FILL_POLICY_NEGATIVES_ONLY,
    "none": pb.FILL_POLICY_NONE,
}
_HEALTH = {0: "UNKNOWN", 1: "SERVING", 2: "NOT_SERVING", 3: "SERVICE_UNKNOWN"}


@dataclass
class Timing:
    """Where the time of one request went. Server fields come from ServerTiming."""

    queue_us: int  #: from acceptance to launch, in the server
    compute_us: int  #: the launch that sampled this request
    total_us: int  #: from acceptance to response, in the server
    batch_rows: int  #: rows that shared the launch (fused requests included)
    round_trip_us: int  #: measured by this client: send to receive (stream: see sample_stream)


@dataclass
class SampleResult:
    """One sampled request, in the kind (numpy or torch) that was sent.

    ``indices`` is int64 ``[B, K]`` (``[K]`` for 1-D labels), relative to each row, with
    -1 marking padding; ``labels`` has the input dtype (padding -1, or 0 for uint8/bool);
    ``features`` is ``[B, K, ...]`` in the input dtype (zeros for padding) or None for a
    labels-only request; ``num_positive``/``num_negative`` are int32 ``[B]``; ``seed`` replays
    the result.
    """

    indices: Any
    labels: Any
    features: Any
    num_positive: Any
    num_negative: Any
    seed: int
    timing: Timing
    device: str = ""
    request_id: str = ""


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
    backend: str  #: "cpu" or "cuda"
    devices: List[DeviceInfo] = field(default_factory=list)
    limits: Optional[Limits] = None


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


class Client:
    """A connection to one or more gpusampler servers. Thread-safe; reuse one per process.

    Args:
        target: ``"host:port"``, a gRPC target URI, or a list of them. Several IP literals
            share one channel balanced with ``round_robin``; otherwise calls rotate over
            one channel per target (each ``round_robin`` over its DNS addresses).
        timeout: default deadline of each call in seconds (None: no deadline).
        token: bearer token, sent as ``authorization: Bearer <token>``.
        tls: use TLS. ``root_certificates`` (PEM bytes) defaults to the system roots;
            ``private_key`` and ``certificate_chain`` enable mutual TLS;
            ``server_name_override`` changes the name expected in the server certificate.
        max_message_bytes: largest request sent and response accepted.
        max_attempts: tries per call on UNAVAILABLE / RESOURCE_EXHAUSTED, with exponential
            backoff from ``initial_backoff`` to ``max_backoff`` seconds (gRPC caps it at 5;
            1 disables retries).
        wait_for_ready: queue calls while the channel connects instead of failing fast.
        options: extra gRPC channel options.
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
        options: Sequence[Tuple[str, Any]] = (),
    ) -> None:
        targets = [target] if isinstance(target, str) else list(target)
        if not targets:
            raise ValueError("gpusampler.Client: no target")
        self.timeout = timeout
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
        if server_name_override:
            channel_options.append(("grpc.ssl_target_name_override", server_name_override))
        channel_options.extend(options)
        self._channels: List[grpc.Channel] = []
        for t in channel_targets(targets):
            if tls or root_certificates or certificate_chain:
                creds = grpc.ssl_channel_credentials(
                    root_certificates=root_certificates,
                    private_key=private_key,
                    certificate_chain=certificate_chain,
                )
                self._channels.append(grpc.secure_channel(t, creds, options=channel_options))
            else:
                self._channels.append(grpc.insecure_channel(t, options=channel_options))
        self._stubs = [pb_grpc.SamplerStub(c) for c in self._channels]
        self._health = [
            c.unary_unary(
                "/grpc.health.v1.Health/Check",
                request_serializer=_encode_health_request,
                response_deserializer=_decode_health_response,
            )
            for c in self._channels
        ]
        self._next = itertools.count()
        self._request_ids = itertools.count()

    # ------------------------------------------------------------------ lifecycle
    def close(self) -> None:
        """Closes the channels. Calls in flight are cancelled."""
        for c in self._channels:
            c.close()

    def __enter__(self) -> "Client":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    # ------------------------------------------------------------------ calls
    def sample(
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
            timeout: deadline in seconds; defaults to the client's.

        Returns:
            A SampleResult whose arrays are numpy if ``labels`` was numpy (or a list) and
            torch (on the same device) if it was a torch tensor; ``features`` follows the kind
            of ``features``.

        Raises:
            InvalidArgumentError, ResourceExhaustedError, UnavailableError,
            DeadlineExceededError, ... (see gpusampler.errors); TypeError for a dtype the
            wire format cannot carry; ValueError for an unknown ``fill``.
        """
        request, kinds = self._build(
            labels,
            features,
            num_samples=num_samples,
            positive_fraction=positive_fraction,
            positive_label=positive_label,
            negative_label=negative_label,
            fill=fill,
            seed=seed,
            row_splits=row_splits,
        )
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
            raise from_rpc_error(e) from None
        return self._result(response, kinds, int((time.perf_counter() - start) * 1e6))

    def sample_stream(
        self,
        requests: Iterable[Any],
        *,
        window: int = 8,
        timeout: Optional[float] = None,
        **defaults: Any,
    ) -> Iterator[SampleResult]:
        """Samples many requests over one SampleStream, with at most ``window`` in flight.

        Each item of ``requests`` is either a mapping of ``sample()`` arguments (``labels``,
        ``features``, ``num_samples``, ...) or just the labels; ``defaults`` fill in what an
        item leaves out. Items are read lazily, so ``requests`` may be an endless generator.
        Results come in request order. ``timeout`` (default: none) bounds the whole stream.
        A failing request raises its error after the results of all earlier requests;
        ``round_trip_us`` is measured from the moment a request is handed to gRPC.

        Example::

            for out in client.sample_stream(({"labels": y} for y in batches), num_samples=64):
                train_step(out.features, out.labels)
        """
        if window < 1:
            raise ValueError("window must be >= 1")
        slots = threading.Semaphore(window)
        pending: "queue.Queue[Tuple[Tuple[_tensors.Kind, Optional[_tensors.Kind]], float]]" = (
            queue.Queue()
        )
        done = threading.Event()
        failure: List[BaseException] = []

        def produce() -> Iterator[pb.SampleRequest]:
            try:
                for item in requests:
                    args = dict(defaults)
                    if isinstance(item, Mapping):
                        args.update(item)
                    else:
                        args["labels"] = item
                    args.pop("timeout", None)
                    labels = args.pop("labels")
                    features = args.pop("features", None)
                    request, kinds = self._build(labels, features, **args)
                    # Blocks gRPC's sending thread while the window is full; wakes up to
                    # notice a consumer that went away.
                    while not slots.acquire(timeout=0.1):
                        if done.is_set():
                            return
                    if done.is_set():
                        return
                    pending.put((kinds, time.perf_counter()))
                    yield request
            except Exception as e:  # surfaced to the consumer once earlier results are out
                failure.append(e)

        stub = self._stubs[next(self._next) % len(self._stubs)]
        call = stub.SampleStream(
            produce(),
            timeout=timeout,
            metadata=self._metadata,
            wait_for_ready=self._wait_for_ready,
        )
        try:
            for response in call:
                kinds, sent = pending.get_nowait()
                slots.release()
                yield self._result(response, kinds, int((time.perf_counter() - sent) * 1e6))
        except grpc.RpcError as e:
            if failure:
                raise failure[0]
            raise from_rpc_error(e) from None
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
            raise from_rpc_error(e) from None
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
            raise from_rpc_error(e) from None
        lim = r.limits
        return ServerInfo(
            version=r.version,
            revision=r.revision,
            backend=r.backend,
            devices=[DeviceInfo(d.id, d.name, d.memory_bytes) for d in r.devices],
            limits=Limits(
                lim.max_message_bytes,
                lim.max_rows,
                lim.max_elements,
                lim.max_row_elements,
                lim.max_num_samples,
                lim.max_batch_rows,
            )
            if r.HasField("limits")
            else None,
        )

    # ------------------------------------------------------------------ helpers
    def _timeout(self, timeout: Optional[float]) -> Optional[float]:
        return self.timeout if timeout is None else timeout

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
        if fill not in _FILL:
            raise ValueError(f"fill must be one of {sorted(_FILL)}, got {fill!r}")
        label_tensor, label_kind = _tensors.to_wire(labels, "labels")
        feature_tensor, feature_kind = _tensors.optional_to_wire(features, "features")
        request = pb.SampleRequest(
            request_id=str(next(self._request_ids)),
            spec=pb.SamplingSpec(
                num_samples=int(num_samples),
                positive_fraction=float(positive_fraction),
                positive_label=int(positive_label),
                negative_label=int(negative_label),
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
            request.seed = int(seed)
        return request, (label_kind, feature_kind)

    @staticmethod
    def _result(
        r: pb.SampleResponse,
        kinds: Tuple[_tensors.Kind, Optional[_tensors.Kind]],
        round_trip_us: int,
    ) -> SampleResult:
        label_kind, feature_kind = kinds
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
        )


__all__ = [
    "Client",
    "SampleResult",
    "Timing",
    "ServerInfo",
    "DeviceInfo",
    "Limits",
    "GpuSamplerError",
    "service_config_json",
    "channel_targets",
]
