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
"""

from __future__ import annotations

import asyncio
import collections
import time
from typing import (Any, AsyncIterable, AsyncIterator, Deque, Dict, Iterable, List,
                    Optional, Sequence, Tuple, Union)

import grpc
import grpc.aio

from gpusampler.client import (
    DatasetInfo,
    SampleResult,
    ServerInfo,
    _check_int,
    _check_timeout,
    _ClientBase,
    _decode_health_response,
    _encode_health_request,
    _HEALTH,
    _Kinds,
    channel_targets,
)
from gpusampler.errors import DeadlineExceededError, GpuSamplerError
from gpusampler.v1 import sampler_pb2 as pb
from gpusampler.v1 import sampler_pb2_grpc as pb_grpc


class Client(_ClientBase):
    __doc__ = (_ClientBase.__doc__ or "").replace(
        "Thread-safe; reuse one per process.",
        "asyncio: every call is a coroutine; create and use it on one event loop.")

    def _open(self) -> None:
        self._channels: List[grpc.aio.Channel] = [
            self._new_channel(grpc.aio, t) for t in channel_targets(self._targets)]
        self._stubs = [pb_grpc.SamplerStub(c) for c in self._channels]
        self._health = [
            c.unary_unary(
                "/grpc.health.v1.Health/Check",
                request_serializer=_encode_health_request,
                response_deserializer=_decode_health_response,
            )
            for c in self._channels
        ]
        self._address_channels: List[grpc.aio.Channel] = []
        self._address_stubs: Optional[List[Any]] = None

    # ------------------------------------------------------------------ lifecycle
    async def close(self) -> None:
        """Closes the channels. Calls in flight are cancelled."""
        for c in self._channels + self._address_channels:
            await c.close()

    async def __aenter__(self) -> "Client":
        return self

    async def __aexit__(self, *exc: Any) -> None:
        await self.close()

    def _stub(self) -> Any:
        return self._stubs[next(self._next) % len(self._stubs)]

    # ------------------------------------------------------------------ calls
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
        timeout: Optional[float] = None,
    ) -> SampleResult:
        """As ``gpusampler.Client.sample``, awaited."""
        timeout = _check_timeout("timeout", timeout)
        request, kinds = self._prepare(dict(
            labels=labels, features=features, num_samples=num_samples, dataset=dataset,
            rows=rows, return_features=return_features, positive_fraction=positive_fraction,
            positive_label=positive_label, negative_label=negative_label, fill=fill, seed=seed,
            row_splits=row_splits))
        start = time.perf_counter()
        try:
            response = await self._stub().Sample(
                request, timeout=self._timeout(timeout), metadata=self._metadata,
                wait_for_ready=self._wait_for_ready)
        except grpc.RpcError as e:
            raise self._error(e) from None
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
        window = _check_int("window", window, 1)
        per_message = self._timeout(_check_timeout("timeout", timeout))
        stream_timeout = _check_timeout("stream_timeout", stream_timeout)
        self._check_stream_defaults(defaults)
        slots = asyncio.Semaphore(window)
        sent: Deque[Tuple[pb.SampleRequest, _Kinds, float]] = collections.deque()
        failure: List[BaseException] = []
        call = self._stub().SampleStream(timeout=stream_timeout, metadata=self._metadata,
                                         wait_for_ready=self._wait_for_ready)

        async def items() -> AsyncIterator[Any]:
            if hasattr(requests, "__aiter__"):
                async for item in requests:
                    yield item
            else:
                for item in requests:
                    yield item

        async def write() -> None:
            index = 0
            try:
                async for item in items():
                    request, kinds = self._stream_request(index, item, defaults)
                    index += 1
                    await slots.acquire()
                    sent.append((request, kinds, time.perf_counter()))
                    try:
                        await call.write(request)
                    except Exception:  # the stream ended; the reader reports why
                        return
            except Exception as e:  # a bad request or a failing iterable: surfaced once
                failure.append(e)  # the results of the earlier requests are out
            try:
                await call.done_writing()
            except Exception:
                pass

        writer = asyncio.ensure_future(write())
        read: Optional[asyncio.Future[Any]] = None
        try:
            while True:
                if read is None:
                    read = asyncio.ensure_future(call.read())
                wait: Optional[float] = None
                if per_message is not None and sent:
                    wait = max(0.0, sent[0][2] + per_message - time.perf_counter())
                waiting = {read} if writer.done() else {read, writer}
                done, _ = await asyncio.wait(waiting, timeout=wait,
                                             return_when=asyncio.FIRST_COMPLETED)
                if read in done:
                    arrived = time.perf_counter()
                    try:
                        response = read.result()
                    except grpc.RpcError as e:
                        if failure:
                            raise failure[0] from None
                        raise self._error(e) from None
                    read = None
                    if response is grpc.aio.EOF:
                        break
                    request, kinds, sent_at = sent.popleft()
                    slots.release()
                    yield self._result(response, request, kinds,
                                       int((arrived - sent_at) * 1e6))
                elif not done and sent and per_message is not None and (
                        time.perf_counter() >= sent[0][2] + per_message):
                    oldest = sent[0][0]
                    call.cancel()
                    raise DeadlineExceededError(
                        grpc.StatusCode.DEADLINE_EXCEEDED,
                        f"sample_stream: no response within timeout={per_message:g} s of "
                        f"sending request {oldest.request_id!r} (per-message deadline); "
                        f"the stream was cancelled")
        finally:
            writer.cancel()
            if read is not None:
                read.cancel()
            call.cancel()
        if failure:
            raise failure[0]

    async def health(self, service: str = "", *, timeout: Optional[float] = None) -> str:
        """As ``gpusampler.Client.health``, awaited."""
        check = self._health[next(self._next) % len(self._health)]
        try:
            status = await check(service, timeout=self._timeout(timeout),
                                 metadata=self._metadata, wait_for_ready=self._wait_for_ready)
        except grpc.RpcError as e:
            raise self._error(e) from None
        return _HEALTH.get(status, "UNKNOWN")

    async def info(self, *, timeout: Optional[float] = None) -> ServerInfo:
        """As ``gpusampler.Client.info``, awaited."""
        try:
            r = await self._stub().GetServerInfo(
                pb.GetServerInfoRequest(), timeout=self._timeout(timeout),
                metadata=self._metadata, wait_for_ready=self._wait_for_ready)
        except grpc.RpcError as e:
            raise self._error(e) from None
        return ServerInfo._from_pb(r)

    # ------------------------------------------------------------------ datasets
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
    ) -> DatasetInfo:
        """As ``gpusampler.Client.create_dataset``, awaited; without a shared repository,
        the uploads to several addresses run concurrently."""
        timeout = _check_timeout("timeout", timeout)
        make_chunks = self._dataset_chunks(name, labels, features, row_splits, replace,
                                           chunk_bytes, progress)
        targets = await self._dataset_targets(timeout)

        async def one(stub: Any) -> pb.DatasetInfo:
            try:
                return await stub.CreateDataset(
                    make_chunks(), timeout=self._timeout(timeout), metadata=self._metadata,
                    wait_for_ready=self._wait_for_ready)
            except grpc.RpcError as e:
                raise self._error(e) from None

        if targets is None:
            return DatasetInfo._from_pb(await one(self._stub()))
        outcomes = await asyncio.gather(*(one(s) for _, s in targets), return_exceptions=True)
        infos: Dict[str, pb.DatasetInfo] = {}
        failed: Dict[str, GpuSamplerError] = {}
        for (address, _), outcome in zip(targets, outcomes):
            if isinstance(outcome, GpuSamplerError):
                failed[address] = outcome
            elif isinstance(outcome, BaseException):
                raise outcome
            else:
                infos[address] = outcome
        if failed:
            raise self._fanout_error(f"create_dataset({name!r})", failed, list(infos))
        return DatasetInfo._from_pb(next(iter(infos.values())), tuple(infos))

    async def delete_dataset(self, name: str, *, timeout: Optional[float] = None) -> None:
        """As ``gpusampler.Client.delete_dataset``, awaited."""
        if not isinstance(name, str):
            raise TypeError(f"name must be a string, got {type(name).__name__} {name!r}")
        timeout = _check_timeout("timeout", timeout)
        request = pb.DeleteDatasetRequest(name=name)
        targets = await self._dataset_targets(timeout) or [("", self._stub())]
        outcomes = await asyncio.gather(
            *(s.DeleteDataset(request, timeout=self._timeout(timeout), metadata=self._metadata,
                              wait_for_ready=self._wait_for_ready) for _, s in targets),
            return_exceptions=True)
        done: List[str] = []
        failed: Dict[str, GpuSamplerError] = {}
        for (address, _), outcome in zip(targets, outcomes):
            if isinstance(outcome, grpc.RpcError):
                failed[address] = self._error(outcome)
            elif isinstance(outcome, BaseException):
                raise outcome
            else:
                done.append(address)
        self._check_deleted(name, done, failed)

    async def list_datasets(self, *, timeout: Optional[float] = None) -> List[DatasetInfo]:
        """As ``gpusampler.Client.list_datasets``, awaited."""
        timeout = _check_timeout("timeout", timeout)
        targets = await self._dataset_targets(timeout) or [("", self._stub())]
        outcomes = await asyncio.gather(
            *(s.ListDatasets(pb.ListDatasetsRequest(), timeout=self._timeout(timeout),
                             metadata=self._metadata, wait_for_ready=self._wait_for_ready)
              for _, s in targets),
            return_exceptions=True)
        lists: List[Tuple[str, Sequence[pb.DatasetInfo]]] = []
        failed: Dict[str, GpuSamplerError] = {}
        for (address, _), outcome in zip(targets, outcomes):
            if isinstance(outcome, grpc.RpcError):
                failed[address] = self._error(outcome)
            elif isinstance(outcome, BaseException):
                raise outcome
            else:
                lists.append((address, list(outcome.datasets)))
        return self._listed(lists, failed)

    async def _dataset_targets(self, timeout: Optional[float]) -> Optional[
            List[Tuple[str, Any]]]:
        if len(self._targets) < 2:
            return None
        if self._repository is None:
            self._repository = (await self.info(timeout=timeout)).dataset_repository
        if self._repository:
            return None
        if self._address_stubs is None:
            if channel_targets(self._targets) == self._targets:
                self._address_stubs = list(self._stubs)
            else:
                self._address_channels = [self._new_channel(grpc.aio, t) for t in self._targets]
                self._address_stubs = [pb_grpc.SamplerStub(c) for c in self._address_channels]
        return list(zip(self._targets, self._address_stubs))


__all__ = ["Client"]
