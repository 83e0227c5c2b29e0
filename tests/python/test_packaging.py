"""The pip-installable package: building it generates the stubs from proto/, and the built
package imports on its own (outside the repository's client/python)."""

from __future__ import annotations

import shutil
import subprocess
import zipfile

from conftest import PYTHON, REPO


def test_wheel_generates_stubs_and_imports(tmp_path):
    # A copy without the stubs that `make build` leaves in the tree, so the build must
    # generate them itself.
    shutil.copytree(REPO / "proto", tmp_path / "src" / "proto")
    shutil.copytree(REPO / "client" / "python", tmp_path / "src" / "client" / "python",
                    ignore=shutil.ignore_patterns("_proto", "build", "*.egg-info", "__pycache__"))
    result = subprocess.run(
        [PYTHON, "-m", "pip", "wheel", "--no-build-isolation", "--no-deps", "--no-index",
         "-w", str(tmp_path / "wheels"), str(tmp_path / "src" / "client" / "python")],
        capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stdout + result.stderr
    (wheel,) = (tmp_path / "wheels").glob("gpusampler-*.whl")
    names = zipfile.ZipFile(wheel).namelist()
    assert "gpusampler/_proto/gpusampler/v1/sampler_pb2_grpc.py" in names
    assert "gpusampler/py.typed" in names
    zipfile.ZipFile(wheel).extractall(tmp_path / "site")
    check = subprocess.run(
        [PYTHON, "-c", "import gpusampler, gpusampler.v1.sampler_pb2 as pb; "
         "print(gpusampler.__file__); print(pb.SampleRequest(seed=3).HasField('seed'))"],
        capture_output=True, text=True, cwd=tmp_path, env={"PYTHONPATH": str(tmp_path / "site")})
    assert check.returncode == 0, check.stderr
    assert check.stdout.split() == [str(tmp_path / "site" / "gpusampler" / "__init__.py"), "True"]
