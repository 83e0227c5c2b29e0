#!/usr/bin/python3
"""Writes the fuzz seed corpus: one serialized SampleRequest per golden case (labels as
[B, N] INT64 and as ragged row_splits, with and without FLOAT32 features)."""
import json
import os
import sys

import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "..", "client", "python"))
from gpusampler._proto.gpusampler.v1 import sampler_pb2 as pb  # noqa: E402


def tensor(arr, dtype):
    t = pb.Tensor(dtype=dtype, shape=list(arr.shape), data=arr.tobytes())
    return t


def main(golden, out):
    os.makedirs(out, exist_ok=True)
    n = 0
    for line in open(golden):
        case = json.loads(line)
        rows = case["labels"]
        s = case["spec"]
        spec = pb.SamplingSpec(num_samples=s["num_samples"],
                               positive_fraction=s["positive_fraction"],
                               positive_label=s["positive_label"],
                               negative_label=s["negative_label"],
                               fill_policy=pb.FillPolicy.Value(s["fill_policy"]))
        for variant in ("dense", "ragged", "features"):
            req = pb.SampleRequest(spec=spec, seed=case["seed"], request_id=case["name"][:16])
            if variant == "ragged" or len({len(r) for r in rows}) > 1:
                flat = np.array([v for r in rows for v in r], dtype=np.int64)
                splits = np.cumsum([0] + [len(r) for r in rows]).astype(np.int64)
                req.labels.CopyFrom(tensor(flat, pb.DTYPE_INT64))
                req.row_splits.CopyFrom(tensor(splits, pb.DTYPE_INT64))
            else:
                labels = np.array(rows, dtype=np.int64)
                req.labels.CopyFrom(tensor(labels, pb.DTYPE_INT64))
                if variant == "features":
                    feats = np.arange(labels.size * 2, dtype=np.float32).reshape(
                        labels.shape + (2,))
                    req.features.CopyFrom(tensor(feats, pb.DTYPE_FLOAT32))
            with open(os.path.join(out, f"{case['name']}-{variant}.pb"), "wb") as f:
                f.write(req.SerializeToString())
            n += 1
    print(f"{n} seeds in {out}")


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
