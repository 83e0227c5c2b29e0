"""The Python client's one dtype table, and conversion between numpy arrays / torch tensors
and gpusampler.v1.Tensor.

Every dtype fact of the package (wire value, name, numpy and torch dtype, size, padding label)
comes from ``DTYPES``. It is the Python twin of the C++ table in
kernels/include/gpusampler/kernels/dtype.hpp; tests/python/test_dtype_table.py checks that the
two agree.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Dict, Optional, Tuple

import numpy as np

from gpusampler.v1 import sampler_pb2 as pb

_torch: Any
try:  # torch is optional: numpy-only users need not install it.
    import torch as _torch
except ImportError:  # pragma: no cover - torch is installed where the tests run
    _torch = None


@dataclass(frozen=True)
class DType:
    """One wire dtype."""

    wire: int  #: the gpusampler.v1.DType value
    name: str  #: as numpy and torch spell it (``torch.<name>`` is its torch dtype)
    #: the numpy descriptor its bytes are read with (little-endian); bfloat16, which numpy
    #: lacks, travels as the bits of a little-endian uint16
    storage: str
    #: the label of a padding slot (-1 signed, 0 bool/unsigned); None: not a label dtype
    padding_label: Optional[int]

    @property
    def size(self) -> int:
        """Bytes per element."""
        return np.dtype(self.storage).itemsize

    @property
    def in_numpy(self) -> bool:
        """Whether numpy has this dtype (all but bfloat16)."""
        return self.name != "bfloat16"


DTYPES: Tuple[DType, ...] = (
    DType(pb.DTYPE_BOOL, "bool", "|b1", 0),
    DType(pb.DTYPE_INT8, "int8", "|i1", -1),
    DType(pb.DTYPE_UINT8, "uint8", "|u1", 0),
    DType(pb.DTYPE_INT16, "int16", "<i2", -1),
    DType(pb.DTYPE_INT32, "int32", "<i4", -1),
    DType(pb.DTYPE_INT64, "int64", "<i8", -1),
    DType(pb.DTYPE_FLOAT16, "float16", "<f2", None),
    DType(pb.DTYPE_BFLOAT16, "bfloat16", "<u2", None),
    DType(pb.DTYPE_FLOAT32, "float32", "<f4", None),
    DType(pb.DTYPE_FLOAT64, "float64", "<f8", None),
)

_BY_WIRE: Dict[int, DType] = {d.wire: d for d in DTYPES}
_BY_NUMPY: Dict[np.dtype, DType] = {np.dtype(d.name): d for d in DTYPES if d.in_numpy}
_BFLOAT16 = _BY_WIRE[pb.DTYPE_BFLOAT16]
_BY_TORCH: Dict[Any, DType] = (
    {getattr(_torch, d.name): d for d in DTYPES} if _torch is not None else {})


def wire_name(wire: int) -> str:
    """The wire enum's name of a dtype value (``DTYPE_INT64``)."""
    return str(pb.DType.Name(wire))


def item_size(wire: int) -> int:
    """Bytes per element of a wire dtype."""
    return _BY_WIRE[wire].size


def row_bytes(t: pb.Tensor) -> int:
    """Bytes of one ``[0]``-index row of a wire tensor (an element of a 1-D one)."""
    return item_size(t.dtype) * math.prod(t.shape[1:])


@dataclass(frozen=True)
class Kind:
    """What the caller gave us, so that the result can be handed back the same way."""

    torch: bool
    device: Any = None  # torch.device of the input tensor


NUMPY = Kind(torch=False)
#: How to decode a response: the kind of the labels, and of the features (None: none back).
Kinds = Tuple[Kind, Optional[Kind]]


def is_torch(x: Any) -> bool:
    return _torch is not None and isinstance(x, _torch.Tensor)


def host_array(x: Any) -> np.ndarray:
    """``x`` as a numpy array on the host (a torch tensor is copied off its device)."""
    return np.asarray(x.detach().cpu().numpy() if is_torch(x) else x)


def to_wire(x: Any, what: str) -> Tuple[pb.Tensor, Kind]:
    """Encodes an array-like as a wire Tensor (C order, little-endian)."""
    if is_torch(x):
        return _torch_to_wire(x, what)
    a = np.asarray(x)
    if a.dtype.name == "bfloat16":  # ml_dtypes / jax bfloat16 arrays
        dtype = _BFLOAT16
        a = np.ascontiguousarray(a).view(np.uint16).astype(dtype.storage, copy=False)
    else:
        native = a.dtype.newbyteorder("=")
        if native not in _BY_NUMPY:
            raise TypeError(f"{what}: numpy dtype {a.dtype} is not supported by gpusampler")
        dtype = _BY_NUMPY[native]
        a = np.ascontiguousarray(a.astype(a.dtype.newbyteorder("<"), copy=False))
    return pb.Tensor(dtype=dtype.wire, shape=list(a.shape), data=a.tobytes()), NUMPY


def _torch_to_wire(x: Any, what: str) -> Tuple[pb.Tensor, Kind]:
    t = x.detach()
    kind = Kind(torch=True, device=t.device)
    if t.dtype not in _BY_TORCH:
        raise TypeError(f"{what}: torch dtype {t.dtype} is not supported by gpusampler")
    dtype = _BY_TORCH[t.dtype]
    t = t.cpu().contiguous()
    if dtype is _BFLOAT16:  # numpy cannot hold it: its bits, as int16
        data = t.view(_torch.int16).numpy().tobytes()
    else:
        data = t.numpy().tobytes()
    return pb.Tensor(dtype=dtype.wire, shape=list(t.shape), data=data), kind


def from_wire(t: pb.Tensor, kind: Kind) -> Any:
    """Decodes a wire Tensor into the kind (numpy or torch, and torch device) given."""
    if t.dtype not in _BY_WIRE:
        raise ValueError(f"response tensor has unknown dtype {t.dtype}")
    shape = tuple(int(d) for d in t.shape)
    # bytearray: a writable buffer, so the arrays handed out are ordinary writable ones.
    a = np.frombuffer(bytearray(t.data), dtype=_BY_WIRE[t.dtype].storage).reshape(shape)
    return _as_kind(a, t.dtype, kind)


def wire_nbytes(t: pb.Tensor) -> int:
    """prod(shape) * itemsize of a wire tensor (its data may be empty: shared memory)."""
    if t.dtype not in _BY_WIRE:
        raise ValueError(f"response tensor has unknown dtype {t.dtype}")
    return item_size(t.dtype) * math.prod(int(d) for d in t.shape)


def view_wire(t: pb.Tensor, buf: Any, offset: int, kind: Kind) -> Any:
    """The array of wire tensor ``t`` (dtype and shape) whose bytes lie in ``buf`` at
    ``offset``: a view of ``buf``, no copy (unless ``kind`` is a GPU torch device)."""
    shape = tuple(int(d) for d in t.shape)
    nbytes = wire_nbytes(t)
    if offset < 0 or offset + nbytes > len(buf):
        raise ValueError(f"response tensor of {nbytes} bytes at offset {offset} lies outside "
                         f"the region's {len(buf)} bytes")
    storage = np.dtype(_BY_WIRE[t.dtype].storage)
    a = np.frombuffer(buf, dtype=storage, count=nbytes // storage.itemsize,
                      offset=offset).reshape(shape)
    return _as_kind(a, t.dtype, kind)


def _as_kind(a: np.ndarray, wire: int, kind: Kind) -> Any:
    """Little-endian storage array ``a`` of wire dtype ``wire`` as numpy or torch (views on
    little-endian hosts)."""
    bfloat16 = wire == _BFLOAT16.wire
    if not kind.torch:
        if bfloat16:
            try:
                import ml_dtypes

                return a.view(ml_dtypes.bfloat16)
            except ImportError:
                return a  # raw bfloat16 bits as uint16
        return a.astype(a.dtype.newbyteorder("="), copy=False)
    if bfloat16:
        out = _torch.from_numpy(a.view(np.int16)).view(_torch.bfloat16)
    else:
        out = _torch.from_numpy(a.astype(a.dtype.newbyteorder("="), copy=False))
    if kind.device is not None and kind.device.type != "cpu":
        out = out.to(kind.device)
    return out


def as_torch(x: Any) -> Any:
    """A result array as a CPU torch tensor; uint16 arrays are bfloat16 bits (the wire
    carries no uint16, and numpy has no bfloat16 of its own)."""
    if is_torch(x):
        return x
    a = np.asarray(x)
    if a.dtype == np.dtype(_BFLOAT16.storage) or a.dtype.name == "bfloat16":
        return _torch.from_numpy(a.view(np.int16)).view(_torch.bfloat16)
    return _torch.from_numpy(a)


def optional_to_wire(x: Optional[Any], what: str) -> Tuple[Optional[pb.Tensor], Optional[Kind]]:
    if x is None:
        return None, None
    return to_wire(x, what)
