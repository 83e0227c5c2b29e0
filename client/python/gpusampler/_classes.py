"""Classes (sampling contract v2, docs/semantics.md "Classes"): ``gpusampler.Class``, one
class of a request, and its wire form. Types and wire ranges are checked here, each message
naming the argument; the semantic rules (targets summing to at most K, overlapping classes,
hard_fraction in [0, 1], ...) are the server's, which names the field too."""

from __future__ import annotations

import numbers
from typing import Any, List, Optional, Sequence, Tuple, Union

import numpy as np

from gpusampler._args import INT64, check_bool, check_int, check_real
from gpusampler.v1 import sampler_pb2 as pb

SELECTION = {
    "uniform": pb.SELECTION_UNIFORM,
    "weighted": pb.SELECTION_WEIGHTED,
    "hardest": pb.SELECTION_HARDEST,
    "mixed": pb.SELECTION_MIXED,
}

LabelSpec = Union[int, Tuple[int, int], Sequence[Union[int, Tuple[int, int]]]]


def _is_int(value: Any) -> bool:
    return isinstance(value, numbers.Integral) and not isinstance(value, (bool, np.bool_))


def _ranges(labels: Any) -> List[Tuple[int, int]]:
    """``labels`` (an int, an inclusive (lo, hi) tuple, or a list of those) as ranges."""
    if _is_int(labels):
        v = check_int("Class labels", labels, *INT64)
        return [(v, v)]
    if isinstance(labels, tuple) and len(labels) == 2 and all(_is_int(x) for x in labels):
        return [(check_int("Class labels lo", labels[0], *INT64),
                 check_int("Class labels hi", labels[1], *INT64))]
    if isinstance(labels, (list, tuple)):
        if not labels:
            raise ValueError("Class labels is empty; a class needs at least one label value")
        out: List[Tuple[int, int]] = []
        for item in labels:
            if not _is_int(item) and not (isinstance(item, tuple) and len(item) == 2):
                raise TypeError("Class labels must be an int, an inclusive (lo, hi) tuple or a "
                                f"list of those, got item {item!r}")
            out.extend(_ranges(item))
        return out
    raise TypeError("Class labels must be an int, an inclusive (lo, hi) tuple or a list of "
                    f"those, got {type(labels).__name__} {labels!r}")


class Class:
    """One class of a request: a set of label values, its share of K, and how its members
    are drawn.

    Args:
        labels: the class's label values: an int, an inclusive ``(lo, hi)`` tuple, or a list
            of those (``[0, (5, 9)]``).
        count / fraction / rest: the share, exactly one of them: ``count`` elements,
            ``floor(K * fraction)`` elements, or ``rest=True``: K minus every other class's
            target (at most one class).
        selection: ``"uniform"`` (default), ``"weighted"`` (successive sampling in proportion
            to the score), ``"hardest"`` (largest score first) or ``"mixed"``
            (``hard_fraction`` of the class's quota hardest, the rest uniform).
        hard_fraction: with ``"mixed"``, in [0, 1].
    """

    __slots__ = ("labels", "count", "fraction", "rest", "selection", "hard_fraction")

    def __init__(self, labels: LabelSpec, *, count: Optional[int] = None,
                 fraction: Optional[float] = None, rest: bool = False,
                 selection: str = "uniform", hard_fraction: Optional[float] = None) -> None:
        self.labels = _ranges(labels)
        check_bool("Class rest", rest)
        shares = [name for name, given in (("count", count is not None),
                                           ("fraction", fraction is not None),
                                           ("rest", rest)) if given]
        if len(shares) != 1:
            raise TypeError("Class needs exactly one share: count=..., fraction=... or "
                            f"rest=True (got {shares or 'none'})")
        self.count = None if count is None else check_int("Class count", count, *INT64)
        self.fraction = None if fraction is None else check_real("Class fraction", fraction)
        self.rest = rest
        if not isinstance(selection, str) or selection not in SELECTION:
            raise ValueError(f"Class selection must be one of {list(SELECTION)}, got "
                             f"{selection!r}")
        self.selection = selection
        self.hard_fraction = (None if hard_fraction is None
                              else check_real("Class hard_fraction", hard_fraction))
        if selection == "mixed" and hard_fraction is None:
            raise TypeError('Class selection="mixed" needs hard_fraction=...')
        if selection != "mixed" and hard_fraction is not None:
            raise TypeError('Class hard_fraction is only for selection="mixed"')

    def __repr__(self) -> str:
        share = (f"count={self.count}" if self.count is not None else
                 f"fraction={self.fraction}" if self.fraction is not None else "rest=True")
        extra = "" if self.hard_fraction is None else f", hard_fraction={self.hard_fraction}"
        return f"Class(labels={self.labels}, {share}, selection={self.selection!r}{extra})"

    def to_wire(self) -> pb.ClassSpec:
        c = pb.ClassSpec(labels=[pb.LabelRange(lo=lo, hi=hi) for lo, hi in self.labels],
                         selection=SELECTION[self.selection])
        if self.count is not None:
            c.count = self.count
        elif self.fraction is not None:
            c.fraction = self.fraction
        else:
            c.rest = True
        if self.hard_fraction is not None:
            c.hard_fraction = self.hard_fraction
        return c

    @property
    def needs_scores(self) -> bool:
        return self.selection != "uniform"


def check_classes(classes: Any) -> List[Class]:
    """``classes`` as a non-empty list of Class."""
    if isinstance(classes, Class) or not isinstance(classes, (list, tuple)):
        raise TypeError(f"classes must be a list of gpusampler.Class, got {classes!r}")
    if not classes:
        raise ValueError("classes is empty; pass None for the two-class rule")
    for i, c in enumerate(classes):
        if not isinstance(c, Class):
            raise TypeError(f"classes[{i}] must be a gpusampler.Class, got "
                            f"{type(c).__name__} {c!r}")
    return list(classes)


def check_fill_order(fill_order: Any) -> List[int]:
    """``fill_order`` as a list of class indices (int32)."""
    if isinstance(fill_order, (str, bytes)) or not isinstance(fill_order, (list, tuple)):
        raise TypeError(f"fill_order must be a list of class indices, got {fill_order!r}")
    return [check_int(f"fill_order[{i}]", v, -(1 << 31), (1 << 31) - 1)
            for i, v in enumerate(fill_order)]
