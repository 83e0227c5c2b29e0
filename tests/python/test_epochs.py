"""Epochs (SPEC section 8) through real servers, on the CPU and on cuda-sim.

The oracle is this file's own: Philox4x32-10 and the Feistel permutation written from the
SPEC text (and checked against tests/data/feistel.jsonl first), DistributedSampler's
arithmetic taken from torch itself, and ELEMENTS' positions -> members and (v, i) order.
"""

from __future__ import annotations

import contextlib
import json
import math
from collections import Counter
from typing import Dict, List, Sequence

import grpc
import numpy as np
import pytest
import torch
from torch.utils.data import DistributedSampler

from conftest import REPO, start_server, stop_server

import gpusampler
from gpusampler.data import SampleIterable

M32 = 0xFFFFFFFF
FEISTEL = [json.loads(x) for x in (REPO / "tests/data/feistel.jsonl").read_text().splitlines()
           if x.strip()]
GOLDEN = [json.loads(x) for x in (REPO / "tests/data/epochs_golden.jsonl").read_text().splitlines()
          if x.strip()]
FILL = {"FILL_POLICY_BOTH": "both", "FILL_POLICY_NEGATIVES_ONLY": "negatives_only",
        "FILL_POLICY_NONE": "none"}


# ------------------------------------------------------------------------------ the oracle
def philox(ctr: Sequence[int], key: Sequence[int]) -> List[int]:
    c0, c1, c2, c3 = ctr
    k0, k1 = key
    for r in range(10):
        if r:
            k0, k1 = (k0 + 0x9E3779B9) & M32, (k1 + 0xBB67AE85) & M32
        p0, p1 = 0xD2511F53 * c0, 0xCD9E8D57 * c2
        c0, c1, c2, c3 = (p1 >> 32) ^ c1 ^ k0, p1 & M32, (p0 >> 32) ^ c3 ^ k1, p0 & M32
    return [c0, c1, c2, c3]


def feistel(n: int, tag: int, pas: int, epoch: int, shuffle_seed: int, x: int) -> int:
    if n == 1:
        return 0
    # h = max(1, ceil(ceil(log2 n) / 2)); ceil(log2 n) is the bit length of n - 1 (exact).
    h = max(1, -(-((n - 1).bit_length()) // 2))
    mask = (1 << h) - 1
    key = (shuffle_seed & M32, shuffle_seed >> 32)

    def rounds(y: int) -> int:
        left, right = y >> h, y & mask
        for k in range(4):
            f = philox((right, epoch, pas, 0x80000000 | (k << 16) | tag), key)[0] & mask
            left, right = right, left ^ f
        return (left << h) | right

    y = rounds(x)
    while y >= n:
        y = rounds(y)
    return y


def order_key(seed: int, i: int) -> int:
    return philox(((i >> 2) & M32, i >> 34, 0, 1), (seed & M32, seed >> 32))[i & 3]


def rows_oracle(b: int, w: int, rank: int, step: int, per_step: int, drop_last: bool,
                epoch: int, shuffle_seed: int):
    """(rows of the step, epoch_steps), written from SPEC section 8's text."""
    if drop_last and b % w:
        num = math.ceil((b - w) / w)
    else:
        num = math.ceil(b / w)
    perm = [feistel(b, 0xFFFF, 0, epoch, shuffle_seed, p) for p in range(b)]
    total = num * w
    lst = (perm * (total // max(b, 1) + 1))[:total] if not drop_last else perm[:total]
    mine = lst[rank:total:w]
    steps = math.ceil(num / per_step)
    return mine[step * per_step:(step + 1) * per_step], steps


def quotas(n_pos: int, n_neg: int, k: int, f: float, fill: str):
    target = math.floor(k * f)
    pos = min(n_pos, target)
    if fill == "both":
        neg = min(n_neg, k - pos)
        pos = min(n_pos, k - neg)
    elif fill == "negatives_only":
        neg = min(n_neg, k - pos)
    else:
        neg = min(n_neg, k - target)
    return [pos, neg]


def elements_oracle(labels: Sequence[int], k: int, f: float, fill: str, seed: int, world: int,
                    rank: int, step: int, epoch: int, shuffle_seed: int, pos_label: int = 1,
                    neg_label: int = 0):
    """(indices [K] with -1 padding, [m_0, m_1], epoch_steps) of an ELEMENTS step."""
    members = [[i for i, x in enumerate(labels) if x == pos_label],
               [i for i, x in enumerate(labels) if x == neg_label]]
    m = quotas(len(members[0]), len(members[1]), k, f, fill)
    g_total = max([len(members[c]) // m[c] for c in range(2) if m[c] > 0], default=0)
    steps = g_total // world
    if step >= steps:
        return None, m, steps
    g = step * world + rank
    chosen = []
    for c in range(2):
        if m[c] == 0:
            continue
        n = len(members[c])
        period = n // m[c] * m[c]
        for q in range(g * m[c], (g + 1) * m[c]):
            chosen.append(members[c][feistel(n, c, q // period, epoch, shuffle_seed, q % period)])
    chosen.sort(key=lambda i: (order_key(seed, i), i))
    return chosen + [-1] * (k - len(chosen)), m, steps


def test_oracle_reproduces_feistel_file():
    for line in FEISTEL:
        assert feistel(line["n"], line["tag"], line["pass"], line["epoch"], line["shuffle_seed"],
                       line["x"]) == line["pi"], line


def test_oracle_rows_matches_golden_file():
    for g in (x for x in GOLDEN if x["mode"] == "EPOCH_MODE_ROWS"):
        for step, want in enumerate(g["rows_by_step"]):
            got, steps = rows_oracle(g["num_rows"], g["world_size"], g["rank"], step,
                                     g["rows_per_step"], g["drop_last"], g["epoch"],
                                     g["shuffle_seed"])
            assert (got, steps) == (want, g["epoch_steps"]), g


def test_oracle_elements_matches_golden_file():
    for g in (x for x in GOLDEN if x["mode"] == "EPOCH_MODE_ELEMENTS"):
        for step, want in enumerate(g["steps"]):
            got, m, steps = elements_oracle(g["labels"], g["num_samples"], g["positive_fraction"],
                                            FILL[g["fill_policy"]], g["seed"], g["world_size"],
                                            g["rank"], step, g["epoch"], g["shuffle_seed"])
            assert (got, m, steps) == (want["indices"], want["num_per_class"], g["epoch_steps"])


# ------------------------------------------------------------------------------ fixtures
@pytest.fixture(scope="module")
def sim_server(tmp_path_factory):
    s = start_server(tmp_path_factory.mktemp("epochs-sim"), device="cuda-sim")
    yield s
    assert stop_server(s) == 0, s.log_text()


@pytest.fixture(scope="module")
def sim_client(sim_server):
    with gpusampler.Client(sim_server.target, timeout=60) as c:
        assert c.info().backend == "cuda-sim"
        yield c


@pytest.fixture(params=["cpu", "cuda-sim"])
def backend(request):
    return request.getfixturevalue("client" if request.param == "cpu" else "sim_client")


def rows_dataset(c, name: str, b: int):
    """Row r holds r + 1 negatives, so an answer with K >= b says which row it sampled
    (num_negative = row + 1)."""
    labels = np.zeros(b * (b + 1) // 2, np.int64)
    splits = np.concatenate([[0], np.cumsum(np.arange(1, b + 1))]).astype(np.int64)
    c.create_dataset(name, labels, row_splits=splits, replace=True)


def epoch(**kw) -> Dict:
    return dict(kw)


def same_answer(a, b) -> None:
    np.testing.assert_array_equal(a.indices, b.indices)
    np.testing.assert_array_equal(a.labels, b.labels)
    np.testing.assert_array_equal(a.num_positive, b.num_positive)
    np.testing.assert_array_equal(a.num_negative, b.num_negative)
    assert a.indices.shape == b.indices.shape and a.labels.dtype == b.labels.dtype
    if a.features is None or b.features is None:
        assert a.features is None and b.features is None
    else:
        np.testing.assert_array_equal(a.features, b.features)
    assert a.seed == b.seed


# ------------------------------------------------------------------------------ reference files
def feistel_via_server(c, line, name: str):
    """pi(n, tag, pass)(x) read back from the server: ROWS (tag 0xFFFF, pass 0) over n rows,
    or ELEMENTS with one member per step of class `tag` (0: positives, 1: negatives) placed
    at indices 0..n-1, so global step pass * n + x returns member pi(x) = index pi(x)."""
    n, tag, pas = line["n"], line["tag"], line["pass"]
    if tag == 0xFFFF and pas == 0:
        rows_dataset(c, name, n)
        r = c.sample(dataset=name, num_samples=n, seed=1, epoch=epoch(
            mode="rows", world_size=1, rank=0, step=line["x"], rows_per_step=1,
            epoch=line["epoch"], shuffle_seed=line["shuffle_seed"]))
        return int(r.num_negative[0]) - 1
    g = pas * n + line["x"]
    other = (pas + 1) * n + 2  # more members of the other class than any x of this pass needs
    mine, theirs = (1, 0) if tag == 0 else (0, 1)
    labels = np.array([mine] * n + [theirs] * other, np.int8)
    key = f"{name}-{n}-{tag}-{pas}"
    if key not in feistel_via_server.uploaded:
        c.create_dataset(name, labels, replace=True)
        feistel_via_server.uploaded = {key}
    r = c.sample(dataset=name, num_samples=2, positive_fraction=0.5, seed=3, epoch=epoch(
        mode="elements", world_size=1, rank=0, step=g, epoch=line["epoch"],
        shuffle_seed=line["shuffle_seed"]))
    picked = [int(i) for i in r.indices if 0 <= i < n]
    assert len(picked) == 1, r.indices
    return picked[0]


feistel_via_server.uploaded = set()

# The lines reached with the binary spec: ROWS datasets of n rows and ELEMENTS classes 0
# and 1 of n members. Tag 2 needs a third class: those lines go through the server with
# three wire classes below (test_feistel_tag2_lines_through_server_with_three_classes).
# The n = 2^31 - 1 lines (tag 0xFFFF, pass 0) go through a ROWS epoch over a repository
# dataset of 2^31 - 1 fixed-length rows (test_feistel_lines_of_2_31_rows_through_server).
REACHABLE = [x for x in FEISTEL if (x["tag"] in (0, 1) and x["n"] <= 70000)
             or (x["tag"] == 0xFFFF and x["pass"] == 0 and x["n"] <= 2000)]
BIG_N = 2**31 - 1
BIG = [x for x in FEISTEL if x["n"] == BIG_N]


def test_feistel_lines_through_server(backend):
    assert len(REACHABLE) == 18  # of 34: tag 2 (8 lines) and n = 2^31 - 1 (8 lines) below
    feistel_via_server.uploaded = set()
    name = "ep-feistel-" + ("sim" if backend.info().backend == "cuda-sim" else "cpu")
    for line in REACHABLE:
        assert feistel_via_server(backend, line, name) == line["pi"], line


@pytest.mark.parametrize("g", [x for x in GOLDEN if x["mode"] == "EPOCH_MODE_ROWS"],
                         ids=lambda g: f"rows-B{g['num_rows']}-W{g['world_size']}-r{g['rank']}"
                         f"-{'drop' if g['drop_last'] else 'pad'}")
def test_golden_rows(backend, g):
    name = f"ep-rows-{g['num_rows']}"
    rows_dataset(backend, name, g["num_rows"])
    for step, want in enumerate(g["rows_by_step"]):
        e = epoch(mode="rows", world_size=g["world_size"], rank=g["rank"], step=step,
                  rows_per_step=g["rows_per_step"], drop_last=g["drop_last"], epoch=g["epoch"],
                  shuffle_seed=g["shuffle_seed"])
        r = backend.sample(dataset=name, num_samples=g["num_rows"], seed=11, epoch=e)
        assert r.epoch_steps == g["epoch_steps"]
        assert [int(x) - 1 for x in r.num_negative] == want
        # Byte for byte the `rows` request of those rows.
        same_answer(r, backend.sample(dataset=name, num_samples=g["num_rows"], seed=11,
                                      rows=np.array(want, np.int64)))
    with pytest.raises(gpusampler.InvalidArgumentError) as err:
        backend.sample(dataset=name, num_samples=4, epoch=dict(
            e, step=g["epoch_steps"]))
    assert err.value.code == grpc.StatusCode.OUT_OF_RANGE
    assert f"epoch_steps = {g['epoch_steps']}" in err.value.details


@pytest.mark.parametrize("g", [x for x in GOLDEN if x["mode"] == "EPOCH_MODE_ELEMENTS"],
                         ids=lambda g: f"elements-W{g['world_size']}-r{g['rank']}")
def test_golden_elements(backend, g):
    name = "ep-golden-elements"
    labels = np.array(g["labels"], np.int64)
    backend.create_dataset(name, labels, replace=True)
    for step, want in enumerate(g["steps"]):
        r = backend.sample(dataset=name, num_samples=g["num_samples"], seed=g["seed"],
                           positive_fraction=g["positive_fraction"], fill=FILL[g["fill_policy"]],
                           epoch=epoch(mode="elements", world_size=g["world_size"],
                                       rank=g["rank"], step=step, epoch=g["epoch"],
                                       shuffle_seed=g["shuffle_seed"]))
        assert r.epoch_steps == g["epoch_steps"]
        assert r.indices.tolist() == want["indices"], step
        assert [int(r.num_positive[0]), int(r.num_negative[0])] == want["num_per_class"]
        valid = r.indices >= 0
        np.testing.assert_array_equal(r.labels[valid], labels[r.indices[valid]])
        assert (r.labels[~valid] == -1).all()


# ------------------------------------------------------------------------------ ROWS vs torch
@contextlib.contextmanager
def randperm_is(perm: List[int]):
    """torch.randperm returns `perm` (our pi) inside: DistributedSampler's own arithmetic
    then gives the lists SPEC section 8 says ROWS gives."""
    real = torch.randperm
    torch.randperm = lambda n, generator=None, **kw: torch.tensor(perm, dtype=torch.int64)
    try:
        yield
    finally:
        torch.randperm = real


@pytest.mark.parametrize("b", [1, 7, 100, 1000])
def test_rows_equal_distributed_sampler(client, b):
    name = f"ep-ds-{b}"
    rows_dataset(client, name, b)
    per_step = 64
    for w in (1, 3, 8):
        for drop_last in (False, True):
            ours: Dict[int, List[int]] = {}
            for rank in range(w):
                ours[rank] = []
                step, steps = 0, 0
                while True:
                    e = epoch(mode="rows", world_size=w, rank=rank, step=step,
                              rows_per_step=per_step, drop_last=drop_last, epoch=2,
                              shuffle_seed=5)
                    try:
                        r = client.sample(dataset=name, num_samples=b, seed=1, epoch=e)
                    except gpusampler.InvalidArgumentError as err:
                        assert err.code == grpc.StatusCode.OUT_OF_RANGE
                        assert step == steps
                        assert f"epoch_steps = {steps}" in err.details
                        break
                    steps = r.epoch_steps
                    ours[rank] += [int(x) - 1 for x in r.num_negative]
                    step += 1
            perm = [feistel(b, 0xFFFF, 0, 2, 5, p) for p in range(b)]
            theirs = {}
            for rank in range(w):
                ds = DistributedSampler(range(b), num_replicas=w, rank=rank, shuffle=True,
                                        drop_last=drop_last)
                with randperm_is(perm):
                    theirs[rank] = list(ds)
            assert ours == theirs, (b, w, drop_last)
            # The multiset of all ranks' rows equals DistributedSampler's (its own randperm):
            # the same multiplicities (each row once, padding repeats of its head).
            plain = Counter()
            for rank in range(w):
                plain.update(DistributedSampler(range(b), num_replicas=w, rank=rank,
                                                shuffle=True, drop_last=drop_last))
            got = Counter(x for v in ours.values() for x in v)
            assert sorted(Counter(got.values()).items()) == sorted(
                Counter(plain.values()).items()), (b, w, drop_last)
            assert sum(got.values()) == sum(plain.values())


# ------------------------------------------------------------------------------ ELEMENTS
def elements_dataset(n_pos=40, n_neg=960, n_ignored=100, seed=0):
    rng = np.random.default_rng(seed)
    labels = np.array([1] * n_pos + [0] * n_neg + [-1] * n_ignored, np.int16)
    rng.shuffle(labels)
    features = rng.standard_normal((labels.size, 3)).astype(np.float32)
    return labels, features


def run_epoch(c, name, world, k=32, f=0.25, seed=9, ep=1, shuffle_seed=4, features=False):
    out = {}
    steps = None
    for rank in range(world):
        step = 0
        while steps is None or step < steps:
            r = c.sample(dataset=name, num_samples=k, positive_fraction=f, seed=seed,
                         return_features=features,
                         epoch=epoch(mode="elements", world_size=world, rank=rank, step=step,
                                     epoch=ep, shuffle_seed=shuffle_seed))
            steps = r.epoch_steps
            out[(rank, step)] = r
            step += 1
    return out, steps


def test_elements_coverage(backend):
    labels, features = elements_dataset()
    backend.create_dataset("ep-cover", labels, features, replace=True)
    world = 4
    answers, steps = run_epoch(backend, "ep-cover", world, features=True)
    assert steps == 10  # G = max(40 // 8, 960 // 24) = 40 global steps, 10 per rank
    negatives = np.flatnonzero(labels == 0)
    positives = np.flatnonzero(labels == 1)
    seen = Counter()
    for (rank, step), r in answers.items():
        idx = r.indices[r.indices >= 0]
        assert len(set(idx.tolist())) == idx.size == 32, "an element twice in one step"
        assert int(r.num_positive[0]) == 8 and int(r.num_negative[0]) == 24
        np.testing.assert_array_equal(r.labels[: idx.size], labels[idx])
        np.testing.assert_array_equal(r.features, features[r.indices])
        seen.update(idx.tolist())
        want, _, _ = elements_oracle(labels.tolist(), 32, 0.25, "both", 9, world, rank, step, 1, 4)
        assert r.indices.tolist() == want
    # The epoch-setting class (negatives) once each; positives once per pass (8 passes).
    assert all(seen[int(i)] == 1 for i in negatives)
    assert all(seen[int(i)] == 8 for i in positives)
    assert set(seen) <= set(negatives.tolist()) | set(positives.tolist())


def test_elements_same_bytes_cpu_and_sim(client, sim_client):
    labels, features = elements_dataset(seed=3)
    for c in (client, sim_client):
        c.create_dataset("ep-cmp", labels, features, replace=True)
    a, _ = run_epoch(client, "ep-cmp", 3, features=True)
    b, _ = run_epoch(sim_client, "ep-cmp", 3, features=True)
    assert a.keys() == b.keys()
    for key in a:
        same_answer(a[key], b[key])
        assert a[key].epoch_steps == b[key].epoch_steps


def test_elements_one_row_with_row_splits_answers_batch_dim(client):
    labels, _ = elements_dataset(seed=5)
    client.create_dataset("ep-split1", labels, row_splits=np.array([0, labels.size]),
                          replace=True)
    client.create_dataset("ep-flat1", labels, replace=True)
    e = epoch(mode="elements", world_size=2, rank=1, step=3, epoch=0, shuffle_seed=1)
    a = client.sample(dataset="ep-split1", num_samples=16, seed=2, epoch=e)
    b = client.sample(dataset="ep-flat1", num_samples=16, seed=2, epoch=e)
    assert a.indices.shape == (1, 16) and b.indices.shape == (16,)
    np.testing.assert_array_equal(a.indices[0], b.indices)


def test_two_replicas_sharing_a_repository(tmp_path):
    repo = tmp_path / "repo"
    repo.mkdir()
    servers = [start_server(tmp_path / f"s{i}", ["--dataset-dir", str(repo)]) for i in range(2)]
    try:
        labels, features = elements_dataset(seed=7)
        clients = [gpusampler.Client(s.target, timeout=30) for s in servers]
        clients[0].create_dataset("ep-shared", labels, features)
        a, _ = run_epoch(clients[0], "ep-shared", 2, features=True)
        b, _ = run_epoch(clients[1], "ep-shared", 2, features=True)
        for key in a:
            same_answer(a[key], b[key])
            assert a[key].dataset_sha256 == b[key].dataset_sha256 != ""
        for c in clients:
            c.close()
    finally:
        for s in servers:
            stop_server(s)


def test_three_replicas_one_restarted(tmp_path):
    """8 ranks through one epoch, step requests spread over three replicas sharing a
    repository, one of them restarted midway: every negative (the epoch-setting class)
    exactly once, every answer the oracle's."""
    repo = tmp_path / "repo"
    repo.mkdir()
    labels = np.array(([1] * 16 + [0] * 768 + [-1] * 50), np.int32)
    np.random.default_rng(11).shuffle(labels)
    servers = [start_server(tmp_path / f"r{i}", ["--dataset-dir", str(repo)]) for i in range(3)]
    try:
        with gpusampler.Client(servers[0].target, timeout=30) as c0:
            c0.create_dataset("ep-3r", labels)
        world, k, f = 8, 16, 0.25  # m = [4, 12]: G = max(4, 64) = 64, 8 steps per rank
        jobs = [(rank, step) for step in range(8) for rank in range(world)]
        seen = Counter()
        for n, (rank, step) in enumerate(jobs):
            if n == len(jobs) // 2:  # restart replica 1 midway
                stop_server(servers[1])
                servers[1] = start_server(tmp_path / "r1-again", ["--dataset-dir", str(repo)])
            s = servers[n % 3]
            with gpusampler.Client(s.target, timeout=30) as c:
                r = c.sample(dataset="ep-3r", num_samples=k, positive_fraction=f, seed=21,
                             epoch=epoch(mode="elements", world_size=world, rank=rank,
                                         step=step, epoch=5, shuffle_seed=77))
            want, m, steps = elements_oracle(labels.tolist(), k, f, "both", 21, world, rank,
                                             step, 5, 77)
            assert steps == r.epoch_steps == 8
            assert r.indices.tolist() == want
            seen.update(int(i) for i in r.indices if i >= 0 and labels[i] == 0)
        assert sorted(seen) == np.flatnonzero(labels == 0).tolist()
        assert set(seen.values()) == {1}
    finally:
        for s in servers:
            stop_server(s)


# ------------------------------------------------------------------------------ resume
def test_resume_at_step_t_equals_uninterrupted(tmp_path):
    labels, features = elements_dataset(seed=13)
    repo = tmp_path / "repo"
    repo.mkdir()
    s = start_server(tmp_path / "a", ["--dataset-dir", str(repo)])
    try:
        with gpusampler.Client(s.target, timeout=30) as c:
            c.create_dataset("ep-resume", labels, features)
            whole, steps = run_epoch(c, "ep-resume", 2, features=True)
    finally:
        stop_server(s)
    s = start_server(tmp_path / "b", ["--dataset-dir", str(repo)])  # a restarted replica
    try:
        with gpusampler.Client(s.target, timeout=30) as c:
            for t in (0, 3, steps - 1):
                for step in range(t, steps):
                    r = c.sample(dataset="ep-resume", num_samples=32, positive_fraction=0.25,
                                 seed=9, return_features=True,
                                 epoch=epoch(mode="elements", world_size=2, rank=1, step=step,
                                             epoch=1, shuffle_seed=4))
                    same_answer(r, whole[(1, step)])
    finally:
        stop_server(s)


# ------------------------------------------------------------------------------ SampleIterable
@pytest.mark.parametrize("prefetch", [0, 2])
def test_sample_iterable_rows_epochs(server, client, prefetch):
    b, w = 37, 3
    rows_dataset(client, "ep-iter-rows", b)
    per_rank = {}
    for rank in range(w):
        it = SampleIterable(server.target, dataset="ep-iter-rows", num_samples=b, seed=1,
                            epoch_mode="rows", shuffle_seed=8, rows_per_step=5, rank=rank,
                            world_size=w, prefetch=prefetch)
        it.set_epoch(4)
        batches = list(it)
        assert [x.step for x in batches] == list(range(len(batches)))
        assert all(x.epoch_steps == len(batches) for x in batches)
        per_rank[rank] = [int(v) - 1 for x in batches for v in x.num_negative]
        want = []
        for step in range(len(batches)):
            rows, steps = rows_oracle(b, w, rank, step, 5, False, 4, 8)
            assert steps == len(batches)
            want += rows
        assert per_rank[rank] == want
    covered = Counter(x for v in per_rank.values() for x in v)
    assert set(covered) == set(range(b))


def test_sample_iterable_elements_workers_split_steps(server, client):
    from torch.utils.data import DataLoader

    labels, _ = elements_dataset(seed=17)
    client.create_dataset("ep-iter-el", labels, replace=True)
    it = SampleIterable(server.target, dataset="ep-iter-el", num_samples=32,
                        positive_fraction=0.25, seed=2, epoch_mode="elements", shuffle_seed=3,
                        rank=0, world_size=1, prefetch=1)
    it.set_epoch(0)
    alone = [x.indices.tolist() for x in it]
    assert len(alone) == 40
    it.set_epoch(0)
    workers = [x.indices.tolist() for x in DataLoader(it, batch_size=None, num_workers=2)]
    assert workers == alone
    it.set_epoch(1)
    assert [x.indices.tolist() for x in it] != alone  # another epoch, another order


def test_sample_iterable_epoch_arguments(server):
    with pytest.raises(TypeError):
        SampleIterable(server.target, labels=np.zeros(4), num_samples=2, epoch_mode="rows",
                       rank=0, world_size=1)
    with pytest.raises(TypeError):
        SampleIterable(server.target, dataset="x", rows=[0], num_samples=2, epoch_mode="rows",
                       rank=0, world_size=1)
    with pytest.raises(ValueError):
        SampleIterable(server.target, dataset="x", num_samples=2, epoch_mode="bogus", rank=0,
                       world_size=1)


# ------------------------------------------------------------------------------ errors
def test_errors(client):
    rows_dataset(client, "ep-err-rows", 5)
    labels, _ = elements_dataset(seed=19)
    client.create_dataset("ep-err-el", labels, replace=True)
    ok = dict(mode="rows", world_size=2, rank=1, step=0, rows_per_step=2)

    def fails(code, needle, **kw):
        with pytest.raises(gpusampler.GpuSamplerError) as err:
            client.sample(num_samples=4, **kw)
        assert err.value.code == code, err.value.details
        assert needle in err.value.details, err.value.details

    inv = grpc.StatusCode.INVALID_ARGUMENT
    fails(inv, "epoch", labels=np.zeros(8, np.int64), epoch=ok)
    fails(inv, "rows", dataset="ep-err-rows", rows=np.array([0]), epoch=ok)
    fails(inv, "epoch.world_size", dataset="ep-err-rows", epoch=dict(ok, world_size=0, rank=0))
    fails(inv, "epoch.rank", dataset="ep-err-rows", epoch=dict(ok, rank=2))
    fails(inv, "epoch.rank", dataset="ep-err-rows", epoch=dict(ok, rank=-1))
    fails(inv, "epoch.step", dataset="ep-err-rows", epoch=dict(ok, step=-1))
    fails(inv, "epoch.rows_per_step", dataset="ep-err-rows", epoch=dict(ok, rows_per_step=0))
    fails(inv, "epoch.mode", dataset="ep-err-rows", epoch=dict(ok, mode="elements"))
    # rows_per_step does not matter in ELEMENTS.
    client.sample(dataset="ep-err-el", num_samples=4,
                  epoch=dict(mode="elements", world_size=1, rank=0, step=0, rows_per_step=0))
    # ROWS: 5 rows over 2 ranks: 3 each, 2 steps of 2.
    fails(grpc.StatusCode.OUT_OF_RANGE, "epoch_steps = 2", dataset="ep-err-rows",
          epoch=dict(ok, step=2))
    r = client.sample(dataset="ep-err-rows", num_samples=4, epoch=dict(ok, step=1))
    assert r.epoch_steps == 2 and r.indices.shape[0] == 1
    assert client.sample(dataset="ep-err-rows", num_samples=4).epoch_steps == 0


def test_mode_unspecified_is_invalid(server):
    from gpusampler.v1 import sampler_pb2, sampler_pb2_grpc

    with grpc.insecure_channel(server.target) as ch:
        stub = sampler_pb2_grpc.SamplerStub(ch)
        req = sampler_pb2.SampleRequest(dataset="ep-err-rows",
                                        spec=sampler_pb2.SamplingSpec(num_samples=4))
        req.epoch.world_size = 1
        with pytest.raises(grpc.RpcError) as err:
            stub.Sample(req)
        assert err.value.code() == grpc.StatusCode.INVALID_ARGUMENT
        assert "epoch.mode" in err.value.details()


def test_elements_stream_and_member_lists_count_toward_budget(tmp_path):
    # 1,000 int8 labels (1,000 bytes) with 4,000 bytes of member lists do not fit 3,000.
    s = start_server(tmp_path / "budget", ["--max-dataset-bytes", "3000"])
    try:
        with gpusampler.Client(s.target, timeout=30) as c:
            labels = np.array([1, 0] * 500, np.int8)
            c.create_dataset("ep-budget", labels)
            with pytest.raises(gpusampler.ResourceExhaustedError) as err:
                c.sample(dataset="ep-budget", num_samples=4,
                         epoch=dict(mode="elements", world_size=1, rank=0, step=0))
            assert "--max-dataset-bytes" in err.value.details
    finally:
        stop_server(s)
    s = start_server(tmp_path / "budget2", ["--max-dataset-bytes", "6000"])
    try:
        with gpusampler.Client(s.target, timeout=30) as c:
            c.create_dataset("ep-budget", np.array([1, 0] * 500, np.int8))
            reqs = [dict(dataset="ep-budget", num_samples=4, seed=t,
                         epoch=dict(mode="elements", world_size=1, rank=0, step=t))
                    for t in range(5)]
            streamed = [r.indices.tolist() for r in c.sample_stream(reqs)]
            unary = [c.sample(**q).indices.tolist() for q in reqs]
            assert streamed == unary
            # The lists now hold 4,000 bytes of the 6,000: another 2,000-byte dataset fails.
            with pytest.raises(gpusampler.ResourceExhaustedError):
                c.create_dataset("ep-budget-2", np.zeros(2000, np.int8))
    finally:
        stop_server(s)


def test_aio_epoch_equals_blocking(server, client):
    import asyncio

    import gpusampler.aio

    labels, _ = elements_dataset(seed=23)
    client.create_dataset("ep-aio", labels, replace=True)
    e = gpusampler.Epoch(mode="elements", world_size=2, rank=1, step=4, epoch=3,
                         shuffle_seed=6)

    async def go():
        async with gpusampler.aio.Client(server.target, timeout=30) as c:
            return await c.sample(dataset="ep-aio", num_samples=32, seed=8, epoch=e)

    a = asyncio.run(go())
    b = client.sample(dataset="ep-aio", num_samples=32, seed=8, epoch=e)
    same_answer(a, b)
    assert a.epoch_steps == b.epoch_steps > 0


@pytest.mark.parametrize("dtype", [np.bool_, np.uint8, np.int8, np.int64])
def test_elements_label_dtypes_and_padding(backend, dtype):
    """K larger than both classes: every member once in the one global step, the rest
    padding (index -1, label -1, or 0 for uint8/bool); labels as stored, in each dtype."""
    raw = np.array([1] * 10 + [0] * 20 + ([2] * 5 if dtype != np.bool_ else []), np.int64)
    np.random.default_rng(29).shuffle(raw)
    labels = raw.astype(dtype)
    name = f"ep-dtype-{np.dtype(dtype).name}"
    backend.create_dataset(name, labels, replace=True)
    r = backend.sample(dataset=name, num_samples=64, seed=4,
                       epoch=epoch(mode="elements", world_size=1, rank=0, step=0))
    assert r.epoch_steps == 1
    assert [int(r.num_positive[0]), int(r.num_negative[0])] == [10, 20]
    want, _, _ = elements_oracle(raw.tolist(), 64, 0.5, "both", 4, 1, 0, 0, 0, 0)
    assert r.indices.tolist() == want
    assert r.labels.dtype == labels.dtype
    np.testing.assert_array_equal(r.labels[:30], labels[r.indices[:30]])
    pad = 0 if dtype in (np.bool_, np.uint8) else -1
    assert (r.labels[30:] == pad).all() and (r.indices[30:] == -1).all()


# ------------------------------------------------------------------------------ classes (SPEC 7)
# ELEMENTS with `spec.classes` from the wire: the classes are section 8's class indices and
# tags, the quotas section 7's with n_c the class sizes. The oracle below is written from
# those two sections' text: a class is (ranges, share), share ("count", t), ("fraction", f)
# or ("rest", None).
def classes_quotas(n: Sequence[int], k: int, shares, fill_order: Sequence[int]) -> List[int]:
    targets = [0] * len(shares)
    for c, (kind, value) in enumerate(shares):
        if kind == "count":
            targets[c] = value
        elif kind == "fraction":
            targets[c] = math.floor(k * value)
    for c, (kind, _) in enumerate(shares):
        if kind == "rest":
            targets[c] = k - sum(t for j, t in enumerate(targets) if j != c)
    m = [min(n[c], targets[c]) for c in range(len(shares))]
    left = k - sum(m)
    for c in fill_order:
        e = min(n[c] - m[c], left)
        m[c] += e
        left -= e
    return m


def classes_oracle(labels: Sequence[int], k: int, classes, fill_order: Sequence[int], seed: int,
                   world: int, rank: int, step: int, epoch: int, shuffle_seed: int):
    """(indices [K] with -1 padding, [m_c], epoch_steps) of an ELEMENTS step with classes."""
    members = [[i for i, x in enumerate(labels) if any(lo <= x <= hi for lo, hi in ranges)]
               for ranges, _ in classes]
    m = classes_quotas([len(x) for x in members], k, [s for _, s in classes], fill_order)
    g_total = max([len(members[c]) // m[c] for c in range(len(m)) if m[c] > 0], default=0)
    steps = g_total // world
    if step >= steps:
        return None, m, steps
    g = step * world + rank
    chosen = []
    for c in range(len(m)):
        if m[c] == 0:
            continue
        n = len(members[c])
        period = n // m[c] * m[c]
        for q in range(g * m[c], (g + 1) * m[c]):
            chosen.append(members[c][feistel(n, c, q // period, epoch, shuffle_seed, q % period)])
    chosen.sort(key=lambda i: (order_key(seed, i), i))
    return chosen + [-1] * (k - len(chosen)), m, steps


def wire_classes(classes) -> List[gpusampler.Class]:
    out = []
    for ranges, (kind, value) in classes:
        share = {"rest": True} if kind == "rest" else {kind: value}
        out.append(gpusampler.Class(list(ranges), **share))
    return out


# Labels 0..9; three classes (tags 0, 1, 2), one of them two ranges; label 4 is in no class.
THREE = [([(0, 1)], ("count", 3)), ([(5, 5), (8, 9)], ("fraction", 0.25)),
         ([(2, 3), (6, 7)], ("rest", None))]


def classes_dataset(seed: int = 31, n: int = 600) -> np.ndarray:
    rng = np.random.default_rng(seed)
    return rng.choice(10, size=n, p=[0.02, 0.03, 0.2, 0.2, 0.1, 0.05, 0.1, 0.1, 0.1, 0.1]
                      ).astype(np.int16)


def test_elements_three_wire_classes(backend):
    labels = classes_dataset()
    backend.create_dataset("ep-cls3", labels, replace=True)
    k, world, fill_order = 16, 3, [2, 0]
    members = [np.flatnonzero(np.isin(labels, [v for lo, hi in r for v in range(lo, hi + 1)]))
               for r, _ in THREE]
    seen = [Counter() for _ in THREE]
    steps = None
    for rank in range(world):
        step = 0
        while True:
            want, m, want_steps = classes_oracle(labels.tolist(), k, THREE, fill_order, 5, world,
                                                 rank, step, 2, 13)
            e = epoch(mode="elements", world_size=world, rank=rank, step=step, epoch=2,
                      shuffle_seed=13)
            if want is None:
                with pytest.raises(gpusampler.GpuSamplerError) as err:
                    backend.sample(dataset="ep-cls3", num_samples=k, seed=5,
                                   classes=wire_classes(THREE), fill_order=fill_order, epoch=e)
                assert err.value.code == grpc.StatusCode.OUT_OF_RANGE
                assert f"epoch_steps = {want_steps}" in err.value.details
                break
            r = backend.sample(dataset="ep-cls3", num_samples=k, seed=5,
                               classes=wire_classes(THREE), fill_order=fill_order, epoch=e)
            assert r.epoch_steps == want_steps
            assert r.indices.tolist() == want, (rank, step)
            # num_per_class is m_c ([C] for a dataset without row_splits); with three
            # classes num_positive / num_negative are zeros (section 7).
            assert r.num_per_class.dtype == np.int32 and r.num_per_class.tolist() == m
            assert int(r.num_positive[0]) == 0 and int(r.num_negative[0]) == 0
            valid = r.indices >= 0
            np.testing.assert_array_equal(r.labels[valid], labels[r.indices[valid]])
            idx = r.indices[valid].tolist()
            assert len(set(idx)) == len(idx) == sum(m)
            for c in range(3):
                seen[c].update(i for i in idx if i in set(members[c].tolist()))
            step += 1
        steps = step if steps is None else steps
        assert step == steps  # every rank the same count
    assert steps > 0
    m = classes_quotas([x.size for x in members], k, [s for _, s in THREE], fill_order)
    setter = max(range(3), key=lambda c: members[c].size // m[c] if m[c] else -1)
    # The class that sets G gives each member at most once in the epoch; nothing outside
    # the classes (label 4) is ever selected.
    assert max(seen[setter].values()) == 1
    assert not any(labels[i] == 4 for c in range(3) for i in seen[c])


def test_elements_one_and_two_wire_classes_counts(backend):
    labels = classes_dataset(seed=37)
    backend.create_dataset("ep-cls12", labels, replace=True)
    backend.create_dataset("ep-cls12-split", labels, row_splits=np.array([0, labels.size]),
                           replace=True)
    e = epoch(mode="elements", world_size=2, rank=1, step=1, epoch=0, shuffle_seed=3)
    one = [([(2, 3)], ("count", 6))]
    two = [([(8, 9)], ("fraction", 0.25)), ([(0, 7)], ("rest", None))]
    for classes, fill_order in ((one, []), (two, [1, 0])):
        want, m, steps = classes_oracle(labels.tolist(), 12, classes, fill_order, 7, 2, 1, 1, 0, 3)
        r = backend.sample(dataset="ep-cls12", num_samples=12, seed=7,
                           classes=wire_classes(classes), fill_order=fill_order, epoch=e)
        assert r.indices.tolist() == want and r.epoch_steps == steps
        assert r.num_per_class.shape == (len(classes),) and r.num_per_class.tolist() == m
        # m_0 / m_1 with two classes, m_0 / 0 with one.
        assert int(r.num_positive[0]) == m[0]
        assert int(r.num_negative[0]) == (m[1] if len(m) == 2 else 0)
        # row_splits [0, N]: answered as [1, K], num_per_class [1, C].
        s = backend.sample(dataset="ep-cls12-split", num_samples=12, seed=7,
                           classes=wire_classes(classes), fill_order=fill_order, epoch=e)
        assert s.indices.shape == (1, 12) and s.indices[0].tolist() == want
        assert s.num_per_class.shape == (1, len(classes)) and s.num_per_class[0].tolist() == m
    # The binary spec: no num_per_class, as for any binary request.
    r = backend.sample(dataset="ep-cls12", num_samples=12, seed=7, positive_label=9,
                       negative_label=2, epoch=e)
    assert r.num_per_class is None


def test_elements_binary_written_as_classes_same_bytes(backend):
    """Section 7: the binary spec written as classes [positives: fraction f, negatives:
    rest] with fill_order [1, 0] is the same ELEMENTS answer (num_per_class aside)."""
    labels, features = elements_dataset(seed=41)
    backend.create_dataset("ep-cls-bin", labels, features, replace=True)
    for step in range(3):
        e = epoch(mode="elements", world_size=2, rank=0, step=step, epoch=1, shuffle_seed=8)
        a = backend.sample(dataset="ep-cls-bin", num_samples=32, seed=9, positive_fraction=0.25,
                           return_features=True, epoch=e)
        b = backend.sample(dataset="ep-cls-bin", num_samples=32, seed=9, return_features=True,
                           classes=[gpusampler.Class(1, fraction=0.25),
                                    gpusampler.Class(0, rest=True)],
                           fill_order=[1, 0], epoch=e)
        same_answer(a, b)
        assert a.epoch_steps == b.epoch_steps
        assert b.num_per_class.tolist() == [int(a.num_positive[0]), int(a.num_negative[0])]


def test_elements_refuses_ranked_selections_and_scores(client):
    labels = classes_dataset(seed=43)
    client.create_dataset("ep-cls-err", labels, replace=True)
    scores = np.random.default_rng(1).random(labels.size).astype(np.float32) + 0.5
    client.create_dataset("ep-cls-err-scored", labels, scores=scores, replace=True)
    e = epoch(mode="elements", world_size=1, rank=0, step=0)
    inv = grpc.StatusCode.INVALID_ARGUMENT
    for name in ("ep-cls-err", "ep-cls-err-scored"):
        for sel, extra in (("weighted", {}), ("hardest", {}), ("mixed", {"hard_fraction": 0.5})):
            classes = [gpusampler.Class(0, count=2),
                       gpusampler.Class(2, rest=True, selection=sel, **extra)]
            with pytest.raises(gpusampler.GpuSamplerError) as err:
                client.sample(dataset=name, num_samples=8, classes=classes, epoch=e,
                              scores=scores if name == "ep-cls-err" else None)
            assert err.value.code == inv, err.value.details
            assert "spec.classes[1].selection" in err.value.details, err.value.details
            assert "EPOCH_MODE_ELEMENTS" in err.value.details
    # scores sent with an ELEMENTS step: refused naming `scores`, with classes (UNIFORM) or
    # the binary spec.
    for kw in ({"classes": [gpusampler.Class(0, count=2), gpusampler.Class(2, rest=True)]}, {}):
        with pytest.raises(gpusampler.GpuSamplerError) as err:
            client.sample(dataset="ep-cls-err", num_samples=8, scores=scores, epoch=e, **kw)
        assert err.value.code == inv, err.value.details
        assert err.value.details.startswith("scores"), err.value.details
        assert "EPOCH_MODE_ELEMENTS" in err.value.details
    # A dataset's stored scores are not sent: its UNIFORM ELEMENTS steps are those of the
    # same labels without scores.
    uniform = [gpusampler.Class(0, count=2), gpusampler.Class(2, rest=True)]
    a = client.sample(dataset="ep-cls-err-scored", num_samples=8, seed=2, classes=uniform,
                      epoch=e)
    b = client.sample(dataset="ep-cls-err", num_samples=8, seed=2, classes=uniform, epoch=e)
    same_answer(a, b)
    np.testing.assert_array_equal(a.num_per_class, b.num_per_class)


# The feistel.jsonl lines of tag 2 (a third class) through the server: three wire classes,
# class 2 (label 2) at indices 0..n-1 with count 1, class 0 (label 0) with count 1 and more
# members than any global step of the line needs (it sets G), class 1 (label 1) with count
# 0. Global step pass * n + x then returns class 2's member pi(n, 2, pass)(x) = index pi(x).
# With the n = 2^31 - 1 lines (test_feistel_lines_of_2_31_rows_through_server) every line of
# feistel.jsonl goes through a server.
TAG2 = [x for x in FEISTEL if x["tag"] == 2]


def test_feistel_tag2_lines_through_server_with_three_classes(backend):
    assert len(TAG2) == 8 and all(x["n"] <= 70000 for x in TAG2)
    assert len(REACHABLE) + len(TAG2) + len(BIG) == len(FEISTEL)
    name = "ep-feistel-tag2-" + ("sim" if backend.info().backend == "cuda-sim" else "cpu")
    uploaded = None
    for line in TAG2:
        n, pas = line["n"], line["pass"]
        key = (n, pas)
        if key != uploaded:
            labels = np.array([2] * n + [0] * ((pas + 1) * n + 2) + [1] * 5, np.int8)
            backend.create_dataset(name, labels, replace=True)
            uploaded = key
        classes = [gpusampler.Class(0, count=1), gpusampler.Class(1, count=0),
                   gpusampler.Class(2, count=1)]
        r = backend.sample(dataset=name, num_samples=2, seed=3, classes=classes,
                           epoch=epoch(mode="elements", world_size=1, rank=0,
                                       step=pas * n + line["x"], epoch=line["epoch"],
                                       shuffle_seed=line["shuffle_seed"]))
        assert r.num_per_class.tolist() == [1, 0, 1]
        picked = [int(i) for i in r.indices if 0 <= i < n]
        assert len(picked) == 1, r.indices
        assert picked[0] == line["pi"], line


# The 8 lines of n = 2^31 - 1 (tag 0xFFFF, pass 0: pi(B, 0xFFFF, 0) of a ROWS epoch over
# B = 2^31 - 1 rows). The dataset is a hand-written repository file of fixed-length rows,
# labels int8 [B, 1] (2 GiB, held as a stride: row_splits would add 16 GiB), all zeros but
# for marker i + 1 at row pi of line i. Step x of a ROWS epoch with world_size 1 and one row
# per step is dataset row pi(x); sampling it with K = 1 and positive_label = the marker
# answers the marker, while any other row answers 0 (a negative) or nothing (another
# marker is neither class). The file is sparse (its zeros take no disk) and removed after.
# Memory: the CPU server holds 2 GiB; cuda-sim holds the host copy and its "device" copy
# while it loads (4 GiB), then the device copy. --max-dataset-bytes is raised to 3 GB.
@pytest.fixture(scope="module")
def big_rows_repository(tmp_path_factory):
    assert len(BIG) == 8 and all(x["tag"] == 0xFFFF and x["pass"] == 0 for x in BIG)
    assert len({x["pi"] for x in BIG}) == 8
    repo = tmp_path_factory.mktemp("big-rows")
    tmp = repo / ".big.partial"
    labels = np.lib.format.open_memmap(tmp, mode="w+", dtype=np.int8, shape=(BIG_N, 1))
    for i, line in enumerate(BIG):
        labels[line["pi"], 0] = i + 1
    labels.flush()
    del labels
    tmp.rename(repo / "big.labels.npy")
    yield repo
    (repo / "big.labels.npy").unlink()


@pytest.mark.parametrize("device", ["cpu", "cuda-sim"])
def test_feistel_lines_of_2_31_rows_through_server(big_rows_repository, tmp_path, device):
    s = start_server(tmp_path / "server", device=device, extra=[
        "--dataset-dir", str(big_rows_repository), "--max-dataset-bytes", str(3 * 10**9),
        "--dataset-poll-seconds", "0"])
    try:
        with gpusampler.Client(s.target, timeout=60) as c:
            assert c.info().backend == device
            (info,) = [d for d in c.list_datasets() if d.name == "big"]
            # 2^31 - 1 rows of one element, and only the labels held.
            assert (info.num_rows, info.num_elements, info.bytes) == (BIG_N, BIG_N, BIG_N)
            for i, line in enumerate(BIG):
                r = c.sample(dataset="big", num_samples=1, seed=1, positive_label=i + 1,
                             negative_label=0, epoch=epoch(
                                 mode="rows", world_size=1, rank=0, step=line["x"],
                                 rows_per_step=1, epoch=line["epoch"],
                                 shuffle_seed=line["shuffle_seed"]))
                assert r.epoch_steps == BIG_N
                assert r.labels.tolist() == [[i + 1]], (line, r.labels, r.indices)
                assert r.indices.tolist() == [[0]] and r.num_positive.tolist() == [1]
            # The same row named with `rows`: the epoch step is that request.
            last = BIG[-1]
            same_answer(c.sample(dataset="big", num_samples=1, seed=1, positive_label=8,
                                 rows=np.array([last["pi"]], np.int64)),
                        r)
            # A row next to a marker is a zero row: a wrong permutation would land on one.
            r = c.sample(dataset="big", num_samples=1, seed=1, positive_label=8,
                         rows=np.array([(last["pi"] + 1) % BIG_N], np.int64))
            assert r.labels.tolist() == [[0]]
            # The whole dataset is refused by --max-rows before anything of its size is built.
            with pytest.raises(gpusampler.GpuSamplerError) as err:
                c.sample(dataset="big", num_samples=1)
            assert err.value.code == grpc.StatusCode.RESOURCE_EXHAUSTED, err.value.details
            assert f"has {BIG_N} rows, over max_rows" in err.value.details
    finally:
        assert stop_server(s) == 0, s.log_text()


def test_golden_elements_lines_use_no_classes():
    """epochs_golden.jsonl's ELEMENTS lines are binary-spec lines (test_golden_elements);
    none names classes, so there is no classes golden line to replay here."""
    assert all("classes" not in g for g in GOLDEN)


# ------------------------------------------------------------------------------ ROWS + classes
def test_rows_with_classes_and_stored_scores_equal_rows_request(backend):
    """A ROWS step with a WEIGHTED class over a dataset's stored scores answers exactly the
    `rows` request of the step's rows (SPEC section 8), num_per_class included."""
    rng = np.random.default_rng(47)
    lengths = rng.integers(5, 40, size=23)
    splits = np.concatenate([[0], np.cumsum(lengths)]).astype(np.int64)
    labels = rng.integers(0, 4, size=int(splits[-1])).astype(np.int32)
    scores = rng.random(labels.size).astype(np.float32)
    scores[rng.random(labels.size) < 0.1] = 0.0  # no WEIGHTED members
    features = rng.standard_normal((labels.size, 3)).astype(np.float32)
    backend.create_dataset("ep-rows-cls", labels, features, row_splits=splits, scores=scores,
                           replace=True)
    classes = [gpusampler.Class([1, 2], count=5, selection="weighted"),
               gpusampler.Class(3, fraction=0.25, selection="hardest"),
               gpusampler.Class(0, rest=True)]
    common = dict(dataset="ep-rows-cls", num_samples=12, seed=21, classes=classes,
                  fill_order=[2, 0], return_features=True)
    for rank in range(2):
        want_steps = None
        for step in range(3):
            rows, steps = rows_oracle(23, 2, rank, step, 4, False, 6, 99)
            r = backend.sample(**common, epoch=epoch(mode="rows", world_size=2, rank=rank,
                                                     step=step, rows_per_step=4, epoch=6,
                                                     shuffle_seed=99))
            assert r.epoch_steps == steps
            want_steps = steps
            q = backend.sample(**common, rows=np.array(rows, np.int64))
            same_answer(r, q)
            assert r.num_per_class.shape == (len(rows), 3)
            np.testing.assert_array_equal(r.num_per_class, q.num_per_class)
        assert want_steps == 3  # 23 rows over 2 ranks: 12 each, 3 steps of 4


@pytest.mark.parametrize("device", ["cpu", "cuda-sim"])
def test_member_list_build_beside_inline_requests(tmp_path, device):
    """The first ELEMENTS step of a 1e7-element version builds the member lists (O(N)) while
    small steps whose lists are built keep being answered, each exactly; afterwards the big
    dataset's answer equals the oracle's positions (spot check). Where the build runs (the
    epoch thread, not a gRPC thread) is proved by EpochsTest.FirstElementsStepRunsOnTheEpochThread:
    a timing bound here failed on a loaded CI host and passed on a build without the thread."""
    import threading

    s = start_server(tmp_path / device, device=device)
    try:
        with gpusampler.Client(s.target, timeout=120) as c:
            n = 10_000_000
            big_labels = (np.arange(n) % 4 == 0).astype(np.int8)
            c.create_dataset("ep-big", big_labels)
            small, _ = elements_dataset(seed=41)
            c.create_dataset("ep-small", small)
            step = dict(mode="elements", world_size=1, rank=0, step=0)
            c.sample(dataset="ep-small", num_samples=32, epoch=step)  # its lists are built
            done = {}

            def build():
                done["answer"] = c.sample(dataset="ep-big", num_samples=256, seed=3, epoch=step)

            thread = threading.Thread(target=build)
            thread.start()
            first = c.sample(dataset="ep-small", num_samples=32, seed=5, epoch=step)
            while thread.is_alive():
                r = c.sample(dataset="ep-small", num_samples=32, seed=5, epoch=step)
                np.testing.assert_array_equal(r.indices, first.indices)
            thread.join()
            a = done["answer"]
            assert a.epoch_steps == (3 * n // 4) // 128  # m = (128, 128): the negatives set G
            idx = a.indices[a.indices >= 0]
            assert idx.size == 256 and len(set(idx.tolist())) == 256
            np.testing.assert_array_equal(a.labels, big_labels[a.indices])
            positives = sorted(i for i in idx.tolist() if i % 4 == 0)
            want = sorted(4 * feistel(n // 4, 0, 0, 0, 0, q) for q in range(128))
            assert positives == want
    finally:
        assert stop_server(s) == 0, s.log_text()
