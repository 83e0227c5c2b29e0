"""gpusampler: class-balanced, fixed-size sampling as a gRPC service.

The client takes numpy arrays or torch tensors (bfloat16 included) and returns the same
kind::

    import gpusampler
    with gpusampler.Client("127.0.0.1:50051") as client:
        out = client.sample(labels, features, num_samples=256, positive_fraction=0.25)
        batch_x, batch_y = out.features, out.labels

See ``Client`` for the options, and ``docs/semantics.md`` in the gpusampler repository for
the exact sampling rules (what a sample is, fill policies, seeds and reproducibility,
padding, shapes).
"""

import os as _os

# The generated stubs live in _proto/gpusampler/v1 and _proto/gpusampler/grpc_health/v1 and
# import themselves as ``gpusampler.v1.sampler_pb2`` and ``gpusampler.grpc_health.v1...``;
# adding _proto/gpusampler to this package's search path makes those names resolve inside
# this package, with no rewriting of generated code.
__path__.append(_os.path.join(_os.path.dirname(__file__), "_proto", "gpusampler"))

try:
    from gpusampler.v1 import sampler_pb2 as _sampler_pb2  # noqa: F401
except ImportError as _error:  # pragma: no cover - exercised only on a broken install
    raise ImportError(
        "gpusampler: the gRPC stubs the package ships (gpusampler/_proto) are missing or do "
        "not import; reinstall the package (`pip install ./client/python`) or restore "
        "client/python/gpusampler/_proto from the repository: " + str(_error)
    ) from _error

from gpusampler._classes import Class  # noqa: E402
from gpusampler.client import (  # noqa: E402
    Client,
    DatasetInfo,
    DeviceInfo,
    Limits,
    SampleResult,
    ServerInfo,
    Timing,
)
from gpusampler._epochs import Epoch  # noqa: E402
from gpusampler._shm import Region, RegionWindow  # noqa: E402
from gpusampler.errors import (  # noqa: E402
    AlreadyExistsError,
    CancelledError,
    DeadlineExceededError,
    FailedPreconditionError,
    GpuSamplerError,
    InternalError,
    InvalidArgumentError,
    NotFoundError,
    PermissionDeniedError,
    ResourceExhaustedError,
    SamplingQualityWarning,
    UnauthenticatedError,
    UnavailableError,
    UnimplementedError,
)

__version__ = "0.1.0"

__all__ = [
    "Class",
    "Client",
    "DatasetInfo",
    "Epoch",
    "Region",
    "RegionWindow",
    "NotFoundError",
    "AlreadyExistsError",
    "FailedPreconditionError",
    "SampleResult",
    "Timing",
    "ServerInfo",
    "DeviceInfo",
    "Limits",
    "GpuSamplerError",
    "InvalidArgumentError",
    "ResourceExhaustedError",
    "UnavailableError",
    "DeadlineExceededError",
    "CancelledError",
    "UnauthenticatedError",
    "PermissionDeniedError",
    "UnimplementedError",
    "InternalError",
    "SamplingQualityWarning",
]
