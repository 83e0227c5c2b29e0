"""gpusampler.data.SampleIterable: sampled batches as a torch ``IterableDataset``, fetched
ahead of the training step by a background thread.

::

    from torch.utils.data import DataLoader
    from gpusampler.data import SampleIterable

    batches = SampleIterable("127.0.0.1:50051", dataset="train", num_samples=256,
                             steps=10_000, seed=7, return_features=True, prefetch=2)
    for batch in DataLoader(batches, batch_size=None):   # or just `for batch in batches`
        loss = loss_fn(model(batch.features), batch.labels)

Prefetch (``prefetch=N``, N >= 1): every iterator starts one background thread. It calls
``Client.sample`` for the next steps, one call after the other, and puts each answer, already
decoded to torch tensors (and copied into pinned memory with ``pin_memory=True``), into a
queue of at most N batches; when the queue is full it waits. So while the model computes
step i the thread fetches and decodes the next steps, and taking the next batch is usually
just a queue read. One call at a time keeps up as long as a call's round trip is shorter
than a training step. Under a competing CPU load it measured lower median waits than keeping
N requests in flight on a ``SampleStream`` (5 runs of 5), not clearly more steps/s
(bench/results/prefetch-contended.md); a likely reason, not traced, is that it has one
thread to wake per batch where the stream has three. ``prefetch=0`` is the blocking path:
each step calls ``Client.sample`` in the consumer's thread, no thread. The batches are the
same either way (the same seeds).

- An error (a failed request, a server that went away, a bad target) is raised by the
  ``next()`` of the step it belongs to, after the batches of all earlier steps.
- The thread ends (and its connection is closed) when the iterator is
  exhausted, ``close()``-d, or garbage-collected (a ``for`` loop that ``break``-s drops it);
  it is a daemon thread, so it never holds up the interpreter's exit.
- ``pin_memory=True`` needs a CUDA build of torch with a GPU (``torch.cuda.is_available()``).
  Without one, ``SampleIterable`` warns (``UserWarning``, once, when it is built) and hands
  out ordinary memory, as ``DataLoader(pin_memory=True)`` does. In DataLoader workers
  (``num_workers > 0``) pin in the main process instead (``DataLoader(pin_memory=True)``):
  pinned pages do not survive the trip from a worker process.

``num_workers``: use 0 (the default). The background thread already overlaps the sampling
with the step; worker processes add a process per worker, a pickled copy of every batch
through shared memory, and compete for the same cores. Measured on a 2-core VM (resident
200,000 x 16 float32 rows, K = 256, a 3 ms MLP step, prefetch 2, a competing CPU load):
``num_workers=1`` gave fewer steps/s than ``num_workers=0`` (medians 79-103 against
107-176 over five runs) and waited longer for its batches than even blocking calls (median
4.6-5.6 ms; bench/results/prefetch-contended.md).
Workers do work, and give the very same batches: worker ``w`` of ``n`` fetches steps ``w,
w+n, w+2n, ...`` and the DataLoader hands them back in step order. Each worker opens its
own connection (a ``gpusampler.Client`` cannot cross a process boundary; give a target, or
a client, whose settings are copied).

Ranks (settled once, when the object is built, in the process that builds it; every
DataLoader worker, forked or spawned, gets them with the object):

1. ``torch.distributed``, when it is initialised: its rank and world size;
2. else the launcher's environment (torchrun, ``torch.distributed.launch``, most
   schedulers' wrappers): ``RANK`` and ``WORLD_SIZE``; without ``RANK``, ``LOCAL_RANK`` on
   a single-node job (``LOCAL_WORLD_SIZE`` equal to ``WORLD_SIZE``, or no ``WORLD_SIZE``);
3. else ``rank=`` and ``world_size=``;
4. else rank 0 of 1.

``rank=`` and ``world_size=`` never override 1 or 2: an argument that disagrees with an
initialised ``torch.distributed`` or with the environment raises ``ValueError`` (two
sources that disagree are a launch bug, and guessing would hand two ranks the same batches).
A world size above 1 with no rank from any source raises ``ValueError`` naming ``RANK``,
``WORLD_SIZE`` and ``rank=``, instead of letting every process be rank 0.

Seeds (what makes runs repeatable): step ``i`` (0-based) on rank ``r`` samples with seed
``SampleIterable.seed_for(seed, r, i)``, a fixed 64-bit mix of the three numbers. So:

- the same ``seed`` gives the same batches, in the same order, on every run;
- every rank of a distributed (DDP) job gets its own stream of seeds, hence different
  batches: rank 0 uses ``seed_for(seed, 0, i)``, rank 1 ``seed_for(seed, 1, i)``, ...; a
  rank's batches do not depend on the world size, so a job keeps its batches per rank when
  it scales out;
- each rank yields ``steps`` batches (``steps=None``: without end).

Use ``DataLoader(..., batch_size=None)``: every item is already a batch.

Epochs (``epoch_mode="rows"`` or ``"elements"``, docs/semantics.md): instead of independent
steps, each rank gets its disjoint share of a fixed permutation of the dataset, like
``torch.utils.data.DistributedSampler``, and the server keeps no state, so any replica (or a
restarted one) answers any step with the same bytes. ``set_epoch(e)`` before each pass, as
with DistributedSampler; iteration stops at the end of the epoch (the first answer says how
many steps this rank has). ``shuffle_seed`` (default 0) keys the permutation and must be
the same on every rank; ``rows_per_step`` and ``drop_last`` are ROWS's. DataLoader workers
split a rank's steps as above. ``client/README-trainer.md`` says what each rank sees.
"""

from __future__ import annotations

import collections
import os
import queue
import threading
import warnings
import weakref
from typing import (Any, Callable, Dict, Generator, Iterator, Mapping, NamedTuple, Optional,
                    Sequence, Tuple, Union)

import grpc
import torch
from torch.utils.data import IterableDataset, get_worker_info

from gpusampler import _shm, _tensors
from gpusampler._args import check_bool, check_int
from gpusampler._epochs import MODES as _EPOCH_MODES
from gpusampler.client import Client, SampleResult
from gpusampler.errors import GpuSamplerError

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
    #: with ``classes``: int32 [B, C] or [C], m_c per row (docs/semantics.md, "Classes")
    num_per_class: Optional[torch.Tensor] = None
    epoch_steps: int = 0  #: with epoch_mode: this rank's steps in the epoch


# ---------------------------------------------------------------------------- ranks
_RANK_HELP = ("set RANK (torchrun sets RANK, WORLD_SIZE and LOCAL_RANK), call "
              "torch.distributed.init_process_group() before building the SampleIterable, "
              "or pass rank=")


def _env_int(env: Mapping[str, str], name: str) -> Optional[int]:
    text = env.get(name)
    if text is None or text.strip() == "":
        return None
    try:
        value = int(text.strip())
    except ValueError:
        raise ValueError(f"SampleIterable: environment variable {name}={text!r} is not an "
                         f"integer") from None
    if value < 0:
        raise ValueError(f"SampleIterable: environment variable {name}={value} is negative")
    return value


def resolve_rank(rank: Optional[int] = None, world_size: Optional[int] = None,
                 env: Optional[Mapping[str, str]] = None
                 ) -> Tuple[int, Optional[int], str]:
    """This process's (rank, world size, where they came from), in the order
    ``SampleIterable`` documents: an initialised ``torch.distributed``, else the launcher's
    environment (``RANK``, ``WORLD_SIZE``, ``LOCAL_RANK``), else ``rank=``/``world_size=``,
    else (0, 1). The world size is None when only a rank is known. Raises ValueError when
    the sources disagree, when the rank is not below the world size, or when the world size
    is above 1 and no source gives a rank."""
    env = os.environ if env is None else env
    if rank is not None:
        rank = check_int("rank", rank, 0)
    if world_size is not None:
        world_size = check_int("world_size", world_size, 1)

    def agree(source: str, found_rank: Optional[int], found_world: Optional[int]) -> None:
        for name, given, found in (("rank", rank, found_rank),
                                   ("world_size", world_size, found_world)):
            if given is not None and found is not None and given != found:
                raise ValueError(
                    f"SampleIterable: {name}={given} contradicts {source}, which says "
                    f"{name} {found}; leave {name}= out (then {source} decides) or fix "
                    f"the launch")

    dist = torch.distributed
    if dist.is_available() and dist.is_initialized():
        dist_rank, dist_world = int(dist.get_rank()), int(dist.get_world_size())
        agree("torch.distributed (initialised)", dist_rank, dist_world)
        return dist_rank, dist_world, "torch.distributed"

    env_rank, env_world = _env_int(env, "RANK"), _env_int(env, "WORLD_SIZE")
    local_rank, local_world = _env_int(env, "LOCAL_RANK"), _env_int(env, "LOCAL_WORLD_SIZE")
    source = "the environment (RANK / WORLD_SIZE)"
    if env_rank is None and local_rank is not None and local_world is not None and (
            env_world is None or env_world == local_world):
        env_rank, env_world = local_rank, local_world  # a single-node job: local is global
        source = "the environment (LOCAL_RANK / LOCAL_WORLD_SIZE, a single-node job)"
    if env_rank is not None or env_world is not None:
        agree(source, env_rank, env_world)
    found_rank = env_rank if env_rank is not None else rank
    found_world = env_world if env_world is not None else world_size
    if found_rank is None:
        if found_world is not None and found_world > 1:
            raise ValueError(
                f"SampleIterable: the world size is {found_world} (from "
                f"{'WORLD_SIZE' if env_world is not None else 'world_size='}) but this "
                f"process's rank is unknown, so every rank would sample the same batches: "
                f"{_RANK_HELP}")
        return 0, 1, "default"
    where = source if env_rank is not None else "rank="
    if found_world is not None and found_rank >= found_world:
        raise ValueError(f"SampleIterable: rank {found_rank} (from {where}) is not below the "
                         f"world size {found_world}")
    return found_rank, found_world, where


# ---------------------------------------------------------------------------- prefetch
_POLL = 0.1  # seconds: how often a blocked put/get checks that the other side is alive


def _put(q: "queue.Queue[Tuple[str, Any]]", stop: threading.Event,
         item: Tuple[str, Any]) -> bool:
    """Puts ``item``, waiting for room; False if the consumer stopped meanwhile."""
    while not stop.is_set():
        try:
            q.put(item, timeout=_POLL)
            return True
        except queue.Full:
            pass
    return False


def _produce(batches: Generator["Batch", None, None], q: "queue.Queue[Tuple[str, Any]]",
             stop: threading.Event) -> None:
    """The prefetch thread: runs ``batches`` (which opens the connection)
    and queues each batch, then ("end", None) or ("error", exception). Holds no reference
    to the consumer's iterator, so that dropping it lets the finalizer stop this."""
    try:
        for batch in batches:
            if not _put(q, stop, ("batch", batch)):
                return
        _put(q, stop, ("end", None))
    except BaseException as e:  # noqa: B902 - handed to the consumer, raised there
        _put(q, stop, ("error", e))
    finally:
        batches.close()  # closes the client (and cancels a stream, see _stream_batches)


class _Slots:
    """SampleIterable(shared_memory=True): ``count`` answer slots of one region, used in
    turn. The region is registered after the first (inline) answer, sized from it."""

    def __init__(self, client: Client, count: int, enabled: bool) -> None:
        self._client, self._count, self._enabled = client, count, enabled
        self._region: Any = None
        self._slot_bytes = 0
        self._next = 0

    def next(self) -> Dict[str, Any]:
        """``output_region=`` of the next step (nothing before the region exists)."""
        if self._region is None:
            return {}
        offset = self._next * self._slot_bytes
        self._next = (self._next + 1) % self._count
        return {"output_region": self._region.window(offset, self._slot_bytes)}

    def size_from(self, result: SampleResult) -> None:
        if not self._enabled or self._region is not None:
            return
        self._slot_bytes = _shm.align(_shm.layout_bytes(result))
        self._region = self._client.register_region(self._slot_bytes * self._count)

    def close(self) -> None:
        if self._region is not None:
            try:
                self._client.unregister_region(self._region)
            except GpuSamplerError:
                pass  # the server is gone: its mapping went with it


class _PrefetchIterator:
    """The iterator of a ``SampleIterable`` with ``prefetch > 0``: reads the queue that its
    background thread fills. ``close()`` (or garbage collection) stops the thread."""

    def __init__(self, batches: Generator["Batch", None, None], depth: int) -> None:
        self._queue: "queue.Queue[Tuple[str, Any]]" = queue.Queue(maxsize=depth)
        self._stop = threading.Event()
        self._finished = False
        self.thread = threading.Thread(target=_produce, args=(batches, self._queue, self._stop),
                                       name="gpusampler-prefetch", daemon=True)
        # The finalizer holds only the event: the iterator itself can be collected.
        self._finalizer = weakref.finalize(self, self._stop.set)
        self.thread.start()

    def __iter__(self) -> "_PrefetchIterator":
        return self

    def __next__(self) -> "Batch":
        if self._finished:
            raise StopIteration
        while True:
            try:
                what, value = self._queue.get(timeout=_POLL)
                break
            except queue.Empty:
                if not self.thread.is_alive() and self._queue.empty():
                    self.close()
                    raise RuntimeError("gpusampler prefetch thread ended without a result")
        if what == "batch":
            return value
        self.close()
        if what == "end":
            raise StopIteration
        raise value

    def close(self) -> None:
        """Stops the prefetch thread (it closes its connection)."""
        self._finished = True
        self._finalizer()

    def __enter__(self) -> "_PrefetchIterator":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()


def _cuda_pinning_available() -> bool:
    try:
        return bool(torch.cuda.is_available())
    except Exception:  # pragma: no cover - a broken CUDA install
        return False


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
        prefetch: batches kept ready ahead of the step being consumed (>= 0). N >= 1: a
            background thread per iterator fetches the next steps (one call at a time) and
            keeps up to N decoded batches in a queue. 0: no thread; each step calls
            ``Client.sample`` when it is asked for. The batches are the same for any value.
        pin_memory: copy each batch's tensors into pinned (page-locked) memory in the
            prefetch thread, for fast ``.to("cuda", non_blocking=True)``. Needs CUDA; without
            it a UserWarning when this is built, and ordinary memory.
        rank, world_size: this process's rank and the job's world size, used only when
            neither an initialised ``torch.distributed`` nor the launcher's environment
            (``RANK``/``WORLD_SIZE``, or ``LOCAL_RANK``/``LOCAL_WORLD_SIZE`` on one node)
            gives them; a value that disagrees with those raises ValueError. Settled here,
            in the building process, and carried into every DataLoader worker (the
            ``rank`` and ``world_size`` attributes). A world size above 1 with no rank
            raises ValueError.
        epoch_mode: ``"rows"`` or ``"elements"``: epochs (docs/semantics.md, "Epochs") instead of
            independent steps; needs ``dataset`` (and no ``rows``). Each rank yields its
            share of epoch ``set_epoch(e)`` and stops at the epoch's end (``steps``, when
            given, caps it further).
        shuffle_seed: keys the epoch's permutation; the same on every rank (default 0).
        rows_per_step, drop_last: ROWS: dataset rows per step, and DistributedSampler's
            ``drop_last``.
        shared_memory: answers come through one shared-memory region of the server's host
            (docs/shared-memory.md) instead of the gRPC response: each iterator registers
            a region of ``prefetch + 2`` slots (one slot without prefetch) and rotates
            them, and the batch tensors view their slot without a copy. Lifetime: a batch
            stays valid until the next-but-one batch is requested, so read (or copy, or
            ``.to("cuda")``) a batch before asking for the batch after the next; the slot
            count covers the ``prefetch`` queued batches, the one being written and the one
            you hold. The first step is answered inline, to size the slots.
        **spec: the other ``Client.sample`` arguments (``positive_fraction``, ``fill``,
            ``positive_label``, ``negative_label``; or ``classes``, ``fill_order`` and
            ``scores``, sent with every step).
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
        pin_memory: bool = False,
        rank: Optional[int] = None,
        world_size: Optional[int] = None,
        epoch_mode: Optional[str] = None,
        shuffle_seed: int = 0,
        rows_per_step: int = 1,
        drop_last: bool = False,
        shared_memory: bool = False,
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
        self.prefetch = check_int("prefetch", prefetch, 0)
        self.pin_memory = check_bool("pin_memory", pin_memory)
        self.shared_memory = check_bool("shared_memory", shared_memory)
        if self.pin_memory and not _cuda_pinning_available():
            warnings.warn("SampleIterable(pin_memory=True): pinned memory needs CUDA, and "
                          "torch.cuda.is_available() is False; the batches come in ordinary "
                          "(pageable) memory", UserWarning, stacklevel=2)
            self.pin_memory = False
        if seed is None:
            seed = int.from_bytes(os.urandom(8), "little")
        self.seed = check_int("seed", seed, 0, _MASK)
        #: this process's rank and the world size (None when only a rank is known), and
        #: where they came from: "torch.distributed", "the environment (...)", "rank=", "default"
        self.rank, self.world_size, self.rank_source = resolve_rank(rank, world_size)
        unknown = sorted(set(spec) - {"positive_fraction", "positive_label", "negative_label",
                                      "fill", "classes", "fill_order", "scores"})
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
        self._init_epochs(epoch_mode, shuffle_seed, rows_per_step, drop_last, dataset, rows)

    # ------------------------------------------------------------------------ epochs
    def _init_epochs(self, mode: Optional[str], shuffle_seed: int, rows_per_step: int,
                     drop_last: bool, dataset: Optional[str], rows: Any) -> None:
        self.epoch_mode = mode
        self.epoch = 0
        #: this rank's steps in the epoch, once an answer said it (None before)
        self.epoch_steps: Optional[int] = None
        if mode is None:
            return
        if mode not in _EPOCH_MODES:
            raise ValueError(f"epoch_mode must be one of {sorted(_EPOCH_MODES)}, got {mode!r}")
        if dataset is None or rows is not None:
            raise TypeError("epoch_mode needs dataset=... and no rows= (the epoch chooses "
                            "the rows)")
        if self.world_size is None:
            raise ValueError("epoch_mode needs the world size: set WORLD_SIZE, initialise "
                             "torch.distributed, or pass world_size=")
        self._epoch = dict(mode=mode, shuffle_seed=check_int("shuffle_seed", shuffle_seed, 0,
                                                             _MASK),
                           world_size=self.world_size, rank=self.rank,
                           rows_per_step=check_int("rows_per_step", rows_per_step, 1),
                           drop_last=check_bool("drop_last", drop_last))

    def set_epoch(self, epoch: int) -> None:
        """The epoch the next iteration goes through (as DistributedSampler's set_epoch):
        it keys the permutation, so every epoch is a different order."""
        self.epoch = check_int("epoch", epoch, 0, (1 << 32) - 1)
        self.epoch_steps = None

    def _step_request(self, step: int) -> Dict[str, Any]:
        """sample()'s arguments for step ``step`` of this rank (and, with epochs, of the
        current epoch; the sample seed then mixes the epoch in)."""
        if self.epoch_mode is None:
            return dict(self._request, seed=self.seed_for(self.seed, self.rank, step))
        seed = self.seed_for(self.seed, self.rank, (self.epoch << 32) | step)
        return dict(self._request, seed=seed,
                    epoch=dict(self._epoch, epoch=self.epoch, step=step))

    #: what the prefetch thread runs: "unary" (one ``Client.sample`` call after the other)
    #: or "stream" (one SampleStream, ``prefetch`` requests in flight); the batches are the
    #: same. Not an API: bench/python_prefetch_bench.py compares the two.
    _producer = "unary"

    @staticmethod
    def seed_for(seed: int, rank: int, step: int) -> int:
        """The seed of step ``step`` on rank ``rank`` of a run with base seed ``seed``."""
        return _splitmix64(_splitmix64(_splitmix64(seed & _MASK) ^ (rank & _MASK))
                           ^ (step & _MASK))

    def __len__(self) -> int:
        if self.epoch_mode is not None and self.epoch_steps is not None:
            return self.epoch_steps if self.steps is None else min(self.steps, self.epoch_steps)
        if self.steps is None:
            raise TypeError("SampleIterable(steps=None) has no length")
        return self.steps

    def _steps(self) -> Iterator[int]:
        """This iterator's steps: worker ``w`` of ``n`` takes ``w, w+n, ...``."""
        info = get_worker_info()
        first, stride = (info.id, info.num_workers) if info is not None else (0, 1)

        def steps(step: int) -> Iterator[int]:
            while self.steps is None or step < self.steps:
                yield step
                step += stride
        return steps(first)

    def __iter__(self) -> Iterator[Batch]:
        if self.prefetch == 0:
            return self._blocking_batches()
        # Epochs end where the server says: one call at a time learns it first.
        stream = self._producer == "stream" and self.epoch_mode is None
        produce = self._stream_batches if stream else self._blocking_batches
        return _PrefetchIterator(produce(self._steps()), self.prefetch)

    def _blocking_batches(self, steps: Optional[Iterator[int]] = None
                          ) -> Generator[Batch, None, None]:
        """One ``Client.sample`` call per step; in the consumer (prefetch=0) or in the
        prefetch thread."""
        steps = self._steps() if steps is None else steps
        client = Client(self._target, **self._options)
        slots = _Slots(client, self.prefetch + 2 if self.prefetch > 0 else 1,
                       self.shared_memory)
        try:
            for step in steps:
                if self.epoch_steps is not None and step >= self.epoch_steps:
                    return  # the end of the epoch
                try:
                    result = client.sample(**self._step_request(step), **slots.next())
                except GpuSamplerError as e:
                    # A worker whose first step is past a short epoch: nothing to yield.
                    if self.epoch_mode is not None and e.code == grpc.StatusCode.OUT_OF_RANGE:
                        return
                    raise
                if self.epoch_mode is not None:
                    self.epoch_steps = result.epoch_steps
                slots.size_from(result)
                yield self._batch(result, step)
        finally:
            slots.close()
            client.close()

    def _stream_batches(self, steps: Iterator[int]) -> Generator[Batch, None, None]:
        """Runs in the prefetch thread: the batches of one SampleStream, decoded."""
        pending: "collections.deque[int]" = collections.deque()  # steps sent, oldest first

        client = Client(self._target, **self._options)
        # Shared memory: a slot is written again only after `prefetch` answers in flight,
        # `prefetch` batches in the queue and the consumer's batch have moved on.
        slots = _Slots(client, 2 * self.prefetch + 2, self.shared_memory)

        def requests() -> Iterator[Dict[str, Any]]:
            for step in steps:
                pending.append(step)
                yield dict(self._step_request(step), **slots.next())

        try:
            stream = client.sample_stream(requests(), window=self.prefetch)
            try:
                for result in stream:
                    slots.size_from(result)
                    yield self._batch(result, pending.popleft())
            finally:
                getattr(stream, "close")()  # a generator: cancels the call
        finally:
            slots.close()
            client.close()

    def _batch(self, r: SampleResult, step: int) -> Batch:
        tensor: Callable[[Any], torch.Tensor] = _tensors.as_torch
        if self.pin_memory:
            tensor = lambda x: _tensors.as_torch(x).pin_memory()  # noqa: E731
        return Batch(
            indices=tensor(r.indices),
            labels=tensor(r.labels),
            features=None if r.features is None else tensor(r.features),
            num_positive=tensor(r.num_positive),
            num_negative=tensor(r.num_negative),
            seed=r.seed,
            step=step,
            dataset_sha256=r.dataset_sha256,
            num_per_class=None if r.num_per_class is None else tensor(r.num_per_class),
            epoch_steps=r.epoch_steps,
        )


__all__ = ["SampleIterable", "Batch", "resolve_rank"]
