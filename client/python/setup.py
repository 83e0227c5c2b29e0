"""Generates the gRPC stubs into gpusampler/_proto while the package is built.

Generators, first that works wins:
  1. grpc_tools.protoc (grpcio-tools >= 1.34; Debian's 1.14 bundles protoc 3.5, which
     rejects proto3 `optional`, so it fails and the next one runs);
  2. `protoc` with `grpc_python_plugin` from PATH (Debian: protobuf-compiler-grpc);
  3. stubs already generated in the source tree (by `make build`), shipped as package data.
The proto comes from ../../proto (this package lives in client/python of the repository).
"""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

from setuptools import setup
from setuptools.command.build_py import build_py

HERE = Path(__file__).resolve().parent
PROTO_ROOT = HERE.parent.parent / "proto"
PROTO = "gpusampler/v1/sampler.proto"


def generate(out_dir: Path) -> bool:
    if not (PROTO_ROOT / PROTO).exists():
        return False
    out_dir = out_dir.resolve()  # protoc runs in PROTO_ROOT
    out_dir.mkdir(parents=True, exist_ok=True)
    common = [f"-I{PROTO_ROOT}", f"--python_out={out_dir}", f"--grpc_python_out={out_dir}"]
    attempts = [[sys.executable, "-m", "grpc_tools.protoc", *common, f"--pyi_out={out_dir}", PROTO],
                [sys.executable, "-m", "grpc_tools.protoc", *common, PROTO]]
    protoc, plugin = shutil.which("protoc"), shutil.which("grpc_python_plugin")
    if protoc and plugin:
        attempts.append([protoc, *common, f"--pyi_out={out_dir}",
                         f"--plugin=protoc-gen-grpc_python={plugin}", PROTO])
    for cmd in attempts:
        if subprocess.run(cmd, cwd=PROTO_ROOT, capture_output=True).returncode == 0:
            return True
    return False


class BuildPyWithStubs(build_py):
    def run(self) -> None:
        super().run()  # copies the package, and pre-generated stubs if there are any
        out_dir = Path(self.build_lib) / "gpusampler" / "_proto"
        if generate(out_dir):
            return
        if not (out_dir / "gpusampler" / "v1" / "sampler_pb2_grpc.py").exists():
            raise RuntimeError(
                "gpusampler: cannot generate the gRPC stubs: install grpcio-tools >= 1.34, or "
                "protoc and grpc_python_plugin, or run `make build` in the repository first")


setup(cmdclass={"build_py": BuildPyWithStubs})
