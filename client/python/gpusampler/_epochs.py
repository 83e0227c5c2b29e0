"""Epochs (docs/semantics.md, "Epochs"): the ``epoch=`` argument of ``sample()``, as
``Epoch`` or a dict.

A dataset request that names an epoch is answered with this rank's step of a fixed
permutation: a pure function of (dataset version, request, epoch), so any replica, or a
restarted one, answers any step with the same bytes.
"""

import dataclasses
from typing import Any, Mapping, Union

from gpusampler._args import INT64, UINT64, check_bool, check_int
from gpusampler.v1 import sampler_pb2 as pb

UINT32 = (0, 2**32 - 1)

MODES = {"rows": pb.EPOCH_MODE_ROWS, "elements": pb.EPOCH_MODE_ELEMENTS}


@dataclasses.dataclass(frozen=True)
class Epoch:
    """One rank's step of an epoch.

    ``mode`` is ``"rows"`` (torch's DistributedSampler over the dataset's rows,
    ``rows_per_step`` rows a step, ``drop_last`` as DistributedSampler's) or ``"elements"``
    (balanced passes over a one-row dataset's elements: the class that sets the epoch's
    length is seen once per epoch). ``shuffle_seed`` and ``epoch`` key the permutation;
    ``step`` is this rank's step in the epoch (``SampleResult.epoch_steps`` says how many).
    """

    mode: str = "rows"
    shuffle_seed: int = 0
    epoch: int = 0
    world_size: int = 1
    rank: int = 0
    step: int = 0
    rows_per_step: int = 1
    drop_last: bool = False


EpochArg = Union[Epoch, Mapping[str, Any]]


def epoch_message(epoch: EpochArg) -> pb.EpochSpec:
    """``epoch`` (an Epoch, or a dict of its fields) as the wire EpochSpec, checked for type.

    The server checks the values (rank in [0, world_size), step >= 0, ...) and names the
    field in its INVALID_ARGUMENT."""
    if isinstance(epoch, Mapping):
        unknown = set(epoch) - {f.name for f in dataclasses.fields(Epoch)}
        if unknown:
            raise TypeError(f"epoch has unknown fields {sorted(unknown)}")
        epoch = Epoch(**epoch)
    if not isinstance(epoch, Epoch):
        raise TypeError(f"epoch must be a gpusampler.Epoch or a dict, got {type(epoch).__name__}")
    if not isinstance(epoch.mode, str) or epoch.mode not in MODES:
        raise ValueError(f"epoch.mode must be one of {sorted(MODES)}, got {epoch.mode!r}")
    return pb.EpochSpec(
        shuffle_seed=check_int("epoch.shuffle_seed", epoch.shuffle_seed, *UINT64),
        epoch=check_int("epoch.epoch", epoch.epoch, *UINT32),
        world_size=check_int("epoch.world_size", epoch.world_size, *INT64),
        rank=check_int("epoch.rank", epoch.rank, *INT64),
        step=check_int("epoch.step", epoch.step, *INT64),
        mode=MODES[epoch.mode],
        rows_per_step=check_int("epoch.rows_per_step", epoch.rows_per_step, *INT64),
        drop_last=check_bool("epoch.drop_last", epoch.drop_last),
    )
