"""Shared-memory regions (docs/shared-memory.md): answers written by a server
on the same host into a POSIX shm object this client created, and read back as arrays that
view it, without a copy.

Layout of one answer at ``offset``: indices, labels, features, num_positive, num_negative,
num_per_class (absent tensors take no room), each at a multiple of 256 bytes past ``offset``.
"""

from __future__ import annotations

import os
import secrets
from dataclasses import dataclass
from multiprocessing import shared_memory
from typing import Any, Optional, Tuple, Union

import numpy as np

from gpusampler import _tensors
from gpusampler.v1 import sampler_pb2 as pb

ALIGNMENT = 256
#: SampleResponse fields in the order their bytes lie in a region.
ORDER = ("indices", "labels", "features", "num_positive", "num_negative", "num_per_class")


def align(n: int) -> int:
    return (n + ALIGNMENT - 1) // ALIGNMENT * ALIGNMENT


class Region:
    """A POSIX shared-memory object this client created and registered with the server
    (``Client.register_region``). ``buf`` is its memory. Results written into it are views:
    an answer stays valid until the same bytes are written again or the region is closed.
    ``close()`` (or the client's ``unregister_region``) unregisters it, unmaps it here and
    removes the object."""

    def __init__(self, name: str, key: str, shm: shared_memory.SharedMemory, size: int,
                 owner: Any) -> None:
        self.name = name  #: the name it is registered under (per token)
        self.key = key  #: the shm_open key, e.g. "/gpusampler-1a2b..."
        self.byte_size = size
        self._shm: Optional[shared_memory.SharedMemory] = shm
        self._owner = owner

    @property
    def buf(self) -> memoryview:
        if self._shm is None:
            raise ValueError(f"region {self.name!r} is closed")
        return self._shm.buf[:self.byte_size]

    def window(self, offset: int = 0, byte_size: int = 0) -> "RegionWindow":
        """``[offset, offset + byte_size)`` of this region (``byte_size`` 0: to its end), to
        pass as ``output_region=``."""
        return RegionWindow(self, int(offset), int(byte_size))

    def _release(self) -> None:
        """Unmaps and removes the object (after the server unregistered it)."""
        if self._shm is None:
            return
        shm, self._shm = self._shm, None
        try:
            shm.close()
        except BufferError:
            # Arrays still view it: the mapping stays until the last of them is gone (the
            # mmap object unmaps when collected); it is removed from /dev/shm below.
            shm._mmap = None  # type: ignore[attr-defined]
        try:
            # Not shm.unlink(): it would tell the resource tracker, which no longer tracks it.
            import _posixshmem  # type: ignore

            _posixshmem.shm_unlink(self.key)
        except FileNotFoundError:
            pass

    def close(self) -> None:
        if self._shm is None:
            return
        done = self._owner.unregister_region(self)
        if hasattr(done, "close") and hasattr(done, "send"):  # an asyncio client's coroutine
            done.close()
            raise TypeError("a region of gpusampler.aio.Client: use "
                            "await client.unregister_region(region)")

    def __enter__(self) -> "Region":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"Region(name={self.name!r}, byte_size={self.byte_size})"


@dataclass(frozen=True)
class RegionWindow:
    """Where one answer goes: ``offset`` and ``byte_size`` (0: to the end) of a region."""

    region: Region
    offset: int = 0
    byte_size: int = 0


OutputRegion = Union[Region, RegionWindow]


def as_window(x: Any) -> RegionWindow:
    if isinstance(x, Region):
        return RegionWindow(x)
    if isinstance(x, RegionWindow):
        return x
    raise TypeError(f"output_region must be a gpusampler Region or Region.window(...), got "
                    f"{type(x).__name__}")


def output_message(x: Any) -> pb.OutputRegion:
    w = as_window(x)
    return pb.OutputRegion(name=w.region.name, offset=w.offset, byte_size=w.byte_size)


def create(size: int, prefix: str, name: Optional[str]) -> Tuple[str, str,
                                                                   shared_memory.SharedMemory]:
    """A new shm object of ``size`` bytes whose key starts with ``prefix``: (name, key, shm)."""
    if not isinstance(size, int) or isinstance(size, bool) or size < 1:
        raise ValueError(f"register_region: size must be an int >= 1, got {size!r}")
    if not prefix.startswith("/") or "/" in prefix[1:]:
        raise ValueError(f"shm_key_prefix must be '/name', got {prefix!r}")
    suffix = f"-{os.getpid()}-{secrets.token_hex(8)}"
    key = prefix + suffix
    # multiprocessing names objects without the leading "/" (it adds it for shm_open).
    shm = shared_memory.SharedMemory(name=key[1:], create=True, size=size)
    _untrack(shm)
    return (name or "r" + suffix), key, shm


def _untrack(shm: shared_memory.SharedMemory) -> None:
    """This client unlinks its objects itself; the resource tracker would warn about them
    (and unlink them early in other processes that attach)."""
    try:
        from multiprocessing import resource_tracker

        resource_tracker.unregister(shm._name, "shared_memory")  # type: ignore[attr-defined]
    except Exception:  # pragma: no cover - private API moved
        pass


def view_result_arrays(r: pb.SampleResponse, window: RegionWindow,
                       kinds: _tensors.Kinds) -> dict:
    """The arrays of response ``r`` (tensors with empty data), viewing ``window``'s bytes
    in SPEC's layout; numpy or torch as ``kinds`` says (torch on a GPU device: copied
    there)."""
    label_kind, feature_kind = kinds
    buf = window.region.buf
    out: dict = {}
    end = 0
    for field in ORDER:
        if not r.HasField(field):
            out[field] = None
            continue
        t = getattr(r, field)
        start = align(end)
        nbytes = _tensors.wire_nbytes(t)
        kind = feature_kind if field == "features" and feature_kind is not None else label_kind
        out[field] = _tensors.view_wire(t, buf, window.offset + start, kind)
        end = start + nbytes
    return out


def layout_bytes(arrays: Any) -> int:
    """The bytes an answer with these arrays (a SampleResult) takes in a region."""
    end = 0
    for field in ORDER:
        a = getattr(arrays, field, None)
        if a is None:
            continue
        n = a.numel() * a.element_size() if hasattr(a, "element_size") else np.asarray(a).nbytes
        end = align(end) + int(n)
    return end
