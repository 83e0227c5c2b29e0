"""sample_stream's bookkeeping, shared by both clients: the requests in flight and the
per-message deadline."""

from __future__ import annotations

import collections
import threading
import time
from typing import Deque, NamedTuple, Optional, Tuple

import grpc

from gpusampler._tensors import Kinds
from gpusampler.errors import DeadlineExceededError
from gpusampler.v1 import sampler_pb2 as pb


class Sent(NamedTuple):
    request: pb.SampleRequest
    kinds: Kinds
    at: float  #: time.perf_counter() when handed to gRPC


class InFlight:
    """The requests sent on a stream whose responses have not arrived, oldest first.
    Responses come in request order, and each must come within ``per_message`` seconds of
    its request's sending. Thread-safe: the blocking client adds from gRPC's sending thread
    and pops from its reader thread."""

    def __init__(self, per_message: Optional[float]) -> None:
        self.per_message = per_message
        self._sent: Deque[Sent] = collections.deque()
        self._lock = threading.Lock()

    def add(self, request: pb.SampleRequest, kinds: Kinds) -> None:
        with self._lock:
            self._sent.append(Sent(request, kinds, time.perf_counter()))

    def pop(self) -> Sent:
        """The request that the response just arrived answers."""
        with self._lock:
            return self._sent.popleft()

    def deadline(self) -> Optional[Tuple[float, pb.SampleRequest]]:
        """By when (a time.perf_counter() time) the oldest request must be answered, and
        that request; None when there is no deadline or nothing is in flight."""
        with self._lock:
            oldest = self._sent[0] if self._sent else None
        if self.per_message is None or oldest is None:
            return None
        return oldest.at + self.per_message, oldest.request

    def deadline_error(self, request: pb.SampleRequest) -> DeadlineExceededError:
        """The error of a stream cancelled because ``request`` was not answered in time."""
        return DeadlineExceededError(
            grpc.StatusCode.DEADLINE_EXCEEDED,
            f"sample_stream: no response within timeout={self.per_message:g} s of "
            f"sending request {request.request_id!r} (per-message deadline); "
            f"the stream was cancelled")


def round_trip_us(sent: Sent, arrived: float) -> int:
    """Microseconds from handing the request to gRPC until its response arrived."""
    return int((arrived - sent.at) * 1e6)
