"""Checks of the arguments the clients take: types and ranges, each message naming the
argument. Both clients (and gpusampler.data) check with these before anything is sent."""

from __future__ import annotations

import math
import numbers
from typing import Any, List, Optional, Sequence, Union

import numpy as np

INT64 = (-(1 << 63), (1 << 63) - 1)
UINT64 = (0, (1 << 64) - 1)


def check_int(name: str, value: Any, lo: Optional[int] = None, hi: Optional[int] = None) -> int:
    """``value`` as an int: Python or numpy integers only (not bool, float or str), within
    [lo, hi]. The messages name the argument."""
    if isinstance(value, (bool, np.bool_)) or not isinstance(value, numbers.Integral):
        raise TypeError(f"{name} must be an integer, got {type(value).__name__} {value!r}")
    v = int(value)
    if (lo is not None and v < lo) or (hi is not None and v > hi):
        lo_text = "-inf" if lo is None else ("-2**63" if lo == INT64[0] else str(lo))
        hi_text = "inf" if hi is None else {INT64[1]: "2**63 - 1", UINT64[1]: "2**64 - 1"}.get(
            hi, str(hi))
        raise ValueError(f"{name} = {v} is outside [{lo_text}, {hi_text}]")
    return v


def check_real(name: str, value: Any, lo: Optional[float] = None,
               hi: Optional[float] = None, *, open_lo: bool = False) -> float:
    """``value`` as a float: a real number (int or float, not bool or str), not NaN, within
    [lo, hi] (``open_lo``: (lo, hi]). The messages name the argument."""
    if isinstance(value, (bool, np.bool_)) or not isinstance(value, numbers.Real):
        raise TypeError(f"{name} must be a number, got {type(value).__name__} {value!r}")
    v = float(value)
    if math.isnan(v):
        raise ValueError(f"{name} is NaN")
    if lo is not None and (v <= lo if open_lo else v < lo):
        raise ValueError(f"{name} = {v} must be {'>' if open_lo else '>='} {lo}")
    if hi is not None and v > hi:
        raise ValueError(f"{name} = {v} must be <= {hi}")
    return v


def check_positive(name: str, value: Any) -> float:
    """A number of seconds (or any quantity) that must be > 0."""
    return check_real(name, value, 0.0, open_lo=True)


def check_timeout(name: str, value: Any) -> Optional[float]:
    """A deadline in seconds, > 0, or None for none."""
    return None if value is None else check_positive(name, value)


def check_bool(name: str, value: Any) -> bool:
    if not isinstance(value, bool):
        raise TypeError(f"{name} must be a bool, got {type(value).__name__} {value!r}")
    return value


def check_targets(target: Union[str, Sequence[str]]) -> List[str]:
    """The client's ``target`` argument as a non-empty list of non-empty strings."""
    targets = [target] if isinstance(target, str) else list(target)
    if not targets:
        raise ValueError("gpusampler.Client: no target")
    for t in targets:
        if not isinstance(t, str) or not t:
            raise TypeError(f"target must be a non-empty string, got {t!r}")
    return targets


def check_name(name: str, value: Any) -> str:
    """A dataset name as sent: a non-empty string."""
    if not isinstance(value, str) or not value:
        raise TypeError(f"{name} must be a non-empty string, got {value!r}")
    return value
