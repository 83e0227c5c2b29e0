"""gpusampler.aio.Client: the asyncio client, on ``grpc.aio``.

The same methods, arguments, results and errors as the blocking ``gpusampler.Client``; every
call is a coroutine, and ``sample_stream`` is an async iterator. It answers byte for byte what
the blocking client answers (both build the same requests and decode the same responses)::

    import gpusampler.aio

    async def train() -> None:
        async with gpusampler.aio.Client("127.0.0.1:50051") as client:
            out = await client.sample(labels, num_samples=256, seed=7)
            async for out in client.sample_stream(({"dataset": "train"} for _ in range(100)),
                                                  num_samples=256):
                ...

Create the client inside a running event loop (a ``grpc.aio`` channel belongs to the loop
that made it), and ``await client.close()`` (or use ``async with``) on the same loop.

Overlapping sampling with a synchronous training step. A step that does not ``await``
(a torch forward/backward) blocks the event loop, and a call only goes out when the loop
runs it. So create the task of step i+1 *before* training step i, and give the loop two
turns: the first starts the task (which creates the gRPC call), the second lets the call
send its request. With one turn (or none) nothing is sent until the step is over, and
there is no overlap at all::

    next_batch = asyncio.ensure_future(client.sample(dataset="train", num_samples=256,
                                                     seed=seed_of(0)))
    for step in range(steps):
        out = await next_batch
        if step + 1 < steps:
            next_batch = asyncio.ensure_future(client.sample(dataset="train",
                                                             num_samples=256,
                                                             seed=seed_of(step + 1)))
            await asyncio.sleep(0)   # turn 1: the task starts, creating the call
            await asyncio.sleep(0)   # turn 2: the call sends its request
        train_step(out)              # synchronous; the server samples step + 1 meanwhile

``sample_stream`` with ``window >= 2`` needs no extra turn: the requests of the window are
written while the loop waits for the previous answer, so the next one is already at the
server when the loop body trains. ``tests/python/test_data_aio_overlap.py`` checks both
against the server's counters (grpcio 1.51).
"""

from __future__ import annotations

import asyncio
import time
from typing import (Any, AsyncIterable, AsyncIterator, Awaitable, Callable, Iterable, List,
                    Optional, Sequence, Tuple, TypeVar, Union)

import grpc
import grpc.aio

from gpusampler import _datasets, _health
from gpusampler._args import check_name, check_timeout
from gpusampler._base import ClientBase, Targets
from gpusampler._classes import Class
from gpusampler._datasets import DatasetInfo
from gpusampler._results import SampleResult, ServerInfo
from gpusampler._shm import Region
from gpusampler._stream import InFlight, Sent, round_trip_us
from gpusampler._tensors import Kinds
from gpusampler.errors import GpuSamplerError
from gpusampler.v1 import sampler_pb2 as pb

T = TypeVar("T")


class Client(ClientBase):
    __doc__ = (ClientBase.__doc__ or "").replace(
        "Thread-safe; reuse one per process.",
        "asyncio: every call is a coroutine; create and use it on one event loop.")

    _api = grpc.aio

    # ------------------------------------------------------------------ lifecycle
    async def close(self) -> None:
        """Closes the channels. Calls in flight are cancelled."""
        for c in self._connection.channels():
            await c.close()

    async def __aenter__(self) -> "Client":
        return self

    async def __aexit__(self, *exc: Any) -> None:
        await self.close()

    # ------------------------------------------------------------------ calls
    async def _unary(self, method: Callable[..., Awaitable[T]], request: Any,
                     timeout: Optional[float]) -> T:
        try:
            return await method(request, **self._call_options(timeout))
        except grpc.RpcError as e:
            raise self._error(e) from None

    async def sample(
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
        """As ``gpusampler.Client.sample``, awaited."""
        request, kinds, timeout = self._sample_request(locals())
        start = time.perf_counter()
        response = await self._unary(self._connection.stub().Sample, request, timeout)
        return self._result(response, request, kinds, int((time.perf_counter() - start) * 1e6))

    async def sample_stream(
        self,
        requests: Union[Iterable[Any], AsyncIterable[Any]],
        *,
        window: int = 8,
        timeout: Optional[float] = None,
        stream_timeout: Optional[float] = None,
        **defaults: Any,
    ) -> AsyncIterator[SampleResult]:
        """As ``gpusampler.Client.sample_stream``, as an async iterator; ``requests`` may be
        an iterable or an async iterable of requests (mappings of ``sample()`` arguments,
        inline ``labels`` or a ``dataset``, or just the labels).

        At most ``window`` requests are unanswered; ``timeout`` is per message (each
        response within ``timeout`` s of sending its request, else the stream is cancelled
        and DeadlineExceededError raised); ``stream_timeout`` bounds the whole stream.
        A failing request raises its error after the results of all earlier requests.
        ``Timing.wait_us`` is 0: responses wait in gRPC's buffer, not in this client.
        """
        window, per_message, stream_timeout = self._stream_settings(window, timeout,
                                                                    stream_timeout, defaults)
        call = self._connection.stub().SampleStream(
            **self._call_options(stream_timeout, whole_stream=True))
        pump = _Pump(call, InFlight(per_message), window)
        pump.start(_items(requests), lambda i, item: self._stream_request(i, item, defaults))
        try:
            while (arrival := await pump.next_response(self._error)) is not None:
                response, sent, arrived = arrival
                yield self._result(response, sent.request, sent.kinds,
                                   round_trip_us(sent, arrived))
        finally:
            pump.stop()
        pump.raise_failure()

    async def health(self, service: str = "", *, timeout: Optional[float] = None) -> str:
        """As ``gpusampler.Client.health``, awaited."""
        check = self._connection.health_stub().Check
        return _health.status_name(await self._unary(check, _health.request(service), timeout))

    async def info(self, *, timeout: Optional[float] = None) -> ServerInfo:
        """As ``gpusampler.Client.info``, awaited."""
        stub = self._connection.stub()
        return ServerInfo._from_pb(await self._unary(stub.GetServerInfo,
                                                     pb.GetServerInfoRequest(), timeout))

    # ------------------------------------------------------------------ datasets
    # ------------------------------------------------------------------ shared memory
    async def register_region(self, size: int, *, name: Optional[str] = None,
                              shm_key_prefix: str = "/gpusampler",
                              timeout: Optional[float] = None) -> Region:
        """As ``gpusampler.Client.register_region``, awaited. ``await client.
        unregister_region(region)`` releases it (``Region.close`` is for blocking clients)."""
        timeout = check_timeout("timeout", timeout)
        region, request = self._new_region(size, name, shm_key_prefix)
        try:
            await self._unary(self._connection.stub().RegisterRegion, request, timeout)
        except BaseException:
            region._release()
            raise
        self._regions[region.name] = region
        return region

    async def unregister_region(self, region: Union[Region, str], *,
                                timeout: Optional[float] = None) -> None:
        """As ``gpusampler.Client.unregister_region``, awaited."""
        name = region.name if isinstance(region, Region) else check_name("region", region)
        timeout = check_timeout("timeout", timeout)
        own = self._regions.pop(name, None)
        try:
            await self._unary(self._connection.stub().UnregisterRegion,
                              pb.UnregisterRegionRequest(name=name), timeout)
        finally:
            if own is not None:
                own._release()

    async def list_regions(self, *, timeout: Optional[float] = None) -> List[Tuple[str, int]]:
        """As ``gpusampler.Client.list_regions``, awaited."""
        timeout = check_timeout("timeout", timeout)
        r = await self._unary(self._connection.stub().ListRegions, pb.ListRegionsRequest(),
                              timeout)
        return [(x.name, int(x.byte_size)) for x in r.regions]

    async def create_dataset(
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
        """As ``gpusampler.Client.create_dataset``, awaited; without a shared repository,
        the uploads to several addresses run concurrently."""
        timeout = check_timeout("timeout", timeout)
        chunks = self._upload(name, labels, features, row_splits, replace, chunk_bytes,
                              progress, scores)
        infos, failed = await self._fan_out(await self._dataset_targets(timeout), lambda stub: (
            stub.CreateDataset(chunks(), **self._call_options(timeout))))
        return _datasets.created(name, infos, failed)

    async def delete_dataset(self, name: str, *, timeout: Optional[float] = None) -> None:
        """As ``gpusampler.Client.delete_dataset``, awaited."""
        request = _datasets.delete_request(name)
        timeout = check_timeout("timeout", timeout)
        done, failed = await self._fan_out(await self._dataset_targets(timeout), lambda stub: (
            stub.DeleteDataset(request, **self._call_options(timeout))))
        _datasets.check_deleted(name, list(done), failed)

    async def list_datasets(self, *, timeout: Optional[float] = None) -> List[DatasetInfo]:
        """As ``gpusampler.Client.list_datasets``, awaited."""
        timeout = check_timeout("timeout", timeout)
        lists, failed = await self._fan_out(await self._dataset_targets(timeout), lambda stub: (
            stub.ListDatasets(pb.ListDatasetsRequest(), **self._call_options(timeout))))
        return _datasets.listed(lists, failed)

    async def _dataset_targets(self, timeout: Optional[float]) -> Targets:
        if self._repository_unknown():
            self._repository = (await self.info(timeout=timeout)).dataset_repository
        return self._targets()

    async def _fan_out(self, targets: Targets,
                       call: Callable[[Any], Awaitable[T]]) -> _datasets.Outcomes[T]:
        """``call`` on the stub of every target, concurrently."""
        results = await asyncio.gather(*(call(stub) for _, stub in targets),
                                       return_exceptions=True)
        return self._outcomes(targets, results)


async def _items(requests: Union[Iterable[Any], AsyncIterable[Any]]) -> AsyncIterator[Any]:
    """The items of an iterable or an async iterable."""
    if hasattr(requests, "__aiter__"):
        async for item in requests:
            yield item
    else:
        for item in requests:
            yield item


class _Pump:
    """The tasks of one asyncio sample_stream: a writer sends the requests, at most
    ``window`` unanswered; the caller's iteration reads the responses in order
    (``next_response``), enforcing the per-message deadline."""

    def __init__(self, call: Any, in_flight: InFlight, window: int) -> None:
        self._call = call
        self._in_flight = in_flight
        self._slots = asyncio.Semaphore(window)
        self._failure: List[BaseException] = []
        self._writer: Optional[asyncio.Future[None]] = None
        self._read: Optional[asyncio.Future[Any]] = None

    def start(self, items: AsyncIterator[Any],
              check: Callable[[int, Any], Tuple[pb.SampleRequest, Kinds]]) -> None:
        """Starts writing the items, as checked requests."""
        self._writer = asyncio.ensure_future(self._write(items, check))

    async def _write(self, items: AsyncIterator[Any],
                     check: Callable[[int, Any], Tuple[pb.SampleRequest, Kinds]]) -> None:
        """A request that fails its checks (or a failing iterable) ends the writing; its
        error comes after the results of the earlier requests."""
        index = 0
        try:
            async for item in items:
                request, kinds = check(index, item)
                index += 1
                await self._slots.acquire()
                self._in_flight.add(request, kinds)
                try:
                    await self._call.write(request)
                except Exception:  # the stream ended; the reader reports why
                    return
        except Exception as e:
            self._failure.append(e)
        try:
            await self._call.done_writing()
        except Exception:
            pass

    async def next_response(self, error: Callable[[grpc.RpcError], GpuSamplerError]
                            ) -> Optional[Tuple[pb.SampleResponse, Sent, float]]:
        """The next response, with its request and when it arrived; None once the stream
        has ended. A failed stream raises the writer's error if it had one, else the
        stream's (``error`` maps it)."""
        assert self._writer is not None
        while True:
            if self._read is None:
                self._read = asyncio.ensure_future(self._call.read())
            due = self._in_flight.deadline()
            waiting = {self._read} if self._writer.done() else {self._read, self._writer}
            done, _ = await asyncio.wait(
                waiting, timeout=None if due is None else max(0.0, due[0] - time.perf_counter()),
                return_when=asyncio.FIRST_COMPLETED)
            if self._read in done:
                arrived = time.perf_counter()
                response = self._take_read(error)
                if response is grpc.aio.EOF:
                    return None
                sent = self._in_flight.pop()
                self._slots.release()
                return response, sent, arrived
            if not done and due is not None and time.perf_counter() >= due[0]:
                self._call.cancel()
                raise self._in_flight.deadline_error(due[1])

    def _take_read(self, error: Callable[[grpc.RpcError], GpuSamplerError]) -> Any:
        """The finished read's response (or EOF)."""
        assert self._read is not None
        read, self._read = self._read, None
        try:
            return read.result()
        except grpc.RpcError as e:
            raise (self._failure[0] if self._failure else error(e)) from None

    def stop(self) -> None:
        """Cancels the writer, a pending read and the call."""
        if self._writer is not None:
            self._writer.cancel()
        if self._read is not None:
            self._read.cancel()
        self._call.cancel()

    def raise_failure(self) -> None:
        """Raises the writer's error, if it had one."""
        if self._failure:
            raise self._failure[0]


__all__ = ["Client"]
