"""Conversion between numpy arrays / torch tensors and gpusampler.v1.Tensor."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Optional, Tuple

import numpy as np

from gpusampler.v1 import sampler_pb2 as pb

_torch: Any
try:  # torch is optional: numpy-only users need not install it.
    import torch as _torch
except ImportError:  # pragma: no cover - torch is installed where the tests run
    _torch = None

_NUMPY_TO_WIRE = {
    np.dtype(np.bool_): pb.DTYPE_BOOL,
    np.dtype(np.int8): pb.DTYPE_INT8,
    np.dtype(np.uint8): pb.DTYPE_UINT8,
    np.dtype(np.int16): pb.DTYPE_INT16,
    np.dtype(np.int32): pb.DTYPE_INT32,
    np.dtype(np.int64): pb.DTYPE_INT64,
    np.dtype(np.float16): pb.DTYPE_FLOAT16,
    np.dtype(np.float32): pb.DTYPE_FLOAT32,
    np.dtype(np.float64): pb.DTYPE_FLOAT64,
}
# bfloat16 has no numpy dtype; its bits travel as little-endian uint16.
_WIRE_TO_NUMPY = {v: k.newbyteorder("<") for k, v in _NUMPY_TO_WIRE.items()}
_WIRE_TO_NUMPY[pb.DTYPE_BFLOAT16] = np.dtype("<u2")

if _torch is not None:
    _TORCH_TO_WIRE = {
        _torch.bool: pb.DTYPE_BOOL,
        _torch.int8: pb.DTYPE_INT8,
        _torch.uint8: pb.DTYPE_UINT8,
        _torch.int16: pb.DTYPE_INT16,
        _torch.int32: pb.DTYPE_INT32,
        _torch.int64: pb.DTYPE_INT64,
        _torch.float16: pb.DTYPE_FLOAT16,
        _torch.bfloat16: pb.DTYPE_BFLOAT16,
        _torch.float32: pb.DTYPE_FLOAT32,
        _torch.float64: pb.DTYPE_FLOAT64,
    }
    _WIRE_TO_TORCH = {v: k for k, v in _TORCH_TO_WIRE.items()}
else:  # pragma: no cover
    _TORCH_TO_WIRE = {}
    _WIRE_TO_TORCH = {}


@dataclass(frozen=True)
class Kind:
    """What the caller gave us, so that the result can be handed back the same way."""

    torch: bool
    device: Any = None  # torch.device of the input tensor


def is_torch(x: Any) -> bool:
    return _torch is not None and isinstance(x, _torch.Tensor)


def to_wire(x: Any, what: str) -> Tuple[pb.Tensor, Kind]:
    """Encodes an array-like as a wire Tensor (C order, little-endian)."""
    if is_torch(x):
        t = x.detach()
        kind = Kind(torch=True, device=t.device)
        if t.dtype not in _TORCH_TO_WIRE:
            raise TypeError(f"{what}: torch dtype {t.dtype} is not supported by gpusampler")
        dtype = _TORCH_TO_WIRE[t.dtype]
        t = t.cpu().contiguous()
        if dtype == pb.DTYPE_BFLOAT16:
            data = t.view(_torch.int16).numpy().tobytes()
        else:
            data = t.numpy().tobytes()
        return pb.Tensor(dtype=dtype, shape=list(t.shape), data=data), kind
    a = np.asarray(x)
    if a.dtype.name == "bfloat16":  # ml_dtypes / jax bfloat16 arrays
        dtype = pb.DTYPE_BFLOAT16
        a = np.ascontiguousarray(a).view(np.uint16).astype("<u2", copy=False)
    else:
        native = a.dtype.newbyteorder("=")
        if native not in _NUMPY_TO_WIRE:
            raise TypeError(f"{what}: numpy dtype {a.dtype} is not supported by gpusampler")
        dtype = _NUMPY_TO_WIRE[native]
        a = np.ascontiguousarray(a.astype(a.dtype.newbyteorder("<"), copy=False))
    return pb.Tensor(dtype=dtype, shape=list(a.shape), data=a.tobytes()), Kind(torch=False)


def from_wire(t: pb.Tensor, kind: Kind) -> Any:
    """Decodes a wire Tensor into the kind (numpy or torch, and torch device) given."""
    if t.dtype not in _WIRE_TO_NUMPY:
        raise ValueError(f"response tensor has unknown dtype {t.dtype}")
    shape = tuple(int(d) for d in t.shape)
    # bytearray: a writable buffer, so the arrays handed out are ordinary writable ones.
    a = np.frombuffer(bytearray(t.data), dtype=_WIRE_TO_NUMPY[t.dtype]).reshape(shape)
    if not kind.torch:
        if t.dtype == pb.DTYPE_BFLOAT16:
            try:
                import ml_dtypes

                return a.view(ml_dtypes.bfloat16)
            except ImportError:
                return a  # raw bfloat16 bits as uint16
        return a.astype(a.dtype.newbyteorder("="), copy=False)
    if t.dtype == pb.DTYPE_BFLOAT16:
        out = _torch.from_numpy(a.view(np.int16)).view(_torch.bfloat16)
    else:
        out = _torch.from_numpy(a.astype(a.dtype.newbyteorder("="), copy=False))
    if kind.device is not None and kind.device.type != "cpu":
        out = out.to(kind.device)
    return out


def optional_to_wire(x: Optional[Any], what: str) -> Tuple[Optional[pb.Tensor], Optional[Kind]]:
    if x is None:
        return None, None
    return to_wire(x, what)
