#!/usr/bin/python3
"""Why balanced sampling matters: train the same classifier twice on a dataset with about
1% positives, once on class-balanced batches from gpusampler and once on uniform batches
(also from gpusampler), and compare recall and precision on held-out data.

Every training batch comes from the service. By default the training set is uploaded once as
a resident dataset (labels and features stay in the server), and each step's request is a
few bytes that name it; the server samples all training rows and returns K of them with
their features. The batches come from `gpusampler.data.SampleIterable`, which keeps
`--prefetch` requests in flight ahead of the step being trained, so the model rarely waits;
`--no-prefetch` asks for each batch when the step needs it instead (same seeds, so the same
batches and the same model: only the speed differs). `--inline` instead sends a random pool
of `--pool` rows (labels and features) every step. `--epochs N` goes through the training
set in N epochs instead of independent steps (docs/semantics.md "Epochs": ELEMENTS mode
over the one-row resident dataset): in each epoch every negative comes at most once and
the positives (the minority) are oversampled in passes, each positive once per pass;
`--steps` then caps the steps of an epoch. Every rank of a DDP job would get its disjoint
share (client/README-trainer.md).
  - balanced: positive_fraction 0.5: half of each batch positive when the rows hold enough
              positives (a resident 200k-row set holds ~2,000; an inline pool of 8,192 holds
              ~82, so its batches are about a third positive);
  - uniform:  every row counts as a "negative" (an all-zero label copy) with
              positive_fraction 0, so the K rows are a uniform random subset; the true labels
              are gathered by index.

Run a server first (`make serve`, or build/bin/gpusampler-server --device cpu), then:
    PYTHONPATH=client/python /usr/bin/python3 examples/train_balanced.py --target 127.0.0.1:50051
"""

from __future__ import annotations

import argparse
import json
import time

import numpy as np
import torch
from torch import nn

import gpusampler
from gpusampler.data import SampleIterable


def make_dataset(n: int, dim: int, positive_rate: float, generator: np.random.Generator):
    """Gaussian classes: positives are shifted along a few directions, so they overlap the
    negatives and the decision threshold depends on how the classes were weighted."""
    y = (generator.random(n) < positive_rate).astype(np.int64)
    x = generator.normal(size=(n, dim)).astype(np.float32)
    shift = np.zeros(dim, dtype=np.float32)
    shift[: dim // 2] = 0.9
    x[y == 1] += shift
    return x, y


class Model(nn.Module):
    def __init__(self, dim: int) -> None:
        super().__init__()
        self.net = nn.Sequential(nn.Linear(dim, 32), nn.ReLU(), nn.Linear(32, 1))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.net(x).squeeze(-1)


def upload(client: gpusampler.Client, x: torch.Tensor, y: torch.Tensor) -> None:
    """The training set as two resident datasets: true labels, and all-zero labels (every
    row a "negative") for uniform sampling. Same features in both."""
    client.create_dataset("train-balanced-example", y, x, replace=True)
    client.create_dataset("train-uniform-example", torch.zeros_like(y), x, replace=True)


def train(client: gpusampler.Client, mode: str, x: torch.Tensor, y: torch.Tensor, args) -> Model:
    torch.manual_seed(args.seed)
    model = Model(x.shape[1])
    optimizer = torch.optim.Adam(model.parameters(), lr=args.lr)
    loss_fn = nn.BCEWithLogitsLoss()
    fraction = 0.5 if mode == "balanced" else 0.0
    name = f"train-{mode}-example"
    if args.inline:
        batches = inline_batches(client, mode, fraction, x, y, args)
    elif args.epochs:
        batches = epoch_batches(client, name, fraction, args)
    elif args.no_prefetch:
        # One blocking call per step, when the step asks: the trainer waits for each.
        batches = (
            (torch.from_numpy(out.indices), torch.from_numpy(out.features))
            for out in (client.sample(dataset=name, num_samples=args.batch,
                                      positive_fraction=fraction, return_features=True,
                                      seed=SampleIterable.seed_for(args.seed, 0, step))
                        for step in range(args.steps)))
    else:
        # A few bytes up, K rows with features down, `prefetch` steps ahead of the training.
        batches = ((b.indices, b.features) for b in SampleIterable(
            client, dataset=name, num_samples=args.batch, steps=args.steps, seed=args.seed,
            positive_fraction=fraction, return_features=True, prefetch=args.prefetch))
    start = time.perf_counter()
    steps = 0
    for indices, features in batches:
        steps += 1
        batch_y = y[indices.clamp(min=0)]  # true labels by index (padding masked below)
        valid = indices >= 0  # padding slots (fewer rows than K) carry no sample
        logits = model(features[valid])
        loss = loss_fn(logits, batch_y[valid].float())
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
    model.steps_per_s = steps / (time.perf_counter() - start)
    model.steps = steps
    return model


def epoch_batches(client: gpusampler.Client, name: str, fraction: float, args):
    """`--epochs`: DistributedSampler-style epochs over the dataset's elements. The rank and
    world size come from torch.distributed or the launcher's environment (rank 0 of 1 when
    run alone); `set_epoch` reshuffles, and each epoch ends where the server says."""
    it = SampleIterable(client, dataset=name, num_samples=args.batch, steps=args.steps,
                        seed=args.seed, positive_fraction=fraction, return_features=True,
                        prefetch=args.prefetch, epoch_mode="elements",
                        shuffle_seed=args.seed)
    for epoch in range(args.epochs):
        it.set_epoch(epoch)
        for b in it:
            yield b.indices, b.features


def inline_batches(client: gpusampler.Client, mode: str, fraction: float, x: torch.Tensor,
                   y: torch.Tensor, args):
    """A random pool of rows sent with every request; indices are into the whole set."""
    pools = np.random.default_rng(args.seed + 1)
    for step in range(args.steps):
        pool = torch.from_numpy(pools.choice(len(y), size=args.pool, replace=False))
        pool_x, pool_y = x[pool], y[pool]
        labels = pool_y if mode == "balanced" else torch.zeros_like(pool_y)
        out = client.sample(labels, pool_x, num_samples=args.batch, positive_fraction=fraction,
                            seed=SampleIterable.seed_for(args.seed, 0, step))
        yield torch.where(out.indices >= 0, pool[out.indices.clamp(min=0)], -1), out.features


def evaluate(model: Model, x: torch.Tensor, y: torch.Tensor) -> dict:
    with torch.no_grad():
        predicted = torch.sigmoid(model(x)) > 0.5
    truth = y == 1
    tp = int((predicted & truth).sum())
    fp = int((predicted & ~truth).sum())
    fn = int((~predicted & truth).sum())
    recall = tp / max(tp + fn, 1)
    precision = tp / max(tp + fp, 1)
    f1 = 2 * precision * recall / max(precision + recall, 1e-12)
    return {"recall": recall, "precision": precision, "f1": f1, "tp": tp, "fp": fp, "fn": fn}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--target", default="127.0.0.1:50051", help="gpusampler server")
    parser.add_argument("--quick", action="store_true", help="small data, few steps (tests)")
    parser.add_argument("--train-size", type=int, default=200_000)
    parser.add_argument("--test-size", type=int, default=100_000)
    parser.add_argument("--dim", type=int, default=16)
    parser.add_argument("--positive-rate", type=float, default=0.01)
    parser.add_argument("--steps", type=int, default=500)
    parser.add_argument("--batch", type=int, default=256, help="K, rows per training batch")
    parser.add_argument("--inline", action="store_true",
                        help="send a pool of rows every step instead of a resident dataset")
    parser.add_argument("--pool", type=int, default=8192, help="rows sent per step (--inline)")
    parser.add_argument("--prefetch", type=int, default=2,
                        help="batches requested ahead of the training step")
    parser.add_argument("--no-prefetch", action="store_true",
                        help="request each batch when the step needs it (for comparison)")
    parser.add_argument("--epochs", type=int, default=0,
                        help="train N epochs over the resident set (each class's members "
                        "once per pass; --steps caps an epoch) instead of independent steps")
    parser.add_argument("--lr", type=float, default=3e-3)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--json", action="store_true", help="end with one JSON line")
    args = parser.parse_args()
    if args.quick:
        args.train_size, args.test_size, args.steps, args.pool = 30_000, 30_000, 80, 4096

    torch.set_num_threads(1)
    rng = np.random.default_rng(args.seed)
    x_train, y_train = make_dataset(args.train_size, args.dim, args.positive_rate, rng)
    x_test, y_test = make_dataset(args.test_size, args.dim, args.positive_rate, rng)
    x_train, y_train = torch.from_numpy(x_train), torch.from_numpy(y_train)
    x_test, y_test = torch.from_numpy(x_test), torch.from_numpy(y_test)
    source = f"pools of {args.pool} sent inline" if args.inline else "a resident dataset"
    print(f"train {len(y_train)} rows ({int(y_train.sum())} positive), "
          f"test {len(y_test)} rows ({int(y_test.sum())} positive); "
          f"{args.steps} steps of {args.batch} rows from {source}")

    results = {}
    with gpusampler.Client(args.target) as client:
        if not args.inline:
            upload(client, x_train, y_train)
        for mode in ("uniform", "balanced"):
            start = time.perf_counter()
            model = train(client, mode, x_train, y_train, args)
            results[mode] = evaluate(model, x_test, y_test)
            results[mode]["train_s"] = round(time.perf_counter() - start, 2)
            results[mode]["steps_per_s"] = round(model.steps_per_s, 1)
            results[mode]["steps"] = model.steps

    print(f"{'sampler':<10} {'recall':>7} {'precision':>9} {'f1':>6} {'train_s':>8} "
          f"{'steps/s':>8}")
    for mode, r in results.items():
        print(f"{mode:<10} {r['recall']:7.3f} {r['precision']:9.3f} {r['f1']:6.3f} "
              f"{r['train_s']:8.2f} {r['steps_per_s']:8.1f}")
    if args.json:
        print(json.dumps(results))
    if not args.inline:
        with gpusampler.Client(args.target) as client:
            for mode in ("uniform", "balanced"):
                client.delete_dataset(f"train-{mode}-example")


if __name__ == "__main__":
    main()
