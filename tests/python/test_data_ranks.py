"""SampleIterable settles rank and world size when it is built, in the main process, and
carries them into DataLoader workers whatever the start method: two simulated ranks (from
the torchrun environment, or from rank=/world_size=) get disjoint seeds and different
batches, with fork and with spawn workers, and the same batches on a rerun. A world size
above 1 without a rank refuses to run; sources that disagree raise."""

from __future__ import annotations

import socket

import numpy as np
import pytest
import torch
import torch.distributed as dist
from torch.utils.data import DataLoader

from gpusampler.data import SampleIterable, resolve_rank

ROWS = 4000
STEPS = 4
SEED = 21
LAUNCHER_VARS = ("RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE")


@pytest.fixture(scope="module")
def dataset(client):
    rng = np.random.default_rng(5)
    labels = (rng.random(ROWS) < 0.05).astype(np.int64)
    client.create_dataset("ranks-ds", labels, replace=True)
    return labels


@pytest.fixture
def no_launcher(monkeypatch):
    """No launcher variables from the environment the tests run in."""
    for name in LAUNCHER_VARS:
        monkeypatch.delenv(name, raising=False)
    return monkeypatch


def make(server, **kw) -> SampleIterable:
    return SampleIterable(server.target, dataset="ranks-ds", num_samples=16, steps=STEPS,
                          seed=SEED, **kw)


def run(ds: SampleIterable, context: str) -> list:
    # Spawned workers each import torch afresh (seconds on a small host): one of them.
    workers = 1 if context == "spawn" else 2
    loader = DataLoader(ds, batch_size=None, num_workers=workers,
                        multiprocessing_context=context)
    return [(b.step, b.seed, b.indices.clone()) for b in loader]


def check_two_ranks(r0: list, r1: list, again: list) -> None:
    assert [s for s, _, _ in r0] == list(range(STEPS)) == [s for s, _, _ in r1]
    assert [seed for _, seed, _ in r0] == [SampleIterable.seed_for(SEED, 0, i)
                                           for i in range(STEPS)]
    assert [seed for _, seed, _ in r1] == [SampleIterable.seed_for(SEED, 1, i)
                                           for i in range(STEPS)]
    assert not {seed for _, seed, _ in r0} & {seed for _, seed, _ in r1}  # disjoint
    for (_, _, a), (_, _, b) in zip(r0, r1):
        assert not torch.equal(a, b)  # different batches at every step
    assert len(again) == len(r1)
    for (s, seed, a), (s2, seed2, b) in zip(r1, again):
        assert (s, seed) == (s2, seed2) and torch.equal(a, b)  # a rerun: the same batches


@pytest.mark.parametrize("context", ["fork", "spawn"])
def test_two_ranks_from_torchrun_environment(server, dataset, no_launcher, context):
    # torchrun sets these and nothing calls init_process_group: the rank must still come
    # through. The environment is changed after building, so a worker that asked for the
    # rank itself (spawned workers inherit the environment at their start) would be wrong.
    built = {}
    for rank in (0, 1):
        no_launcher.setenv("RANK", str(rank))
        no_launcher.setenv("WORLD_SIZE", "2")
        no_launcher.setenv("LOCAL_RANK", str(rank))
        built[rank] = make(server)
        assert (built[rank].rank, built[rank].world_size) == (rank, 2)
        assert "environment" in built[rank].rank_source
    no_launcher.setenv("RANK", "0")
    r0, r1 = run(built[0], context), run(built[1], context)
    # The rerun in forked workers (cheap): the same batches whatever the start method.
    check_two_ranks(r0, r1, run(built[1], "fork"))


@pytest.mark.parametrize("context", ["fork", "spawn"])
def test_two_ranks_from_arguments(server, dataset, no_launcher, context):
    ds0, ds1 = make(server, rank=0, world_size=2), make(server, rank=1, world_size=2)
    assert (ds1.rank, ds1.world_size, ds1.rank_source) == (1, 2, "rank=")
    r0, r1 = run(ds0, context), run(ds1, context)
    check_two_ranks(r0, r1, run(make(server, rank=1, world_size=2), "fork"))


def test_world_size_above_one_without_rank_refuses(server, no_launcher):
    no_launcher.setenv("WORLD_SIZE", "2")
    with pytest.raises(ValueError, match=r"world size is 2 \(from WORLD_SIZE\).*rank is "
                                         r"unknown.*RANK.*rank="):
        make(server)
    no_launcher.delenv("WORLD_SIZE")
    with pytest.raises(ValueError, match=r"from world_size=.*RANK.*WORLD_SIZE.*rank="):
        make(server, world_size=2)
    no_launcher.setenv("WORLD_SIZE", "2")  # the environment's world size, the argument's rank
    assert (make(server, rank=1).rank, make(server, rank=1).world_size) == (1, 2)


def test_sources_that_disagree_raise(server, no_launcher):
    no_launcher.setenv("RANK", "1")
    no_launcher.setenv("WORLD_SIZE", "2")
    with pytest.raises(ValueError, match=r"rank=0 contradicts the environment"):
        make(server, rank=0)
    with pytest.raises(ValueError, match=r"world_size=4 contradicts the environment"):
        make(server, world_size=4)
    assert make(server, rank=1, world_size=2).rank == 1  # agreeing arguments are fine
    no_launcher.setenv("RANK", "2")
    with pytest.raises(ValueError, match="rank 2 .* is not below the world size 2"):
        make(server)
    no_launcher.setenv("RANK", "one")
    with pytest.raises(ValueError, match="RANK='one' is not an integer"):
        make(server)


def test_resolution_order_and_defaults(no_launcher):
    assert resolve_rank(env={}) == (0, 1, "default")
    assert resolve_rank(3, env={}) == (3, None, "rank=")
    assert resolve_rank(env={"RANK": "3", "WORLD_SIZE": "4", "LOCAL_RANK": "1"})[:2] == (3, 4)
    # LOCAL_RANK alone is the rank only on one node (local world = world).
    assert resolve_rank(env={"LOCAL_RANK": "1", "LOCAL_WORLD_SIZE": "2",
                             "WORLD_SIZE": "2"})[:2] == (1, 2)
    with pytest.raises(ValueError, match="rank is unknown"):
        resolve_rank(env={"LOCAL_RANK": "1", "LOCAL_WORLD_SIZE": "2", "WORLD_SIZE": "4"})


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def test_initialised_torch_distributed_wins_and_contradictions_raise(server, no_launcher):
    # The environment says rank 1 of 2, torch.distributed (initialised) rank 0 of 1: the
    # process group decides.
    no_launcher.setenv("RANK", "1")
    no_launcher.setenv("WORLD_SIZE", "2")
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{free_port()}", rank=0,
                            world_size=1)
    try:
        ds = make(server)
        assert (ds.rank, ds.world_size, ds.rank_source) == (0, 1, "torch.distributed")
        with pytest.raises(ValueError, match=r"rank=1 contradicts torch.distributed"):
            make(server, rank=1)
        with pytest.raises(ValueError, match=r"world_size=2 contradicts torch.distributed"):
            make(server, world_size=2)
        assert make(server, rank=0, world_size=1).rank == 0
    finally:
        dist.destroy_process_group()
