"""The user docs say what the service does: docs/semantics.md's worked example and shape
table hold against the real server, and no doc points at a contract file the repository
does not have."""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import pytest

REPO = Path(__file__).resolve().parents[2]
SEMANTICS = REPO / "docs" / "semantics.md"


def worked_example():
    """Rows of the fill-policy example: (P, Q, {policy: (m_pos, m_neg)}), K and f."""
    text = SEMANTICS.read_text()
    head = re.search(r"Worked example, K = (\d+), f = ([\d.]+)", text)
    assert head, "docs/semantics.md lost its worked example"
    k, f = int(head.group(1)), float(head.group(2))
    table = text[head.end():].split("\n\n", 2)[1]
    rows = []
    for line in table.splitlines()[2:]:
        cells = [c.strip() for c in line.strip("|").split("|")]
        p, q = int(cells[1]), int(cells[2])
        quotas = {}
        for policy, cell in zip(("both", "negatives_only", "none"), cells[3:6]):
            m = re.match(r"(\d+) \+ (\d+)(?:, (\d+) padding)?$", cell)
            assert m, cell
            m_pos, m_neg = int(m.group(1)), int(m.group(2))
            assert int(m.group(3) or 0) == k - m_pos - m_neg, cell
            quotas[policy] = (m_pos, m_neg)
        rows.append((p, q, quotas))
    return k, f, rows


def test_worked_example_of_the_fill_policies_holds(client):
    k, f, rows = worked_example()
    assert len(rows) == 4
    for p, q, quotas in rows:
        labels = np.array([1] * p + [0] * q + [-1] * 3, dtype=np.int64)
        for policy, (m_pos, m_neg) in quotas.items():
            out = client.sample(labels, num_samples=k, positive_fraction=f, fill=policy, seed=5)
            assert (int(out.num_positive[0]), int(out.num_negative[0])) == (m_pos, m_neg), \
                (p, q, policy)
            used = m_pos + m_neg
            assert (out.indices[:used] >= 0).all() and (out.indices[used:] == -1).all()
            assert (out.labels[used:] == -1).all()


def test_shape_table_holds(client):
    rng = np.random.default_rng(3)
    one = (rng.random(50) < 0.3).astype(np.int8)
    feats = rng.normal(size=(50, 3, 2)).astype(np.float32)
    out = client.sample(one, feats, num_samples=6)
    assert out.indices.shape == (6,) and out.labels.shape == (6,)
    assert out.features.shape == (6, 3, 2)
    assert out.num_positive.shape == (1,) and out.num_positive.dtype == np.int32
    two = np.stack([one, one[::-1]])
    out = client.sample(two, np.stack([feats, feats]), num_samples=6)
    assert out.indices.shape == (2, 6) and out.features.shape == (2, 6, 3, 2)
    out = client.sample(one, feats, num_samples=6, row_splits=np.array([0, 20, 20, 50]))
    assert out.indices.shape == (3, 6) and out.features.shape == (3, 6, 3, 2)
    assert (out.indices[1] == -1).all()  # the empty row is all padding
    padded = client.sample(np.array([True, False]), num_samples=4)
    assert padded.labels.tolist() == [padded.labels[0], padded.labels[1], False, False]


@pytest.mark.parametrize("path", ["README.md", "client", "docs"])
def test_no_doc_points_at_a_missing_contract_file(path):
    """`grep -rn SPEC README.md client docs` finds no reference to a SPEC.md or to ../shared:
    the docs explain the semantics themselves (docs/semantics.md)."""
    root = REPO / path
    files = [root] if root.is_file() else [
        f for f in root.rglob("*") if f.is_file() and "_proto" not in f.parts
        and f.suffix in {".md", ".py", ".cc", ".hpp", ".h", ".txt", ".toml", ".cfg", ""}]
    bad = []
    for f in files:
        for n, line in enumerate(f.read_text(errors="replace").splitlines(), 1):
            if re.search(r"SPEC(\.md| section)|\.\./shared|shared/SPEC", line):
                bad.append(f"{f.relative_to(REPO)}:{n}: {line.strip()}")
    assert bad == []
    assert (REPO / "docs" / "semantics.md").exists()
