#!/usr/bin/python3
"""PyTorch baselines for gpusampler benchmarks.

Two plain-PyTorch implementations of class-balanced sampling (SPEC section 1,
FILL_BOTH, positive_fraction 0.5, positive label 1, negative label 0), in the
two styles discussed in background article 002 ("variable-shaped tensors"):

  nonzero        per row, in a Python loop: nonzero() to list each class,
                 randperm() to pick, a final randperm() to shuffle.
                 Data-dependent shapes (a host sync per row on CUDA).
  topk           batched and shape-static: class counts with count_nonzero,
                 quotas as tensors, random keys masked per class, topk(K) per
                 class, slots beyond the quota invalidated, then a second topk
                 over the 2K candidates to pick and mix the K outputs.
  topk_compiled  torch.compile(topk); needs PyTorch >= 2, otherwise a record
                 with "skipped" is emitted.  topk is the article's optimized,
                 shape-static sampler (its "opt_sample_data"), so this is the
                 torch.compile(opt_sample_data) baseline that issue 8's bar
                 (>= 10x at B=32 on an H200) is measured against; nonzero has
                 data-dependent shapes and would only break torch.compile's graph.

Both return features [B, K, D], labels [B, K] and indices [B, K].  They are
baselines for timing, not bit-exact references: gpusampler uses Philox keys
(SPEC 1) while these use torch's own generator.

Run with Debian's interpreter, which has torch:
    /usr/bin/python3 bench/pytorch_baselines.py --sampler all --rows 1 --n 10000 --k 1000 --threads 2
    /usr/bin/python3 bench/pytorch_baselines.py --check

Debian 12's torch is 1.13 (no torch.compile).  For the topk_compiled column, a throw-away
venv with PyPI's torch (a large download: its Linux wheel bundles the CUDA libraries, and
runs on the CPU as well; benchmarks only, nothing at runtime uses it; torch.compile on the
CPU also needs a C++ compiler, which the build already has):
    python3 -m venv /tmp/torch2 && /tmp/torch2/bin/pip install torch numpy
    /tmp/torch2/bin/python bench/pytorch_baselines.py --sampler topk_compiled --rows 1 --n 10000 --threads 2
(bench/compare.sh takes it as COMPILE_PYTHON=/tmp/torch2/bin/python.)
"""

import argparse
import json
import math
import os
import statistics
import sys
import time

import torch

IMPLS = ("nonzero", "topk", "topk_compiled")


def fill_both_quotas(P, Q, K):
    """SPEC 1 FILL_BOTH quotas with f = 0.5, on Python ints."""
    target = K // 2
    m_pos = min(P, target)
    m_neg = min(Q, K - m_pos)
    m_pos = min(P, K - m_neg)
    return m_pos, m_neg


# --------------------------------------------------------------------------
# a. per-row nonzero / randperm sampler (variable shapes)
# --------------------------------------------------------------------------
def sample_nonzero(features, labels, K):
    """features [B, N, D], labels [B, N] -> ([B, K, D], [B, K], [B, K])."""
    device = labels.device
    out_f, out_l, out_i = [], [], []
    for r in range(labels.shape[0]):
        lab = labels[r]
        pos = torch.nonzero(lab == 1).squeeze(1)
        neg = torch.nonzero(lab == 0).squeeze(1)
        m_pos, m_neg = fill_both_quotas(pos.numel(), neg.numel(), K)
        pick_pos = pos[torch.randperm(pos.numel(), device=device)[:m_pos]]
        pick_neg = neg[torch.randperm(neg.numel(), device=device)[:m_neg]]
        idx = torch.cat((pick_pos, pick_neg))
        idx = idx[torch.randperm(idx.numel(), device=device)]
        out_f.append(features[r].index_select(0, idx))
        out_l.append(lab.index_select(0, idx))
        out_i.append(idx)
    return torch.stack(out_f), torch.stack(out_l), torch.stack(out_i)


# --------------------------------------------------------------------------
# b. batched count_nonzero / topk sampler (static shapes, no host sync)
# --------------------------------------------------------------------------
def sample_topk(features, labels, K):
    """features [B, N, D], labels [B, N] -> ([B, K, D], [B, K], [B, K]).

    Requires K <= N.  With binary labels P + Q = N >= K, so FILL_BOTH always
    fills all K slots and no padding is needed.
    """
    B, N = labels.shape
    D = features.shape[-1]
    pos_mask = labels == 1
    neg_mask = labels == 0
    P = torch.count_nonzero(pos_mask, dim=-1)  # [B]
    Q = torch.count_nonzero(neg_mask, dim=-1)
    # FILL_BOTH quotas as tensors (no .item(), so no sync on a GPU)
    m_pos = torch.clamp(P, max=K // 2)
    m_neg = torch.minimum(Q, K - m_pos)
    m_pos = torch.minimum(P, K - m_neg)

    # one uniform key per element; -1 marks "not in this class"
    keys = torch.rand((B, N), device=labels.device)
    pos_keys = keys.masked_fill(~pos_mask, -1.0)
    neg_keys = keys.masked_fill(~neg_mask, -1.0)

    # K largest keys per class (the quota is unknown to the host: take K)
    top_pos_keys, top_pos_idx = torch.topk(pos_keys, K, dim=-1)
    top_neg_keys, top_neg_idx = torch.topk(neg_keys, K, dim=-1)
    slot = torch.arange(K, device=labels.device).unsqueeze(0)  # [1, K]
    pos_ok = (slot < m_pos.unsqueeze(-1)) & (top_pos_keys >= 0)
    neg_ok = (slot < m_neg.unsqueeze(-1)) & (top_neg_keys >= 0)

    # mix: fresh uniform keys for the valid candidates (the article reused
    # the selection keys here, which biases where a scarce class lands),
    # -1 for invalid ones; topk(K) of the 2K candidates gives a random order.
    cand_ok = torch.cat((pos_ok, neg_ok), dim=-1)  # [B, 2K]
    cand_idx = torch.cat((top_pos_idx, top_neg_idx), dim=-1)
    mix_keys = torch.rand((B, 2 * K), device=labels.device).masked_fill(~cand_ok, -1.0)
    order = torch.topk(mix_keys, K, dim=-1).indices
    idx = torch.gather(cand_idx, 1, order)  # [B, K]

    out_f = torch.gather(features, 1, idx.unsqueeze(-1).expand(B, K, D))
    out_l = torch.gather(labels, 1, idx)
    return out_f, out_l, idx


def torch_major():
    try:
        return int(torch.__version__.split(".")[0])
    except ValueError:
        return 0


def make_compiled_topk():
    """torch.compile(sample_topk), or None where torch is older than 2 (no torch.compile)."""
    if torch_major() < 2 or not hasattr(torch, "compile"):
        return None
    return torch.compile(sample_topk)


# --------------------------------------------------------------------------
# timing
# --------------------------------------------------------------------------
def percentile(sorted_vals, q):
    """Nearest-rank percentile of an ascending list (q in (0, 100])."""
    rank = max(1, math.ceil(q / 100.0 * len(sorted_vals)))
    return sorted_vals[rank - 1]


def time_fn(fn, args, iters, warmup, cuda):
    for _ in range(warmup):
        fn(*args)
    if cuda:
        torch.cuda.synchronize()
    times = []
    for _ in range(iters):
        if cuda:
            torch.cuda.synchronize()
        t0 = time.perf_counter()
        fn(*args)
        if cuda:
            torch.cuda.synchronize()
        times.append((time.perf_counter() - t0) * 1e3)
    times.sort()
    return {
        "median_ms": statistics.median(times),
        "p90_ms": percentile(times, 90),
        "mean_ms": statistics.fmean(times),
        "min_ms": times[0],
        "max_ms": times[-1],
    }


def base_record(impl, a, device):
    return {
        "impl": "pytorch-" + impl,
        "backend": "pytorch-" + device.type,
        "torch": torch.__version__,
        "rows": a.rows,
        "n": a.n,
        "k": a.k,
        "dim": a.dim,
        "label_dtype": "int64",
        "threads": a.threads,
        "iters": a.iters,
        "warmup": a.warmup,
        "seed": a.seed,
    }


def run_bench(a, device):
    torch.manual_seed(a.seed)
    labels = torch.randint(0, 2, (a.rows, a.n), dtype=torch.int64, device=device)
    features = torch.randn((a.rows, a.n, a.dim), dtype=torch.float32, device=device)
    cuda = device.type == "cuda"
    impls = IMPLS if a.sampler == "all" else (a.sampler,)
    records = []
    for impl in impls:
        rec = base_record(impl, a, device)
        if impl == "nonzero":
            fn = sample_nonzero
        elif impl == "topk":
            fn = sample_topk
        else:
            fn = make_compiled_topk()
            if fn is None:
                rec["skipped"] = f"torch.compile needs PyTorch >= 2, this is {torch.__version__}"
                records.append(rec)
                emit(rec, a)
                continue
        # the first compiled call compiles: always warm up at least once
        warmup = max(a.warmup, 1) if impl == "topk_compiled" else a.warmup
        try:
            rec.update(time_fn(fn, (features, labels, a.k), a.iters, warmup, cuda))
        except Exception as e:  # a compiler toolchain problem must not hide the other columns
            if impl != "topk_compiled":
                raise
            rec["skipped"] = f"torch.compile failed: {type(e).__name__}: {str(e).splitlines()[0][:200]}"
        records.append(rec)
        emit(rec, a)
    if not a.json:
        print_table(records)
    return records


def emit(rec, a):
    if a.json:
        print(json.dumps(rec), flush=True)


def print_table(records):
    if not records:
        return
    r0 = records[0]
    print(f"torch {r0['torch']}  backend {r0['backend']}  rows={r0['rows']} n={r0['n']} "
          f"k={r0['k']} dim={r0['dim']} threads={r0['threads']} iters={r0['iters']} "
          f"warmup={r0['warmup']}")
    print(f"{'impl':<24}{'median ms':>12}{'p90 ms':>12}{'min ms':>12}")
    for r in records:
        if "skipped" in r:
            print(f"{r['impl']:<24}  skipped: {r['skipped']}")
        else:
            print(f"{r['impl']:<24}{r['median_ms']:>12.3f}{r['p90_ms']:>12.3f}{r['min_ms']:>12.3f}")


# --------------------------------------------------------------------------
# self-test
# --------------------------------------------------------------------------
def check_one(name, fn, features, labels, K):
    out_f, out_l, idx = fn(features, labels, K)
    B, N = labels.shape
    assert idx.shape == (B, K), (name, tuple(idx.shape))
    assert out_l.shape == (B, K) and out_f.shape == (B, K, features.shape[-1]), name
    idx_c, lab_c, f_c, out_l_c, out_f_c = (t.cpu() for t in (idx, labels, features, out_l, out_f))
    for r in range(B):
        row = idx_c[r]
        assert int(row.min()) >= 0 and int(row.max()) < N, (name, r, "index out of range")
        assert torch.unique(row).numel() == K, (name, r, "indices not distinct")
        assert torch.equal(out_l_c[r], lab_c[r][row]), (name, r, "labels not gathered")
        assert torch.equal(out_f_c[r], f_c[r][row]), (name, r, "features not gathered")
        P = int((lab_c[r] == 1).sum())
        Q = int((lab_c[r] == 0).sum())
        m_pos, m_neg = fill_both_quotas(P, Q, K)
        got_pos = int((out_l_c[r] == 1).sum())
        got_neg = int((out_l_c[r] == 0).sum())
        assert (got_pos, got_neg) == (m_pos, m_neg), (name, r, (P, Q), (got_pos, got_neg), (m_pos, m_neg))


def run_check(device):
    torch.manual_seed(1234)
    samplers = [("nonzero", sample_nonzero), ("topk", sample_topk)]
    compiled = make_compiled_topk()
    if compiled is not None:
        samplers.append(("topk_compiled", compiled))
    else:
        print("check: topk_compiled skipped (torch.compile needs PyTorch 2)")
    N, D = 200, 3
    # rows: balanced random, scarce positives, scarce negatives, all positive, all negative
    rows = [torch.randint(0, 2, (N,))]
    scarce = torch.zeros(N, dtype=torch.int64)
    scarce[torch.randperm(N)[:3]] = 1
    rows.append(scarce)
    rows.append(1 - scarce)
    rows.append(torch.ones(N, dtype=torch.int64))
    rows.append(torch.zeros(N, dtype=torch.int64))
    labels = torch.stack(rows).to(device)
    features = torch.randn((labels.shape[0], N, D), device=device)
    cases = 0
    for K in (1, 2, 20, 21, 150, N):
        for name, fn in samplers:
            for trial in range(3):
                check_one(name, fn, features, labels, K)
                # also each row alone (B = 1), as the B=1 benchmarks use it
                check_one(name, fn, features[1:2], labels[1:2], K)
                cases += 2
    # order is shuffled: over many draws each slot sees both classes
    f1 = features[:1]
    l1 = labels[:1]
    for name, fn in samplers:
        first = [int(fn(f1, l1, 20)[1][0, 0]) for _ in range(64)]
        assert 0 < sum(first) < 64, (name, "output order looks unshuffled")
    print(f"check: OK ({cases} cases, samplers: {', '.join(n for n, _ in samplers)}, "
          f"device {device}, torch {torch.__version__})")


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--sampler", choices=IMPLS + ("all",), default="all")
    p.add_argument("--rows", type=int, default=1)
    p.add_argument("--n", type=int, default=10000)
    p.add_argument("--k", type=int, default=None, help="samples per row (default n // 10)")
    p.add_argument("--dim", type=int, default=16)
    p.add_argument("--threads", type=int, default=None, help="torch threads (default: CPUs available)")
    p.add_argument("--iters", type=int, default=50)
    p.add_argument("--warmup", type=int, default=5)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--device", choices=("cpu", "cuda"), default="cpu")
    p.add_argument("--json", action="store_true", help="one JSON object per line per sampler")
    p.add_argument("--check", action="store_true", help="run a quick correctness self-test and exit")
    p.add_argument("--cells", default=None,
                   help="B:N:K:D[:ITERS] cells, comma-separated, run in this order in this one "
                        "process (overrides --rows/--n/--k/--dim; ITERS defaults to --iters)")
    a = p.parse_args()
    if a.cells:
        return run_cells(p, a)

    if a.threads is None:
        a.threads = len(os.sched_getaffinity(0))
    if a.k is None:
        a.k = max(1, a.n // 10)
    if a.rows < 1 or a.n < 1 or a.dim < 1 or a.iters < 1 or a.warmup < 0 or a.threads < 1:
        p.error("rows, n, dim, iters, threads must be >= 1 and warmup >= 0")
    if not 1 <= a.k <= a.n:
        p.error(f"--k must be in [1, n]; got k={a.k}, n={a.n}")
    torch.set_num_threads(a.threads)
    if a.device == "cuda" and not torch.cuda.is_available():
        p.error("--device cuda: torch.cuda.is_available() is False")
    device = torch.device(a.device)

    if a.check:
        run_check(device)
        return 0
    run_bench(a, device)
    return 0


def run_cells(p, a):
    """Every cell in one process, in the order given: one interpreter start and one CUDA
    context for all of them, and torch.compile's per-shape compiles as each cell comes."""
    cells = []
    for item in a.cells.split(","):
        f = item.split(":")
        if len(f) not in (4, 5) or not all(x.isdigit() for x in f):
            p.error(f"--cells: {item!r} is not B:N:K:D[:ITERS]")
        cells.append([int(x) for x in f])
    threads = a.threads if a.threads is not None else len(os.sched_getaffinity(0))
    torch.set_num_threads(threads)
    if a.device == "cuda" and not torch.cuda.is_available():
        p.error("--device cuda: torch.cuda.is_available() is False")
    device = torch.device(a.device)
    for f in cells:
        cell = argparse.Namespace(**vars(a))
        cell.rows, cell.n, cell.k, cell.dim = f[:4]
        cell.dim = max(cell.dim, 1)  # the baselines gather at least one 4-byte column
        cell.iters = f[4] if len(f) == 5 else a.iters
        cell.threads = threads
        if cell.rows < 1 or cell.n < 1 or not 1 <= cell.k <= cell.n or cell.iters < 1:
            p.error(f"--cells: {f} out of range (rows, n, iters >= 1; 1 <= k <= n)")
        run_bench(cell, device)
        sys.stdout.flush()
    return 0


if __name__ == "__main__":
    sys.exit(main())
