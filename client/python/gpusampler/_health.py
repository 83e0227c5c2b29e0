"""The grpc.health.v1 health check, on grpc's own generated stubs.

grpcio-health-checking's stubs (``grpc_health.v1``) when it is installed; else the copy this
package ships (``gpusampler.grpc_health.v1``, generated from the same protocol, since Debian's
python3-grpcio has no grpc_health). Never both: the two define the same protobuf messages, and
protobuf refuses a second definition of a message in one process.
"""

from __future__ import annotations

from typing import Any

try:
    from grpc_health.v1 import health_pb2, health_pb2_grpc
except ImportError:
    from gpusampler.grpc_health.v1 import health_pb2, health_pb2_grpc

_STATUS = health_pb2.HealthCheckResponse.ServingStatus


def stub(channel: Any) -> Any:
    """The Health stub on ``channel`` (a ``grpc`` or ``grpc.aio`` channel)."""
    return health_pb2_grpc.HealthStub(channel)


def request(service: str) -> Any:
    """The Check request for ``service`` ("" = the whole server)."""
    return health_pb2.HealthCheckRequest(service=service)


def status_name(response: Any) -> str:
    """"SERVING", "NOT_SERVING", "UNKNOWN" or "SERVICE_UNKNOWN"; a status this protocol
    version does not know reads as "UNKNOWN"."""
    status = int(response.status)
    return str(_STATUS.Name(status)) if status in _STATUS.values() else "UNKNOWN"
