#!/usr/bin/python3
"""Writes the fuzz seed corpus: one serialized gpusampler.v1.SampleRequest per golden case and
variant (labels as [B, N] INT64, as ragged [total] + row_splits, and with FLOAT32 features).
The wire format is written by hand (a few varints and length-delimited fields), so that no
generated stubs are needed: a fresh clone can make the corpus before anything is built."""
import json
import os
import struct
import sys

DTYPE_INT64, DTYPE_FLOAT32 = 6, 9  # sampler.proto: DType values
FILL = {"FILL_POLICY_UNSPECIFIED": 0, "FILL_POLICY_BOTH": 1, "FILL_POLICY_NEGATIVES_ONLY": 2,
        "FILL_POLICY_NONE": 3}


def varint(v):
    v &= (1 << 64) - 1
    out = bytearray()
    while True:
        b = v & 0x7F
        v >>= 7
        out.append(b | (0x80 if v else 0))
        if not v:
            return bytes(out)


def field(number, wire_type, payload):
    head = varint(number << 3 | wire_type)
    if wire_type == 2:
        return head + varint(len(payload)) + payload
    return head + payload


def tensor(dtype, shape, data):
    packed = b"".join(varint(d) for d in shape)
    return field(1, 0, varint(dtype)) + field(2, 2, packed) + field(3, 2, data)


def spec(s):
    return (field(1, 0, varint(s["num_samples"])) +
            field(2, 1, struct.pack("<d", s["positive_fraction"])) +
            field(3, 0, varint(s["positive_label"])) +
            field(4, 0, varint(s["negative_label"])) +
            field(5, 0, varint(FILL[s["fill_policy"]])))


def main(golden, out):
    dtype_check = open(os.path.join(os.path.dirname(__file__), "..", "..", "proto", "gpusampler",
                                    "v1", "sampler.proto")).read()
    assert "DTYPE_INT64 = 6;" in dtype_check and "DTYPE_FLOAT32 = 9;" in dtype_check
    os.makedirs(out, exist_ok=True)
    n = 0
    for line in open(golden):
        case = json.loads(line)
        rows = case["labels"]
        ragged_only = len({len(r) for r in rows}) > 1
        for variant in ("dense", "ragged", "features"):
            msg = field(1, 2, case["name"][:16].encode()) + field(2, 2, spec(case["spec"]))
            if variant == "ragged" or ragged_only:
                flat = [v for r in rows for v in r]
                splits = [0]
                for r in rows:
                    splits.append(splits[-1] + len(r))
                msg += field(3, 2, tensor(DTYPE_INT64, [len(flat)],
                                          struct.pack(f"<{len(flat)}q", *flat)))
                msg += field(5, 2, tensor(DTYPE_INT64, [len(splits)],
                                          struct.pack(f"<{len(splits)}q", *splits)))
            else:
                flat = [v for r in rows for v in r]
                shape = [len(rows), len(rows[0])]
                msg += field(3, 2, tensor(DTYPE_INT64, shape, struct.pack(f"<{len(flat)}q", *flat)))
                if variant == "features":
                    feats = [float(i) for i in range(len(flat) * 2)]
                    msg += field(4, 2, tensor(DTYPE_FLOAT32, shape + [2],
                                              struct.pack(f"<{len(feats)}f", *feats)))
            msg += field(6, 0, varint(case["seed"]))
            with open(os.path.join(out, f"{case['name']}-{variant}.pb"), "wb") as f:
                f.write(msg)
            n += 1
    print(f"{n} seeds in {out}")


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
