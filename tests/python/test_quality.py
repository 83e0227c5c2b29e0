"""Sampling-quality signals: gpusampler_short_rows_total and gpusampler_positive_fraction
on the server, and the Python client's opt-in SamplingQualityWarning."""

from __future__ import annotations

import urllib.request
import warnings

import numpy as np
import pytest

import gpusampler


def scrape(server) -> dict:
    text = urllib.request.urlopen(f"http://127.0.0.1:{server.metrics_port}/metrics",
                                  timeout=10).read().decode()
    out = {}
    for line in text.splitlines():
        if line.startswith("gpusampler_short_rows_total") or line.startswith(
                "gpusampler_positive_fraction"):
            name, value = line.rsplit(" ", 1)
            out[name] = float(value)
    return out


def rows(*pos_neg):
    """One [B, N] batch: row r has pos_neg[r] = (P, Q) positives then negatives, padded
    with -1 (ignored) to a common length."""
    n = max(p + q for p, q in pos_neg)
    out = np.full((len(pos_neg), n), -1, np.int64)
    for r, (p, q) in enumerate(pos_neg):
        out[r, :p] = 1
        out[r, p:p + q] = 0
    return out


def test_server_counts_short_rows_and_observes_the_realized_fraction(client, server):
    before = scrape(server)
    # K = 10, f = 0.5: (50, 50) -> 5 + 5; (2, 90) -> 2 + 8, fraction 0.2; (1, 3) -> short.
    out = client.sample(rows((50, 50), (2, 90), (1, 3)), num_samples=10, seed=3)
    np.testing.assert_array_equal(out.num_positive, [5, 2, 1])
    after = scrape(server)

    def delta(name):
        return after.get(name, 0) - before.get(name, 0)

    assert delta("gpusampler_short_rows_total") == 1
    assert delta("gpusampler_positive_fraction_count") == 3
    assert delta("gpusampler_positive_fraction_sum") == pytest.approx(0.5 + 0.2 + 0.1)
    assert delta('gpusampler_positive_fraction_bucket{le="0.05"}') == 0
    assert delta('gpusampler_positive_fraction_bucket{le="0.1"}') == 1
    assert delta('gpusampler_positive_fraction_bucket{le="0.2"}') == 2
    assert delta('gpusampler_positive_fraction_bucket{le="0.5"}') == 3


def test_quality_warning_is_off_by_default(client):
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        client.sample(rows((1, 3)), num_samples=10, seed=1)


def test_quality_warning_once_per_kind(server):
    with gpusampler.Client(server.target, warn_quality=True) as c:
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            c.sample(rows((50, 50)), num_samples=10, seed=1)  # full and balanced: quiet
            assert caught == []
            c.sample(rows((2, 90)), num_samples=10, seed=1)  # under the fraction
            c.sample(rows((2, 90)), num_samples=10, seed=2)  # again: no second warning
            list(c.sample_stream([rows((1, 3))], num_samples=10))  # short (and under)
            c.sample(rows((1, 3)), num_samples=10, seed=2)
        messages = [str(w.message) for w in caught]
        assert all(w.category is gpusampler.SamplingQualityWarning for w in caught)
        assert len(messages) == 2, messages
        assert "fewer positives than floor(num_samples * positive_fraction) = 5" in messages[0]
        assert "fewer than num_samples = 10" in messages[1]
