#!/usr/bin/python3
"""The golden samples of tests/data as gpusampler-cli inputs, and the check of its outputs.

  golden.py prepare DIR      writes DIR/NAME/labels.npy per case and DIR/cases.txt, one line
                             per case: NAME K FRACTION POSITIVE NEGATIVE FILL SEED
  golden.py check DIR OUT    compares OUT/NAME/{indices,num_positive,num_negative}.npy with
                             the golden answers; exit 1 on any difference
"""
import json
import pathlib
import sys

import numpy as np

GOLDEN = pathlib.Path(__file__).resolve().parents[2] / "tests" / "data" / "golden_samples.jsonl"
FILL = {"FILL_POLICY_BOTH": "both", "FILL_POLICY_NEGATIVES_ONLY": "negatives_only",
        "FILL_POLICY_NONE": "none"}


def cases():
    with open(GOLDEN) as f:
        return [json.loads(line) for line in f if line.strip()]


def prepare(out):
    out.mkdir(parents=True, exist_ok=True)
    lines = []
    for c in cases():
        d = out / c["name"]
        d.mkdir(exist_ok=True)
        np.save(d / "labels.npy", np.array(c["labels"], dtype=np.int64))
        s = c["spec"]
        lines.append(f'{c["name"]} {s["num_samples"]} {s["positive_fraction"]!r} '
                     f'{s["positive_label"]} {s["negative_label"]} {FILL[s["fill_policy"]]} '
                     f'{c["seed"]}')
    (out / "cases.txt").write_text("\n".join(lines) + "\n")
    print(f"golden: {len(lines)} cases from {GOLDEN.name}")


def check(out):
    bad = 0
    n = 0
    for c in cases():
        d = out / c["name"]
        got = {k: np.load(d / f"{k}.npy").tolist() for k in ("indices", "num_positive",
                                                              "num_negative")}
        want = {k: c[k] for k in ("indices", "num_positive", "num_negative")}
        n += 1
        if n == 1 or len(c["labels"]) > 1:
            print(f"golden: {c['name']}: indices {got['indices']} "
                  f"{'==' if got['indices'] == want['indices'] else '!='} golden")
        if got != want:
            bad += 1
            print(f"golden: {c['name']}: MISMATCH\n  got  {got}\n  want {want}")
    print(f"golden: {n - bad}/{n} cases oracle-exact (indices, num_positive, num_negative)")
    return 1 if bad or n == 0 else 0


if __name__ == "__main__":
    if len(sys.argv) == 3 and sys.argv[1] == "prepare":
        prepare(pathlib.Path(sys.argv[2]))
    elif len(sys.argv) == 3 and sys.argv[1] == "check":
        sys.exit(check(pathlib.Path(sys.argv[2])))
    else:
        sys.exit(__doc__)
