"""Exceptions raised by gpusampler.Client, one per gRPC status code that a caller may
want to handle differently. All derive from GpuSamplerError, which carries the code and
the server's message."""

from __future__ import annotations

from typing import Dict, List, Optional, Type

import grpc


class GpuSamplerError(Exception):
    """A call failed. ``code`` is the grpc.StatusCode, ``details`` the server's message."""

    def __init__(self, code: grpc.StatusCode, details: str) -> None:
        super().__init__(f"{code.name}: {details}")
        self.code = code
        self.details = details
        #: Dataset calls that must reach several addresses (no shared repository): the
        #: addresses that failed, each with its error, and those that succeeded.
        self.failed: Dict[str, "GpuSamplerError"] = {}
        self.succeeded: List[str] = []


class InvalidArgumentError(GpuSamplerError, ValueError):
    """INVALID_ARGUMENT: malformed tensor, bad spec, bad row_splits (the message names
    the field and the numbers)."""


class ResourceExhaustedError(GpuSamplerError):
    """RESOURCE_EXHAUSTED: over the server's limits (the message names the limit and its
    server flag; never retried, the server says so with ``grpc-retry-pushback-ms: -1``),
    queue full (retried after the delay the server asks for), or device out of memory
    (retried with backoff)."""


class UnavailableError(GpuSamplerError, ConnectionError):
    """UNAVAILABLE: no server reachable, or the server is draining. Retried automatically
    before it is raised."""


class DeadlineExceededError(GpuSamplerError, TimeoutError):
    """DEADLINE_EXCEEDED: the call's timeout passed."""


class CancelledError(GpuSamplerError):
    """CANCELLED: the call was cancelled."""


class UnauthenticatedError(GpuSamplerError, PermissionError):
    """UNAUTHENTICATED: missing or wrong bearer token."""


class PermissionDeniedError(GpuSamplerError, PermissionError):
    """PERMISSION_DENIED."""


class UnimplementedError(GpuSamplerError, NotImplementedError):
    """UNIMPLEMENTED: the server does not offer this method (version mismatch?)."""


class InternalError(GpuSamplerError):
    """INTERNAL: a server bug or a malformed response."""


class NotFoundError(GpuSamplerError, LookupError):
    """A named resource (a resident dataset) does not exist."""


class AlreadyExistsError(GpuSamplerError):
    """A dataset of that name exists; pass ``replace=True`` to overwrite it."""


class FailedPreconditionError(GpuSamplerError):
    """FAILED_PRECONDITION: the server cannot do this in its present state, e.g. a dataset
    upload or delete on a replica whose shared repository (``--dataset-dir``) is read-only."""


class SamplingQualityWarning(UserWarning):
    """Issued (once per client and kind, with ``Client(warn_quality=True)``) when rows come
    back short of ``num_samples`` or with fewer positives than the asked fraction."""


_BY_CODE: Dict[grpc.StatusCode, Type[GpuSamplerError]] = {
    grpc.StatusCode.INVALID_ARGUMENT: InvalidArgumentError,
    grpc.StatusCode.OUT_OF_RANGE: InvalidArgumentError,
    grpc.StatusCode.RESOURCE_EXHAUSTED: ResourceExhaustedError,
    grpc.StatusCode.UNAVAILABLE: UnavailableError,
    grpc.StatusCode.DEADLINE_EXCEEDED: DeadlineExceededError,
    grpc.StatusCode.CANCELLED: CancelledError,
    grpc.StatusCode.UNAUTHENTICATED: UnauthenticatedError,
    grpc.StatusCode.PERMISSION_DENIED: PermissionDeniedError,
    grpc.StatusCode.UNIMPLEMENTED: UnimplementedError,
    grpc.StatusCode.INTERNAL: InternalError,
    grpc.StatusCode.NOT_FOUND: NotFoundError,
    grpc.StatusCode.ALREADY_EXISTS: AlreadyExistsError,
    grpc.StatusCode.FAILED_PRECONDITION: FailedPreconditionError,
}


def from_rpc_error(error: grpc.RpcError,
                   max_message_bytes: Optional[int] = None) -> GpuSamplerError:
    """The GpuSamplerError subclass for a failed gRPC call. With the client's
    ``max_message_bytes``, gRPC's own size-limit message gets the limit that produced it."""
    code: Optional[grpc.StatusCode] = error.code() if hasattr(error, "code") else None
    details = error.details() if hasattr(error, "details") else str(error)
    if code is None:
        code = grpc.StatusCode.UNKNOWN
    out = _BY_CODE.get(code, GpuSamplerError)(code, details or "")
    if (max_message_bytes is not None and code == grpc.StatusCode.RESOURCE_EXHAUSTED
            and out.details.startswith("Received message larger than max")):
        out = type(out)(code, f"{out.details}: {_size_hint(out.details, max_message_bytes)}")
    return out


def _size_hint(details: str, max_message_bytes: int) -> str:
    """Which side's limit gRPC's "Received message larger than max (N vs. LIMIT)" is."""
    limit = details.rstrip(")").rsplit(" ", 1)[-1]
    if limit == str(max_message_bytes):
        return ("the response is over this client's max_message_bytes = "
                f"{max_message_bytes} (Client(max_message_bytes=...))")
    return ("the request is far over the server's --max-message-bytes (see "
            "Client.info().limits.max_message_bytes); gRPC refused it unread")
