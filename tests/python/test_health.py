"""Client.health on grpc's generated health stubs: the copy the package ships, or
grpcio-health-checking's ``grpc_health.v1`` when that is installed (never both in one
process: protobuf refuses the second definition of the same messages)."""

from __future__ import annotations

import os
import shutil
import subprocess

import pytest

import gpusampler
from conftest import BUILD_DIR, PYTHON, REPO
from gpusampler import _health

# The health.proto the build staged for the package's stubs (proto/grpc/health/v1/health.proto,
# copied by proto/CMakeLists.txt).
STAGED_PROTO = (BUILD_DIR / "proto" / "python_health_proto" / "gpusampler" / "grpc_health"
                / "v1" / "health.proto")


def test_status_names(client):
    assert client.health() == "SERVING"
    response = _health.health_pb2.HealthCheckResponse
    assert [_health.status_name(response(status=s)) for s in range(5)] == [
        "UNKNOWN", "SERVING", "NOT_SERVING", "SERVICE_UNKNOWN", "UNKNOWN"]
    assert _health.request("").SerializeToString() == b""  # the whole server


def test_unknown_service_is_an_error(client):
    with pytest.raises(gpusampler.NotFoundError):
        client.health("no.such.Service")


def test_installed_grpc_health_is_used_instead(tmp_path, server):
    plugin, protoc = shutil.which("grpc_python_plugin"), shutil.which("protoc")
    if not (plugin and protoc and STAGED_PROTO.exists()):
        pytest.skip("needs protoc, grpc_python_plugin and a build that staged health.proto")
    # What grpcio-health-checking installs: grpc.health.v1 as the module grpc_health.v1.
    (tmp_path / "src" / "grpc_health" / "v1").mkdir(parents=True)
    shutil.copy(STAGED_PROTO, tmp_path / "src" / "grpc_health" / "v1")
    (tmp_path / "site").mkdir()
    subprocess.run([protoc, "-I", str(tmp_path / "src"), f"--python_out={tmp_path / 'site'}",
                    f"--grpc_python_out={tmp_path / 'site'}",
                    f"--plugin=protoc-gen-grpc_python={plugin}", "grpc_health/v1/health.proto"],
                   check=True, timeout=60)
    probe = ("import sys, gpusampler, gpusampler._health as h, grpc_health.v1.health_pb2\n"
             "with gpusampler.Client(sys.argv[1]) as c:\n"
             "    print(h.health_pb2.__name__, c.health())\n")
    path = os.pathsep.join([str(tmp_path / "site"), str(REPO / "client" / "python")])
    run = subprocess.run([PYTHON, "-c", probe, server.target], capture_output=True, text=True,
                         timeout=60, env=dict(os.environ, PYTHONPATH=path))
    assert run.returncode == 0, run.stderr
    assert run.stdout.split() == ["grpc_health.v1.health_pb2", "SERVING"]
