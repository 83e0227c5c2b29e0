"""The Python client's dtype table (gpusampler/_tensors.py) covers the wire enum, agrees with
numpy and torch, and agrees row for row with the C++ table (kernels/.../dtype.hpp)."""

from __future__ import annotations

import re

import numpy as np
import torch

from conftest import REPO
from gpusampler import _tensors
from gpusampler.v1 import sampler_pb2 as pb

CPP_TABLE = REPO / "kernels" / "include" / "gpusampler" / "kernels" / "dtype.hpp"
# case DType::kInt8:
#   return {1, "int8", "|i1", Widen::kSign, -1};
CPP_ROW = re.compile(r'case DType::k\w+:\s*return \{(\d+), "(\w+)", "([^"]*)", Widen::k(\w+), '
                     r'(-?\d+)\};')


def test_one_row_per_wire_dtype():
    wire = {v for v in pb.DType.values() if v != pb.DTYPE_UNSPECIFIED}
    assert sorted(d.wire for d in _tensors.DTYPES) == sorted(wire)
    for d in _tensors.DTYPES:
        assert _tensors.wire_name(d.wire) == "DTYPE_" + d.name.upper()


def test_rows_agree_with_numpy_and_torch():
    for d in _tensors.DTYPES:
        assert torch.empty(0, dtype=getattr(torch, d.name)).element_size() == d.size, d.name
        if d.in_numpy:
            assert np.dtype(d.name).itemsize == d.size
            assert np.dtype(d.storage) == np.dtype(d.name).newbyteorder("<")


def test_rows_agree_with_the_cpp_table():
    rows = {m[1]: m for m in CPP_ROW.findall(CPP_TABLE.read_text())}
    assert rows, f"no Traits rows found in {CPP_TABLE}: its layout changed; update CPP_ROW"
    assert sorted(rows) == sorted(d.name for d in _tensors.DTYPES)
    for d in _tensors.DTYPES:
        size, _, descr, widen, padding = rows[d.name]
        assert int(size) == d.size, d.name
        assert descr in ("", d.storage), d.name  # "": numpy has no such dtype (bfloat16)
        assert (widen == "None") == (d.padding_label is None), d.name
        if d.padding_label is not None:
            assert int(padding) == d.padding_label, d.name
