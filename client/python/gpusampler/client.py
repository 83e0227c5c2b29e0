"""gpusampler.Client: the blocking client of the gpusampler.v1.Sampler service.

Its arguments are checked, its requests built and its answers decoded by what it shares with
the asyncio client (gpusampler._base and the modules it uses); this module makes the calls.
"""

from __future__ import annotations

import queue
import threading
import time
from typing import (Any, Callable, Iterable, Iterator, List, Optional, Sequence, Tuple, TypeVar,
                    Union)

import grpc

from gpusampler import _datasets, _health
from gpusampler._args import check_name, check_timeout
from gpusampler._base import ClientBase, Targets
from gpusampler._classes import Class
from gpusampler._channel import channel_targets, service_config_json
from gpusampler._datasets import DatasetInfo
from gpusampler._shm import Region
from gpusampler._results import DeviceInfo, Limits, SampleResult, ServerInfo, Timing
from gpusampler._stream import InFlight, Sent, round_trip_us
from gpusampler._tensors import Kinds
from gpusampler.errors import GpuSamplerError, SamplingQualityWarning
from gpusampler.v1 import sampler_pb2 as pb

T = TypeVar("T")


class Client(ClientBase):
    __doc__ = ClientBase.__doc__

    # ------------------------------------------------------------------ lifecycle
    def close(self) -> None:
        """Closes the channels. Calls in flight are cancelled."""
        for c in self._connection.channels():
            c.close()

    def __enter__(self) -> "Client":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    # ------------------------------------------------------------------ calls
    def _unary(self, method: Callable[..., T], request: Any, timeout: Optional[float]) -> T:
        try:
            return method(request, **self._call_options(timeout))
        except grpc.RpcError as e:
            raise self._error(e) from None

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
        classes: Optional[Sequence[Class]] = None,
        fill_order: Optional[Sequence[int]] = None,
        scores: Any = None,
        timeout: Optional[float] = None,
        epoch: Any = None,
        output_region: Any = None,
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
            classes: instead of the two-class arguments (which must then stay at their
                defaults), up to 256 ``gpusampler.Class`` objects, each a set of label
                values with a share of K and a selection (docs/semantics.md, "Classes").
            fill_order: with ``classes``, the class indices that fill unused quota, in order.
            scores: float32 scores laid out like ``labels`` (with ``dataset``: aligned with
                the concatenation of the requested rows; they win over stored scores); needed
                by ``"weighted"``, ``"hardest"`` and ``"mixed"`` classes. The result's
                ``num_per_class`` is then int32 ``[B, C]`` (``[C]`` for 1-D labels).
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
            epoch: with ``dataset`` (and without ``rows``), answer this rank's step of an
                epoch (docs/semantics.md, "Epochs"): a ``gpusampler.Epoch`` or a dict of its fields
                (``mode="rows"|"elements"``, ``shuffle_seed``, ``epoch``, ``world_size``,
                ``rank``, ``step``, ``rows_per_step``, ``drop_last``). The result's
                ``epoch_steps`` is this rank's steps in the epoch; a step past it is
                InvalidArgumentError with code OUT_OF_RANGE.
            output_region: a ``Region`` from ``register_region`` (or ``region.window(offset,
                byte_size)``): the server writes the answer's bytes there and the result's
                arrays view them, without a copy; not bound by ``--max-message-bytes``
                (docs/shared-memory.md). They stay valid until the same bytes are written
                again or the region is closed.

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
        request, kinds, timeout = self._sample_request(locals())
        start = time.perf_counter()
        response = self._unary(self._connection.stub().Sample, request, timeout)
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
        window, per_message, stream_timeout = self._stream_settings(window, timeout,
                                                                    stream_timeout, defaults)
        pump = _Pump(InFlight(per_message), window)
        pump.start(self._connection.stub().SampleStream(
            pump.requests(requests, lambda i, item: self._stream_request(i, item, defaults)),
            **self._call_options(stream_timeout, whole_stream=True)))
        try:
            while (arrival := pump.next_response(self._error)) is not None:
                response, sent, arrived = arrival
                result = self._result(response, sent.request, sent.kinds,
                                      round_trip_us(sent, arrived))
                result.timing.wait_us = int((time.perf_counter() - arrived) * 1e6)
                yield result
        finally:
            pump.stop()
        pump.raise_failure()

    def health(self, service: str = "", *, timeout: Optional[float] = None) -> str:
        """grpc.health.v1 status of ``service`` ("" = the whole server): "SERVING",
        "NOT_SERVING", "UNKNOWN" or "SERVICE_UNKNOWN"."""
        check = self._connection.health_stub().Check
        return _health.status_name(self._unary(check, _health.request(service), timeout))

    def info(self, *, timeout: Optional[float] = None) -> ServerInfo:
        """The server's version, devices, backend and limits."""
        stub = self._connection.stub()
        return ServerInfo._from_pb(self._unary(stub.GetServerInfo, pb.GetServerInfoRequest(),
                                               timeout))

    # ------------------------------------------------------------------ shared memory
    def register_region(self, size: int, *, name: Optional[str] = None,
                        shm_key_prefix: str = "/gpusampler",
                        timeout: Optional[float] = None) -> Region:
        """Creates a POSIX shared-memory object of ``size`` bytes (under ``/dev/shm``, its key
        starting with ``shm_key_prefix``, which must match the server's ``--shm-key-prefix``)
        and registers it, so that ``sample(..., output_region=region)`` answers there. The
        server must run on this host with ``--allow-shared-memory``
        (docs/shared-memory.md). ``region.close()`` unregisters and removes it."""
        timeout = check_timeout("timeout", timeout)
        region, request = self._new_region(size, name, shm_key_prefix)
        try:
            self._unary(self._connection.stub().RegisterRegion, request, timeout)
        except BaseException:
            region._release()
            raise
        self._regions[region.name] = region
        return region

    def unregister_region(self, region: Union[Region, str], *,
                          timeout: Optional[float] = None) -> None:
        """Unregisters a region (requests still writing to it fail CANCELLED) and, for one
        this client created, removes its object."""
        name = region.name if isinstance(region, Region) else check_name("region", region)
        timeout = check_timeout("timeout", timeout)
        own = self._regions.pop(name, None)
        try:
            self._unary(self._connection.stub().UnregisterRegion,
                        pb.UnregisterRegionRequest(name=name), timeout)
        finally:
            if own is not None:
                own._release()

    def list_regions(self, *, timeout: Optional[float] = None) -> List[Tuple[str, int]]:
        """(name, byte_size) of the regions this client's token registered."""
        timeout = check_timeout("timeout", timeout)
        r = self._unary(self._connection.stub().ListRegions, pb.ListRegionsRequest(), timeout)
        return [(x.name, int(x.byte_size)) for x in r.regions]

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
        scores: Any = None,
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
        timeout = check_timeout("timeout", timeout)
        chunks = self._upload(name, labels, features, row_splits, replace, chunk_bytes,
                              progress, scores)
        # Without a shared repository every address keeps its own copy, so that a request
        # sent to any of them finds it.
        infos, failed = self._fan_out(self._dataset_targets(timeout), lambda stub: (
            stub.CreateDataset(chunks(), **self._call_options(timeout))))
        return _datasets.created(name, infos, failed)

    def delete_dataset(self, name: str, *, timeout: Optional[float] = None) -> None:
        """Deletes a resident dataset (requests already accepted still complete).

        Without a shared repository and with several addresses, deletes it on every address;
        an address that does not hold it counts as done, and NotFoundError comes only when
        none held it. With a repository, any one replica deletes it for all.

        Raises NotFoundError when there is none of that name; when some addresses fail, the
        error of the first names each failed address (``error.failed``).
        """
        request = _datasets.delete_request(name)
        timeout = check_timeout("timeout", timeout)
        done, failed = self._fan_out(self._dataset_targets(timeout), lambda stub: (
            stub.DeleteDataset(request, **self._call_options(timeout))))
        _datasets.check_deleted(name, list(done), failed)

    def list_datasets(self, *, timeout: Optional[float] = None) -> List[DatasetInfo]:
        """The resident datasets. Without a shared repository and with several addresses,
        the union over every address: each version once, ``replicas`` naming the addresses
        that hold it (an address that fails raises, naming it)."""
        timeout = check_timeout("timeout", timeout)
        lists, failed = self._fan_out(self._dataset_targets(timeout), lambda stub: (
            stub.ListDatasets(pb.ListDatasetsRequest(), **self._call_options(timeout))))
        return _datasets.listed(lists, failed)

    def _dataset_targets(self, timeout: Optional[float]) -> Targets:
        if self._repository_unknown():
            self._repository = self.info(timeout=timeout).dataset_repository
        return self._targets()

    def _fan_out(self, targets: Targets, call: Callable[[Any], T]) -> _datasets.Outcomes[T]:
        """``call`` on the stub of every target, one after the other."""
        results: List[Any] = []
        for _, stub in targets:
            try:
                results.append(call(stub))
            except grpc.RpcError as e:
                results.append(e)
        return self._outcomes(targets, results)


class _Pump:
    """The threads of one blocking sample_stream. gRPC's sending thread pulls requests
    (``requests``), at most ``window`` unanswered; a reader thread stamps each response as
    it arrives, so that round_trip_us leaves out the time it then waits for the caller; the
    caller's thread takes the responses in order (``next_response``), enforcing the
    per-message deadline."""

    _POLL = 0.1  # seconds between checks of a stopped consumer or a passed deadline

    def __init__(self, in_flight: InFlight, window: int) -> None:
        self._in_flight = in_flight
        self._slots = threading.Semaphore(window)
        # (what, value, arrived, sent): "response", "end", "rpc_error" or "client_error".
        self._inbox: "queue.Queue[Tuple[str, Any, float, Optional[Sent]]]" = queue.Queue()
        self._done = threading.Event()
        self._failure: List[BaseException] = []
        self._call: Any = None

    def requests(self, items: Iterable[Any],
                 check: Callable[[int, Any], Tuple[pb.SampleRequest, Kinds]]) -> Iterator[
                     pb.SampleRequest]:
        """The items as checked requests, sent as the window allows. A request that fails
        its checks (or a failing iterable) ends them; its error comes after the results of
        the earlier requests."""
        try:
            for index, item in enumerate(items):
                request, kinds = check(index, item)
                # Blocks gRPC's sending thread while the window is full; wakes up to notice
                # a consumer that went away.
                while not self._slots.acquire(timeout=self._POLL):
                    if self._done.is_set():
                        return
                if self._done.is_set():
                    return
                self._in_flight.add(request, kinds)
                yield request
        except Exception as e:  # surfaced to the consumer once earlier results are out
            self._failure.append(e)
            self._inbox.put(("client_error", e, time.perf_counter(), None))

    def start(self, call: Any) -> None:
        """Starts reading the responses of ``call``, the stream that sends ``requests``."""
        self._call = call
        threading.Thread(target=self._read, name="gpusampler-stream-reader",
                         daemon=True).start()

    def _read(self) -> None:
        try:
            for response in self._call:
                arrived = time.perf_counter()
                self._inbox.put(("response", response, arrived, self._in_flight.pop()))
            self._inbox.put(("end", None, time.perf_counter(), None))
        except grpc.RpcError as e:
            self._inbox.put(("rpc_error", e, time.perf_counter(), None))

    def next_response(self, error: Callable[[grpc.RpcError], GpuSamplerError]) -> Optional[
            Tuple[pb.SampleResponse, Sent, float]]:
        """The next response, with its request and when it arrived; None once the stream
        has ended. A failed stream raises the sender's error if it had one, else the
        stream's (``error`` maps it)."""
        while True:
            event = self._next_event()
            if event is None:
                continue
            what, value, arrived, sent = event
            if what == "response":
                assert sent is not None
                self._slots.release()
                return value, sent, arrived
            if what == "end":
                return None
            if what == "rpc_error":
                self.raise_failure()
                raise error(value) from None
            # client_error: the sender stopped; the rest of the responses first

    def _next_event(self) -> Optional[Tuple[str, Any, float, Optional[Sent]]]:
        """The next event of the reader or sender; None after a poll interval without one.
        Cancels the stream when the oldest request's deadline has passed."""
        wait = self._POLL  # nothing in flight: wait for the sender, re-checking
        due = self._in_flight.deadline()
        if due is not None:
            left = due[0] - time.perf_counter()
            if left <= 0:
                self._call.cancel()
                raise self._in_flight.deadline_error(due[1])
            wait = min(left, self._POLL)
        try:
            return self._inbox.get(timeout=wait)
        except queue.Empty:
            return None

    def stop(self) -> None:
        """Ends the sender and cancels the call (a no-op once it has ended)."""
        self._done.set()
        self._call.cancel()

    def raise_failure(self) -> None:
        """Raises the sender's error, if it had one."""
        if self._failure:
            raise self._failure[0]


# The blocking Client, and the names this module has always exported (the package's types,
# now defined in the modules they belong to).
__all__ = ["Client", "DatasetInfo", "SampleResult", "Timing", "ServerInfo", "DeviceInfo",
           "Limits", "GpuSamplerError", "SamplingQualityWarning", "service_config_json",
           "channel_targets"]
