"""One DNS name over several replicas without a shared repository (a headless Service): the
dataset calls resolve the name and reach every address, so that round_robin sample calls
find the dataset on whichever replica they land. Python's resolver is pointed at two
loopback servers for the name; gRPC's own resolver is not involved in the dataset calls."""

from __future__ import annotations

import socket

import numpy as np
import pytest

import gpusampler
from gpusampler._channel import dns_host_port
from conftest import start_server, stop_server
from test_errors import free_port


@pytest.mark.parametrize("target, want", [
    ("gpusampler.ns.svc:50051", ("gpusampler.ns.svc", 50051)),
    ("dns:///replicas:7", ("replicas", 7)),
    ("127.0.0.1:50051", None),
    ("[::1]:50051", None),
    ("ipv4:127.0.0.1:1,127.0.0.2:1", None),
    ("unix:/tmp/s.sock", None),
    ("no-port", None),
])
def test_which_targets_are_dns_names(target, want):
    assert dns_host_port(target) == want


@pytest.fixture
def two_replicas(tmp_path):
    port = free_port()
    servers = [start_server(tmp_path / name, address=f"{ip}:{port}")
               for name, ip in (("a", "127.0.0.1"), ("b", "127.0.0.2"))]
    yield port, servers
    for s in servers:
        stop_server(s)


def test_a_dataset_created_through_one_name_reaches_every_address(two_replicas, monkeypatch):
    port, servers = two_replicas
    real = socket.getaddrinfo

    def resolve(host, *args, **kwargs):
        if host == "localhost":
            return [(socket.AF_INET, socket.SOCK_STREAM, 6, "", (ip, port))
                    for ip in ("127.0.0.1", "127.0.0.2")]
        return real(host, *args, **kwargs)

    monkeypatch.setattr(socket, "getaddrinfo", resolve)
    labels = np.arange(4000) % 2
    with gpusampler.Client(f"localhost:{port}") as c:
        info = c.create_dataset("spread", labels)
        assert info.num_elements == 4000
        names = {d.name for d in c.list_datasets()}
        assert "spread" in names
    # Each replica on its own address holds the same version.
    shas = []
    for ip in ("127.0.0.1", "127.0.0.2"):
        with gpusampler.Client(f"{ip}:{port}") as one:
            out = one.sample(dataset="spread", num_samples=16, seed=3)
            assert out.indices.shape == (16,)
            shas.append(out.dataset_sha256)
    assert shas[0] == shas[1] and shas[0]
    with gpusampler.Client(f"localhost:{port}") as c:
        c.delete_dataset("spread")
    for ip in ("127.0.0.1", "127.0.0.2"):
        with gpusampler.Client(f"{ip}:{port}") as one:
            with pytest.raises(gpusampler.NotFoundError):
                one.sample(dataset="spread", num_samples=16, seed=3)
