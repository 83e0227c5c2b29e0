"""examples/train_balanced.py in --quick mode: balanced batches must beat uniform ones on
held-out recall."""

from __future__ import annotations

import json
import os
import subprocess

from conftest import PYTHON, REPO


def test_train_balanced_quick(server):
    env = dict(os.environ, PYTHONPATH=str(REPO / "client" / "python"))
    result = subprocess.run(
        [PYTHON, str(REPO / "examples" / "train_balanced.py"), "--quick", "--json",
         "--target", server.target],
        capture_output=True, text=True, timeout=300, env=env)
    assert result.returncode == 0, result.stdout + result.stderr
    results = json.loads(result.stdout.strip().splitlines()[-1])
    balanced, uniform = results["balanced"], results["uniform"]
    assert balanced["recall"] > uniform["recall"] + 0.3, results
    assert balanced["tp"] + balanced["fn"] == uniform["tp"] + uniform["fn"] > 0  # same test set
    assert "uniform" in result.stdout and "balanced" in result.stdout


def test_prefetch_changes_speed_not_batches(server):
    """SampleIterable's prefetch and one blocking call per step use the same seeds: the same
    batches, so the very same models (only steps/s differs)."""
    env = dict(os.environ, PYTHONPATH=str(REPO / "client" / "python"))
    runs = []
    for extra in ([], ["--no-prefetch"]):
        result = subprocess.run(
            [PYTHON, str(REPO / "examples" / "train_balanced.py"), "--quick", "--json",
             "--steps", "30", "--target", server.target, *extra],
            capture_output=True, text=True, timeout=300, env=env)
        assert result.returncode == 0, result.stdout + result.stderr
        runs.append(json.loads(result.stdout.strip().splitlines()[-1]))
    for mode in ("balanced", "uniform"):
        a, b = (dict(r[mode]) for r in runs)
        assert a.pop("steps_per_s") > 0 and b.pop("steps_per_s") > 0
        a.pop("train_s"), b.pop("train_s")
        assert a == b, (mode, a, b)


def test_train_balanced_epochs(server):
    """--epochs: two epochs of ELEMENTS steps (each capped by --steps), balanced still beats
    uniform, and every epoch runs its steps."""
    env = dict(os.environ, PYTHONPATH=str(REPO / "client" / "python"))
    result = subprocess.run(
        [PYTHON, str(REPO / "examples" / "train_balanced.py"), "--quick", "--json",
         "--epochs", "2", "--target", server.target],
        capture_output=True, text=True, timeout=300, env=env)
    assert result.returncode == 0, result.stdout + result.stderr
    results = json.loads(result.stdout.strip().splitlines()[-1])
    # --quick: 80 steps (fewer than either epoch has: 232 balanced, 117 uniform) per epoch.
    assert results["balanced"]["steps"] == results["uniform"]["steps"] == 160, results
    assert results["balanced"]["recall"] > results["uniform"]["recall"] + 0.3, results
