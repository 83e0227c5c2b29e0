#!/usr/bin/python3
"""PyTorch baselines of the class path's selection rules (issue 29), on PyTorch's own CPU,
timed like gpusampler-bench (median ms of --iters calls after a warm-up), printing one JSON
object per line:

  weighted: torch.multinomial(w, K, replacement=False) per row (the negatives' scores as
            weights), the way a trainer draws importance-sampled negatives today;
  hardest:  torchvision SSD's hard-negative selection written in torch (two full sorts per
            row: sort the scores descending, sort the order to get each element's rank, keep
            rank < K) plus the positives' uniform draw (randperm), per row.

  bench/classes_torch_baselines.py --rows 32 --n 100000 --k 10000 --threads 2 --iters 5

Labels are half positive, half negative, as gpusampler-bench's binary-as-classes; scores
uniform in (0, 1]. Each selection then gathers what gpusampler answers with: the selected
elements' labels and, with --dim D > 0, their D float32 features (a [rows, n, D] tensor), the
way a trainer would build its batch from the indices. --dim 0 gathers the labels only.
"""
import argparse
import json
import statistics
import time

import torch


def batch(labels, features, r, take):
    """What the trainer needs from the indices: labels and, with features, their rows."""
    if features is None:
        return take, labels[r, take]
    return take, labels[r, take], features[r].index_select(0, take)


def weighted(labels, scores, features, k):
    out = []
    for r in range(labels.shape[0]):
        neg = torch.nonzero(labels[r] == 0).squeeze(1)
        pos = torch.nonzero(labels[r] == 1).squeeze(1)
        k_pos = min(k // 2, pos.numel())
        take_pos = pos[torch.randperm(pos.numel())[:k_pos]]
        k_neg = min(k - k_pos, neg.numel())
        take_neg = neg[torch.multinomial(scores[r, neg], k_neg, replacement=False)]
        out.append(batch(labels, features, r, torch.cat([take_pos, take_neg])))
    return out


def hardest(labels, scores, features, k):
    out = []
    for r in range(labels.shape[0]):
        neg_mask = labels[r] == 0
        pos = torch.nonzero(labels[r] == 1).squeeze(1)
        k_pos = min(k // 2, pos.numel())
        take_pos = pos[torch.randperm(pos.numel())[:k_pos]]
        k_neg = min(k - k_pos, int(neg_mask.sum()))
        loss = torch.where(neg_mask, scores[r], torch.full_like(scores[r], -float("inf")))
        _, order = loss.sort(descending=True)   # SSD: the first sort
        _, rank = order.sort()                  # SSD: the second sort (each element's rank)
        take_neg = torch.nonzero(neg_mask & (rank < k_neg)).squeeze(1)
        out.append(batch(labels, features, r, torch.cat([take_pos, take_neg])))
    return out


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--rows", type=int, default=32)
    p.add_argument("--n", type=int, default=100000)
    p.add_argument("--k", type=int, default=10000)
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--iters", type=int, default=5)
    p.add_argument("--dim", type=int, default=16)
    p.add_argument("--modes", default="weighted,hardest")
    a = p.parse_args()
    torch.set_num_threads(a.threads)
    g = torch.Generator().manual_seed(1)
    labels = torch.randint(0, 2, (a.rows, a.n), generator=g)
    scores = (torch.randint(0, 1 << 24, (a.rows, a.n), generator=g).float() + 1) * 2.0 ** -24
    features = torch.rand((a.rows, a.n, a.dim), generator=g) if a.dim > 0 else None
    for mode in a.modes.split(","):
        fn = {"weighted": weighted, "hardest": hardest}[mode]
        fn(labels, scores, features, a.k)  # warm-up
        ms = []
        for _ in range(a.iters):
            t = time.perf_counter()
            fn(labels, scores, features, a.k)
            ms.append((time.perf_counter() - t) * 1e3)
        print(json.dumps({"baseline": mode, "rows": a.rows, "n": a.n, "k": a.k,
                          "threads": a.threads, "dim": a.dim, "torch": torch.__version__,
                          "median_ms": statistics.median(ms), "min_ms": min(ms)}), flush=True)


if __name__ == "__main__":
    main()
