"""What the blocking and the asyncio clients share: the constructor (arguments checked,
channels opened) and every step of a call except the call itself. Each client's methods
check and build with these, make the gRPC call (blocking or awaited), and decode or merge
the answer with these, so the two answer alike."""

from __future__ import annotations

import itertools
from typing import Any, Callable, Dict, Iterator, List, Mapping, Optional, Sequence, Tuple, Union

import grpc

from gpusampler import _datasets, _requests, _shm
from gpusampler._args import (check_bool, check_int, check_name, check_positive,
                              check_targets, check_timeout)
from gpusampler._channel import Connection, channel_options, credentials
from gpusampler._results import QualityWarnings, SampleResult, sample_result
from gpusampler._tensors import Kinds
from gpusampler.errors import GpuSamplerError, from_rpc_error
from gpusampler.v1 import sampler_pb2 as pb

#: A dataset call's destinations: (address, stub) pairs; the address "" stands for any one
#: replica (one address given, or servers sharing a dataset repository).
Targets = List[Tuple[str, Any]]


class ClientBase:
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

    #: The gRPC API the channels come from: ``grpc`` or ``grpc.aio``.
    _api: Any = grpc

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
        targets = check_targets(target)
        timeout = check_timeout("timeout", timeout)
        max_message_bytes = check_int("max_message_bytes", max_message_bytes, 1, (1 << 31) - 1)
        max_attempts = check_int("max_attempts", max_attempts, 1, 5)
        initial_backoff = check_positive("initial_backoff", initial_backoff)
        max_backoff = check_positive("max_backoff", max_backoff)
        keepalive_time = check_timeout("keepalive_time", keepalive_time)
        keepalive_timeout = check_positive("keepalive_timeout", keepalive_timeout)
        for name, flag in (("tls", tls), ("wait_for_ready", wait_for_ready),
                           ("warn_quality", warn_quality)):
            check_bool(name, flag)
        self.timeout = timeout
        self.max_message_bytes = max_message_bytes
        self._metadata: Tuple[Tuple[str, str], ...] = (
            (("authorization", f"Bearer {token}"),) if token else ())
        self._wait_for_ready = wait_for_ready
        self._quality = QualityWarnings(warn_quality)
        self._request_ids = itertools.count()
        #: shared memory: the regions this client registered, by name
        self._regions: Dict[str, _shm.Region] = {}
        # None until a server has said whether it has a shared dataset repository.
        self._repository: Optional[bool] = None
        # What built this client, so that a DataLoader worker can open its own copy.
        self._config: Tuple[List[str], Dict[str, Any]] = (list(targets), dict(
            timeout=timeout, token=token, tls=tls, root_certificates=root_certificates,
            private_key=private_key, certificate_chain=certificate_chain,
            server_name_override=server_name_override, max_message_bytes=max_message_bytes,
            max_attempts=max_attempts, initial_backoff=initial_backoff, max_backoff=max_backoff,
            wait_for_ready=wait_for_ready, keepalive_time=keepalive_time,
            keepalive_timeout=keepalive_timeout, options=tuple(options),
            warn_quality=warn_quality))
        self._connection = Connection(self._api, targets, channel_options(
            max_message_bytes=max_message_bytes, max_attempts=max_attempts,
            initial_backoff=initial_backoff, max_backoff=max_backoff,
            keepalive_time=keepalive_time, keepalive_timeout=keepalive_timeout,
            server_name_override=server_name_override, options=options),
            credentials(tls, root_certificates, private_key, certificate_chain))

    # ------------------------------------------------------------------ every call
    def _call_options(self, timeout: Optional[float], *,
                      whole_stream: bool = False) -> Dict[str, Any]:
        """The keyword arguments of a gRPC call: the deadline (``timeout``, else the
        client's; a whole stream has none by default), the bearer token, wait_for_ready."""
        if timeout is None and not whole_stream:
            timeout = self.timeout
        return dict(timeout=timeout, metadata=self._metadata,
                    wait_for_ready=self._wait_for_ready)

    def _error(self, error: grpc.RpcError) -> GpuSamplerError:
        """The exception for a failed call."""
        return from_rpc_error(error, self.max_message_bytes)

    # ------------------------------------------------------------------ sampling
    def _sample_request(self, args: Mapping[str, Any]) -> Tuple[pb.SampleRequest, Kinds,
                                                                  Optional[float]]:
        """sample()'s arguments (by name), checked: the request, how to decode its response,
        and the call's timeout."""
        timeout = check_timeout("timeout", args["timeout"])
        request, kinds = _requests.prepare(
            {k: v for k, v in args.items() if k in _requests.SAMPLE_ARGS}, self._request_ids,
            self.max_message_bytes)
        return request, kinds, timeout

    def _stream_settings(self, window: Any, timeout: Any, stream_timeout: Any,
                         defaults: Mapping[str, Any]) -> Tuple[int, Optional[float],
                                                               Optional[float]]:
        """sample_stream's own arguments, checked: the window, the per-message deadline
        (``timeout``, else the client's) and the whole stream's."""
        window = check_int("window", window, 1)
        per_message = check_timeout("timeout", timeout)
        per_message = self.timeout if per_message is None else per_message
        stream_timeout = check_timeout("stream_timeout", stream_timeout)
        _requests.check_stream_defaults(defaults)
        return window, per_message, stream_timeout

    def _stream_request(self, index: int, item: Any,
                        defaults: Mapping[str, Any]) -> Tuple[pb.SampleRequest, Kinds]:
        """Item ``index`` of sample_stream's requests as a checked request."""
        return _requests.stream_request(index, item, defaults, self._request_ids,
                                        self.max_message_bytes)

    def _result(self, response: pb.SampleResponse, request: pb.SampleRequest, kinds: Kinds,
                round_trip_us: int) -> SampleResult:
        """The result of ``response``; called from the public method itself, so that a
        quality warning points at the caller's line."""
        if request.HasField("output_region"):  # shared memory: views of the region
            arrays = _shm.view_result_arrays(response, self._window(request.output_region),
                                             kinds)
            self._quality.check(response, request.spec, stacklevel=4,
                                counts=(arrays["num_positive"], arrays["num_negative"]))
            return sample_result(response, kinds, round_trip_us, arrays)
        self._quality.check(response, request.spec, stacklevel=4)
        return sample_result(response, kinds, round_trip_us)

    # ------------------------------------------------------------------ shared memory
    def _new_region(self, size: int, name: Optional[str],
                    shm_key_prefix: str) -> Tuple[_shm.Region, pb.RegisterRegionRequest]:
        """register_region's object, created here, and its request."""
        if len(self._connection.targets) != 1:
            raise ValueError("register_region needs a client of one server address: shared "
                             "memory works only with a server on this host")
        if name is not None:
            check_name("name", name)
        name, key, shm = _shm.create(size, shm_key_prefix, name)
        region = _shm.Region(name, key, shm, size, self)
        return region, pb.RegisterRegionRequest(name=name, shm_key=key, offset=0,
                                                byte_size=size)

    def _window(self, output: pb.OutputRegion) -> "_shm.RegionWindow":
        region = self._regions.get(output.name)
        if region is None:
            raise ValueError(f"output_region {output.name!r} is not a region this client "
                             "registered (Client.register_region)")
        return region.window(output.offset, output.byte_size)

    # ------------------------------------------------------------------ datasets
    def _upload(self, name: str, labels: Any, features: Any, row_splits: Any, replace: bool,
                chunk_bytes: Optional[int], progress: Optional[bool],
                scores: Any = None) -> Callable[[], Iterator[pb.DatasetChunk]]:
        """create_dataset's arguments, checked, as a maker of the upload's chunk stream."""
        return _datasets.upload_chunks(name, labels, features, row_splits, replace,
                                       chunk_bytes, progress, self.max_message_bytes, scores)

    def _repository_unknown(self) -> bool:
        """Whether the dataset calls must first ask a server whether it has a shared
        repository (several addresses, or one DNS name of several addresses, and none has
        said yet)."""
        if self._repository is not None:
            return False
        return (len(self._connection.targets) >= 2 or
                self._connection.resolved_stubs() is not None)

    def _targets(self) -> Targets:
        """Where a dataset call goes, once the repository question is settled: any one
        replica (one address, or servers sharing a dataset repository), else every address
        given, each with its own stub. One DNS name (a headless Service) that resolves to
        several addresses counts as those addresses: without a repository each replica
        behind it keeps its own copy, and the round_robin sample calls reach all of them."""
        if self._repository:
            return [(_datasets.ANY, self._connection.stub())]
        if len(self._connection.targets) < 2:
            resolved = self._connection.resolved_stubs()
            return resolved if resolved is not None else [(_datasets.ANY,
                                                           self._connection.stub())]
        return self._connection.address_stubs()

    def _outcomes(self, targets: Targets, results: Sequence[Any]) -> _datasets.Outcomes[Any]:
        """A dataset call's results per target (answers, or the exceptions raised)."""
        return _datasets.outcomes([a for a, _ in targets], results, self._error)

