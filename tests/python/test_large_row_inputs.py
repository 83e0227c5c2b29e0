"""The two inputs of the GPU round 4 review that reach the block sort of the large-row stages,
sent to a cuda-sim server and to the CPU server and checked against an oracle written here
from the contract (numpy Philox4x32-10, full sorts): a crafted 4 MiB int8 request whose
positives all share the top 16 bits of their order key v (one bin of the bucket sort over the
insertion limit: cub's sort, whose shared storage a GPU reads with 16-byte loads), and a
balanced row of 2^25 int8 labels (the boundary's narrowing rounds).
"""

from __future__ import annotations

import numpy as np
import pytest

from conftest import REPO, start_server, stop_server

M0, M1 = np.uint64(0xD2511F53), np.uint64(0xCD9E8D57)
W0, W1 = np.uint64(0x9E3779B9), np.uint64(0xBB67AE85)
LO = np.uint64(0xFFFFFFFF)
SEED = 0x5EED2025


def philox(c0, c1, c2, c3, k0, k1, rounds=10):
    """Philox4x32 over numpy arrays of uint64 holding 32-bit words."""
    c0, c1, c2, c3 = (np.asarray(x, dtype=np.uint64) for x in (c0, c1, c2, c3))
    k0, k1 = np.uint64(k0), np.uint64(k1)
    for r in range(rounds):
        if r:
            k0, k1 = (k0 + W0) & LO, (k1 + W1) & LO
        p0, p1 = M0 * c0, M1 * c2
        c0, c1, c2, c3 = ((p1 >> np.uint64(32)) ^ c1 ^ k0, p1 & LO,
                          (p0 >> np.uint64(32)) ^ c3 ^ k1, p0 & LO)
    return c0, c1, c2, c3


def keys(seed: int, row: int, stream: int, n: int) -> np.ndarray:
    """u (stream 0) or v (stream 1) of elements [0, n) of row `row`: one call per 4 elements."""
    block = np.arange((n + 3) // 4, dtype=np.uint64)
    x = philox(block & LO, block >> np.uint64(32), np.full_like(block, row),
               np.full_like(block, stream), seed & 0xFFFFFFFF, seed >> 32)
    return np.stack(x, axis=1).reshape(-1)[:n].astype(np.uint32)


def oracle(labels: np.ndarray, k: int, seed: int, fraction: float = 0.5):
    """SPEC section 1 for one row, FILL_BOTH, positives 1 and negatives 0."""
    u = keys(seed, 0, 0, labels.size)
    pos, neg = np.flatnonzero(labels == 1), np.flatnonzero(labels == 0)
    target = int(np.floor(k * fraction))
    m_pos = min(pos.size, target)
    m_neg = min(neg.size, k - m_pos)
    m_pos = min(pos.size, k - m_neg)

    def smallest(idx, m):
        return idx[np.lexsort((idx, u[idx]))[:m]]

    chosen = np.concatenate([smallest(pos, m_pos), smallest(neg, m_neg)])
    v = keys(seed, 0, 1, labels.size)
    ordered = chosen[np.lexsort((chosen, v[chosen]))]
    out = np.full(k, -1, dtype=np.int64)
    out[: ordered.size] = ordered
    return out, m_pos, m_neg


def test_numpy_philox_meets_the_known_answers():
    for line in (REPO / "tests/data/philox4x32_10_kat.txt").read_text().splitlines():
        if not line.strip() or line.startswith("#"):
            continue
        f = line.split()
        if int(f[0]) != 10:
            continue
        w = [int(x, 16) for x in f[1:]]
        got = philox(*[np.array([x], dtype=np.uint64) for x in w[:4]], w[4], w[5])
        assert [int(x[0]) for x in got] == w[6:10], line


def crafted_bucket_sort_labels() -> np.ndarray:
    n = 1 << 22
    top = keys(SEED, 0, 1, n) >> np.uint32(16)
    counts = np.bincount(top, minlength=1 << 16)
    mode = int(np.argmax(counts))
    assert 32 < counts[mode] < 128, counts[mode]
    return (top == mode).astype(np.int8)


def balanced_labels() -> np.ndarray:
    rng = np.random.default_rng(2)
    return rng.integers(0, 2, size=1 << 25, dtype=np.int8)


@pytest.fixture(scope="module")
def sim_server(tmp_path_factory):
    s = start_server(tmp_path_factory.mktemp("cuda-sim-large"), device="cuda-sim")
    yield s
    assert stop_server(s) == 0, s.log_text()


@pytest.mark.parametrize("name,k", [("crafted_bucket_sort", 256), ("balanced_2e25", 512)])
def test_large_row_input_is_exact_on_cuda_sim_and_cpu(sim_server, client, name, k):
    import gpusampler

    labels = crafted_bucket_sort_labels() if name == "crafted_bucket_sort" else balanced_labels()
    want, m_pos, m_neg = oracle(labels, k, SEED)
    with gpusampler.Client(sim_server.target, timeout=300) as sim:
        for c in (sim, client):
            out = c.sample(labels, num_samples=k, seed=SEED, timeout=300)
            np.testing.assert_array_equal(out.indices, want)
            assert int(out.num_positive) == m_pos and int(out.num_negative) == m_neg
