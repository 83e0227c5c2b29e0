"""Session fixtures: one real gpusampler-server (CPU backend) on port 0 for the suite.

start_server(..., device="cuda-sim") starts another on the cuda-sim device (the CUDA pipeline
run on the host), as test_golden.py does to run the golden cases through it too.

The build directory comes from GPUSAMPLER_BUILD_DIR (set by `make test`), else ./build.
A missing binary is a failure with instructions, never a skip.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Iterator, List, Optional

import pytest

REPO = Path(__file__).resolve().parents[2]
BUILD_DIR = Path(os.environ.get("GPUSAMPLER_BUILD_DIR", REPO / "build"))
SERVER_BIN = BUILD_DIR / "bin" / "gpusampler-server"
CLI_BIN = BUILD_DIR / "bin" / "gpusampler-cli"
PYTHON = "/usr/bin/python3"  # Debian's, with python3-grpcio / numpy / torch
TEST_TOKEN = "gpusampler-test-token"

# The package under test: client/python, whatever PYTHONPATH says.
sys.path.insert(0, str(REPO / "client" / "python"))


@dataclass
class Server:
    target: str
    metrics_port: int
    process: subprocess.Popen
    log: Path

    def log_text(self) -> str:
        return self.log.read_text(errors="replace")[-4000:]


def require_binary(path: Path) -> None:
    if not path.exists():
        pytest.fail(
            f"{path} does not exist: build it first (`make build`, or `cmake --preset release "
            f"&& cmake --build build`), or point GPUSAMPLER_BUILD_DIR at a build directory",
            pytrace=False,
        )


def start_server(workdir: Path, extra: Optional[List[str]] = None, device: str = "cpu",
                 address: str = "127.0.0.1:0") -> Server:
    require_binary(SERVER_BIN)
    workdir.mkdir(parents=True, exist_ok=True)
    port_file = workdir / "ports"
    log = workdir / "server.log"
    cmd = [
        str(SERVER_BIN), "--device", device, "--address", address,
        "--metrics-address", "127.0.0.1:0", "--port-file", str(port_file),
    ] + (extra or [])
    with open(log, "wb") as log_file:
        proc = subprocess.Popen(cmd, stdout=log_file, stderr=subprocess.STDOUT)
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        if port_file.exists():
            text = port_file.read_text()
            if text.endswith("\n"):
                grpc_port, metrics_port = (int(x) for x in text.split())
                host = address.rsplit(":", 1)[0]
                return Server(f"{host}:{grpc_port}", metrics_port, proc, log)
        if proc.poll() is not None:
            pytest.fail(f"gpusampler-server exited with {proc.returncode} before serving:\n"
                        f"{log.read_text(errors='replace')}", pytrace=False)
        time.sleep(0.05)
    proc.kill()
    pytest.fail(f"gpusampler-server did not write {port_file} within 60 s:\n"
                f"{log.read_text(errors='replace')}", pytrace=False)


def stop_server(server: Server) -> int:
    server.process.send_signal(signal.SIGTERM)
    try:
        return server.process.wait(timeout=30)
    except subprocess.TimeoutExpired:
        server.process.kill()
        server.process.wait()
        return -9


@pytest.fixture(scope="session")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    s = start_server(tmp_path_factory.mktemp("server"))
    yield s
    rc = stop_server(s)
    assert rc == 0, f"gpusampler-server exited {rc} on SIGTERM:\n{s.log_text()}"


@pytest.fixture(scope="session")
def client(server: Server):
    import gpusampler

    with gpusampler.Client(server.target, timeout=30) as c:
        yield c


@pytest.fixture(scope="session")
def cli_bin() -> Path:
    require_binary(CLI_BIN)
    return CLI_BIN
