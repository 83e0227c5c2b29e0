"""gpusampler.data.SampleIterable: sampled batches as a torch ``IterableDataset``, fetched
ahead of the training step.

::

    from torch.utils.data import DataLoader
    from gpusampler.data import SampleIterable

    batches = SampleIterable("127.0.0.1:50051", dataset="train", num_samples=256,
                             steps=10_000, seed=7, return_features=True, prefetch=2)
    for batch in DataLoader(batches, batch_size=None):   # or just `for batch in batches`
        loss = loss_fn(model(batch.features), batch.labels)

Prefetch: the requests go out over one ``SampleStream`` with ``prefetch`` of them in flight
ahead of the step being trained, so while the model computes step i the server is already
sampling steps i+1 .. i+prefetch, and the next batch is usually waiting when the step asks.

Seeds (what makes runs repeatable): step ``i`` (0-based) on rank ``r`` samples with seed
``SampleIterable.seed_for(seed, r, i)``, a fixed 64-bit mix of the three numbers. So:

- the same ``seed`` gives the same batches, in the same order, on every run;
- every rank of a distributed (DDP) job gets its own stream of seeds, hence different
  batches: rank 0 uses ``seed_for(seed, 0, i)``, rank 1 ``seed_for(seed, 1, i)``, ...; a
  rank's batches do not depend on the world size, so a job keeps its batches per rank when
  it scales out. The rank comes from ``torch.distributed`` when it is initialised, or from
  ``rank=``;
- each rank yields ``steps`` batches (``steps=None``: without end);
- DataLoader workers split a rank's steps: worker ``w`` of ``n`` fetches steps ``w, w+n,
  w+2n, ...``, and the DataLoader hands them back in step order, so the batches are the same
  whatever ``num_workers`` is. Each worker opens its own connection (a ``gpusampler.Client``
  cannot cross a process boundary; give a target, or a client, whose settings are copied).

Use ``DataLoader(..., batch_size=None)``: every item is already a batch.
"""

from __future__ import annotations

import collections
import os
from typing import Any, Deque, Dict, Iterator, NamedTuple, Optional, Sequence, Union

import torch
from torch.utils.data import IterableDataset, get_worker_info

from gpusampler import _tensors
from gpusampler._args import check_int
from gpusampler.client import Client, SampleResult

_MASK = (1 << 64) - 1


def _splitmix64(x: int) -> int:
    x = (x + 0x9E3779B97F4A7C15) & _MASK
    x = ((x ^ (x >> 30)) * 0xBF58476D1CE4E5B9) & _MASK
    x = ((x ^ (x >> 27)) * 0x94D049BB133111EB) & _MASK
    return x ^ (x >> 31)


class Batch(NamedTuple):
    """One sampled step, as torch tensors (CPU). Shapes as in ``SampleResult``."""

    indices: torch.Tensor  #: int64 [B, K] or [K]; -1 marks padding
    labels: torch.Tensor  #: the dataset's label dtype
    features: Optional[torch.Tensor]  #: [.., K, ...] with return_features (or inline features)
    num_positive: torch.Tensor  #: int32 [B]
    num_negative: torch.Tensor  #: int32 [B]
    seed: int  #: the seed of this step (``SampleIterable.seed_for(seed, rank, step)``)
    step: int  #: 0-based step of this rank
    dataset_sha256: str  #: the dataset version that answered ("" for inline requests)


class SampleIterable(IterableDataset):
    """Sampled batches from a gpusampler server, ``prefetch`` steps ahead.

    Args:
        target_or_client: ``"host:port"`` (or a list, as ``gpusampler.Client`` takes) or a
            ``gpusampler.Client`` whose settings each iterator copies into its own client.
        dataset: the resident dataset to sample (``Client.create_dataset``); or
        labels, features, row_splits: an inline pool sent with every step instead.
        num_samples: K per row.
        steps: batches per rank (None: without end).
        seed: base seed (None: drawn once here, so every worker and every pass over this
            object shares it; give one to repeat a run).
        return_features: with ``dataset``, gather the K feature rows too.
        rows: with ``dataset``, which rows to sample (default all).
        prefetch: requests in flight ahead of the step being consumed (>= 1).
        rank: this process's rank (default: ``torch.distributed``'s when initialised, else 0).
        **spec: the other ``Client.sample`` arguments (``positive_fraction``, ``fill``,
            ``positive_label``, ``negative_label``).
    """

    def __init__(
        self,
        target_or_client: Union[str, Sequence[str], Client],
        *,
        num_samples: int,
        dataset: Optional[str] = None,
        labels: Any = None,
        features: Any = None,
        row_splits: Any = None,
        steps: Optional[int] = None,
        seed: Optional[int] = None,
        return_features: bool = False,
        rows: Any = None,
        prefetch: int = 2,
        rank: Optional[int] = None,
        **spec: Any,
    ) -> None:
        super().__init__()
        if isinstance(target_or_client, Client):
            targets, options = target_or_client._config
            self._target: Union[str, Sequence[str]] = targets
            self._options: Dict[str, Any] = dict(options)
        else:
            self._target, self._options = target_or_client, {}
        if (dataset is None) == (labels is None):
            raise TypeError("SampleIterable needs exactly one of dataset=... (a resident "
                            "dataset) and labels=... (an inline pool)")
        self.num_samples = check_int("num_samples", num_samples, 1)
        self.steps = None if steps is None else check_int("steps", steps, 0)
        self.prefetch = check_int("prefetch", prefetch, 1)
        if seed is None:
            seed = int.from_bytes(os.urandom(8), "little")
        self.seed = check_int("seed", seed, 0, _MASK)
        self.rank = None if rank is None else check_int("rank", rank, 0)
        unknown = sorted(set(spec) - {"positive_fraction", "positive_label", "negative_label",
                                      "fill"})
        if unknown:
            raise TypeError(f"SampleIterable got unknown keyword argument(s) {unknown}")
        request: Dict[str, Any] = dict(spec, num_samples=self.num_samples)
        if dataset is not None:
            request.update(dataset=dataset, return_features=return_features)
            if rows is not None:
                request["rows"] = rows
        else:
            request.update(labels=labels, features=features, row_splits=row_splits)
        self._request = request

    @staticmethod
    def seed_for(seed: int, rank: int, step: int) -> int:
        """The seed of step ``step`` on rank ``rank`` of a run with base seed ``seed``."""
        return _splitmix64(_splitmix64(_splitmix64(seed & _MASK) ^ (rank & _MASK))
                           ^ (step & _MASK))

    def _rank(self) -> int:
        if self.rank is not None:
            return self.rank
        if torch.distributed.is_available() and torch.distributed.is_initialized():
            return int(torch.distributed.get_rank())
        return 0

    def __len__(self) -> int:
        if self.steps is None:
            raise TypeError("SampleIterable(steps=None) has no length")
        return self.steps

    def __iter__(self) -> Iterator[Batch]:
        rank = self._rank()
        info = get_worker_info()
        worker, workers = (info.id, info.num_workers) if info is not None else (0, 1)

        pending: Deque[int] = collections.deque()  # steps sent, oldest first

        def requests() -> Iterator[Dict[str, Any]]:
            step = worker
            while self.steps is None or step < self.steps:
                pending.append(step)
                yield dict(self._request, seed=self.seed_for(self.seed, rank, step))
                step += workers

        client = Client(self._target, **self._options)
        try:
            for result in client.sample_stream(requests(), window=self.prefetch):
                yield self._batch(result, pending.popleft())
        finally:
            client.close()

    @staticmethod
    def _batch(r: SampleResult, step: int) -> Batch:
        return Batch(
            indices=_tensors.as_torch(r.indices),
            labels=_tensors.as_torch(r.labels),
            features=None if r.features is None else _tensors.as_torch(r.features),
            num_positive=_tensors.as_torch(r.num_positive),
            num_negative=_tensors.as_torch(r.num_negative),
            seed=r.seed,
            step=step,
            dataset_sha256=r.dataset_sha256,
        )


__all__ = ["SampleIterable", "Batch"]
