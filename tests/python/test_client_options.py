"""health(), info(), several targets with round_robin, and the TLS + bearer-token options
(against an in-process gRPC server that checks them, since they are client plumbing)."""

from __future__ import annotations

import json
import shutil
import subprocess
import time
from concurrent import futures
from pathlib import Path

import grpc
import numpy as np
import pytest

import gpusampler
from gpusampler.client import channel_targets, service_config_json
from conftest import start_server, stop_server
from test_errors import requests_total

LABELS = (np.arange(300) % 4 == 0).astype(np.int64).reshape(3, 100)


def test_health_and_info(client):
    assert client.health() == "SERVING"
    info = client.info()
    assert info.backend == "cpu"
    assert info.version
    assert [d.id for d in info.devices] == ["cpu"]
    assert info.limits.max_num_samples > 0 and info.limits.max_message_bytes > 0


def test_channel_targets_and_service_config():
    assert channel_targets(["10.0.0.1:5", "10.0.0.2:6"]) == ["ipv4:10.0.0.1:5,10.0.0.2:6"]
    assert channel_targets(["[::1]:5", "[::2]:6"]) == ["ipv6:[::1]:5,[::2]:6"]
    assert channel_targets(["a.example:5", "10.0.0.2:6"]) == ["a.example:5", "10.0.0.2:6"]
    assert channel_targets(["dns:///svc:5"]) == ["dns:///svc:5"]
    config = json.loads(service_config_json(4, 0.05, 2.0))
    assert config["loadBalancingConfig"] == [{"round_robin": {}}]
    retry = config["methodConfig"][0]["retryPolicy"]
    assert retry["maxAttempts"] == 4 and retry["initialBackoff"] == "0.050000s"
    assert set(retry["retryableStatusCodes"]) == {"UNAVAILABLE", "RESOURCE_EXHAUSTED"}
    assert "retryPolicy" not in json.loads(service_config_json(1, 0.05, 2.0))["methodConfig"][0]


@pytest.mark.parametrize("merged", [True, False], ids=["ipv4_round_robin", "channel_per_target"])
def test_several_targets_share_the_load(server, tmp_path, merged):
    second = start_server(tmp_path / "second")
    try:
        targets = [server.target, second.target]
        if not merged:
            targets = [t.replace("127.0.0.1", "localhost") for t in targets]
        with gpusampler.Client(targets, wait_for_ready=True) as c:
            for i in range(4):  # connect to both before counting
                c.sample(LABELS, num_samples=4, seed=i)
            time.sleep(0.3)
            before = [requests_total(s, "OK") for s in (server, second)]
            for i in range(20):
                c.sample(LABELS, num_samples=4, seed=i)
        served = [requests_total(s, "OK") - b for s, b in zip((server, second), before)]
        assert sum(served) >= 20
        assert min(served) >= 5, served  # round_robin: both servers took a share
    finally:
        assert stop_server(second) == 0


# ---------------------------------------------------------------- TLS and bearer token

def make_certificate(tmp_path: Path):
    if shutil.which("openssl") is None:
        pytest.fail("openssl is needed to make a test certificate (apt-get install openssl)")
    key, cert = tmp_path / "key.pem", tmp_path / "cert.pem"
    subprocess.run(
        ["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1",
         "-subj", "/CN=gpusampler.test", "-addext", "subjectAltName=DNS:gpusampler.test",
         "-keyout", str(key), "-out", str(cert)],
        check=True, capture_output=True)
    return key.read_bytes(), cert.read_bytes()


class _Health(grpc.GenericRpcHandler):
    """Health/Check that answers SERVING only with the expected bearer token."""

    def __init__(self, token):
        self.token = token
        self.seen = []

    def service(self, details):
        if details.method != "/grpc.health.v1.Health/Check":
            return None

        def check(request, context):
            auth = dict(context.invocation_metadata()).get("authorization")
            self.seen.append(auth)
            if auth != f"Bearer {self.token}":
                context.abort(grpc.StatusCode.UNAUTHENTICATED, "bad token")
            return b"\x08\x01"  # status: SERVING

        return grpc.unary_unary_rpc_method_handler(check, request_deserializer=None, response_serializer=None)


def test_tls_and_bearer_token(tmp_path):
    key, cert = make_certificate(tmp_path)
    handler = _Health("s3cret")
    server = grpc.server(futures.ThreadPoolExecutor(max_workers=2), handlers=[handler])
    port = server.add_secure_port("127.0.0.1:0", grpc.ssl_server_credentials([(key, cert)]))
    server.start()
    try:
        target = f"127.0.0.1:{port}"
        common = dict(tls=True, root_certificates=cert, server_name_override="gpusampler.test")
        with gpusampler.Client(target, token="s3cret", **common) as c:
            assert c.health() == "SERVING"
        with gpusampler.Client(target, token="wrong", **common) as c:
            with pytest.raises(gpusampler.UnauthenticatedError):
                c.health()
        with gpusampler.Client(target, max_attempts=1, timeout=5) as c:  # plaintext to TLS
            with pytest.raises(gpusampler.UnavailableError):
                c.health()
        assert handler.seen == ["Bearer s3cret", "Bearer wrong"]
    finally:
        server.stop(None)
